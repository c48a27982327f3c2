"""Splitting remoting frames out of a connection's receive buffer, with bounded memory.

A :class:`FrameReceiver` owns one connection's receive memory and hands the event
loop's ``BufferedProtocol`` the buffer to ``recv_into``:

* small frames (the usual request or answer) arrive in one ring buffer and are decoded
  straight from it, several per ``recv`` when a peer pipelines. The ring grows with
  need: none until the first bytes arrive, then ``initial_bytes``, doubled (up to
  ``ring_bytes``) when a ``recv`` fills all the room offered or a frame needs more, and
  given back by :meth:`FrameReceiver.trim` when it holds nothing (an idle connection
  costs no receive buffer; 10,000 of them used to hold a 128 KiB ring each). A ring is
  replaced, never resized, so a ``memoryview`` of an old one stays valid;
* a frame larger than the ring gets a buffer of exactly its size, into which the rest
  of the frame is received with no further copy. Above ``MMAP_FRAME_BYTES`` that
  buffer is an anonymous ``mmap``: pages cost memory only once written, and the whole
  buffer goes back to the operating system when the frame is done or the connection
  closes (a malloc'd 16 MiB buffer can stay in the heap after ``free``, which is how
  idle connections holding partial frames used to leave hundreds of MB behind);
* a receiver made with ``keep_large_buffer=True`` (a client's connections: a push
  consumer's pull answers of 1000 messages are large frames, one after the other; a
  broker's: a producer of 1 MiB messages sends one large frame after the other) keeps
  the last large-frame buffer, up to ``KEPT_LARGE_BUFFER_BYTES`` (allocated with a little
  headroom, as the next answer is often a few bytes longer), for the next large frame
  of the connection: a fresh buffer's first writes fault every page in, and unmapping it
  flushes the other CPUs' TLBs, which together cost more than the rest of receiving and
  decoding a 1 MiB frame (~0.5 ms per MiB on a VM). Only frames read by a decoder that
  copies what it keeps (the default one, or one passed with ``copies=True``) reuse it.
  What all connections of a budget keep is capped too (``FrameBudget.keep_max_bytes``,
  a quarter of the budget by default): past it a finished buffer is freed as before, so
  kept buffers never hold memory the budget does not bound, and never hold budget a
  waiting connection needs;
* every large-frame buffer is charged to a :class:`FrameBudget` shared by all the
  connections of a server. When the budget is spent, the connection stops reading
  (``RECV_WAIT``) until another connection's large frame completes or closes, so
  partial frames can never hold more than the budget in total.

Frame layout and header codecs are those of :mod:`mqcore.remoting.command`.
"""
from __future__ import annotations

import functools
import mmap
from collections.abc import Callable
from typing import Any

from mqcore.errors import ConfigError, FrameTooLargeError, ProtocolError
from mqcore.remoting.command import (
    FRAME_LENGTH_SIZE,
    HEADER_WORD_SIZE,
    RemotingCommand,
    decode_header,
    parse_header_word,
)

__all__ = ["FrameBudget", "FrameReceiver", "receiver_class", "RECV_WAIT", "DEFAULT_RING_BYTES",
           "DEFAULT_INITIAL_RING_BYTES", "DEFAULT_BUDGET_BYTES", "MMAP_FRAME_BYTES"]

#: the largest ring a connection receives small frames into (one ``recv`` fills at most this)
DEFAULT_RING_BYTES = 128 * 1024
#: the ring a connection gets when its first bytes arrive (a request or answer fits)
DEFAULT_INITIAL_RING_BYTES = 4 * 1024
#: large frames above this are received into an anonymous mmap instead of the heap
MMAP_FRAME_BYTES = 1024 * 1024
#: the largest large-frame buffer a ``keep_large_buffer`` receiver keeps for the next frame
KEPT_LARGE_BUFFER_BYTES = 8 * 1024 * 1024
#: a buffer meant to be kept is allocated this much larger than its frame, rounded up to
#: ``_KEPT_GRAIN``: a consumer's next answers are a few bytes longer (the offsets in their
#: header gain digits), and each one that did not fit cost a fresh buffer's page faults
_KEPT_HEADROOM_DIVISOR = 16
_KEPT_GRAIN = 64 * 1024
#: total large-frame buffering a server allows across its connections
DEFAULT_BUDGET_BYTES = 256 * 1024 * 1024
_PREFIX_SIZE = FRAME_LENGTH_SIZE + HEADER_WORD_SIZE
#: ``decode(view, start, end)`` of one whole frame (length prefix included)
FrameDecoder = Callable[[memoryview, int, int], Any]


class _RecvWait:
    """Sentinel: the next frame needs budget that is not available yet."""

    def __repr__(self) -> str:
        return "RECV_WAIT"


RECV_WAIT = _RecvWait()
#: the ring of a receiver holding none (shared: it is never written, as it has no room)
_NO_RING = bytearray()


class FrameBudget:
    """Bytes of large-frame buffers held by all connections of one server, capped.

    Waiters are callbacks run (on the loop) when budget is released; each retries and
    re-registers if it still does not fit. Not thread-safe: one event loop owns it.
    """

    def __init__(self, max_bytes: int = DEFAULT_BUDGET_BYTES, keep_max_bytes: int | None = None) -> None:
        if max_bytes < 0:
            raise ConfigError(f"frame budget must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.used_bytes = 0
        #: most bytes of finished large-frame buffers the receivers may keep for their next frame
        self.keep_max_bytes = max_bytes // 4 if keep_max_bytes is None else keep_max_bytes
        self.kept_bytes = 0
        self._waiters: dict[int, Callable[[], None]] = {}

    def try_keep(self, n: int) -> bool:
        """Room to keep a finished buffer of ``n`` bytes for its connection's next large frame."""
        if self.kept_bytes + n > self.keep_max_bytes:
            return False
        self.kept_bytes += n
        return True

    def unkeep(self, n: int) -> None:
        self.kept_bytes -= n

    def try_acquire(self, n: int) -> bool:
        # one frame may always be received when nothing else is held, so a frame larger
        # than the whole budget (but within the frame limit) cannot wait forever
        if self.used_bytes and self.used_bytes + n > self.max_bytes:
            return False
        self.used_bytes += n
        return True

    def release(self, n: int) -> None:
        self.used_bytes -= n
        if self._waiters:
            waiters, self._waiters = self._waiters, {}
            for wake in waiters.values():
                wake()

    def wait(self, key: int, wake: Callable[[], None]) -> None:
        self._waiters[key] = wake

    def cancel(self, key: int) -> None:
        self._waiters.pop(key, None)

    @property
    def waiting(self) -> int:
        return len(self._waiters)


class FrameReceiver:
    """One connection's receive buffers; see the module docstring.

    Protocol: ``view = get_buffer()``, the transport writes ``n`` bytes into it,
    ``received(n)``, then ``next_frame()`` until it returns ``None`` (need more bytes)
    or ``RECV_WAIT`` (need budget). ``next_frame`` raises :class:`FrameTooLargeError` or
    :class:`ProtocolError` on malformed input; the connection is then to be closed.
    ``release()`` frees everything and returns the budget (idempotent). ``trim()`` gives
    the ring back while it holds nothing (the owner calls it on a quiet connection).

    The broker's C connection core (``mqcore/_send_core.pxi``, ``ChannelCore``) runs the
    usual case of ``get_buffer``, ``received``, ``complete_frames`` and ``consumed`` on these
    attributes itself: a change to the ring's bookkeeping changes it there too. Its
    connections' receivers are this class on a C base declaring the ring's per-buffer fields
    (:func:`receiver_class`), which the core reads as struct fields.
    """

    def __init__(self, max_frame_bytes: int, budget: FrameBudget | None = None, *,
                 ring_bytes: int = DEFAULT_RING_BYTES, initial_bytes: int = DEFAULT_INITIAL_RING_BYTES,
                 keep_large_buffer: bool = False) -> None:
        if ring_bytes < 64:
            raise ConfigError(f"ring_bytes must be >= 64, got {ring_bytes}")
        if initial_bytes < 64:
            raise ConfigError(f"initial_bytes must be >= 64, got {initial_bytes}")
        self._max_frame_bytes = max_frame_bytes
        self._budget = budget if budget is not None else FrameBudget()
        self._ring_max = ring_bytes
        self._ring_initial = min(initial_bytes, ring_bytes)
        self._ring = _NO_RING  # allocated when the first bytes arrive (get_buffer)
        self._ring_view = memoryview(self._ring)
        self._start = 0  # first unconsumed byte in the ring
        self._end = 0  # end of received bytes in the ring
        self._offered = 0  # room handed to the transport by the last get_buffer
        self._grow = False  # the last recv filled all the room it was offered: more is coming
        self._big: bytearray | mmap.mmap | None = None  # buffer of one large frame
        self._big_view: memoryview | None = None
        self._big_filled = 0
        self._big_charge = 0
        self._keep_large = keep_large_buffer
        self._kept: bytearray | mmap.mmap | None = None  # the last large frame's buffer, for the next one

    # --- buffer for the transport ---------------------------------------------------------
    def get_buffer(self) -> memoryview:
        if self._big_view is not None:
            return self._big_view[self._big_filled:]
        ring = self._ring
        if not ring:
            self._set_ring(self._ring_initial)
        elif self._grow and len(ring) < self._ring_max:
            self._set_ring(min(2 * len(ring), self._ring_max))
        self._grow = False
        ring = self._ring
        if self._end == len(ring) or len(ring) - self._end < 4096 < self._end - self._start + 4096:
            self._compact()
        if self._end == len(ring):
            # the ring is full of complete frames the connection is not processing yet
            # (reading should be paused); give the transport a little room rather than none
            self._set_ring(2 * len(ring))
        view = self._ring_view[self._end:]
        self._offered = len(view)
        return view

    def _set_ring(self, size: int) -> None:
        """Replace the ring by one of ``size`` bytes holding the unconsumed bytes at its start."""
        start, end = self._start, self._end
        ring = bytearray(size)
        ring[:end - start] = self._ring_view[start:end]
        self._ring, self._ring_view = ring, memoryview(ring)
        self._start, self._end = 0, end - start

    def _compact(self) -> None:
        start, end = self._start, self._end
        if start:
            self._ring[0:end - start] = self._ring[start:end]
            self._start, self._end = 0, end - start

    def trim(self) -> int:
        """Give the ring back when it holds nothing and no large frame is under way (the
        next bytes get a small ring again); returns the bytes freed."""
        if self._big_view is not None or self._end != self._start:
            return 0
        kept = self._take_kept()  # the last large frame's buffer, kept for the next one
        freed = len(kept) if kept is not None else 0
        if not self._ring:
            return freed
        freed += len(self._ring)
        self._ring, self._ring_view = _NO_RING, memoryview(_NO_RING)
        self._start = self._end = self._offered = 0
        self._grow = False
        return freed

    @property
    def ring_bytes(self) -> int:
        """Size of the ring held now (0: none)."""
        return len(self._ring)

    def received(self, n: int) -> None:
        if self._big_view is not None:
            self._big_filled += n
        else:
            self._end += n
            # a recv that filled all the room offered (and that room was no scrap left at the
            # end of the ring) says the peer sends faster than one ring per read: grow it
            if n >= self._offered and 2 * n >= len(self._ring):
                self._grow = True

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet decoded (ring plus large-frame buffer)."""
        return (self._end - self._start) + self._big_filled

    @property
    def large_buffer_bytes(self) -> int:
        """Size of the large-frame buffer held (charged to the budget), 0 if none."""
        return self._big_charge

    # --- frames ---------------------------------------------------------------------------
    def next_frame(self, decode: FrameDecoder | None = None, *, copies: bool = False) -> Any:
        """The next complete frame, decoded by ``decode(view, start, end)`` (default: into a
        :class:`RemotingCommand`; a caller expecting one kind of answer may read it in one step).
        The view is only valid during the call: ``copies=True`` says ``decode`` keeps nothing
        of it (it copies what it keeps, as the default decoder does), so the large-frame buffer
        may be kept and overwritten by the next large frame."""
        copying = copies or decode is None
        if decode is None:
            decode = self.decode_command
        if self._big_view is not None:
            if self._big_filled < len(self._big_view):
                return None
            try:
                return decode(self._big_view, 0, len(self._big_view))
            finally:
                self._drop_big(keep=copying)
        start, end = self._start, self._end
        avail = end - start
        if avail < FRAME_LENGTH_SIZE:
            return None
        view = self._ring_view
        length = int.from_bytes(view[start:start + FRAME_LENGTH_SIZE], "big")
        if length > self._max_frame_bytes:
            raise FrameTooLargeError(f"frame length {length} exceeds the limit {self._max_frame_bytes}")
        if length < HEADER_WORD_SIZE:
            raise ProtocolError(f"frame length {length} is shorter than the header word")
        total = FRAME_LENGTH_SIZE + length
        if avail >= total:
            self._start = start + total
            if self._start == end:
                self._start = self._end = 0
            return decode(view, start, start + total)
        if total <= self._ring_max:
            if total > len(self._ring):  # the rest will fit in a ring grown to hold the frame
                size = len(self._ring)
                while size < total:
                    size *= 2
                self._set_ring(min(size, self._ring_max))
            return None
        if not self._budget.try_acquire(total):
            return RECV_WAIT
        # a large frame: move what has arrived into a buffer of exactly its size (or the kept one)
        big: bytearray | mmap.mmap | None = self._take_kept()
        if big is not None and len(big) >= total:
            big_view = memoryview(big)[:total]
        else:
            size = total
            if self._keep_large and total <= KEPT_LARGE_BUFFER_BYTES:
                size = -(-(total + total // _KEPT_HEADROOM_DIVISOR) // _KEPT_GRAIN) * _KEPT_GRAIN
                size = max(total, min(size, KEPT_LARGE_BUFFER_BYTES))
            # private anonymous memory: a shared mapping (mmap's default) is shmem, whose pages
            # cost a page-cache insert on the first write and a removal at the unmap
            big = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE) if size > MMAP_FRAME_BYTES else bytearray(size)
            big_view = memoryview(big)[:total] if size != total else memoryview(big)
        big_view[:avail] = view[start:end]
        self._big, self._big_view, self._big_filled, self._big_charge = big, big_view, avail, total
        self._start = self._end = 0
        return None

    def complete_frames(self) -> tuple[memoryview, int, int] | None:
        """``(view, start, end)`` of the received bytes waiting in the ring, for a reader that
        takes several complete frames at once (the broker's send pipeline), or None while a
        large frame is being received. The reader reports what it took with
        :meth:`consumed`; anything it leaves is then read by :meth:`next_frame`. The view is
        only valid until the next call into the receiver."""
        if self._big_view is not None or self._end - self._start < _PREFIX_SIZE:
            return None
        return self._ring_view, self._start, self._end

    def consumed(self, position: int) -> None:
        """The frames before ``position`` (a frame boundary inside the range
        :meth:`complete_frames` gave) were taken."""
        if not self._start <= position <= self._end:
            raise ValueError(f"consumed position {position} is outside {self._start}..{self._end}")
        self._start = position
        if position == self._end:
            self._start = self._end = 0

    @staticmethod
    def decode_command(view: memoryview, start: int, end: int) -> RemotingCommand:
        """Decode the frame ``view[start:end]`` (length prefix included); body copied."""
        cmd, body_start = FrameReceiver.decode_head(view, start, end)
        cmd.body = bytes(view[body_start:end]) if body_start < end else b""
        return cmd

    @staticmethod
    def decode_head(view: memoryview, start: int, end: int) -> tuple[RemotingCommand, int]:
        """The header of the frame ``view[start:end]`` (length prefix included) as a command
        with an empty body, and where the body starts in ``view`` (``end``: none)."""
        length = end - start - FRAME_LENGTH_SIZE
        word = int.from_bytes(view[start + FRAME_LENGTH_SIZE:start + _PREFIX_SIZE], "big")
        serialize_type, header_len = parse_header_word(word, length)
        header_end = start + _PREFIX_SIZE + header_len
        return decode_header(serialize_type, view[start + _PREFIX_SIZE:header_end]), header_end

    def _drop_big(self, keep: bool = False) -> None:
        charge = self._big_charge
        big = self._big
        self._big_view = None  # the last view of an mmap going away unmaps it
        self._big = None
        if keep and self._keep_large and big is not None and len(big) <= KEPT_LARGE_BUFFER_BYTES \
                and self._kept is None and self._budget.try_keep(len(big)):
            self._kept = big
        self._big_filled = 0
        self._big_charge = 0
        if charge:
            self._budget.release(charge)

    def _take_kept(self) -> bytearray | mmap.mmap | None:
        """The kept buffer, no longer counted as kept (the caller uses or frees it)."""
        kept, self._kept = self._kept, None
        if kept is not None:
            self._budget.unkeep(len(kept))
        return kept

    def release(self) -> None:
        """Free every buffer (called on every close path). Idempotent."""
        self._drop_big()
        self._take_kept()
        self._start = self._end = 0
        self.trim()  # a late callback after close gets a small ring from get_buffer


@functools.cache
def receiver_class(core: type | None) -> type[FrameReceiver]:
    """:class:`FrameReceiver`, on the C base ``core`` when one is given (a C connection core's
    ``ReceiverCore``, mqcore/_receiver_core.pxi: the ring's per-buffer fields - ``_ring``,
    ``_ring_view``, ``_start``, ``_end``, ``_offered``, ``_grow``, ``_big_view``, ``_big_filled`` -
    as C fields, which FrameReceiver's methods read and write through the base's descriptors
    exactly as they do in the instance dict). One class per base."""
    if core is None:
        return FrameReceiver
    return type("CoreFrameReceiver", (core, FrameReceiver), {"__doc__": FrameReceiver.__doc__})
