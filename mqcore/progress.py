"""Progress of a long job (a store recovery scanning gigabytes): lines in the log at a
bounded rate, and a progress bar when a person watches a terminal.

    progress = ProgressReporter("recovery", log, stream=sys.stderr)
    progress(done_bytes, total_bytes)    # as often as is convenient; output is throttled
    progress.finish()
"""
from __future__ import annotations

import logging
import time
from typing import Callable, TextIO

MIB = 1 << 20


class ProgressReporter:
    """``__call__(done, total)`` in bytes. Logs at most every ``log_every_s`` seconds
    (and at the end); draws a bar on ``stream`` if it is a terminal (``force_tty`` for
    tests), redrawn at most every ``bar_every_s``."""

    def __init__(self, what: str, logger: logging.Logger, *, stream: TextIO | None = None,
                 force_tty: bool = False, clock: Callable[[], float] = time.monotonic,
                 log_every_s: float = 5.0, bar_every_s: float = 0.2, width: int = 30) -> None:
        self.what = what
        self.log = logger
        self.tty = stream if stream is not None and (force_tty or _isatty(stream)) else None
        self.clock = clock
        self.log_every_s = log_every_s
        self.bar_every_s = bar_every_s
        self.width = width
        self._last_log: float | None = None
        self._last_bar: float | None = None
        self._done = 0
        self._total = 0
        self._drew = False

    def __call__(self, done: int, total: int) -> None:
        self._done, self._total = done, max(total, done)
        now = self.clock()
        if self._last_log is None or now - self._last_log >= self.log_every_s:
            self._last_log = now
            self.log.info("%s: %s", self.what, self.text())
        if self.tty is not None and (self._last_bar is None or now - self._last_bar >= self.bar_every_s):
            self._last_bar = now
            self._draw()

    def text(self) -> str:
        pct = 100.0 * self._done / self._total if self._total else 100.0
        return f"scanned {self._done / MIB:.1f} of {self._total / MIB:.1f} MiB ({pct:.0f}%)"

    def _draw(self) -> None:
        assert self.tty is not None  # only called when a terminal watches
        filled = int(self.width * self._done / self._total) if self._total else self.width
        self.tty.write(f"\r{self.what} [{'#' * filled}{'.' * (self.width - filled)}] {self.text()}")
        self.tty.flush()
        self._drew = True

    def finish(self) -> None:
        """Final log line and bar (only if anything was reported)."""
        if self._last_log is None:
            return
        self._done = self._total
        self.log.info("%s: done, %s", self.what, self.text())
        if self.tty is not None:
            self._draw()
            self.tty.write("\n")
            self.tty.flush()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
