"""An abusive or broken client against a live mqcore broker: system topics, names that
try to leave the store, bad groups, ``||`` subscriptions, disabled groups, and a bounded
fuzz of well-framed requests with hostile fields."""
from __future__ import annotations

import json
import os
import random
import time

import pytest

from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.broker.test_protocol import decode, pull, send
from tests.support import abuse
from tests.support.processes import BrokerProcess

pytestmark = pytest.mark.timeout(300)

BAD_GROUPS = ["", " ", "..", "/", "a/b", "x/../../../escaped", "g" * 256, "tab\tgroup"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("abuse")
    (root / "victim_empty_dir").mkdir()
    with BrokerProcess(root / "base" / "store") as b, SyncRemotingClient() as rc:
        yield root, b, rc


def test_answers_match_apache_49(env):
    _root, b, rc = env
    results = abuse.run(rc, b.broker_addr)
    assert not abuse.mismatches(results), "\n".join(abuse.mismatches(results))
    assert b.proc.poll() is None


def test_bad_group_names_are_refused_everywhere_a_group_arrives(env):
    _root, b, rc = env
    assert send(rc, b, "GroupT", b"m").code == ResponseCode.SUCCESS
    for g in BAD_GROUPS:
        requests = {
            "update offset": create_request(RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": g, "topic": "GroupT",
                                                                       "queueId": "0", "commitOffset": "1"}),
            "query offset": create_request(RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": g, "topic": "GroupT",
                                                                     "queueId": "0"}),
            "pull": abuse.pull_request("GroupT", group=g, sub="*"),
            "send back": create_request(RC.CONSUMER_SEND_MSG_BACK, {"group": g, "offset": "0", "delayLevel": "0",
                                                                   "originMsgId": "x", "originTopic": "GroupT"}),
            "group admin": abuse.group_config_request(g),
            "heartbeat": create_request(RC.HEART_BEAT, None, json.dumps({
                "clientID": "c1", "producerDataSet": [],
                "consumerDataSet": [{"groupName": g, "consumeType": "CONSUME_PASSIVELY",
                                     "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                     "unitMode": False, "subscriptionDataSet": []}]}).encode()),
            "producer heartbeat": create_request(RC.HEART_BEAT, None, json.dumps({
                "clientID": "c1", "producerDataSet": [{"groupName": g}], "consumerDataSet": []}).encode()),
        }
        for what, req in requests.items():
            r = rc.invoke(b.broker_addr, req, 5000)
            assert r.code == ResponseCode.SYSTEM_ERROR and "group" in r.remark, (what, g, r.code, r.remark)
    # nothing of them was persisted
    groups = rc.invoke(b.broker_addr, create_request(RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 5000).body
    offsets = rc.invoke(b.broker_addr, create_request(RC.GET_ALL_CONSUMER_OFFSET), 5000).body
    for g in BAD_GROUPS:
        if g.strip():
            assert json.dumps(g)[1:-1].encode() not in groups + offsets, g


def test_names_never_reach_outside_the_store(env):
    root, b, rc = env
    r = rc.invoke(b.broker_addr, create_request(RC.DELETE_TOPIC_IN_BROKER, {"topic": "../../victim_empty_dir"}), 5000)
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert (root / "victim_empty_dir").is_dir()
    hb = {"clientID": "c2", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "x/../../../escaped", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "../t", "subString": "*"}]}]}
    assert rc.invoke(b.broker_addr, create_request(RC.HEART_BEAT, None, json.dumps(hb).encode()), 5000).code \
        == ResponseCode.SYSTEM_ERROR
    topics = rc.invoke(b.broker_addr, create_request(RC.GET_ALL_TOPIC_CONFIG), 5000).body
    assert b"escaped" not in topics
    assert not any("escaped" in d for _, dirs, _ in os.walk(root) for d in dirs)


def test_heartbeat_subscription_of_only_bars_matches_nothing(env):
    _root, b, rc = env
    assert send(rc, b, "BarsT", b"tagged", TAGS="A").code == ResponseCode.SUCCESS
    hb = {"clientID": "c3", "producerDataSet": [], "consumerDataSet": [{
        "groupName": "CG_BARS", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "BarsT", "subString": "||", "tagsSet": [], "codeSet": [],
                                 "subVersion": 1, "expressionType": "TAG"}]}]}
    assert rc.invoke(b.broker_addr, create_request(RC.HEART_BEAT, None, json.dumps(hb).encode()), 5000).code == 0
    r = pull(rc, b, "BarsT", 0, group="CG_BARS")  # no expression in the request: the heartbeat's applies
    assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY, (r.code, r.remark)
    assert decode(pull(rc, b, "BarsT", 0, group="CG_BARS", sub="A").body)[0].body == b"tagged"


# --- bounded fuzz: well-framed requests with hostile fields ----------------------------------------
def test_bounded_fuzz_of_hostile_requests(env):
    """20,000 framed requests over 4 connections, pipelined; the broker answers each and
    stays healthy. A few seconds; bench/soak_fuzz.py runs the long version."""
    root, b, rc = env
    rng = random.Random(20260)
    per_conn, conns = 5000, 4
    frames = [list(abuse.fuzz_frames(rng, per_conn)) for _ in range(conns)]
    t0 = time.monotonic()
    answered = abuse.blast(b.broker_addr, frames, conns)
    elapsed = time.monotonic() - t0
    assert b.proc.poll() is None, b.output()[-3000:]
    assert answered >= conns * per_conn * 0.9, (answered, elapsed)
    assert elapsed < 60
    log = b.output()
    assert log.count("Traceback") <= 5, log[-3000:]
    assert (root / "victim_empty_dir").is_dir()
    assert not (root / "x").exists() and not (root / "base" / "x").exists()
    # the fuzz may have deleted TBW102 as an admin may (auto-creation then stops): create explicitly
    assert rc.invoke(b.broker_addr, abuse.create_topic_request("AfterAbuse"), 5000).code == ResponseCode.SUCCESS
    r = send(rc, b, "AfterAbuse", b"ok")
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert decode(pull(rc, b, "AfterAbuse", 0, sub="*").body)[0].body == b"ok"


@pytest.mark.parametrize("code", [RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2])
def test_a_topic_of_128_characters_is_refused_and_127_is_served(env, code):
    """The limit is RocketMQ's 127 characters (TopicValidator) on every way in: raising it must fail
    here, since a longer name is a consume-queue directory and a record field Apache refuses."""
    _root, b, rc = env
    longest, too_long = "L" * 127, "L" * 128
    # the fuzz may have deleted TBW102 (auto-creation then stops): the admin request makes the topic
    made = rc.invoke(b.broker_addr, create_request(RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": longest, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG"}), 5000)
    assert made.code == ResponseCode.SUCCESS, made.remark
    ok = send(rc, b, longest, b"longest", code=code)
    assert ok.code == ResponseCode.SUCCESS, ok.remark
    refused = send(rc, b, too_long, b"too long", code=code)
    assert refused.code != ResponseCode.SUCCESS and "longer than topic max length" in (refused.remark or ""), \
        (refused.code, refused.remark)
    made = rc.invoke(b.broker_addr, create_request(RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": too_long, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG"}), 5000)
    assert made.code != ResponseCode.SUCCESS
    assert not os.path.exists(os.path.join(b.store_dir, "consumequeue", too_long))
    assert pull(rc, b, longest, 0).code == ResponseCode.SUCCESS


def test_the_client_refuses_a_topic_of_128_characters():
    from mqcore.client import Message
    from mqcore.errors import IllegalArgumentError
    from mqcore.message import validate_topic
    validate_topic("T" * 127)
    with pytest.raises(IllegalArgumentError, match="longer than 127"):
        validate_topic("T" * 128)
    with pytest.raises(IllegalArgumentError):
        from mqcore.client.validators import check_message
        check_message(Message("T" * 128, b"x"), 4 * 1024 * 1024)
