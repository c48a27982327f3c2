"""Rates over time for the dashboard's charts, from the counters the Prometheus endpoint serves.

The broker counts messages stored per topic and delivered per (group, topic) in
``BrokerStats`` (``rocketmq_messages_in`` / ``rocketmq_messages_out`` on ``/metrics``). The
dashboard samples those running totals every few seconds and keeps a bounded ring of
samples; a rate is the difference of two samples over their time. Nothing is added to the
send or pull paths. The totals are read through the two functions below, so a renamed
metric label changes nothing here.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mqcore.dashboard.source import Stats as BrokerStats

#: one sample every 5 s, one hour kept
SAMPLE_INTERVAL_MS = 5_000
KEEP_SAMPLES = 720


def stored_by_topic(stats: BrokerStats) -> dict[str, int]:
    """Messages stored so far, per topic (the counter behind ``rocketmq_messages_in``)."""
    return {topic: c[0] for topic, c in list(stats.put.items())}


def delivered_by_topic(stats: BrokerStats) -> dict[str, int]:
    """Messages delivered so far by pulls and 5.x receives, per topic (summed over groups;
    the counter behind ``rocketmq_messages_out``)."""
    out: dict[str, int] = {}
    for (_group, topic), c in list(stats.pulled.items()):
        out[topic] = out.get(topic, 0) + c[0]
    return out


class RateHistory:
    """Samples of (time, stored per topic, delivered per topic); rates between samples.

    Called on the broker's event loop only (``sample`` by the dashboard's timer, the
    readers by its request handlers)."""

    def __init__(self, stats: BrokerStats, keep: int = KEEP_SAMPLES):
        self.stats = stats
        self.samples: deque[tuple[int, dict[str, int], dict[str, int]]] = deque(maxlen=keep)

    def sample(self, now_ms: int) -> None:
        self.samples.append((now_ms, stored_by_topic(self.stats), delivered_by_topic(self.stats)))

    def series(self, topic: str | None = None) -> dict[str, list[float]]:
        """``{"t": [epoch s], "put": [msg/s], "get": [msg/s]}`` between consecutive samples,
        for one topic or the whole broker. A counter that went down (a deleted topic) gives 0,
        never a negative rate."""
        t: list[float] = []
        put: list[float] = []
        get: list[float] = []
        prev = None
        for now, stored, delivered in self.samples:
            if prev is not None:
                p_now, p_stored, p_delivered = prev
                dt = (now - p_now) / 1000
                if dt > 0:
                    t.append(now / 1000)
                    put.append(round(max(0, _total(stored, topic) - _total(p_stored, topic)) / dt, 3))
                    get.append(round(max(0, _total(delivered, topic) - _total(p_delivered, topic)) / dt, 3))
            prev = (now, stored, delivered)
        return {"t": t, "put": put, "get": get}

    def latest_rates(self) -> dict[str, tuple[float, float]]:
        """topic -> (put msg/s, get msg/s) over the last sample interval."""
        if len(self.samples) < 2:
            return {}
        (t0, s0, d0), (t1, s1, d1) = self.samples[-2], self.samples[-1]
        dt = (t1 - t0) / 1000
        if dt <= 0:
            return {}
        return {topic: (max(0, s1.get(topic, 0) - s0.get(topic, 0)) / dt,
                        max(0, d1.get(topic, 0) - d0.get(topic, 0)) / dt)
                for topic in set(s1) | set(d1)}


def _total(counts: dict[str, int], topic: str | None) -> int:
    return counts.get(topic, 0) if topic is not None else sum(counts.values())


#: groups whose consume stats are kept over time, at most (the first by name beyond it are kept)
MAX_GROUPS = 200


class GroupHistory:
    """Per consumer group: samples of (time, consumeTps, Diff Total, lag per (topic, queue)), the
    figures GET_CONSUME_STATS answers ``mqadmin consumerProgress`` (its ``consumeTps`` is the
    broker's GROUP_GET_NUMS minute window; each lag is brokerOffset - consumerOffset). Sampled by
    the dashboard's timer on the broker's loop, one hour kept."""

    def __init__(self, keep: int = KEEP_SAMPLES) -> None:
        self.keep = keep
        self.samples: dict[str, deque[tuple[int, float, int, dict[tuple[str, int], int]]]] = {}

    def add(self, group: str, now_ms: int, tps: float, diff_total: int, queues: dict[tuple[str, int], int]) -> None:
        ring = self.samples.get(group)
        if ring is None:
            ring = self.samples[group] = deque(maxlen=self.keep)
        ring.append((now_ms, tps, diff_total, queues))

    def retain(self, groups: set[str]) -> None:
        """Forget the groups no longer known (deleted, or without offsets)."""
        for g in [g for g in self.samples if g not in groups]:
            del self.samples[g]

    def series(self, group: str) -> dict[str, object]:
        """``{"t": [epoch s], "tps": [...], "lag": [...], "queues": {(topic, queue): [lag...]}}``;
        a queue missing from a sample (it appeared later) counts 0 there."""
        ring = list(self.samples.get(group, ()))
        keys = sorted({k for _t, _tps, _d, q in ring for k in q})
        return {"t": [s[0] / 1000 for s in ring], "tps": [s[1] for s in ring], "lag": [s[2] for s in ring],
                "queues": {k: [s[3].get(k, 0) for s in ring] for k in keys}}


#: topics whose queue offsets are kept over time, at most (the first by name)
MAX_TOPICS = 200


class QueueHistory:
    """Per topic: samples of (time, {queue id: (min offset, max offset)}), the offsets
    GET_TOPIC_STATS_INFO answers ``mqadmin topicStatus`` (``queries.queue_offsets``, the same
    reading the topic page's table shows). Sampled by the dashboard's timer on the broker's
    loop beside the groups' figures, one hour kept."""

    def __init__(self, keep: int = KEEP_SAMPLES) -> None:
        self.keep = keep
        self.samples: dict[str, deque[tuple[int, dict[int, tuple[int, int]]]]] = {}

    def add(self, topic: str, now_ms: int, queues: dict[int, tuple[int, int]]) -> None:
        ring = self.samples.get(topic)
        if ring is None:
            ring = self.samples[topic] = deque(maxlen=self.keep)
        ring.append((now_ms, queues))

    def retain(self, topics: set[str]) -> None:
        """Forget the topics no longer sampled (deleted, or beyond MAX_TOPICS)."""
        for t in [t for t in self.samples if t not in topics]:
            del self.samples[t]

    def series(self, topic: str) -> dict[str, object]:
        """``{"t": [epoch s], "messages": [kept over all queues], "max": {queue: [max offset...]},
        "kept": {queue: [max - min...]}}``; a queue missing from a sample (added later) counts 0."""
        ring = list(self.samples.get(topic, ()))
        qids = sorted({q for _t, qs in ring for q in qs})
        return {"t": [s[0] / 1000 for s in ring],
                "messages": [sum(hi - lo for lo, hi in qs.values()) for _t, qs in ring],
                "max": {q: [qs.get(q, (0, 0))[1] for _t, qs in ring] for q in qids},
                "kept": {q: [qs.get(q, (0, 0))[1] - qs.get(q, (0, 0))[0] for _t, qs in ring] for q in qids}}
