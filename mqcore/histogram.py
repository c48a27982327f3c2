"""A latency histogram cheap enough for a hot path, read by the metrics endpoint."""
from __future__ import annotations

import bisect

#: put latency bucket upper bounds, seconds (an in-memory append is ~10 us; a SYNC_FLUSH
#: put waits for an fsync, ms to s)
PUT_LATENCY_BOUNDS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                        1.0, 2.5, 5.0)
#: flush latency bucket upper bounds, seconds
FLUSH_LATENCY_BOUNDS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Counts per bucket (``bounds`` upper limits, then +Inf) and a sum: ``observe`` is a
    bisect and two adds."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """Prometheus buckets: (le, count of observations <= le), +Inf last."""
        out, total = [], 0
        for bound, n in zip(self.bounds, self.counts):
            total += n
            out.append((repr(float(bound)), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out
