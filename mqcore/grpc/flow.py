"""Outbound flow control of the 5.x endpoint's ReceiveMessage streams.

A receive pops messages (they become invisible to every other consumer) and writes them
down its response stream. grpcio completes a write once HTTP/2 flow control lets the
message out, so a peer that stops reading leaves the write pending, and everything the
stream popped and did not write yet sits in broker memory. Unbounded, 1,000 such streams
held 3.5 GB. Here:

- every stream pops at most ``STREAM_CHUNK_BYTES`` at a time and pops again only when the
  writes of what it has are done: a peer that does not read gets no more messages;
- what all streams hold (popped and not yet written, the pending writes included) is
  bounded by one :class:`OutboundBudget` (``grpcReceiveBufferBytes``); a receive waits for
  room within its long-polling time, else it is answered ``TOO_MANY_REQUESTS``;
- a write still pending after ``WRITE_STALL_S`` gives up on the peer: the messages not
  written (the pending one too, as its peer may never read it) are made visible again at
  once, as the proxy does with the messages of a write that failed, and the stream writes
  no more. The pending write is left to finish (the peer reads, or the call or connection
  ends) and its bytes stay counted until then, because until then grpc holds them.
"""
from __future__ import annotations

import asyncio

#: what one stream pops at a time (its peer must take it before the stream pops more)
STREAM_CHUNK_BYTES = 1024 * 1024
#: a write pending this long means the peer is not reading
WRITE_STALL_S = 10.0


class OutboundBudget:
    """Bytes the receive streams may hold together. ``reserve`` waits for room (FIFO order
    is not kept: a small reservation may pass a large one, which then waits for more)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed: asyncio.Event | None = None

    async def reserve(self, n: int, timeout_s: float) -> bool:
        """Take ``n`` bytes (at most the limit) within ``timeout_s``; False if no room came."""
        n = min(n, self.limit)
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        while self.used + n > self.limit:
            left = end - loop.time()
            if left <= 0:
                return False
            if self._freed is None:
                self._freed = asyncio.Event()
            freed = self._freed
            try:
                await asyncio.wait_for(freed.wait(), left)
            except asyncio.TimeoutError:
                return False
        self.used += n
        return True

    def take(self, n: int) -> None:
        """Count ``n`` more bytes without waiting (what a pop returned past its reservation)."""
        self.used += n

    def release(self, n: int) -> None:
        self.used = max(0, self.used - n)
        if self._freed is not None:
            self._freed.set()
            self._freed = None  # waiters woke on this one; later ones wait on a new event

