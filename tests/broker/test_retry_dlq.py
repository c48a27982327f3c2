"""Retry topics, dead letters, delay levels and disk cleanup through the remoting
protocol: a real mqbroker with RocketMQ's default delay levels (10 s, 30 s, 1 min ...) on a
virtual clock (``mqcore.testing.TestBroker``: the tests advance it instead of waiting), a
broker process for the restart, and one in-process broker with an injected disk-usage source."""
from __future__ import annotations

import asyncio
import json
import time

import pytest

from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.config import StoreConfig
from mqcore.jsonutil import loads_lenient
from mqcore.message import SCHEDULE_TOPIC, decode_offset_msg_id, properties_to_string
from mqcore.remoting import (
    RemotingClient,
    ResponseCode,
    SyncRemotingClient,
    create_request,
)
from mqcore.remoting import RequestCode as RC
from mqcore.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
)
from mqcore.testing import TestBroker
from tests.support.protocol import decode, pull, send
from tests.support.processes import BrokerProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

@pytest.fixture(scope="module")
def broker():
    with TestBroker() as b:  # the default levels: 1s 5s 10s 30s 1m 2m ...
        yield b


@pytest.fixture(scope="module")
def rc():
    with SyncRemotingClient() as c:
        yield c


def send_back(rc, broker, offset, group, delay_level=0, max_times=None):
    h = ConsumerSendMsgBackRequestHeader(offset=offset, group=group, delay_level=delay_level,
                                         origin_msg_id="CLIENT-ID", max_reconsume_times=max_times)
    return rc.invoke(broker.broker_addr, create_request(RC.CONSUMER_SEND_MSG_BACK, h.to_ext()), 5000)


def wait_messages(rc, broker, topic, n, group="CG_reader", timeout_s=15.0):
    deadline = time.monotonic() + timeout_s
    while True:
        r = pull(rc, broker, topic, 0, group=group)
        msgs = decode(r.body) if r.code == ResponseCode.SUCCESS else []
        if len(msgs) >= n or time.monotonic() > deadline:
            return msgs
        time.sleep(0.1)


def offset_of(resp) -> int:
    return decode_offset_msg_id(resp.ext_fields["msgId"])[2]


def test_send_back_retries_with_growing_level_then_dead_letters(rc, broker):
    r = send(rc, broker, "RetryT", b"work", TAGS="TagA", KEYS="order-1 order-2", UNIQ_KEY="UNIQ-R1")
    assert r.code == ResponseCode.SUCCESS
    first_offset, first_id = offset_of(r), r.ext_fields["msgId"]
    assert send_back(rc, broker, first_offset, "CG_r").code == ResponseCode.SUCCESS
    # parked at level 3 + 0 (queue 2) of the schedule topic, then delivered to %RETRY%CG_r
    parked = decode(pull(rc, broker, SCHEDULE_TOPIC, 0, queue_id=2, group="CG_reader").body)
    assert parked[-1].properties["REAL_TOPIC"] == "%RETRY%CG_r" and parked[-1].properties["DELAY"] == "3"
    assert wait_messages(rc, broker, "%RETRY%CG_r", 1, timeout_s=0.5) == []  # not before its 10 s
    broker.advance(10)
    [retry] = wait_messages(rc, broker, "%RETRY%CG_r", 1)
    assert retry.body == b"work" and retry.reconsume_times == 1
    assert retry.store_timestamp - parked[-1].store_timestamp >= 10_000  # level 3, on the broker's clock
    p = retry.properties
    assert p["RETRY_TOPIC"] == "RetryT" and p["ORIGIN_MESSAGE_ID"] == first_id
    assert p["KEYS"] == "order-1 order-2" and p["TAGS"] == "TagA" and p["UNIQ_KEY"] == "UNIQ-R1"
    assert p["DELAY"] == "3"  # a delivered delay message keeps its level, as the 4.9 broker's do
    # second failure: level 3 + 1; the header's maxReconsumeTimes (2) then sends it to the DLQ
    assert send_back(rc, broker, retry.commitlog_offset, "CG_r", max_times=2).code == ResponseCode.SUCCESS
    parked = decode(pull(rc, broker, SCHEDULE_TOPIC, 0, queue_id=3, group="CG_reader").body)
    assert parked[-1].properties["REAL_TOPIC"] == "%RETRY%CG_r" and parked[-1].reconsume_times == 2
    broker.advance(30)  # level 4
    retries = wait_messages(rc, broker, "%RETRY%CG_r", 2)
    assert [m.reconsume_times for m in retries] == [1, 2]
    assert retries[1].properties["ORIGIN_MESSAGE_ID"] == first_id
    assert send_back(rc, broker, retries[1].commitlog_offset, "CG_r", max_times=2).code == ResponseCode.SUCCESS
    [dead] = wait_messages(rc, broker, "%DLQ%CG_r", 1, timeout_s=3)
    assert dead.reconsume_times == 3 and dead.queue_id == 0 and "DELAY" not in dead.properties
    assert dead.properties["RETRY_TOPIC"] == "RetryT" and dead.properties["ORIGIN_MESSAGE_ID"] == first_id
    topics = loads_lenient(rc.invoke(broker.broker_addr, create_request(RC.GET_ALL_TOPIC_CONFIG), 5000).body)
    table = topics["topicConfigTable"]
    assert table["%DLQ%CG_r"]["readQueueNums"] == 1 and table["%RETRY%CG_r"]["writeQueueNums"] == 1


def test_group_retry_max_times_explicit_level_and_negative_level(rc, broker):
    body = json.dumps({"groupName": "CG_max1", "retryMaxTimes": 1, "retryQueueNums": 1}).encode()
    assert rc.invoke(broker.broker_addr, create_request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body),
                     5000).code == ResponseCode.SUCCESS
    r = send(rc, broker, "RetryT2", b"a")
    assert send_back(rc, broker, offset_of(r), "CG_max1", delay_level=5).code == ResponseCode.SUCCESS
    parked = decode(pull(rc, broker, SCHEDULE_TOPIC, 0, queue_id=4, group="CG_reader").body)
    assert parked[-1].body == b"a" and parked[-1].properties["REAL_TOPIC"] == "%RETRY%CG_max1"
    broker.advance(60)  # level 5
    [retry] = wait_messages(rc, broker, "%RETRY%CG_max1", 1)
    # the group's retryMaxTimes (1) applies when the header has none
    assert send_back(rc, broker, retry.commitlog_offset, "CG_max1").code == ResponseCode.SUCCESS
    assert [m.body for m in wait_messages(rc, broker, "%DLQ%CG_max1", 1, timeout_s=3)] == [b"a"]
    # a negative delay level: straight to the DLQ
    r = send(rc, broker, "RetryT2", b"poison")
    assert send_back(rc, broker, offset_of(r), "CG_neg", delay_level=-1).code == ResponseCode.SUCCESS
    [dead] = wait_messages(rc, broker, "%DLQ%CG_neg", 1, timeout_s=3)
    assert dead.body == b"poison" and dead.reconsume_times == 1
    assert send_back(rc, broker, 1 << 40, "CG_neg").code == ResponseCode.SYSTEM_ERROR


def test_client_resend_into_retry_topic_uses_its_counts(rc, broker):
    # a client's own fallback: RECONSUME_TIME / MAX_RECONSUME_TIMES as properties
    r = send(rc, broker, "%RETRY%CG_self", b"again", DELAY="3", RETRY_TOPIC="Orig", RECONSUME_TIME="1",
             MAX_RECONSUME_TIMES="3")
    assert r.code == ResponseCode.SUCCESS
    broker.advance(10)  # level 3
    [m] = wait_messages(rc, broker, "%RETRY%CG_self", 1)
    assert m.body == b"again" and m.reconsume_times == 1
    r = send(rc, broker, "%RETRY%CG_self", b"enough", DELAY="3", RETRY_TOPIC="Orig", RECONSUME_TIME="3",
             MAX_RECONSUME_TIMES="3")
    assert r.code == ResponseCode.SUCCESS
    [dead] = wait_messages(rc, broker, "%DLQ%CG_self", 1, timeout_s=3)
    assert dead.body == b"enough" and dead.reconsume_times == 3 and "DELAY" not in dead.properties


def test_delay_offsets_are_reported_and_survive_a_restart(tmp_path, rc):
    with BrokerProcess(tmp_path / "store", conf={"messageDelayLevel": "1s 2s"}) as b:
        for i in range(3):
            assert send(rc, b, "DelayT", b"d%d" % i, DELAY="1").code == ResponseCode.SUCCESS
        assert len(wait_messages(rc, b, "DelayT", 3)) == 3
        table = loads_lenient(rc.invoke(b.broker_addr, create_request(RC.GET_ALL_DELAY_OFFSET), 5000).body)
        assert table["offsetTable"]["1"] == 3
        b.restart()
        assert send(rc, b, "DelayT", b"after", DELAY="2").code == ResponseCode.SUCCESS
        assert len(wait_messages(rc, b, "DelayT", 4)) == 4

        def delay_offsets():
            resp = rc.invoke(b.broker_addr, create_request(RC.GET_ALL_DELAY_OFFSET), 5000)
            return loads_lenient(resp.body)["offsetTable"]

        # both levels delivered to the end of their queues: nothing is left that could come twice
        # (a level that restarted from 0 would have redelivered d0-d2 on its way back to 3)
        assert wait_for(lambda: delay_offsets() == {"1": 3, "2": 1}), delay_offsets()
        got = wait_messages(rc, b, "DelayT", 5, timeout_s=0)
        assert [m.body for m in got] == [b"d0", b"d1", b"d2", b"after"]


def test_cleanup_moves_queue_min_offsets_and_pulls_are_told(tmp_path, rc):
    conf = {"mappedFileSizeCommitLog": 64 * 1024, "fileReservedTime": 0,
            "deleteWhen": ";".join(f"{h:02d}" for h in range(24)), "cleanResourceFirstDelay": 0,
            "cleanResourceInterval": 200}
    with BrokerProcess(tmp_path / "store", conf=conf) as b:
        for i in range(300):
            assert send(rc, b, "CleanT", b"x" * 1000, queue_id=0).code == ResponseCode.SUCCESS
        # a consumer still at offset 0 is told where the queue now starts; cleanup may still be
        # deleting (a pass every 200 ms), so follow it until the offset it names can be read
        deadline = time.monotonic() + 15
        moved = found = None
        while time.monotonic() < deadline and found is None:
            r = pull(rc, b, "CleanT", 0, group="CG_behind")
            if r.code == ResponseCode.PULL_OFFSET_MOVED:
                moved = r
                got = pull(rc, b, "CleanT", int(r.ext_fields["nextBeginOffset"]), group="CG_behind")
                if got.code == ResponseCode.SUCCESS:
                    found = got
                    break
            time.sleep(0.2)
        assert moved is not None and found is not None, r.remark
        moved_to = int(moved.ext_fields["nextBeginOffset"])
        assert moved_to == int(moved.ext_fields["minOffset"]) > 0
        assert decode(found.body)[0].queue_offset == moved_to
    assert "deleted commitlog file" in b.output() and "age " in b.output()


def test_disk_full_refuses_sends_with_a_clear_error_and_reads_go_on(tmp_path):
    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="full"),
                        StoreConfig(store_path=str(tmp_path / "store")))
        await broker.start()
        client = RemotingClient()
        usage = {"now": 50.0}
        broker.cleanup.disk_usage = lambda path: usage["now"]
        try:
            async def put(body):
                h = SendMessageRequestHeader(producer_group="PG", topic="FullT", default_topic="TBW102",
                                             default_topic_queue_nums=4, queue_id=0, sys_flag=0, born_timestamp=0,
                                             flag=0, properties=properties_to_string({"TAGS": "a"}))
                return await client.invoke(broker.addr, create_request(RC.SEND_MESSAGE_V2, h.to_ext(RC.SEND_MESSAGE_V2),
                                                                       body), 5000)
            assert (await put(b"before")).code == ResponseCode.SUCCESS
            usage["now"] = 93.0
            broker.cleanup.run_once()
            refused = await put(b"refused")
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
            assert "disk is full" in refused.remark and "93.0%" in refused.remark
            got = broker.store.get_message("FullT", 0, 0, 8)
            assert got.message_count == 1                     # reads go on
            usage["now"] = 40.0
            broker.cleanup.run_once()
            assert (await put(b"after")).code == ResponseCode.SUCCESS
        finally:
            await client.shutdown()
            await broker.shutdown()

    asyncio.run(scenario())
