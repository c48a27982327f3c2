"""SYNC_MASTER (Apache 4.9's submitReplicaRequest / GroupTransferService): a send is answered
once a slave has reported its end offset, FLUSH_SLAVE_TIMEOUT when none does in
``slaveTimeout``, SLAVE_NOT_AVAILABLE at once with no slave (or one too far behind); the
message is stored in every case. Each on the compiled plain-send path (SEND_MESSAGE_V2),
the general path (SEND_MESSAGE) and batches. Also: the slaves' lag in the runtime info and
/metrics, and the VIP port (listenPort - 2) that Apache's slave syncs topic configs from."""
import concurrent.futures
import urllib.request

import pytest

from mqcore.format.batch import encode_batch_messages
from mqcore.jsonutil import loads_lenient
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from mqcore.testing import TestBroker
from tests.broker.test_ha_master import Slave
from tests.support.protocol import send
from tests.support.reference import free_port_block
from tests.support.waiting import free_port, wait_for

pytestmark = pytest.mark.timeout(120)

TOPIC = "SyncTopic"
# the plain-send fast path, the general path, a batch (general path too)
ROUTES = [RC.SEND_MESSAGE_V2, RC.SEND_MESSAGE, RC.SEND_BATCH_MESSAGE]


def _broker(**conf):
    return TestBroker({"brokerRole": "SYNC_MASTER", "haSendHeartbeatInterval": "200", **conf})


def _send(rc, b, code, body=b"m"):
    if code == RC.SEND_BATCH_MESSAGE:
        return send(rc, b, TOPIC, encode_batch_messages([(0, body + b"1", {}), (0, body + b"2", {})]), code=code)
    return send(rc, b, TOPIC, body, code=code)


def _create_topic(rc, b):
    r = rc.invoke(b.broker_addr, create_request(RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": TOPIC, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": "SINGLE_TAG"}), 5000)
    assert r.code == ResponseCode.SUCCESS, r.remark


def _caught_up_slave(b) -> Slave:
    s = Slave(b.broker.ha_port)
    end = b.broker.store.commitlog.max_offset
    s.report(end)
    s.start = end
    assert wait_for(lambda: b.broker.ha.push2slave_max >= end and b.broker.ha.connections)
    return s


@pytest.mark.parametrize("code", ROUTES)
def test_a_send_is_answered_only_after_a_slave_acknowledged_it(code):
    with _broker() as b, SyncRemotingClient() as rc, concurrent.futures.ThreadPoolExecutor(1) as pool:
        _create_topic(rc, b)
        s = _caught_up_slave(b)
        before = b.broker.store.commitlog.max_offset
        answer = pool.submit(_send, rc, b, code)
        assert wait_for(lambda: b.broker.store.commitlog.max_offset > before)
        end = b.broker.store.commitlog.max_offset
        while s.start + len(s.data) < end:  # the slave receives the message but does not ack it yet
            s.read_transfer()
        with pytest.raises(concurrent.futures.TimeoutError):
            answer.result(timeout=0.5)  # withheld: no slave has reported the end offset
        s.report(end - 1)  # one byte short is not enough
        with pytest.raises(concurrent.futures.TimeoutError):
            answer.result(timeout=0.3)
        s.report(end)
        r = answer.result(timeout=10)
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert r.ext_fields["msgId"] and r.ext_fields["queueOffset"] == "0"
        s.sock.close()


@pytest.mark.parametrize("code", ROUTES)
def test_no_ack_within_slave_timeout_answers_flush_slave_timeout_and_keeps_the_message(code):
    with _broker(slaveTimeout="300") as b, SyncRemotingClient() as rc:
        _create_topic(rc, b)
        s = _caught_up_slave(b)
        r = _send(rc, b, code)
        assert r.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert r.remark is None and r.ext_fields["msgId"]  # Apache: stored, answered as SEND_OK is
        r2 = _send(rc, b, code)  # the next one waits its own timeout, and is stored after the first
        assert r2.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        assert int(r2.ext_fields["queueOffset"]) > int(r.ext_fields["queueOffset"])
        assert b.broker.store.get_max_offset_in_queue(TOPIC, 0) == (4 if code == RC.SEND_BATCH_MESSAGE else 2)
        s.sock.close()


@pytest.mark.parametrize("code", ROUTES)
def test_no_slave_answers_slave_not_available_at_once(code):
    with _broker(slaveTimeout="60000") as b, SyncRemotingClient() as rc:
        _create_topic(rc, b)
        r = _send(rc, b, code)
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE and r.ext_fields["msgId"]
        assert b.broker.store.get_max_offset_in_queue(TOPIC, 0) == (2 if code == RC.SEND_BATCH_MESSAGE else 1)


def test_a_slave_too_far_behind_counts_as_none_and_wait_false_does_not_wait():
    with _broker(haSlaveFallbehindMax="1000", slaveTimeout="60000") as b, SyncRemotingClient() as rc:
        _create_topic(rc, b)
        s = _caught_up_slave(b)
        r = send(rc, b, TOPIC, b"x" * 2000)  # its end is 2000+ bytes past the slave's ack
        assert r.code == ResponseCode.SLAVE_NOT_AVAILABLE
        # WAIT=false: Apache's isWaitStoreMsgOK is false, the send does not wait for a slave
        for code in (RC.SEND_MESSAGE_V2, RC.SEND_MESSAGE):
            r = send(rc, b, TOPIC, b"y", code=code, WAIT="false")
            assert r.code == ResponseCode.SUCCESS, r.remark
        s.sock.close()


def test_async_master_answers_at_once_with_a_silent_slave():
    with TestBroker({"haSendHeartbeatInterval": "200"}) as b, SyncRemotingClient() as rc:
        _create_topic(rc, b)
        s = _caught_up_slave(b)
        for code in ROUTES:
            assert _send(rc, b, code).code == ResponseCode.SUCCESS
        s.sock.close()


def test_the_slaves_lag_is_in_runtime_info_and_metrics():
    port = free_port()
    with _broker(metricsPort=str(port), slaveTimeout="200") as b, SyncRemotingClient() as rc:
        _create_topic(rc, b)
        s = _caught_up_slave(b)
        acked = b.broker.store.commitlog.max_offset
        for _ in range(3):
            assert send(rc, b, TOPIC, b"z" * 100).code == ResponseCode.FLUSH_SLAVE_TIMEOUT
        behind = b.broker.store.commitlog.max_offset - acked

        def table():
            r = rc.invoke(b.broker_addr, create_request(RC.GET_BROKER_RUNTIME_INFO), 5000)
            return loads_lenient(r.body)["table"]

        t = table()
        assert t["haSlaveCount"] == "1" and t["haSlaveAckOffset"] == str(acked)
        assert t["haSlaveFallBehindBytes"] == str(behind) and int(t["haSlaveFallBehindMs"]) >= 200
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert "rocketmq_ha_slaves{" in text
        lag = [ln for ln in text.splitlines() if ln.startswith("rocketmq_ha_slave_lag_bytes{")]
        assert len(lag) == 1 and float(lag[0].rsplit(" ", 1)[1]) == behind
        s.report(b.broker.store.commitlog.max_offset)  # caught up: no lag left
        assert wait_for(lambda: table()["haSlaveFallBehindBytes"] == "0")
        assert table()["haSlaveFallBehindMs"] == "0"
        s.sock.close()
        assert wait_for(lambda: table()["haSlaveCount"] == "0")


def test_the_vip_port_serves_the_remoting_protocol():
    port = free_port_block(2)
    with TestBroker({"listenPort": str(port)}) as b, SyncRemotingClient() as rc:
        _create_topic(rc, b)
        assert b.broker.vip_port == port - 2
        r = rc.invoke(f"127.0.0.1:{port - 2}", create_request(RC.GET_ALL_TOPIC_CONFIG), 5000)
        assert r.code == ResponseCode.SUCCESS and TOPIC in loads_lenient(r.body)["topicConfigTable"]
        # sends too (clients with vipChannelEnabled), on the same plain-send path
        vip = type("Vip", (), {"broker_addr": f"127.0.0.1:{port - 2}"})
        assert send(rc, vip, TOPIC, b"via vip").code == ResponseCode.SUCCESS
