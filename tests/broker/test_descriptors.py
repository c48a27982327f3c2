"""File descriptors: a broker at its RLIMIT_NOFILE answers errors, keeps connections, recovers.

Real mqbroker processes with a lowered descriptor limit (set in the child before exec). A
mapped store file holds one descriptor, every connection one more; the broker keeps the
last descriptors (``MIN_FD_RESERVE``, at least) for the store by refusing connections that
would take them.
"""
from __future__ import annotations

import socket

import pytest

from mqcore.admin.api import MQAdmin
from mqcore.client import Message, Producer
from mqcore.client.message import MessageQueue
from mqcore.errors import BrokerError
from mqcore.remoting.codes import ResponseCode
from mqcore.remoting.server import MIN_FD_RESERVE
from tests.support.processes import BrokerProcess
from tests.support.waiting import wait_for

LIMIT = 256
#: consume-queue files of 300 units: every queue's first message makes one file
CONF = {"mappedFileSizeConsumeQueue": 6000}


def _send(producer: Producer, queue_id: int) -> BrokerError | None:
    try:
        producer.send(Message("Fd", b"x"), queue=MessageQueue("Fd", "broker-a", queue_id))
    except BrokerError as e:
        return e
    return None


def _closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except OSError:
        return True


def test_at_the_descriptor_limit_sends_get_an_error_answer_and_the_broker_recovers(tmp_path):
    with BrokerProcess(tmp_path / "store", nofile=LIMIT, conf=CONF) as broker, \
            MQAdmin(broker.namesrv_addr) as admin:
        admin.create_topic(broker.broker_addr, "Fd", read_queue_nums=400, write_queue_nums=400)
        producer = Producer("fd-producer", namesrv_addr=broker.namesrv_addr, retry_times_when_send_failed=0)
        with producer:
            assert _send(producer, 0) is None  # connected before the flood
            host, port = broker.broker_addr.rsplit(":", 1)
            flood = [socket.create_connection((host, int(port))) for _ in range(LIMIT)]
            try:
                # connections stop being accepted before the store's reserve is eaten
                assert wait_for(lambda: sum(_closed_by_peer(s) for s in flood) >= MIN_FD_RESERVE // 2, 20)
                # ... so new store files (a queue's first message: one consume-queue file) still open
                assert all(_send(producer, q) is None for q in range(1, MIN_FD_RESERVE // 2))
                # until the store itself has used the reserve up: an error answer, the connection kept
                errors = [e for q in range(MIN_FD_RESERVE // 2, 400) if (e := _send(producer, q)) is not None]
                assert errors, "the store never reached the limit"
                assert all(e.code == ResponseCode.SYSTEM_ERROR for e in errors), errors[:3]
                assert "RLIMIT_NOFILE" in errors[0].remark and "create mapped file failed" in errors[0].remark
                assert _send(producer, 0) is None  # an existing file takes puts on the same connection
            finally:
                for s in flood:
                    s.close()
            # the load goes: descriptors come back, new files open again, new connections are served
            assert wait_for(lambda: _send(producer, 399) is None, 20)
            assert admin.topic_route("Fd").queue_datas
        out = broker.output()
        assert "refusing connections" in out and "file descriptors in use" in out
        assert "Traceback" not in out and "unexpected error" not in out, out[-3000:]


def test_a_store_with_more_files_than_the_limit_names_the_limit_at_start(tmp_path):
    store = tmp_path / "store"
    with BrokerProcess(store, conf=CONF) as broker, MQAdmin(broker.namesrv_addr) as admin:
        admin.create_topic(broker.broker_addr, "Fd", read_queue_nums=300, write_queue_nums=300)
        with Producer("fd-producer", namesrv_addr=broker.namesrv_addr) as producer:
            assert all(_send(producer, q) is None for q in range(300))
    too_small = BrokerProcess(store, conf=CONF, nofile=200)
    with pytest.raises(RuntimeError) as failed:
        too_small.start()
    message = str(failed.value)
    assert "more file descriptors than RLIMIT_NOFILE allows: soft 200, hard 200" in message, message[-2000:]
    assert "ulimit -Hn" in message


def test_mqbroker_raises_its_soft_descriptor_limit_to_the_hard_one(tmp_path):
    with BrokerProcess(tmp_path / "store", nofile=(300, 700)) as broker:
        with open(f"{broker.log_dir}/broker.log") as f:
            assert "file descriptor limit (RLIMIT_NOFILE): 700" in f.read()
