"""QUERY_ASSIGNMENT (400) and SET_MESSAGE_REQUEST_MODE (401) against a live mqbroker, spoken
raw: the broker divides a topic's queues among a group's live clients (PULL by default, POP as
set, popShareQueueNum widening it), the setting is kept in config/messageRequestMode.json across
a restart, a retry topic cannot be set, and malformed bodies get SYSTEM_ERROR naming what is
wrong and store nothing."""
from __future__ import annotations

import json

import pytest

from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from mqcore.remoting import RequestCode as RC
from tests.support.processes import BrokerProcess
from tests.support.protocol import create_topic

pytestmark = pytest.mark.timeout(120)
R = ResponseCode
TOPIC, GROUP = "AssignT", "AssignG"


def heartbeat(rc, b, client_id: str) -> None:
    body = {"clientID": client_id, "producerDataSet": [],
            "consumerDataSet": [{"groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                                 "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
                                 "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "tagsSet": [],
                                                          "codeSet": [], "subVersion": 1, "expressionType": "TAG"}]}]}
    resp = rc.invoke(b.broker_addr, create_request(RC.HEART_BEAT, body=json.dumps(body).encode()), 5000)
    assert resp.code == R.SUCCESS, resp.remark


def raw(rc, b, code: int, body: bytes | None):
    return rc.invoke(b.broker_addr, create_request(code, body=body), 5000)


def query(rc, b, client_id: str, topic: str = TOPIC, strategy: str = "AVG", model: str = "CLUSTERING"):
    resp = raw(rc, b, RC.QUERY_ASSIGNMENT, json.dumps({"topic": topic, "consumerGroup": GROUP, "clientId": client_id,
                                                       "strategyName": strategy, "messageModel": model}).encode())
    assert resp.code == R.SUCCESS, resp.remark
    answer = json.loads(bytes(resp.body))
    if "messageQueueAssignments" not in answer:
        return None
    return sorted((a["messageQueue"]["queueId"], a["mode"]) for a in answer["messageQueueAssignments"])


def set_mode(rc, b, mode: str, share: int, topic: str = TOPIC):
    return raw(rc, b, RC.SET_MESSAGE_REQUEST_MODE, json.dumps(
        {"topic": topic, "consumerGroup": GROUP, "mode": mode, "popShareQueueNum": share}).encode())


def test_queues_divided_by_mode_and_kept_across_a_restart(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"defaultTopicQueueNums": "4"}) as b:
        create_topic(b, TOPIC)
        c1, c2 = SyncRemotingClient(), SyncRemotingClient()  # two connections: two live clients
        try:
            heartbeat(c1, b, "c1")
            heartbeat(c2, b, "c2")
            # no setting: defaultMessageRequestMode (PULL), the client's AVG division
            assert query(c1, b, "c1") == [(0, "PULL"), (1, "PULL")]
            assert query(c2, b, "c2") == [(2, "PULL"), (3, "PULL")]
            assert query(c1, b, "c1", model="BROADCASTING") == [(q, "PULL") for q in range(4)]
            assert query(c1, b, "c1", strategy="AVG_BY_CIRCLE") == [(0, "PULL"), (2, "PULL")]
            # POP, every client pops every queue (one "queue" -1)
            assert set_mode(c1, b, "POP", -1).code == R.SUCCESS
            assert query(c2, b, "c2") == [(-1, "POP")]
            # POP sharing its neighbour's queues
            assert set_mode(c1, b, "POP", 1).code == R.SUCCESS
            assert query(c1, b, "c1") == [(q, "POP") for q in range(4)]
            # nothing to say: unknown topic, strategy, a client-less group; a retry topic is pulled
            assert query(c1, b, "c1", topic="NoSuchTopic") is None
            assert query(c1, b, "c1", strategy="CONSISTENT_HASH") is None
            refused = set_mode(c1, b, "POP", -1, topic="%RETRY%" + GROUP)
            assert (refused.code, refused.remark) == (R.NO_PERMISSION, "retry topic is not allowed to set mode")
        finally:
            c1.close()
            c2.close()
        saved = json.loads((tmp_path / "store" / "config" / "messageRequestMode.json").read_text())
        assert saved == {"messageRequestModeMap": {TOPIC: {GROUP: {
            "topic": TOPIC, "consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": 1}}}}
        b.restart()
        rc = SyncRemotingClient()
        try:
            heartbeat(rc, b, "c1")
            assert query(rc, b, "c1") == [(q, "POP") for q in range(4)]  # one client: all its own
            assert set_mode(rc, b, "POP", -1).code == R.SUCCESS
            assert query(rc, b, "c1") == [(-1, "POP")]
        finally:
            rc.close()


MALFORMED_SET = [
    (None, "the request mode body is missing"),
    (b"{not json", "the request mode body is not JSON"),
    (b"[1, 2]", "the request mode body is not a JSON object"),
    (json.dumps({"consumerGroup": GROUP, "mode": "POP"}).encode(), "topic is missing"),
    (json.dumps({"topic": TOPIC, "mode": "POP"}).encode(), "consumerGroup is missing"),
    (json.dumps({"topic": TOPIC, "consumerGroup": GROUP, "mode": "PUSH"}).encode(), "neither PULL nor POP"),
    (json.dumps({"topic": TOPIC, "consumerGroup": GROUP, "mode": "POP", "popShareQueueNum": "x"}).encode(),
     "popShareQueueNum"),
]
MALFORMED_QUERY = [
    (None, "the query assignment body is missing"),
    (b"\xff\xfe", "the query assignment body is not JSON"),
    (json.dumps({"topic": TOPIC, "consumerGroup": GROUP, "clientId": "c1", "strategyName": "AVG"}).encode(),
     "messageModel"),
    (json.dumps({"topic": TOPIC, "clientId": "c1", "messageModel": "CLUSTERING"}).encode(), "consumerGroup is missing"),
    (json.dumps({"topic": TOPIC, "consumerGroup": GROUP, "messageModel": "CLUSTERING"}).encode(),
     "clientId is missing"),
]


def test_malformed_bodies_are_refused_and_store_nothing(tmp_path):
    conf = {"defaultTopicQueueNums": "4", "autoCreateSubscriptionGroup": "false"}
    with BrokerProcess(tmp_path / "store", conf=conf) as b:
        create_topic(b, TOPIC)
        rc = SyncRemotingClient()
        try:
            heartbeat(rc, b, "c1")
            for body, words in MALFORMED_SET:
                resp = raw(rc, b, RC.SET_MESSAGE_REQUEST_MODE, body)
                assert resp.code == R.SYSTEM_ERROR and words in resp.remark, (body, resp.code, resp.remark)
            for body, words in MALFORMED_QUERY:
                resp = raw(rc, b, RC.QUERY_ASSIGNMENT, body)
                assert resp.code == R.SYSTEM_ERROR and words in resp.remark, (body, resp.code, resp.remark)
            # as Apache 5.3.3: a topic or group that does not exist is refused
            unknown = set_mode(rc, b, "POP", -1, topic="NoSuchTopic")
            assert (unknown.code, unknown.remark) == (R.TOPIC_NOT_EXIST, "topic[NoSuchTopic] not exist")
            unknown = set_mode(rc, b, "POP", -1)  # no auto-creation: the group is unknown
            assert (unknown.code, unknown.remark) == (R.SUBSCRIPTION_GROUP_NOT_EXIST, "subscription group does not exist")
            # nothing was stored: still the default mode, no file, and the broker still serves
            assert query(rc, b, "c1") == [(q, "PULL") for q in range(4)]
            assert not (tmp_path / "store" / "config" / "messageRequestMode.json").exists()
        finally:
            rc.close()
