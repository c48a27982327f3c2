"""SEND_REPLY_MESSAGE(_V2) on mqbroker, with what the Java 4.9.7 broker answers written down (the
same scenario runs against both in tests/reference/test_reply_reference.py): the reply is
pushed to the requesting producer's connection and stored as sent; a missing or unknown
requester, one that refuses or never answers, and malformed headers get Apache's codes; a
refused header stores nothing; storeReplyMessageEnable=false stores nothing; without
autoCreateTopicEnable an unknown cluster's reply topic is TOPIC_NOT_EXIST and nothing is pushed."""
from __future__ import annotations

import asyncio
import json

from mqcore.remoting import RemotingClient, RequestCode, ResponseCode
from mqcore.remoting.command import create_request, create_response
from tests.support import reply_scenarios as rs
from tests.support.processes import BrokerProcess

OK, SYS, NOT_EXIST = ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR, ResponseCode.TOPIC_NOT_EXIST

#: case -> (code, queue offset in the answer, pushed to the requester) as the Java broker answers
JAVA = {
    "ok_v2": (OK, "0", True),
    "ok_v1": (OK, "1", True),
    "no_reply_to": (SYS, "2", False),
    "unknown_requester": (SYS, "3", False),
    "consumer_only_requester": (SYS, "4", False),
    "requester_refuses": (SYS, "5", True),
    "no_correlation_id": (OK, "6", True),
    "other_cluster_topic": (OK, "0", True),  # auto-created from TBW102, like any topic
    "bad_queue_id_type": (SYS, None, False),
    "missing_topic_field": (SYS, None, False),
    "queue_id_out_of_range": (SYS, None, False),
    "illegal_topic_name": (SYS, None, False),
    "bad_born_timestamp": (SYS, None, False),
    "any_queue": (OK, "7", True),  # queue -1: the broker picks one (the push still says -1)
}
JAVA_REMARKS = {
    "no_reply_to": "reply message properties[REPLY_TO_CLIENT] is null",
    "unknown_requester": "push reply message fail, channel of <127.0.0.1@nobody> not found.",
    "consumer_only_requester": f"push reply message fail, channel of <{rs.CONSUMER_ONLY_ID}> not found.",
    "requester_refuses": f"push reply message to {rs.REQUESTER_ID}fail.",
}


def test_replies_are_pushed_stored_and_refused_as_the_java_broker_does(tmp_path):
    with BrokerProcess(tmp_path / "store") as b:
        obs = asyncio.run(rs.run(b.broker_addr, "DefaultCluster"))
    got = {name: (o.code, o.queue_offset, o.pushed is not None) for name, o in obs.outcomes.items()}
    assert got == JAVA
    for name, remark in JAVA_REMARKS.items():
        assert obs.outcomes[name].remark == remark
    pushed = obs.outcomes["ok_v2"].pushed
    assert pushed["code"] == RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT and pushed["body"] == b"reply-body"
    assert pushed["topic"] == "DefaultCluster_REPLY_TOPIC" and pushed["storeHost"] == "127.0.0.1:<port>"
    assert pushed["PUSH_REPLY_TIME"] == "<ms>" and pushed["properties"] == rs.string_to_properties(rs.reply_props())
    # stored: every reply that passed the checks (8 on the cluster's topic), properties as sent
    # (WAIT kept, no CLUSTER added: Apache's reply processor stores them so); none refused by a check
    stored = obs.stored["DefaultCluster_REPLY_TOPIC"]
    assert len(stored) == 8 and len(obs.stored["NoSuchCluster_REPLY_TOPIC"]) == 1
    assert obs.outcomes["any_queue"].pushed["queueId"] == "-1"
    assert stored[0] == (rs.string_to_properties(rs.reply_props()), b"reply-body")
    assert "CLUSTER" not in stored[0][0]


def test_a_requester_that_never_answers_is_waited_for_ten_seconds(tmp_path):
    with BrokerProcess(tmp_path / "store") as b:
        obs = asyncio.run(rs.run(b.broker_addr, "DefaultCluster", include_silent=True))
    silent = obs.outcomes[rs.SILENT]
    assert (silent.code, silent.remark) == (SYS, f"push reply message to {rs.REQUESTER_ID}fail.")
    assert silent.pushed is not None and 9.5 < silent.elapsed_s < 15
    assert silent.queue_offset == "8"  # stored all the same, as Apache does


async def _one_reply(addr: str, topic: str, push_answer: int | None, props: str) -> tuple:
    """One reply from a fresh replier, with a requester that answers ``push_answer``."""
    pushes = []

    async def on_push(channel, request):
        pushes.append(request)
        return create_response(request, push_answer)

    requester, replier = RemotingClient(name="req"), RemotingClient(name="rep")
    requester.register_processor(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, on_push)
    try:
        hb = {"clientID": rs.REQUESTER_ID, "producerDataSet": [{"groupName": "PG_REQ"}], "consumerDataSet": []}
        await requester.invoke(addr, create_request(RequestCode.HEART_BEAT, None, json.dumps(hb).encode()), 5000)
        resp = await replier.invoke(addr, create_request(RequestCode.SEND_REPLY_MESSAGE_V2,
                                                         rs.v2_header(topic, props), b"r"), 15000)
        max_offset = await replier.invoke(addr, create_request(RequestCode.GET_MAX_OFFSET,
                                                               {"topic": topic, "queueId": "0"}), 5000)
        return resp, len(pushes), max_offset
    finally:
        await requester.shutdown()
        await replier.shutdown()


def test_without_store_reply_message_enable_nothing_is_stored(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"storeReplyMessageEnable": "false"}) as b:
        resp, pushes, max_offset = asyncio.run(_one_reply(b.broker_addr, "DefaultCluster_REPLY_TOPIC",
                                                          ResponseCode.SUCCESS, rs.reply_props()))
        assert (resp.code, pushes) == (OK, 1)
        assert (resp.ext_fields["msgId"], resp.ext_fields["queueOffset"]) == ("0", "0")
        assert max_offset.ext_fields["offset"] == "0"
        resp, pushes, max_offset = asyncio.run(_one_reply(b.broker_addr, "DefaultCluster_REPLY_TOPIC",
                                                          ResponseCode.SUCCESS,
                                                          rs.reply_props(REPLY_TO_CLIENT="127.0.0.1@gone")))
        assert (resp.code, pushes) == (SYS, 0) and "msgId" not in resp.ext_fields
        assert max_offset.ext_fields["offset"] == "0"


def test_an_unknown_reply_topic_without_auto_creation_is_refused_before_the_push(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"autoCreateTopicEnable": "false"}) as b:
        resp, pushes, _ = asyncio.run(_one_reply(b.broker_addr, "OtherCluster_REPLY_TOPIC", ResponseCode.SUCCESS,
                                                 rs.reply_props()))
        assert (resp.code, pushes) == (NOT_EXIST, 0)
        # the broker's own cluster reply topic exists from the start, with one queue
        resp, pushes, max_offset = asyncio.run(_one_reply(b.broker_addr, "DefaultCluster_REPLY_TOPIC",
                                                          ResponseCode.SUCCESS, rs.reply_props()))
        assert (resp.code, pushes, max_offset.ext_fields["offset"]) == (OK, 1, "1")


def test_the_cluster_reply_topic_cannot_be_redefined_by_an_admin(tmp_path):
    """4.9 registers ``<cluster>_REPLY_TOPIC`` as a system topic: UPDATE_AND_CREATE_TOPIC is refused."""
    async def create(addr, topic):
        client = RemotingClient(name="admin")
        try:
            return await client.invoke(addr, create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6",
                "topicFilterType": "SINGLE_TAG"}), 5000)
        finally:
            await client.shutdown()

    with BrokerProcess(tmp_path / "store") as b:
        resp = asyncio.run(create(b.broker_addr, "DefaultCluster_REPLY_TOPIC"))
        assert (resp.code, resp.remark) == (SYS, "The topic[DefaultCluster_REPLY_TOPIC] is conflict with system topic.")
        assert asyncio.run(create(b.broker_addr, "Other_REPLY_TOPIC")).code == OK  # another cluster's: a topic
