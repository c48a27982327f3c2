"""100,000 pending timers do not grow the broker's heap: they live in the timer files and
are read back a second at a time (a heap of pending timers would cost far more than the
bound here). The heap is RssAnon; the mapped store files' pages (RssFile) grow with the bytes
stored whatever the messages are, and the page cache can drop them."""
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


def _rss_anon_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc status")


def test_100k_pending_timers_grow_the_broker_heap_by_less_than_20_mib(tmp_path):
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
        before = _rss_anon_mib(b.proc.pid)
        send_many(b, "Mem", COUNT, lambda i: {"TIMER_DELIVER_MS": str(far + 200 + i * 17)})
        assert wait_for(lambda: enqueued(COUNT + 200), timeout=120, step=0.5)  # all in the wheel
        time.sleep(2)
        grown = _rss_anon_mib(b.proc.pid) - before
        assert grown < 20, f"the broker's heap grew by {grown:.1f} MiB with {COUNT} pending timers"
