"""Stats windows (VIEW_BROKER_STATS_DATA), daily totals and the put-latency texts of the runtime
info, with an injected clock."""
from __future__ import annotations

import datetime

from mqcore.broker.runtime_stats import latency_texts
from mqcore.broker.stats_windows import DailyTotals, StatsWindows, stats_values


def test_minute_hour_and_day_windows_from_running_totals():
    put, pulled = {}, {}
    w = StatsWindows(lambda: stats_values(put, pulled, "C"))
    w.sample(0)
    assert w.lookup("TOPIC_PUT_NUMS", "T") is None  # never counted: RocketMQ's "not exist"
    put["T"] = [8, 800]
    pulled[("g", "T")] = [3, 300]
    w.sample(5_000)  # inside the 10 s period: no sample yet
    w.sample(10_000)
    minute, hour, day = w.lookup("TOPIC_PUT_NUMS", "T")
    assert (minute.sum, minute.tps) == (8, 0.8) and (hour.sum, day.sum) == (0, 0)
    assert w.lookup("TOPIC_PUT_SIZE", "T")[0].sum == 800
    assert w.lookup("GROUP_GET_NUMS", "T@g")[0].sum == 3
    assert w.lookup("BROKER_PUT_NUMS", "C")[0].sum == 8
    for t in range(20_000, 80_001, 10_000):  # a minute later, nothing more: the minute is quiet
        w.sample(t)
    assert w.lookup("TOPIC_PUT_NUMS", "T")[0].sum == 0
    put["T"][0] = 20
    w.sample(600_000)
    minute, hour, day = w.lookup("TOPIC_PUT_NUMS", "T")
    # the hour window sampled at 0 (before T existed) and now: all 20 of them
    assert minute.sum == 12 and hour.sum == 20 and hour.tps == 20 * 1000 / 600_000
    del put["T"]  # a deleted topic leaves the windows
    w.sample(610_000)
    assert w.lookup("TOPIC_PUT_NUMS", "T") is None


def test_daily_totals_move_at_midnight():
    days = {0: datetime.date(2026, 1, 1), 1: datetime.date(2026, 1, 2), 2: datetime.date(2026, 1, 3)}
    d = DailyTotals(day_of=lambda ms: days[ms // 100])
    d.sample(10, 5)
    assert (d.today_morning, d.yesterday_morning) == (0, 0)
    d.sample(110, 9)
    assert (d.today_morning, d.yesterday_morning) == (9, 0)
    d.sample(210, 20)
    assert (d.today_morning, d.yesterday_morning) == (20, 9)


def test_latency_texts_from_buckets():
    bounds = (0.001, 0.01, 0.1)  # 1, 10, 100 ms
    t = latency_texts(bounds, [90, 9, 1, 0])
    assert t["putLatency99"] == "10.00" and t["putLatency999"] == "100.00"
    assert t["putMessageEntireTimeMax"] == "100"
    assert t["putMessageDistributeTime"] == "[0~1ms]:90 [1~10ms]:9 [10~100ms]:1 [>100ms]:0"
    assert latency_texts(bounds, [0, 0, 0, 0])["putMessageEntireTimeMax"] == "0"
    assert latency_texts(bounds, [0, 0, 0, 2])["putMessageEntireTimeMax"] == "101"
