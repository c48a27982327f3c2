"""100,000 pending timers do not grow the broker's memory: they live in the timer files and
are read back a second at a time (a heap of pending timers would cost far more than the
bound here). Both the heap (RssAnon) and the whole resident set (VmRSS, which also counts
mapped store pages) are bounded: flushed pages of the commitlog, consume queues and timerlog
are released from the process once they are ``residentBehindBytes`` behind the writer."""
from __future__ import annotations

import struct
import time

import pytest

from mqcore.format import timer as T
from tests.support.processes import BrokerProcess
from tests.support.protocol import send_many
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(400)
COUNT = 100_000


def _rss_mib(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} in /proc status")


def test_100k_pending_timers_grow_the_broker_rss_by_less_than_20_mib(tmp_path):
    with BrokerProcess(tmp_path / "store") as b:
        far = int(time.time() * 1000) + 3_600_000
        send_many(b, "Mem", 200, lambda i: {"TIMER_DELIVER_MS": str(far + i)})  # paths and files warmed up
        check = tmp_path / "store" / "config" / T.TIMERCHECK_FILE

        def enqueued(n: int) -> bool:
            try:
                return struct.unpack_from(">q", check.read_bytes(), T.C_QUEUE_OFFSET)[0] >= n
            except (OSError, struct.error):
                return False

        assert wait_for(lambda: enqueued(200), timeout=30)
        time.sleep(1)
        before = {f: _rss_mib(b.proc.pid, f) for f in ("RssAnon", "VmRSS")}
        send_many(b, "Mem", COUNT, lambda i: {"TIMER_DELIVER_MS": str(far + 200 + i * 17)})
        assert wait_for(lambda: enqueued(COUNT + 200), timeout=120, step=0.5)  # all in the wheel
        time.sleep(2)
        grown = {f: _rss_mib(b.proc.pid, f) - mib for f, mib in before.items()}
        assert grown["RssAnon"] < 20, f"the broker's heap grew by {grown} MiB with {COUNT} pending timers"
        assert grown["VmRSS"] < 20, f"the broker's RSS grew by {grown} MiB with {COUNT} pending timers"
