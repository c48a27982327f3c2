"""A store with pending timers moves between mqbroker and Apache RocketMQ 5.3.3 with its timers
still pending, both ways: mqbroker writes the timer files in Apache's layout (timerlog,
timerwheel, config/timercheck, config/timermetrics), so the other broker delivers every pending
timer once, not before its time, and nothing already delivered again. (On a loaded machine a
JVM can take longer to start than the timers wait: those are then delivered as soon as it
serves, which the checks allow.)"""
from __future__ import annotations

import time

import pytest

from mqcore.remoting import ResponseCode, SyncRemotingClient
from tests.support.processes import BrokerProcess
from tests.support.protocol import decode, pull, send
from tests.support.reference5 import Java5Broker, Java5Namesrv
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(420)

#: one geometry for both brokers (file sizes must match for the files to be read)
GEOMETRY = {"mappedFileSizeCommitLog": 16 * 1024 * 1024, "mappedFileSizeConsumeQueue": 300000 * 20,
            "maxHashSlotNum": 10000, "maxIndexNum": 40000, "mappedFileSizeTimerLog": 4 * 1024 * 1024}
TOPIC = "SwapTimer"


class _Addr:
    def __init__(self, addr):
        self.broker_addr = addr


def _served(rc, addr, queues=4):
    out = []
    for q in range(queues):
        off = 0
        while True:
            r = pull(rc, _Addr(addr), TOPIC, off, queue_id=q, sub="*")
            if r.code != ResponseCode.SUCCESS:
                break
            out += decode(r.body)
            off = int(r.ext_fields["nextBeginOffset"])
    return out


def _send_timers(rc, addr, n, first_due_ms, tag):
    due = {}
    for i in range(n):
        body = b"%s-%d" % (tag, i)
        due[body] = first_due_ms + i * 97
        r = send(rc, _Addr(addr), TOPIC, body, queue_id=i % 4, TIMER_DELIVER_MS=str(due[body]),
                 UNIQ_KEY="%s%06d" % (tag.decode(), i))
        assert r.code == ResponseCode.SUCCESS, r.remark
    return due


def _check_once_and_on_time(msgs, due):
    bodies = [m.body for m in msgs]
    assert sorted(bodies) == sorted(due), (sorted(bodies), sorted(due))
    for m in msgs:
        assert m.store_timestamp >= due[m.body] - 5, (m.body, m.store_timestamp - due[m.body])


def test_pending_timers_move_from_mqbroker_to_apache_5(tmp_path):
    store = tmp_path / "store"
    with BrokerProcess(store, conf=GEOMETRY) as b, SyncRemotingClient() as rc:
        now = int(time.time() * 1000)
        early = _send_timers(rc, b.broker_addr, 5, now + 2000, b"early")
        pending = _send_timers(rc, b.broker_addr, 30, now + 60_000, b"late")
        assert wait_for(lambda: len(_served(rc, b.broker_addr)) == 5, timeout=20, step=0.2)  # the rest pending
        _check_once_and_on_time(_served(rc, b.broker_addr), early)
    with Java5Namesrv(tmp_path / "ns") as ns, Java5Broker(store, ns.addr, conf=GEOMETRY) as jb, \
            SyncRemotingClient() as rc:
        assert wait_for(lambda: len(_served(rc, jb.broker_addr)) >= 35, timeout=120, step=0.3)
        time.sleep(2)
        _check_once_and_on_time(_served(rc, jb.broker_addr), {**early, **pending})


def test_pending_timers_move_from_apache_5_to_mqbroker(tmp_path):
    store = tmp_path / "store"
    with Java5Namesrv(tmp_path / "ns") as ns, Java5Broker(store, ns.addr, conf=GEOMETRY) as jb, \
            SyncRemotingClient() as rc:
        now = int(time.time() * 1000)
        early = _send_timers(rc, jb.broker_addr, 5, now + 3000, b"early")
        assert wait_for(lambda: len(_served(rc, jb.broker_addr)) == 5, timeout=30, step=0.3)
        now = int(time.time() * 1000)
        pending = _send_timers(rc, jb.broker_addr, 30, now + 30_000, b"late")
        time.sleep(2)  # the Java broker's timer flush (1 s) has the units in its wheel
    with BrokerProcess(store, conf=GEOMETRY) as b, SyncRemotingClient() as rc:
        assert wait_for(lambda: len(_served(rc, b.broker_addr)) >= 35, timeout=90, step=0.3)
        time.sleep(2)
        _check_once_and_on_time(_served(rc, b.broker_addr), {**early, **pending})
