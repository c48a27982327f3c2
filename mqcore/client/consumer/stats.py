"""A push consumer's figures per topic for GET_CONSUMER_RUNNING_INFO's ``statusTable``
(``mqadmin consumerStatus``): RocketMQ's ``ConsumerStatsManager`` keys.

* ``pullTPS``: messages pulled per second over the last minute; ``pullRT``: ms per pull request;
* ``consumeOKTPS`` / ``consumeFailedTPS``: messages consumed (or failed) per second over the last
  minute; ``consumeRT``: ms per consumed message (the drainer's time from the first message's
  listener start to giving the run back, over its messages); ``consumeFailedMsgs``: failures over
  the last hour.

Counted per pull request and per settled run of messages, never per message. Running totals
are plain ints updated from the loop thread (pulls) and consume threads (settles): a lost
increment of a statistic is acceptable where a lock on the consume path is not. ``sample``
(every 10 s) keeps an hour of totals; the rates are differences of samples.
"""
from __future__ import annotations

import collections
from collections.abc import Callable, Sequence

SAMPLE_EVERY_MS = 10_000
MINUTE_MS = 60_000
HOUR_MS = 3_600_000

# indexes of a topic's running totals
PULLED, PULLS, PULL_RT_MS, SETTLED, SENT_BACK, FAILED, CONSUME_RT_MS, CONSUME_RT_MSGS = range(8)


class ConsumerStats:
    """Per-topic running totals and their samples (one consumer group)."""

    def __init__(self, clock: Callable[[], int]):
        self.clock = clock
        self.totals: dict[str, list[float]] = {}
        self.samples: collections.deque[tuple[int, dict[str, list[float]]]] = collections.deque(
            maxlen=HOUR_MS // SAMPLE_EVERY_MS + 1)
        self.samples.append((clock(), {}))

    def _of(self, topic: str) -> list[float]:
        t = self.totals.get(topic)
        if t is None:
            t = self.totals[topic] = [0.0] * 8
        return t

    def on_pull(self, topic: str, messages: int, rt_ms: float) -> None:
        t = self._of(topic)
        t[PULLED] += messages
        t[PULLS] += 1
        t[PULL_RT_MS] += rt_ms

    def on_settled(self, topic: str, messages: int, rt_ms: float) -> None:
        """``messages`` gave back to their queue (consumed, or failed and sent back) after
        ``rt_ms`` of listener time in all."""
        t = self._of(topic)
        t[SETTLED] += messages
        t[CONSUME_RT_MS] += rt_ms
        t[CONSUME_RT_MSGS] += messages

    def on_failed(self, topic: str, failed: int, sent_back: int) -> None:
        """``failed`` messages whose listener did not succeed; ``sent_back`` of them were sent
        back to the broker and are settled as done (so they are not counted as consumed)."""
        t = self._of(topic)
        t[FAILED] += failed
        t[SENT_BACK] += sent_back

    def sample(self) -> None:
        self.samples.append((self.clock(), {k: list(v) for k, v in self.totals.items()}))

    def _since(self, window_ms: int, now: int) -> tuple[int, dict[str, list[float]]]:
        """The oldest sample inside the window (the consumer's start when younger than it)."""
        for ts, snap in self.samples:
            if ts >= now - window_ms:
                return ts, snap
        return self.samples[-1]

    def status_table(self, topics: Sequence[str] = ()) -> dict[str, dict[str, float | int]]:
        """Figures of every topic counted, and of ``topics`` (the subscriptions) even if idle."""
        now = self.clock()
        t0, minute = self._since(MINUTE_MS, now)
        _, hour = self._since(HOUR_MS, now)
        seconds = max((now - t0) / 1000.0, 1e-3)
        zero = [0.0] * 8
        out: dict[str, dict[str, float | int]] = {}
        totals = dict(self.totals)
        for topic in topics:
            totals.setdefault(topic, zero)
        for topic, cur in sorted(totals.items()):
            old = minute.get(topic, zero)
            d = [c - o for c, o in zip(cur, old)]
            ok = d[SETTLED] - d[SENT_BACK]
            out[topic] = {
                "consumeFailedMsgs": int(cur[FAILED] - hour.get(topic, zero)[FAILED]),
                "consumeFailedTPS": d[FAILED] / seconds,
                "consumeOKTPS": max(ok, 0) / seconds,
                "consumeRT": d[CONSUME_RT_MS] / d[CONSUME_RT_MSGS] if d[CONSUME_RT_MSGS] else 0.0,
                "pullRT": d[PULL_RT_MS] / d[PULLS] if d[PULLS] else 0.0,
                "pullTPS": d[PULLED] / seconds,
            }
        return out
