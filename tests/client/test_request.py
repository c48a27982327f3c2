"""mqcore.client.request: the reply message a consumer builds, the requester's table of waiting
requests and its answers to PUSH_REPLY_MESSAGE_TO_CLIENT (as the Java client answers: SUCCESS
for a reply taken or unmatched, SYSTEM_ERROR for one without CORRELATION_ID or unreadable)."""
from __future__ import annotations

import asyncio
import zlib

import pytest

from mqcore.client import Message, ReplyMessage, create_reply_message
from mqcore.client.accumulator import ProduceAccumulator
from mqcore.client.api import MQClientAPI
from mqcore.client.request import ReplyTable, stamp_request
from mqcore.errors import IllegalArgumentError
from mqcore.message import Prop, properties_to_string
from mqcore.remoting import LanguageCode, RequestCode, ResponseCode
from mqcore.remoting.command import create_request
from mqcore.remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader


class _Channel:
    remote_addr = "127.0.0.1:10911"


def _push(props: dict, body: bytes = b"answer", sys_flag: int = 0, **header):
    fields = dict(producer_group="pg", topic="DefaultCluster_REPLY_TOPIC", default_topic="TBW102",
                  default_topic_queue_nums=4, queue_id=0, sys_flag=sys_flag, born_timestamp=1, flag=0,
                  born_host="127.0.0.1:5555", store_host="127.0.0.1:10911", store_timestamp=2,
                  properties=properties_to_string(props))
    fields.update(header)
    return create_request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, ReplyMessageRequestHeader(**fields).to_ext(), body)


def _received(props: dict) -> Message:
    msg = Message("Rpc", b"q")
    msg.properties.update(props)
    return msg


def test_create_reply_message_addresses_the_cluster_reply_topic_and_carries_the_ids_back():
    request = Message("Rpc", b"q")
    correlation = stamp_request(request, "10.0.0.1@req", 2500)
    request.properties[Prop.CLUSTER] = "Blue"
    reply = create_reply_message(request, "pong")
    assert isinstance(reply, ReplyMessage)
    assert (reply.topic, reply.body) == ("Blue_REPLY_TOPIC", b"pong")
    assert reply.properties[Prop.MSG_TYPE] == "reply"
    assert reply.properties[Prop.CORRELATION_ID] == correlation
    assert reply.properties[Prop.REPLY_TO_CLIENT] == "10.0.0.1@req"
    assert reply.properties[Prop.TTL] == "2500"


def test_create_reply_message_needs_a_message_from_a_broker():
    with pytest.raises(IllegalArgumentError, match="CLUSTER"):
        create_reply_message(Message("Rpc", b"q"), b"x")
    with pytest.raises(IllegalArgumentError):
        create_reply_message(None, b"x")  # type: ignore[arg-type]


def test_replies_go_as_send_reply_message_and_never_join_an_auto_batch():
    reply = create_reply_message(_received({Prop.CLUSTER: "C", Prop.CORRELATION_ID: "c"}), b"r")
    assert not ProduceAccumulator.eligible(reply)
    header = SendMessageRequestHeader(producer_group="pg", topic=reply.topic, default_topic="TBW102",
                                      default_topic_queue_nums=4, queue_id=0, sys_flag=0, born_timestamp=1, flag=0,
                                      properties=properties_to_string(reply.properties))
    api = MQClientAPI(None, language=LanguageCode.JAVA, version=0, namesrv_addrs=[])  # type: ignore[arg-type]
    assert api.build_send_request(header, b"r", batch=False, use_v2=True, reply=True).code == \
        RequestCode.SEND_REPLY_MESSAGE_V2
    assert api.build_send_request(header, b"r", batch=False, use_v2=False, reply=True).code == \
        RequestCode.SEND_REPLY_MESSAGE
    assert api.build_send_request(header, b"r", batch=False, use_v2=True).code == RequestCode.SEND_MESSAGE_V2


def test_a_pushed_reply_completes_its_request():
    async def scenario():
        table = ReplyTable(lambda: 42)
        waiting = table.expect("c-1")
        answer = await table.on_push(_Channel(), _push({Prop.CORRELATION_ID: "c-1", Prop.MSG_TYPE: "reply"}))
        assert answer.code == ResponseCode.SUCCESS
        reply = waiting.result()
        assert (reply.body, reply.topic, reply.store_host, reply.born_host) == (
            b"answer", "DefaultCluster_REPLY_TOPIC", "127.0.0.1:10911", "127.0.0.1:5555")
        assert reply.properties[Prop.ARRIVE_TIME] == "42"
        assert len(table) == 0
    asyncio.run(scenario())


def test_a_compressed_reply_body_is_decompressed():
    async def scenario():
        table = ReplyTable(lambda: 1)
        waiting = table.expect("c-z")
        await table.on_push(_Channel(), _push({Prop.CORRELATION_ID: "c-z"}, zlib.compress(b"x" * 5000), 0x301))
        assert waiting.result().body == b"x" * 5000
    asyncio.run(scenario())


def test_unmatched_and_malformed_pushes_are_answered_as_the_java_client_answers():
    async def scenario():
        table = ReplyTable(lambda: 1)
        late = await table.on_push(_Channel(), _push({Prop.CORRELATION_ID: "nobody-waits"}))
        assert late.code == ResponseCode.SUCCESS  # taken and dropped (logged)
        no_id = await table.on_push(_Channel(), _push({Prop.MSG_TYPE: "reply"}))
        assert (no_id.code, no_id.remark) == (ResponseCode.SYSTEM_ERROR, "process reply message fail")
        bad = _push({Prop.CORRELATION_ID: "c"})
        bad.ext_fields["queueId"] = "zero"
        unreadable = await table.on_push(_Channel(), bad)
        assert unreadable.code == ResponseCode.SYSTEM_ERROR
        missing = _push({Prop.CORRELATION_ID: "c"})
        del missing.ext_fields["storeHost"]
        assert (await table.on_push(_Channel(), missing)).code == ResponseCode.SYSTEM_ERROR
    asyncio.run(scenario())
