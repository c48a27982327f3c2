"""Long polling: park pulls that found nothing until a message arrives or time runs out.

A pull with the SUSPEND flag that would answer PULL_NOT_FOUND waits here on a future
keyed by (topic, queue id). The store's dispatcher calls ``notify`` when units land;
every parked pull whose offset is now below the queue's max offset wakes and is
re-executed at once. Timeouts re-execute it too (and answer whatever there is).
Threads: ``hold`` on the event loop; ``notify`` from any thread.

A message can land between the pull that found nothing and the moment its waiter is
registered (the dispatcher runs on its own thread, and a parked pull only starts on a
later loop turn). ``notify`` would see no waiter and the pull would sleep out its whole
suspend time. So ``hold`` asks the queue's max offset once more after registering: a
dispatch before that check is seen by it, one after it finds the waiter.

The store is given ``arrivals`` (the pipeline kernels' ``ArrivalGate`` around ``notify``), not
``notify``: it counts the parked pulls, so a put while none is parked (a producer-only
broker's every send) calls no Python function - the compiled put reads the count in C.
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from mqcore._compat import default_pipeline_kernels
from mqcore.kernel_api import PipelineKernels


class PullRequestHoldService:
    """Parks suspended pulls per (topic, queue id) until a message arrives, a timeout or shutdown."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_offset: Callable[[str, int], int] | None = None,
                 kernels: PipelineKernels | None = None) -> None:
        """``max_offset(topic, queue_id)``: the queue's current max offset (the store's)."""
        self.loop = loop
        self._max_offset = max_offset
        self._loop_thread = threading.get_ident()
        self._waiting: dict[tuple[str, int], list[tuple[int, asyncio.Future[bool]]]] = {}
        k = kernels if kernels is not None else default_pipeline_kernels()
        #: the store's arrival listener: ``notify`` while a pull is parked (``waiting``: how many)
        self.arrivals = k.ArrivalGate(self.notify)

    async def hold(self, topic: str, queue_id: int, offset: int, timeout_ms: int,
                   gone: asyncio.Future[object] | None = None) -> bool:
        """Wait until the queue's max offset passes ``offset``; False on timeout, or as soon as
        ``gone`` (the asking connection's close) completes: nobody is left to answer, and the
        pull must not stay counted as waiting for the rest of its suspend time."""
        fut: asyncio.Future[bool] = self.loop.create_future()
        if gone is not None:
            def answer_gone(_g: object) -> None:
                if not fut.done():
                    fut.set_result(False)
            gone.add_done_callback(answer_gone)
        key = (topic, queue_id)
        self._waiting.setdefault(key, []).append((offset, fut))
        # counted before the check below: a put that moves the max offset after the check
        # reads the count after it, and calls notify
        self.arrivals.waiting += 1
        try:
            if self._max_offset is not None and self._max_offset(topic, queue_id) > offset:
                fut.set_result(True)  # it landed before we were registered
            return await asyncio.wait_for(fut, max(timeout_ms, 0) / 1000)
        except asyncio.TimeoutError:
            return False
        finally:
            self.arrivals.waiting -= 1
            waiters = self._waiting.get(key)
            if waiters is not None:
                waiters[:] = [w for w in waiters if w[1] is not fut]
                if not waiters:
                    del self._waiting[key]

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        if not self._waiting:  # no pull parked (a producer-only broker's every send): nothing to wake
            return
        if threading.get_ident() == self._loop_thread:
            self._wake(topic, queue_id, max_offset)
        elif (topic, queue_id) in self._waiting:
            self.loop.call_soon_threadsafe(self._wake, topic, queue_id, max_offset)

    def _wake(self, topic: str, queue_id: int, max_offset: int) -> None:
        waiters = self._waiting.get((topic, queue_id))
        if not waiters:
            return
        for offset, fut in waiters:
            if offset < max_offset and not fut.done():
                fut.set_result(True)

    def wake_all(self) -> None:
        """Shutdown: answer every parked pull now."""
        for waiters in self._waiting.values():
            for _, fut in waiters:
                if not fut.done():
                    fut.set_result(False)

    @property
    def waiting_count(self) -> int:
        return sum(len(w) for w in self._waiting.values())
