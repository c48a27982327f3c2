"""Counters the broker keeps for its metrics, at the cost of a few integer adds per request.

The send and pull paths call ``on_put`` / ``on_pull`` once per request (a batch is one
call), never per message; everything else a scrape shows (offsets, lag, disk use,
backlogs) is read from the broker's own state when the scrape happens
(``mqcore.broker.metrics``). Plain ints in dicts and lists: updated on the event loop
(or, for a put on the SYNC_FLUSH pool, under the GIL: an ``+=`` on an int in a list is
not atomic, but a lost increment of a statistic is acceptable where a lock is not).
"""
from __future__ import annotations

import dataclasses

from mqcore._compat import default_pipeline_kernels
from mqcore.histogram import PUT_LATENCY_BOUNDS_S
from mqcore.kernel_api import HistogramApi
from mqcore.store.results import GetMessageResult, PutMessageResult, PutMessageStatus

_PUT_OK = PutMessageStatus.PUT_OK


def _put_latency() -> HistogramApi:
    """The pipeline kernels' Histogram: the compiled one keeps its buckets in C, where the send
    core adds a put's latency without a Python call (the twin is ``mqcore.histogram.Histogram``)."""
    return default_pipeline_kernels().Histogram(PUT_LATENCY_BOUNDS_S)


@dataclasses.dataclass
class BrokerStats:
    #: topic -> [messages, bytes] stored
    put: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    #: (status name) -> puts refused or failed
    put_failures: dict[str, int] = dataclasses.field(default_factory=dict)
    #: (group, topic) -> [messages, bytes] delivered by pulls
    pulled: dict[tuple[str, str], list[int]] = dataclasses.field(default_factory=dict)
    #: response kind ("found", "not_found", "offset_moved", "other") -> pull requests
    pull_requests: dict[str, int] = dataclasses.field(default_factory=dict)
    #: (group, "retry" | "dlq") -> messages a consumer sent back that went there
    sent_back: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    #: pulls parked by long polling
    long_polls: int = 0
    put_latency: HistogramApi = dataclasses.field(default_factory=_put_latency)

    def on_put(self, topic: str, result: PutMessageResult) -> None:
        """One put request's outcome (a batch counts all its messages)."""
        status = result.status
        if status is _PUT_OK or status.stored:  # the identity test first: an enum property is slow
            c = self.put.get(topic)
            if c is None:
                c = self.put[topic] = [0, 0]
            c[0] += result.message_count or 1
            c[1] += result.wrote_bytes
        else:
            name = result.status.value
            self.put_failures[name] = self.put_failures.get(name, 0) + 1

    def on_put_many(self, topic: str, count: int, size: int) -> None:
        """``on_put`` of ``count`` stored messages of one topic, ``size`` bytes in all (the send
        pipeline counts a receive buffer's run of one topic at once)."""
        c = self.put.get(topic)
        if c is None:
            c = self.put[topic] = [0, 0]
        c[0] += count
        c[1] += size

    def on_pull(self, group: str, topic: str, result: GetMessageResult | None, kind: str, held: bool) -> None:
        if held:
            self.long_polls += 1
        if result is None:
            self.on_pulled(group, topic, kind, 0, 0)
        else:
            self.on_pulled(group, topic, kind, result.message_count, result.buffer_total_size)

    def on_pulled(self, group: str, topic: str, kind: str, messages: int, nbytes: int) -> None:
        """One pull answered at once, of ``kind``, delivering ``messages`` records of ``nbytes``
        (the pull pipeline's C core counts this way: it builds no result object)."""
        self.pull_requests[kind] = self.pull_requests.get(kind, 0) + 1
        if messages:
            key = (group, topic)
            c = self.pulled.get(key)
            if c is None:
                c = self.pulled[key] = [0, 0]
            c[0] += messages
            c[1] += nbytes

    def on_delivered(self, group: str, topic: str, messages: int, nbytes: int) -> None:
        """Messages handed out other than by a pull (a 5.x receive), with their record bytes."""
        c = self.pulled.get((group, topic))
        if c is None:
            c = self.pulled[(group, topic)] = [0, 0]
        c[0] += messages
        c[1] += nbytes

    def on_send_back(self, group: str, topic: str, result: PutMessageResult) -> None:
        self.on_put(topic, result)
        if result.status.stored:
            key = (group, "dlq" if topic.startswith("%DLQ%") else "retry")
            self.sent_back[key] = self.sent_back.get(key, 0) + 1

    def forget_topic(self, topic: str) -> None:
        self.put.pop(topic, None)
        for key in [k for k in self.pulled if k[1] == topic]:
            del self.pulled[key]
