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


class VirtualClock:
    """The wall clock plus an offset that a test moves forward (``mqcore.testing``).

    A broker given this clock lets a test skip hours: delay levels, timers, the retry ladder
    and transaction check-backs come due when ``advance`` passes their time. What measures
    liveness (client heartbeats, rebalance locks) reads ``wall`` instead: the clients stay
    connected and heartbeating through the skipped time, as they would have. Listeners added
    with ``subscribe`` run after every ``advance`` (the broker wakes its services there), on
    the advancing thread. Thread-safe; never moves back.
    """

    def __init__(self, wall: Clock = system_clock_ms) -> None:
        self.wall = wall
        self._offset = 0
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def __call__(self) -> int:
        return self.wall() + self._offset

    @property
    def offset_ms(self) -> int:
        """How far ahead of the wall clock this clock is."""
        return self._offset

    def advance(self, delta_ms: int) -> int:
        """Move the clock ``delta_ms`` forward (0 or more); returns the new time."""
        delta = int(delta_ms)
        if delta < 0:
            raise ValueError(f"a virtual clock only moves forward, not by {delta_ms!r} ms")
        with self._lock:
            self._offset += delta
            listeners = list(self._listeners)
        for listener in listeners:
            listener()
        return self()

    def subscribe(self, listener: Callable[[], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def unsubscribe(self, listener: Callable[[], None]) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)
