"""Wakes pop receives (a gRPC ReceiveMessage, a remoting POP_MESSAGE) parked on a topic
when the store dispatches a message to it, or when a FIFO queue becomes free."""
from __future__ import annotations

import asyncio
from collections.abc import Callable


class Arrivals:
    """Wakes receives parked on a topic when the store dispatches a message to it.

    A message can be dispatched (on the store's thread) after a receive looked and found
    nothing but before it parked; the receive would then sleep out its long-polling time.
    Each topic therefore has a generation, bumped on every arrival or wake: a receive takes
    ``generation`` before it looks and passes it to ``wait``, which returns at once when it
    moved in between.

    ``install`` adds ``notify`` to the store's arrival listeners; it is called at the first
    ``generation`` (before that receive looks, so no arrival after it is missed): a broker
    that never serves a pop never has a Python call on its SEND path for it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop,
                 install: Callable[[Callable[[str, int, int], None]], None] | None = None) -> None:
        self.loop = loop
        self._install = install
        self._waiters: dict[str, set[asyncio.Future[bool]]] = {}
        self._generation: dict[str, int] = {}

    def generation(self, topics: list[str]) -> tuple[int, ...]:
        if self._install is not None:
            install, self._install = self._install, None
            install(self.notify)
        return tuple(self._generation.get(t, 0) for t in topics)

    async def wait(self, topics: list[str], timeout_s: float, since: tuple[int, ...] | None = None) -> None:
        fut = self.loop.create_future()
        for t in topics:
            self._waiters.setdefault(t, set()).add(fut)
        if since is not None and self.generation(topics) != since:
            fut.set_result(True)  # something arrived between the look and the registration
        try:
            await asyncio.wait_for(fut, max(timeout_s, 0))
        except asyncio.TimeoutError:
            pass
        finally:
            for t in topics:
                s = self._waiters.get(t)
                if s is not None:
                    s.discard(fut)
                    if not s:
                        del self._waiters[t]

    def notify(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Store arrival listener: may run on another thread."""
        self._bump(topic)
        if topic in self._waiters:
            self.loop.call_soon_threadsafe(self._wake, topic)

    def wake(self, topic: str) -> None:
        """Wake receives parked on ``topic`` now (a FIFO queue became free); on the loop."""
        self._bump(topic)
        self._wake(topic)

    def _bump(self, topic: str) -> None:
        # only ever compared for change, so a lost race between two bumpers is harmless
        self._generation[topic] = self._generation.get(topic, 0) + 1

    def _wake(self, topic: str) -> None:
        for fut in self._waiters.get(topic, ()):
            if not fut.done():
                fut.set_result(True)
