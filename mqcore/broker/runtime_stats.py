"""Throughput figures for GET_BROKER_RUNTIME_INFO (``putTps``, ``getTransferedTps``).

RocketMQ reports each as three rates, over the last 10 s, 1 min and 10 min, in one
string (``"12.50 11.02 9.87"``); ``clusterList`` prints the first. The broker samples two
running totals once a second: messages stored (the sum of every queue's max offset) and
messages consumed (the sum of committed consumer offsets). Rates are differences of
samples, so nothing is counted on the send or pull paths.
"""
from __future__ import annotations

from collections import deque

WINDOWS_MS = (10_000, 60_000, 600_000)


class ThroughputSampler:
    """Running-total samples -> rates per second over fixed windows."""

    def __init__(self, keep_ms: int = WINDOWS_MS[-1] + 5_000):
        self.keep_ms = keep_ms
        self.samples: deque[tuple[int, int]] = deque()

    def sample(self, now_ms: int, total: int) -> None:
        self.samples.append((now_ms, total))
        while len(self.samples) > 2 and self.samples[0][0] < now_ms - self.keep_ms:
            self.samples.popleft()

    def rate(self, window_ms: int) -> float:
        """Per-second rate over the last ``window_ms`` (the oldest sample inside it to the newest)."""
        if len(self.samples) < 2:
            return 0.0
        t1, v1 = self.samples[-1]
        t0, v0 = next(((t, v) for t, v in self.samples if t >= t1 - window_ms), self.samples[0])
        if t1 <= t0:
            return 0.0
        # a deleted topic or group lowers the total: never report a negative rate
        return max(0.0, (v1 - v0) * 1000.0 / (t1 - t0))

    def text(self) -> str:
        return " ".join(f"{self.rate(w):.2f}" for w in WINDOWS_MS)


def latency_texts(bounds_s: tuple[float, ...], counts: list[int]) -> dict[str, str]:
    """The put-latency keys of the runtime info from the put-latency histogram's buckets:
    ``putLatency99``/``putLatency999`` (ms; RocketMQ also reads them off buckets: the bound of
    the bucket the percentile falls in), ``putMessageEntireTimeMax`` (ms, the highest non-empty
    bucket's bound, rounded up) and ``putMessageDistributeTime`` (the count per bucket)."""
    total = sum(counts)
    uppers_ms = [b * 1000 for b in bounds_s] + [float("inf")]

    def percentile(p: float) -> float:
        if not total:
            return 0.0
        want, seen = p * total, 0
        for upper, n in zip(uppers_ms, counts):
            seen += n
            if seen >= want:
                return upper if upper != float("inf") else uppers_ms[-2]
        return uppers_ms[-2]

    top = max((i for i, n in enumerate(counts) if n), default=None)
    if top is None:
        max_ms = 0
    else:
        max_ms = int(-(-uppers_ms[top] // 1)) if uppers_ms[top] != float("inf") else int(uppers_ms[-2]) + 1
    lower = 0.0
    parts = []
    for upper, n in zip(uppers_ms, counts):
        label = f"[{lower:g}~{upper:g}ms]" if upper != float("inf") else f"[>{lower:g}ms]"
        parts.append(f"{label}:{n}")
        lower = upper
    return {"putLatency99": f"{percentile(0.99):.2f}", "putLatency999": f"{percentile(0.999):.2f}",
            "putMessageEntireTimeMax": str(max_ms), "putMessageDistributeTime": " ".join(parts)}
