"""Latency fault tolerance: steer sends away from slow or failing brokers.

RocketMQ's ``MQFaultStrategy`` / ``LatencyFaultToleranceImpl`` (4.9.8 tables,
client-defaults.md §1, seed 000). After every send attempt the producer records a
``FaultItem`` for the broker: the latency it saw and the time until which the broker
counts as unavailable (``now + notAvailableDuration(latency)``; a failed attempt
counts as 30 000 ms latency, i.e. a 10-minute ban). When choosing a queue with the
feature on:

1. round-robin over the topic's queues, take the first whose broker is available;
2. otherwise ``pick_one_at_least``: sort all fault items (available first, then lower
   latency, then earlier ``start_timestamp``) and pick round-robin among the better
   half (the first item when there are fewer than two), and send to that broker's
   queue ``counter % writeQueueNums``;
3. if that broker has no write queues any more, forget it and fall back to plain
   round-robin.

Java's comparator reads the clock inside ``compareTo`` (an inconsistent order while
items expire mid-sort); here the clock is read once and handed to :func:`fault_order`,
so the order is a total order. The clock is injected. A producer knows a handful of
brokers, so the sort is plain Python (it used to live among the store kernels).

Thread model: all methods are called from the client's event-loop thread; the table
is also guarded by a lock so tools may read it from elsewhere.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Sequence

from mqcore.client.config import LATENCY_MAX_MS, NOT_AVAILABLE_DURATION_MS
from mqcore.client.route import TopicPublishInfo
from mqcore.clock import Clock, system_clock_ms
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["FaultItem", "LatencyFaultTolerance", "MQFaultStrategy", "ISOLATION_LATENCY_MS"]

#: latency charged for a failed attempt (4.9.8): 30 s => the 600 s ban of the last row
ISOLATION_LATENCY_MS = 30_000


@dataclasses.dataclass(slots=True)
class FaultItem:
    """Latency seen for one broker and when it becomes available again."""

    name: str
    current_latency: int
    start_timestamp: int

    def is_available(self, now_ms: int) -> bool:
        return now_ms - self.start_timestamp >= 0


def fault_order(latency: Sequence[int], start_timestamp: Sequence[int], now_ms: int) -> list[int]:
    """Indexes of FaultItems best first: available (``now >= start``) first, then lower
    latency, then earlier start, then position (a total order for one ``now_ms``)."""
    return sorted(range(len(latency)), key=lambda i: (now_ms < start_timestamp[i], latency[i],
                                                      start_timestamp[i], i))


class LatencyFaultTolerance:
    """The fault-item table (``LatencyFaultToleranceImpl``)."""

    def __init__(self, clock: Clock = system_clock_ms) -> None:
        self._clock = clock
        self._items: dict[str, FaultItem] = {}
        self._lock = threading.Lock()
        self._which_item_worst = 0

    def update_fault_item(self, name: str, current_latency: int, not_available_duration: int) -> None:
        start = self._clock() + not_available_duration
        with self._lock:
            item = self._items.get(name)
            if item is None:
                self._items[name] = FaultItem(name, int(current_latency), start)
            else:
                item.current_latency = int(current_latency)
                item.start_timestamp = start

    def is_available(self, name: str) -> bool:
        item = self._items.get(name)
        return item is None or item.is_available(self._clock())

    def remove(self, name: str) -> None:
        with self._lock:
            self._items.pop(name, None)

    def items(self) -> list[FaultItem]:
        with self._lock:
            return [dataclasses.replace(i) for i in self._items.values()]

    def sorted_items(self) -> list[FaultItem]:
        """All items best first, ordered by the sort kernel with one clock reading."""
        with self._lock:
            items = list(self._items.values())
        if not items:
            return []
        order = fault_order([i.current_latency for i in items], [i.start_timestamp for i in items], self._clock())
        return [items[k] for k in order]

    def pick_one_at_least(self) -> str | None:
        """A broker name from the better half of the sorted items, round-robin."""
        ranked = self.sorted_items()
        if not ranked:
            return None
        half = len(ranked) // 2
        if half <= 0:
            return ranked[0].name
        self._which_item_worst += 1
        return ranked[self._which_item_worst % half].name

    def __repr__(self) -> str:
        return f"LatencyFaultTolerance({list(self._items.values())!r})"


def compute_not_available_duration(latency_ms: int, latency_max: Sequence[int],
                                   not_available_duration: Sequence[int]) -> int:
    """``notAvailableDuration[i]`` for the largest ``i`` with ``latency >= latencyMax[i]``."""
    for i in range(len(latency_max) - 1, -1, -1):
        if latency_ms >= latency_max[i]:
            return not_available_duration[i]
    return 0


class MQFaultStrategy:
    """Queue choice for a send, with or without latency fault tolerance."""

    def __init__(self, *, enabled: bool = False, clock: Clock = system_clock_ms,
                 latency_max: Sequence[int] = LATENCY_MAX_MS,
                 not_available_duration: Sequence[int] = NOT_AVAILABLE_DURATION_MS) -> None:
        self.enabled = enabled
        self.latency_max = tuple(latency_max)
        self.not_available_duration = tuple(not_available_duration)
        self.fault_tolerance = LatencyFaultTolerance(clock)

    def select_one_message_queue(self, info: TopicPublishInfo, last_broker_name: str | None) -> MessageQueue:
        if not self.enabled:
            return info.select_one_message_queue(last_broker_name)
        tolerance = self.fault_tolerance
        queues = info.message_queues
        n = len(queues)
        index = info.next_index()
        for _ in range(n):
            mq = queues[index % n]
            index += 1
            if tolerance.is_available(mq.broker_name):
                return mq
        not_best = tolerance.pick_one_at_least()
        if not_best is not None:
            write_queues = info.write_queue_nums(not_best)
            if write_queues > 0:
                log.debug("all brokers of %s are in back-off; using the least bad one, %s", info.topic, not_best)
                return MessageQueue(info.topic, not_best, info.next_index() % write_queues)
            tolerance.remove(not_best)
        return info.select_one_message_queue()

    def update_fault_item(self, broker_name: str, current_latency: int, isolation: bool) -> None:
        """Record an attempt; ``isolation`` marks a failure (charged 30 000 ms)."""
        if not self.enabled:
            return
        latency = ISOLATION_LATENCY_MS if isolation else current_latency
        duration = compute_not_available_duration(latency, self.latency_max, self.not_available_duration)
        self.fault_tolerance.update_fault_item(broker_name, current_latency, duration)
