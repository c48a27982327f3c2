"""RateLimitedLog: one line per key and interval, with the count of lines held back."""
from __future__ import annotations

import logging

from mqcore.remoting.ratelimit import RateLimitedLog


def test_one_line_per_key_and_interval_then_the_suppressed_count(caplog):
    now = [100.0]
    warn = RateLimitedLog(logging.getLogger("t.ratelimit"), 10.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t.ratelimit"):
        assert warn.warning("a", "bad %s", 1)
        assert not any(warn.warning("a", "bad %s", i) for i in range(500))
        assert warn.warning("b", "other")  # another key is not held back
        now[0] += 10.0
        assert warn.warning("a", "bad %s", 2)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["bad 1", "other", "bad 2 (500 similar lines suppressed)"]


def test_keys_from_the_network_are_bounded():
    warn = RateLimitedLog(logging.getLogger("t.ratelimit2"), 10.0, clock=lambda: 0.0, max_keys=8)
    for i in range(1000):
        warn.warning(f"peer{i}", "x")
    assert len(warn._last) <= 8
