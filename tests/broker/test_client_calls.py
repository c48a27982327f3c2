"""The broker forwards GET_CONSUMER_RUNNING_INFO (307) and CONSUME_MESSAGE_DIRECTLY (309) to the
consumer named by group and client id, and relays its answer; a consumer that is not online, too
old, or silent gets the Java broker's refusals (SYSTEM_ERROR, CONSUME_MSG_TIMEOUT)."""
from __future__ import annotations

import asyncio
import json

import pytest

from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.config import StoreConfig
from mqcore.message import offset_msg_id
from mqcore.remoting import RemotingClient, ResponseCode, create_request, create_response
from mqcore.remoting.codes import RequestCode as RC

pytestmark = pytest.mark.timeout(60)

GROUP = "calls-cg"


def heartbeat(client_id: str, version: int | None = None):
    body = {"clientID": client_id, "producerDataSet": [],
            "consumerDataSet": [{"groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                                 "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [],
                                 "unitMode": False}]}
    cmd = create_request(RC.HEART_BEAT, body=json.dumps(body).encode())
    if version is not None:
        cmd.version = version
    return cmd


def run(tmp_path, scenario):
    async def main():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="calls"),
                        StoreConfig(store_path=str(tmp_path / "store")))
        await broker.start()
        consumer, tool = RemotingClient(), RemotingClient()
        try:
            return await scenario(broker, consumer, tool)
        finally:
            await consumer.shutdown()
            await tool.shutdown()
            await broker.shutdown()
    return asyncio.run(main())


def test_running_info_is_relayed_from_the_consumer(tmp_path):
    seen = []

    async def answer(channel, request):
        seen.append(dict(request.ext_fields))
        return create_response(request, ResponseCode.SUCCESS, body=b'{"properties":{"PROP_CONSUME_TYPE":"x"}}')

    async def scenario(broker, consumer, tool):
        consumer.register_processor(RC.GET_CONSUMER_RUNNING_INFO, answer)
        assert (await consumer.invoke(broker.listen_addr, heartbeat("10.0.0.1@c1"), 3000)).code == 0
        ext = {"consumerGroup": GROUP, "clientId": "10.0.0.1@c1", "jstackEnable": "false"}
        ok = await tool.invoke(broker.listen_addr, create_request(RC.GET_CONSUMER_RUNNING_INFO, ext), 5000)
        missing = await tool.invoke(broker.listen_addr, create_request(
            RC.GET_CONSUMER_RUNNING_INFO, {**ext, "clientId": "10.0.0.1@nobody"}), 5000)
        return ok, missing

    ok, missing = run(tmp_path, scenario)
    assert ok.code == ResponseCode.SUCCESS and json.loads(ok.body) == {"properties": {"PROP_CONSUME_TYPE": "x"}}
    assert seen == [{"consumerGroup": GROUP, "clientId": "10.0.0.1@c1", "jstackEnable": "false"}]
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert missing.remark == f"The Consumer <{GROUP}> <10.0.0.1@nobody> not online"


def test_a_silent_consumer_times_out_and_an_old_one_is_refused(tmp_path):
    async def never(channel, request):
        await asyncio.sleep(5)

    async def scenario(broker, consumer, tool):
        broker._calls.timeout_ms = 300
        consumer.register_processor(RC.GET_CONSUMER_RUNNING_INFO, never)
        await consumer.invoke(broker.listen_addr, heartbeat("10.0.0.1@slow"), 3000)
        ext = {"consumerGroup": GROUP, "clientId": "10.0.0.1@slow"}
        slow = await tool.invoke(broker.listen_addr, create_request(RC.GET_CONSUMER_RUNNING_INFO, ext), 5000)
        old = RemotingClient()
        try:
            await old.invoke(broker.listen_addr, heartbeat("10.0.0.1@old", version=40), 3000)
            too_old = await tool.invoke(broker.listen_addr, create_request(
                RC.GET_CONSUMER_RUNNING_INFO, {**ext, "clientId": "10.0.0.1@old"}), 5000)
        finally:
            await old.shutdown()
        return slow, too_old

    slow, too_old = run(tmp_path, scenario)
    assert slow.code == ResponseCode.CONSUME_MSG_TIMEOUT
    assert slow.remark.startswith(f"consumer <{GROUP}> <10.0.0.1@slow> Timeout")
    assert too_old.code == ResponseCode.SYSTEM_ERROR and "too low" in too_old.remark


def test_consume_directly_sends_the_stored_record(tmp_path):
    got = []

    async def answer(channel, request):
        got.append((dict(request.ext_fields), bytes(request.body)))
        return create_response(request, ResponseCode.SUCCESS, body=b'{"consumeResult":"CR_SUCCESS"}')

    async def scenario(broker, consumer, tool):
        consumer.register_processor(RC.CONSUME_MESSAGE_DIRECTLY, answer)
        await consumer.invoke(broker.listen_addr, heartbeat("10.0.0.1@c1"), 3000)
        broker.topics.create_group_topic("CallsTopic")  # a topic to store one message in
        from mqcore.remoting.headers import SendMessageRequestHeader
        h = SendMessageRequestHeader(producer_group="p", topic="CallsTopic", default_topic="TBW102",
                                     default_topic_queue_nums=4, queue_id=0, sys_flag=0, born_timestamp=1, flag=0,
                                     properties="", reconsume_times=0, unit_mode=False, batch=False)
        sent = await tool.invoke(broker.listen_addr, create_request(RC.SEND_MESSAGE, h.to_ext(), b"direct"), 3000)
        assert sent.code == 0, sent.remark
        msg_id = sent.ext_fields["msgId"]
        ext = {"consumerGroup": GROUP, "clientId": "10.0.0.1@c1", "msgId": msg_id}
        ok = await tool.invoke(broker.listen_addr, create_request(RC.CONSUME_MESSAGE_DIRECTLY, ext), 5000)
        bad = await tool.invoke(broker.listen_addr, create_request(
            RC.CONSUME_MESSAGE_DIRECTLY, {**ext, "msgId": "not-an-id"}), 5000)
        gone = await tool.invoke(broker.listen_addr, create_request(
            RC.CONSUME_MESSAGE_DIRECTLY, {**ext, "msgId": offset_msg_id(broker.store_host, 1 << 40)}), 5000)
        return msg_id, ok, bad, gone, broker.store.select_one_message_by_offset(int(msg_id[-16:], 16))

    msg_id, ok, bad, gone, record = run(tmp_path, scenario)
    assert ok.code == ResponseCode.SUCCESS and json.loads(ok.body) == {"consumeResult": "CR_SUCCESS"}
    (ext, body), = got
    assert ext["brokerName"] == "calls" and ext["msgId"] == msg_id and body == bytes(record)
    assert bad.code == ResponseCode.SYSTEM_ERROR and gone.code == ResponseCode.SYSTEM_ERROR
