"""Rate-limited warnings: one line per key and interval, with a count of the lines held back.

A peer can make the broker repeat the same complaint thousands of times a second (a
client pipelining requests it never reads, a fuzzer); each complaint is worth one log
line per interval, not one per request.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """``warning(key, msg, *args)`` logs at most once per ``interval_s`` per key; the next
    line that gets through says how many were suppressed. The clock is injectable."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0, *,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 1024) -> None:
        self._log = logger
        self._interval_s = interval_s
        self._clock = clock
        self._max_keys = max_keys
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args: object) -> bool:
        """Log ``msg % args`` unless ``key`` was logged within the interval; True if logged."""
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        if len(self._last) >= self._max_keys and key not in self._last:
            self._last.clear()  # bounded: keys come from the network (addresses, codes)
            self._suppressed.clear()
        self._last[key] = now
        held = self._suppressed.pop(key, 0)
        if held:
            self._log.warning(msg + " (%d similar lines suppressed)", *args, held)
        else:
            self._log.warning(msg, *args)
        return True
