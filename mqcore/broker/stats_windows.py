"""Per-topic and per-group counters over the last minute, hour and day (VIEW_BROKER_STATS_DATA,
``mqadmin statsAll``), and the daily put/get totals of GET_BROKER_RUNTIME_INFO.

RocketMQ's ``StatsItem`` keeps a running value per key and samples it every 10 s (the last
minute: 7 samples), every 10 min (the last hour) and every hour (the last day); a window's
``sum`` is the newest sample minus the oldest, ``tps`` that over the seconds between them.
Here the running values are ``BrokerStats``' own counters (messages and bytes stored per topic,
delivered per group and topic), so nothing more is counted on the send or pull paths; the
broker calls ``sample`` once a second and a window takes a sample when its period has passed.
What RocketMQ also keeps per key, the number of requests behind the messages (its ``avgpt``:
messages per put or pull request), is not counted here: ``avgpt`` is reported as 0.0.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections import deque
from collections.abc import Callable

MINUTE_PERIOD_MS = 10_000
HOUR_PERIOD_MS = 600_000
DAY_PERIOD_MS = 3_600_000
#: samples kept per window: the period's count over the window, plus the one it starts from
_KEEP = {MINUTE_PERIOD_MS: 7, HOUR_PERIOD_MS: 7, DAY_PERIOD_MS: 25}

#: stats names (``BrokerStatsManager``) this broker answers, with what their value counts
STATS_NAMES = ("TOPIC_PUT_NUMS", "TOPIC_PUT_SIZE", "GROUP_GET_NUMS", "GROUP_GET_SIZE",
               "BROKER_PUT_NUMS", "BROKER_GET_NUMS")


@dataclasses.dataclass(frozen=True)
class WindowStats:
    """One window of one key: what ``BrokerStatsItem`` carries."""

    sum: int
    tps: float
    avgpt: float = 0.0

    def to_json(self) -> dict[str, float | int]:
        return {"avgpt": self.avgpt, "sum": self.sum, "tps": self.tps}


class _Window:
    """Samples of every key, one per ``period_ms``."""

    def __init__(self, period_ms: int):
        self.period_ms = period_ms
        self.last_ms: int | None = None
        self.samples: dict[tuple[str, str], deque[tuple[int, int]]] = {}

    def due(self, now_ms: int) -> bool:
        return self.last_ms is None or now_ms - self.last_ms >= self.period_ms

    def take(self, now_ms: int, values: dict[tuple[str, str], int]) -> None:
        keep = _KEEP[self.period_ms]
        for key in [k for k in self.samples if k not in values]:  # a deleted topic or group
            del self.samples[key]
        for key, value in values.items():
            q = self.samples.get(key)
            if q is None:
                q = self.samples[key] = deque(maxlen=keep)
                if self.last_ms is not None:  # new since the last sample: it was 0 then
                    q.append((self.last_ms, 0))
            q.append((now_ms, value))
        self.last_ms = now_ms

    def stats(self, key: tuple[str, str]) -> WindowStats:
        q = self.samples.get(key)
        if not q or len(q) < 2:
            return WindowStats(0, 0.0)
        (t0, v0), (t1, v1) = q[0], q[-1]
        total = max(0, v1 - v0)
        return WindowStats(total, total * 1000.0 / (t1 - t0) if t1 > t0 else 0.0)


class StatsWindows:
    """The minute, hour and day windows of every stats key (``(stats name, stats key)``).

    ``values`` returns the running value of every key now. Threads: the broker's event loop."""

    def __init__(self, values: Callable[[], dict[tuple[str, str], int]]):
        self.values = values
        self.windows = [_Window(MINUTE_PERIOD_MS), _Window(HOUR_PERIOD_MS), _Window(DAY_PERIOD_MS)]
        self._current: dict[tuple[str, str], int] = {}

    def sample(self, now_ms: int) -> None:
        due = [w for w in self.windows if w.due(now_ms)]
        if not due:
            return
        self._current = self.values()
        for w in due:
            w.take(now_ms, self._current)

    def lookup(self, name: str, key: str) -> tuple[WindowStats, WindowStats, WindowStats] | None:
        """(minute, hour, day) of a key, or None when it has never counted anything."""
        k = (name, key)
        if k not in self.values():
            return None
        minute, hour, day = (w.stats(k) for w in self.windows)
        return minute, hour, day


def stats_values(put: dict[str, list[int]], pulled: dict[tuple[str, str], list[int]], cluster: str) -> dict[tuple[str, str], int]:
    """Running values by stats key from ``BrokerStats.put`` ({topic: [messages, bytes]}) and
    ``.pulled`` ({(group, topic): [messages, bytes]}); group keys are ``topic@group`` as in
    RocketMQ."""
    out: dict[tuple[str, str], int] = {}
    put_total = get_total = 0
    for topic, (messages, nbytes) in list(put.items()):
        out[("TOPIC_PUT_NUMS", topic)] = messages
        out[("TOPIC_PUT_SIZE", topic)] = nbytes
        put_total += messages
    for (group, topic), (messages, nbytes) in list(pulled.items()):
        out[("GROUP_GET_NUMS", f"{topic}@{group}")] = messages
        out[("GROUP_GET_SIZE", f"{topic}@{group}")] = nbytes
        get_total += messages
    out[("BROKER_PUT_NUMS", cluster)] = put_total
    out[("BROKER_GET_NUMS", cluster)] = get_total
    return out


class DailyTotals:
    """A running total as seen at the start of today and of yesterday (RocketMQ's
    ``msgPutTotalTodayMorning`` / ``...YesterdayMorning``): both 0 until the broker's first
    midnight, then moved on at each local midnight the broker lives through."""

    def __init__(self, day_of: Callable[[int], datetime.date] | None = None):
        self.day_of = day_of or (lambda ms: datetime.datetime.fromtimestamp(ms / 1000).date())
        self.day: datetime.date | None = None
        self.today_morning = 0
        self.yesterday_morning = 0

    def sample(self, now_ms: int, total: int) -> None:
        day = self.day_of(now_ms)
        if self.day is not None and day != self.day:
            self.yesterday_morning, self.today_morning = self.today_morning, total
        self.day = day
