"""A push consumer's statusTable figures (GET_CONSUMER_RUNNING_INFO) from its running totals."""
from __future__ import annotations

from mqcore.client.consumer.stats import ConsumerStats
from mqcore.clock import ManualClock


def test_rates_over_the_last_minute_and_failures_over_the_hour():
    clock = ManualClock(0)
    s = ConsumerStats(clock)
    s.on_pull("T", 10, 40.0)
    s.on_pull("T", 0, 20.0)
    s.on_settled("T", 10, 5.0)
    s.on_failed("T", 2, 2)  # two of the settled ones failed and were sent back
    clock.advance(10_000)
    t = s.status_table(["T", "%RETRY%g"])
    assert t["T"]["pullTPS"] == 1.0 and t["T"]["pullRT"] == 30.0
    assert t["T"]["consumeOKTPS"] == 0.8 and t["T"]["consumeFailedTPS"] == 0.2 and t["T"]["consumeRT"] == 0.5
    assert t["T"]["consumeFailedMsgs"] == 2
    assert t["%RETRY%g"] == {"consumeFailedMsgs": 0, "consumeFailedTPS": 0.0, "consumeOKTPS": 0.0, "consumeRT": 0.0,
                             "pullRT": 0.0, "pullTPS": 0.0}
    for _ in range(8):  # quiet for more than a minute: the rates fall to 0, the hour keeps the failures
        clock.advance(10_000)
        s.sample()
    t = s.status_table()
    assert t["T"]["pullTPS"] == 0.0 and t["T"]["consumeOKTPS"] == 0.0 and t["T"]["consumeFailedMsgs"] == 2
