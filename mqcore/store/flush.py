"""Flushing: background flush (ASYNC_FLUSH) and group commit (SYNC_FLUSH).

ASYNC_FLUSH: a thread msyncs the commitlog every ``flush_interval_commitlog_ms``
when at least ``flush_commitlog_least_pages`` are dirty (everything every
``flush_commitlog_thorough_interval_ms``), and consume queues, index and the
checkpoint every ``flush_interval_consume_queue_ms``: each consume-queue file once
``flush_consume_queue_least_pages`` of it are dirty, every one of them every
``flush_consume_queue_thorough_interval_ms`` (RocketMQ's FlushConsumeQueueService; with
thousands of queues a pass that msyncs each file that got one unit cost a core).

SYNC_FLUSH: a put waits in ``GroupCommitService.wait_flushed`` until its end offset
is on disk. The service thread flushes everything written so far in one go, so all
puts that arrived while a flush was running share the next one.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from mqcore.service import ServiceThread

log = logging.getLogger(__name__)


class FlushService(ServiceThread):
    """Periodic flush of everything; in SYNC_FLUSH mode only the logic files (group commit
    flushes the commitlog)."""

    name = "mqcore-flush"

    def __init__(self, flush_commitlog: Callable[[int], object] | None, flush_logic: Callable[[int], None],
                 commitlog_interval_ms: int, least_pages: int, thorough_interval_ms: int,
                 logic_interval_ms: int, logic_least_pages: int = 0, logic_thorough_interval_ms: int = 0):
        super().__init__()
        self.flush_commitlog = flush_commitlog
        self.flush_logic = flush_logic
        self.commitlog_interval_ms = commitlog_interval_ms
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self.logic_interval_ms = logic_interval_ms
        self.logic_least_pages = logic_least_pages
        self.logic_thorough_interval_ms = logic_thorough_interval_ms

    def run(self) -> None:
        last_thorough = last_logic = last_logic_thorough = time.monotonic()
        while not self.stopped:
            self.wait_for_running(self.commitlog_interval_ms / 1000)
            now = time.monotonic()
            if self.flush_commitlog is not None:
                thorough = (now - last_thorough) * 1000 >= self.thorough_interval_ms
                if thorough:
                    last_thorough = now
                self.flush_commitlog(0 if thorough else self.least_pages)
            if (now - last_logic) * 1000 >= self.logic_interval_ms:
                last_logic = now
                thorough = (now - last_logic_thorough) * 1000 >= self.logic_thorough_interval_ms
                if thorough:
                    last_logic_thorough = now
                self.flush_logic(0 if thorough else self.logic_least_pages)


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: puts wait here until their bytes are on disk; one flush serves many."""

    name = "mqcore-group-commit"

    def __init__(self, flush_all: Callable[[], int]):
        super().__init__()
        self.flush_all = flush_all
        self._cond = threading.Condition()
        self._requested = 0
        self._flushed = 0

    def wait_flushed(self, offset: int, timeout_ms: int) -> bool:
        """Block until everything below ``offset`` is flushed; False on timeout."""
        deadline = time.monotonic() + timeout_ms / 1000
        with self._cond:
            if offset > self._requested:
                self._requested = offset
                self._cond.notify_all()
            while self._flushed < offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.stopped:
                    return self._flushed >= offset
                self._cond.wait(remaining)
        return True

    def run(self) -> None:
        while True:
            with self._cond:
                while self._requested <= self._flushed and not self.stopped:
                    self._cond.wait(0.01)
                if self.stopped and self._requested <= self._flushed:
                    return
            flushed = self.flush_all()
            with self._cond:
                self._flushed = max(self._flushed, flushed)
                self._cond.notify_all()

    def shutdown(self, timeout_s: float = 10) -> None:
        self._stopped.set()
        with self._cond:
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout_s)
