"""Timer messages over 4.x remoting against a live broker process: held until their second,
refused when malformed, recalled by handle, kept across kill -9, and interleaved with
gRPC timers in the one store timer."""
from __future__ import annotations

import time

import pytest

from mqcore.format import timer as T
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.support.processes import BrokerProcess
from tests.support.protocol import decode, pull, send
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)


def _all(rc, b, topic, queue_id=0):
    out, off = [], 0
    while True:
        r = pull(rc, b, topic, off, queue_id=queue_id, sub="*")
        if r.code != ResponseCode.SUCCESS:
            return out
        out += decode(r.body)
        off = int(r.ext_fields["nextBeginOffset"])


def test_a_timer_over_remoting_arrives_in_its_second_not_before(tmp_path):
    with BrokerProcess(tmp_path / "store") as b, SyncRemotingClient() as rc:
        due = int(time.time() * 1000) + 2500
        r = send(rc, b, "Timed", b"at due", TIMER_DELIVER_MS=str(due), UNIQ_KEY="AA01")
        assert r.code == ResponseCode.SUCCESS, r.remark
        assert r.ext_fields.get("recallHandle")
        sec = send(rc, b, "Timed", b"by seconds", TIMER_DELAY_SEC="2", UNIQ_KEY="AA02")
        assert sec.code == ResponseCode.SUCCESS
        sent_sec = time.time() * 1000
        assert _all(rc, b, "Timed") == []
        assert wait_for(lambda: len(_all(rc, b, "Timed")) == 2, timeout=10, step=0.05)
        arrived = time.time() * 1000
        got = {m.body: m for m in _all(rc, b, "Timed")}
        m = got[b"at due"]
        assert m.properties[T.PROP_TIMER_DELIVER_MS] == str(due)
        assert m.properties["REAL_TOPIC"] == "Timed"
        assert m.store_timestamp >= due - 1000  # the slot of the due second, never earlier
        assert got[b"by seconds"].store_timestamp >= sent_sec + 1000
        assert arrived - due < 2000


@pytest.mark.parametrize("props", [{"TIMER_DELAY_SEC": "soon"}, {"TIMER_DELIVER_MS": "12e5"},
                                   {"TIMER_DELAY_SEC": str(3 * 86400 + 60)}])
def test_malformed_timers_get_message_illegal_and_store_nothing(tmp_path, props):
    with BrokerProcess(tmp_path / "store") as b, SyncRemotingClient() as rc:
        r = send(rc, b, "Bad", b"x", **props)
        assert r.code == ResponseCode.MESSAGE_ILLEGAL and r.remark.startswith("timer message illegal")
        ok = send(rc, b, "Bad", b"plain")
        assert ok.ext_fields["queueOffset"] == "0" and int(ok.ext_fields["msgId"][-16:], 16) == 0


def test_recall_over_remoting_removes_one(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"recallMessageEnable": "true"}) as b, SyncRemotingClient() as rc:
        due = str(int(time.time() * 1000) + 3000)
        keep = send(rc, b, "Rc", b"keep", TIMER_DELIVER_MS=due, UNIQ_KEY="K1")
        drop = send(rc, b, "Rc", b"drop", TIMER_DELIVER_MS=due, UNIQ_KEY="K2")
        handle = drop.ext_fields["recallHandle"]
        ans = rc.invoke(b.broker_addr, create_request(RC.RECALL_MESSAGE, {
            "producerGroup": "PG", "topic": "Rc", "recallHandle": handle}), 5000)
        assert ans.code == ResponseCode.SUCCESS and ans.ext_fields["msgId"] == "K2"
        bad = rc.invoke(b.broker_addr, create_request(RC.RECALL_MESSAGE, {
            "producerGroup": "PG", "topic": "Rc", "recallHandle": "bm90IGEgaGFuZGxl"}), 5000)
        assert bad.code == ResponseCode.ILLEGAL_OPERATION and bad.remark == "recall failed, timestamp invalid" \
            or bad.remark == "recall failed, topic not match" or "invalid" in bad.remark
        other = rc.invoke(b.broker_addr, create_request(RC.RECALL_MESSAGE, {
            "producerGroup": "PG", "topic": "Nope", "recallHandle": handle}), 5000)
        assert other.code == ResponseCode.TOPIC_NOT_EXIST
        assert keep.code == ResponseCode.SUCCESS
        assert wait_for(lambda: len(_all(rc, b, "Rc")) >= 1, timeout=10, step=0.1)
        time.sleep(1.5)  # a recalled message would come in the same slot
        assert [m.body for m in _all(rc, b, "Rc")] == [b"keep"]


def test_kill9_with_pending_timers_delivers_them_all_after_restart(tmp_path):
    b = BrokerProcess(tmp_path / "store")
    with b, SyncRemotingClient() as rc:
        due = int(time.time() * 1000) + 4000
        for i in range(200):
            assert send(rc, b, "Kt", b"%d" % i, queue_id=i % 2, TIMER_DELIVER_MS=str(due + (i % 5) * 300),
                        UNIQ_KEY="KT%04d" % i).code == ResponseCode.SUCCESS
        assert wait_for(lambda: (tmp_path / "store" / "timerwheel").exists(), timeout=10)
        time.sleep(0.5)
        b.kill9()
        b.restart()
        assert wait_for(lambda: len(_all(rc, b, "Kt", 0)) + len(_all(rc, b, "Kt", 1)) >= 200, timeout=30,
                        step=0.2)
        time.sleep(1.5)
        bodies = [m.body for q in (0, 1) for m in _all(rc, b, "Kt", q)]
        assert sorted(bodies, key=int) == [b"%d" % i for i in range(200)]


def test_the_python_client_sends_timers_with_its_message_helpers(tmp_path):
    from mqcore.client import Message, Producer
    from tests.client.integration.helpers import create_topic, pull_everything

    with BrokerProcess(tmp_path / "store") as b:
        create_topic(b.broker_addr, b.namesrv_addr, "PyTimed")
        with Producer("pg-timer", namesrv_addr=b.namesrv_addr) as p:
            m1 = Message("PyTimed", "by time")
            m1.deliver_time_ms = int(time.time() * 1000) + 1500
            m2 = Message("PyTimed", "by seconds")
            m2.delay_time_sec = 1
            sent = time.time() * 1000
            assert p.send(m1).ok and p.send(m2).ok
        assert pull_everything(b.namesrv_addr, "PyTimed") == []
        assert wait_for(lambda: len(pull_everything(b.namesrv_addr, "PyTimed")) == 2, timeout=10, step=0.1)
        got = {m.body: m for m in pull_everything(b.namesrv_addr, "PyTimed")}
        assert got[b"by time"].store_timestamp >= m1.deliver_time_ms - 5
        assert got[b"by seconds"].store_timestamp >= sent + 1000 - 5
