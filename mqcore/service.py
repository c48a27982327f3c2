"""The generic service thread every background loop builds on (RocketMQ's ``ServiceThread``).

Used by the store (flush, group commit, prefault, cleanup) and the broker (delay
levels). Waits go through :meth:`ServiceThread.wait_for_running`, so ``wakeup`` and
``shutdown`` end a wait at once instead of after the interval.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

log = logging.getLogger(__name__)


class ServiceThread:
    """A named daemon thread with start / shutdown / wakeup (RocketMQ's ``ServiceThread``)."""

    name = "service"

    def __init__(self) -> None:
        self._stopped = threading.Event()
        self._wakeup = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run_safely, name=self.name, daemon=True)
        self._thread.start()

    def _run_safely(self) -> None:
        try:
            self.run()
        except Exception:  # a dying service must be loud: nothing else would notice
            log.exception("%s stopped by an unexpected error", self.name)
            raise

    def run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def wakeup(self) -> None:
        self._wakeup.set()

    def wait_for_running(self, interval_s: float) -> None:
        self._wakeup.wait(interval_s)
        self._wakeup.clear()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def shutdown(self, timeout_s: float = 10) -> None:
        self._stopped.set()
        self._wakeup.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


async def cancel_and_wait(task: "asyncio.Task[Any] | None") -> None:
    """Cancel an asyncio loop task and wait until it has ended (its cancellation swallowed):
    the asyncio side's ``shutdown``."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


async def wait_for_wake(wake: asyncio.Event, deadline_ms: float | None, now_ms: float, idle_s: float) -> None:
    """An asyncio loop task's wait between rounds (the asyncio side's ``wait_for_running``):
    until ``wake`` is set or the next deadline (epoch ms, None for none) comes, at most
    ``idle_s``; ``wake`` is cleared for the next round."""
    wait = idle_s if deadline_ms is None else min(idle_s, max(0.0, (deadline_ms - now_ms) / 1000))
    try:
        await asyncio.wait_for(wake.wait(), wait)
    except asyncio.TimeoutError:
        pass
    wake.clear()
