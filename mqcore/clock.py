"""The one clock: epoch milliseconds, injectable everywhere.

Timing decisions (store timestamps, expiry, persist timers, fault items, id time fields)
take a clock argument instead of reading the wall clock, so tests can drive them
with :class:`ManualClock`. A clock is any ``Callable[[], int]`` returning epoch
milliseconds.
"""
from __future__ import annotations

import threading
import time
from typing import Callable

Clock = Callable[[], int]


def system_clock_ms() -> int:
    """Wall clock, epoch milliseconds (what RocketMQ's ``System.currentTimeMillis``)."""
    return time.time_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when told to. Thread-safe."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = int(start_ms)
        self._lock = threading.Lock()

    def __call__(self) -> int:
        return self._now

    def advance(self, delta_ms: int) -> int:
        with self._lock:
            self._now += int(delta_ms)
            return self._now

    def set(self, now_ms: int) -> None:
        with self._lock:
            self._now = int(now_ms)
