"""One remoting TCP connection, used identically by server and client.

Either peer may send requests on a connection (the broker sends
NOTIFY_CONSUMER_IDS_CHANGED / CHECK_TRANSACTION_STATE on the connection the client
opened), so a :class:`Channel` both answers requests (through a dispatcher) and keeps
an opaque -> future table for the requests it sent itself; frame flag bit 0 tells the
two directions apart.

A Channel is the connection's ``asyncio.BufferedProtocol``: the loop receives straight
into the :class:`~mqcore.remoting.framing.FrameReceiver`'s buffer and the channel
decodes and dispatches every complete frame in the same callback, with no task and no
stream reader per request. A server may install a frames processor (the broker's send
pipeline) that takes the complete frames it handles straight from the receive buffer,
before any is decoded; the channel decodes the frame it stops at the usual way. Answers
written while one receive buffer is handled are held and leave in one transport write
at its end, so a peer that pipelines requests is woken once per batch of answers. A request
sent with an answer decoder (``invoke_decoded``: a consumer's PULL_MESSAGE) has its answer's
body read straight from the receive buffer by that decoder, in the same callback and before
the buffer is reused, instead of being copied into the command's ``bytes`` body first. A server
may create a subclass with a C connection core instead (``register_frames_processor``'s
``channel_class``: the broker's send pipeline with the compiled kernels), which handles a
buffer its processor takes whole in C and hands anything else to these methods.
Memory per connection is bounded both ways:

* receiving: small frames share one fixed ring; large ones are charged to the
  server's :class:`~mqcore.remoting.framing.FrameBudget` (reading pauses when it is
  spent);
* sending: when the transport holds more than ``write_high_water`` unsent bytes the
  channel stops reading (and stops dispatching frames already received) until the
  peer has taken the backlog below the low-water mark, so a peer that pipelines
  requests and never reads the answers cannot grow the process.

Every close path (peer gone, protocol error, idle sweep, shutdown) releases the
receive buffers and drops unsent data of a peer that does not read.

All methods must be called from the event loop that owns the connection.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import traceback
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

from mqcore.errors import (
    FrameTooLargeError,
    ProtocolError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from mqcore.netaddr import format_sockaddr as format_addr
from mqcore.netaddr import parse_host_port as parse_addr
from mqcore.remoting.codes import DEFAULT_MAX_FRAME_BYTES, FLAG_ONEWAY, FLAG_RESPONSE
from mqcore.remoting.command import (
    FRAME_LENGTH_SIZE,
    HEADER_LENGTH_MASK,
    HEADER_WORD_SIZE,
    SERIALIZE_TYPE_SHIFT,
    RemotingCommand,
    encode,
)
from mqcore.remoting.eventloop import time_is_monotonic
from mqcore.remoting.framing import RECV_WAIT, FrameBudget, FrameReceiver, receiver_class
from mqcore.remoting.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)
T = TypeVar("T")

#: bodies up to this size are copied into the prefix's write (cheaper than a second send())
_JOIN_BODY_BYTES = 16 * 1024
#: unsent bytes above which a connection stops reading requests (see the module docstring)
DEFAULT_WRITE_HIGH_WATER = 4 * 1024 * 1024

__all__ = ["AnswerDecoder", "Channel", "FramesProcessor", "RequestSink", "format_addr", "parse_addr",
           "DEFAULT_WRITE_HIGH_WATER"]

#: answers written while the frames of one receive buffer are handled are joined into one
#: transport write (one wake-up for a pipelining peer); past this many bytes they go at once
_CORK_BYTES = 256 * 1024

#: ``processor(channel, view, start, end) -> position``: reads the complete frames at the
#: head of ``view[start:end]`` it handles itself (answering them through the channel) and
#: returns the position it stopped at; the channel decodes and dispatches the frame there
#: the usual way, then offers the rest to the processor again.
FramesProcessor = Callable[["Channel", memoryview, int, int], int]

#: ``decode(answer, view, start, end) -> value``: the answer to one request of ours, its header
#: decoded into ``answer`` (body left empty) and its body ``view[start:end]`` still in the
#: receive buffer. It runs on the loop inside the channel's read callback and must copy what
#: it keeps: the view is reused for the next frames as soon as it returns. Its value (or the
#: exception it raises) is what the request's future gets.
AnswerDecoder = Callable[[RemotingCommand, memoryview, int, int], Any]
#: ``(code, opaque, flag, remark, ext_fields)`` of an answer header (the ``decode_json_answer`` kernel)
AnswerTuple = tuple[int, int, int, "str | None", dict[str, str]]
_PREFIX_SIZE = FRAME_LENGTH_SIZE + HEADER_WORD_SIZE


class FlatWaiter(Protocol):
    """What waits for an ``invoke_flat`` answer: settled as an asyncio future would be."""

    def done(self) -> bool: ...
    def set_result(self, answer: AnswerTuple) -> None: ...
    def set_exception(self, error: BaseException) -> None: ...
#: what the channel's frame decoder returns for an answer it already handed to its future
_SETTLED = object()

_OPAQUE_MASK = 0x7FFFFFFF  # opaques stay positive int32, as Java's counter does for 2^31 requests
_PAUSE_WRITE = "write"  # reasons reading is paused
_PAUSE_BUDGET = "budget"
#: close reasons after which unsent data is discarded rather than flushed
#: (a peer that only half-closed still gets the answers already written)
_ABORT_REASONS = ("idle", "I/O error", "frame too large", "protocol error", "internal error", "slow frame")


class RequestSink(Protocol):
    """What a channel hands inbound requests to (the processor table)."""

    def submit(self, channel: Channel, request: RemotingCommand) -> None: ...


class Channel(asyncio.BufferedProtocol):
    """A framed connection: reads frames, dispatches requests, matches responses.

    ``attributes`` is free for the owner (the broker stores the client id there).
    Processors get the channel so they can answer later (``send_response``) or call
    back into the peer (``invoke``, ``send_request_oneway``).

    Created by the loop as the protocol of a connection (``create_server`` /
    ``create_connection`` with ``lambda: Channel(...)``); ``on_made(channel)`` runs
    once the transport is attached.
    """

    #: the C base of the channel's FrameReceiver (a C connection core's ``ReceiverCore``,
    #: which reads the ring's fields as C fields); None: the Python FrameReceiver alone
    _receiver_core: type | None = None

    def __init__(
        self,
        sink: RequestSink,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        budget: FrameBudget | None = None,
        write_high_water: int = DEFAULT_WRITE_HIGH_WATER,
        on_made: Callable[[Channel], None] | None = None,
        warnings: RateLimitedLog | None = None,
        frames: FramesProcessor | None = None,
        keep_large_buffer: bool = False,
    ) -> None:
        self._sink = sink
        self._max_frame_bytes = max_frame_bytes
        self._budget = budget if budget is not None else FrameBudget()
        self._receiver = receiver_class(self._receiver_core)(max_frame_bytes, self._budget,
                                                             keep_large_buffer=keep_large_buffer)
        self._write_high_water = write_high_water
        self._on_made = on_made
        self._warn = warnings if warnings is not None else RateLimitedLog(log)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self.remote_addr: str = "?"
        self.local_addr: str = "?"
        self.attributes: dict[str, Any] = {}
        self.last_activity: float = self._loop.time()
        #: the loop's ``time()`` is CLOCK_MONOTONIC (asyncio's and uvloop's): a C connection core
        #: reads that clock itself per receive buffer instead of calling ``loop.time()``
        self._monotonic_loop = time_is_monotonic(self._loop)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        #: opaque -> the decoder of its answer's body (``invoke_decoded``), popped with the answer
        self._answer_decoders: dict[int, AnswerDecoder] = {}
        self._timers: dict[int, asyncio.TimerHandle] = {}  # opaque -> its timeout
        #: opaque -> the waiter of a request sent by ``invoke_flat``, whose answer header the
        #: ``_read_flat`` kernel reads; ``_flat_out``: their frames not yet written
        self._flat: dict[int, FlatWaiter] = {}
        self._read_flat: Callable[[Any], AnswerTuple | None] | None = None
        self._flat_out: list[bytes] = []
        self._next_opaque = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._close_listeners: list[Callable[[Channel], Any]] = []
        self._closed = False
        self._closed_future: asyncio.Future[None] = self._loop.create_future()
        self._lost_future: asyncio.Future[None] = self._loop.create_future()
        self._read_paused: set[str] = set()
        self._write_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._in_frames = False  # re-entrancy guard for _process_frames
        #: bytes received on this connection, and (loop time, that count) when the partial
        #: frame being received started; None while no partial frame is under way or reading
        #: is paused (see ``frame_rate``)
        self._rx_bytes = 0
        self._partial_since: float | None = None
        self._partial_rx = 0
        #: loop time since which reading waits for the frame budget (None: not waiting)
        self.budget_wait_since: float | None = None
        self._frames = frames
        #: answers held while a receive buffer is handled (None: write at once)
        self._cork: list[bytes | memoryview] | None = None
        self._cork_bytes = 0
        #: the cork holds a frame given as buffers (``write_buffers_nowait``): written with
        #: ``writelines`` (one writev, the views not copied) instead of joined
        self._cork_vectored = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "active"
        return f"Channel({self.local_addr} <-> {self.remote_addr}, {state})"

    # --- state ------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        return not self._closed

    @property
    def inflight_count(self) -> int:
        """Inbound requests being processed plus our own requests awaiting answers."""
        return len(self._tasks) + len(self._pending) + len(self._flat)

    @property
    def buffered_bytes(self) -> int:
        """Received bytes not yet decoded plus answers not yet taken by the peer."""
        unsent = self._transport.get_write_buffer_size() if self._transport is not None and not self._closed else 0
        return self._receiver.buffered_bytes + unsent

    @property
    def remote_host(self) -> str:
        """The peer's address without the port (keys rate-limited warnings: a peer that
        reconnects for every bad frame is still one peer)."""
        try:
            return parse_addr(self.remote_addr)[0]
        except ValueError:  # not host:port (a unix socket, an unknown peer): the whole text
            return self.remote_addr

    @property
    def reading_paused(self) -> bool:
        return bool(self._read_paused)

    def add_close_listener(self, listener: Callable[[Channel], Any]) -> None:
        """``listener(channel)`` (sync or async) runs once when the connection closes."""
        self._close_listeners.append(listener)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_future)

    # --- asyncio.BufferedProtocol ---------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport subclass
        self.remote_addr = format_addr(transport.get_extra_info("peername"))
        self.local_addr = format_addr(transport.get_extra_info("sockname"))
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        cast(asyncio.Transport, transport).set_write_buffer_limits(high=self._write_high_water, low=self._write_high_water // 4)
        if self._on_made is not None:
            self._on_made(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._receiver.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self._receiver.received(nbytes)
        self._rx_bytes += nbytes
        self.last_activity = now = self._loop.time()
        self._process_frames()
        if self._read_paused:
            self._partial_since = None
            return
        buffered = self._receiver.buffered_bytes
        if not buffered:
            self._partial_since = None
        elif self._partial_since is None:
            # the bytes of this frame already here count towards its progress
            self._partial_since = now
            self._partial_rx = self._rx_bytes - buffered

    def frame_rate(self, now: float) -> tuple[float, float] | None:
        """(seconds, bytes per second) of the partial frame being received, or None when
        there is none or reading is paused (then the wait is ours, not the peer's). A
        trickle keeps ``last_activity`` fresh; this is what the idle sweep judges it by."""
        since = self._partial_since
        if since is None or self._read_paused or self._closed:
            return None
        elapsed = now - since
        return elapsed, (self._rx_bytes - self._partial_rx) / elapsed if elapsed > 0 else float("inf")

    @property
    def receiving(self) -> bool:
        """Received bytes wait to be decoded: a partial frame (or frames held while paused)."""
        return self._receiver.buffered_bytes > 0

    def trim_buffers(self) -> int:
        """Give back the receive ring of a quiet connection; returns the bytes freed."""
        return self._receiver.trim()

    def eof_received(self) -> bool:
        self.close("peer closed")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.close("peer closed" if exc is None else f"I/O error: {exc!r}")
        self._wake_drain_waiters()
        if not self._lost_future.done():
            self._lost_future.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause_reading(_PAUSE_WRITE)

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_drain_waiters()
        self._resume_reading(_PAUSE_WRITE)

    # --- reading ------------------------------------------------------------------------
    def _process_frames(self, held: bytes | list[bytes | memoryview] | None = None) -> None:
        """Decode and dispatch every complete frame, unless reading is paused. Never
        raises: network input cannot crash the process, it only closes this channel.
        ``held``: answers already produced for this receive buffer (a C connection core
        took its first frames), written ahead of the rest: one bytes object, or a list of
        buffers (pull answers with the store's views, written with ``writelines``)."""
        if self._in_frames:
            return  # a processor answered inline and the transport resumed us: the outer loop continues
        self._in_frames = True
        if type(held) is list:
            self._cork = held
            self._cork_vectored = True
        else:
            # not a list, so one bytes object (mypy does not narrow on ``type(...) is``'s else)
            self._cork = [] if held is None else [cast(bytes, held)]
        try:
            receiver, sink, frames = self._receiver, self._sink, self._frames
            while not self._read_paused and not self._closed:
                if frames is not None:
                    ready = receiver.complete_frames()
                    if ready is not None:
                        view, start, end = ready
                        stop = frames(self, view, start, end)
                        if stop != start:
                            receiver.consumed(stop)
                            if stop == end:
                                return  # everything received was taken (the usual case)
                            continue
                if self._answer_decoders or self._flat:  # an answer may be read from the buffer by its decoder
                    cmd = receiver.next_frame(self._decode_frame, copies=True)
                    if cmd is _SETTLED:
                        continue
                else:
                    cmd = receiver.next_frame()
                if cmd is None:
                    return
                if cmd is RECV_WAIT:
                    self._pause_reading(_PAUSE_BUDGET)
                    self._budget.wait(id(self), self._on_budget)
                    if self.budget_wait_since is None:
                        self.budget_wait_since = self._loop.time()
                    return
                assert isinstance(cmd, RemotingCommand)
                if cmd.is_response:
                    self._on_response(cmd)
                else:
                    sink.submit(self, cmd)
        except FrameTooLargeError as e:
            self._warn.warning(f"too-large {self.remote_host}", "closing %s: %s", self, e)
            self.close(f"frame too large: {e}")
        except ProtocolError as e:
            self._warn.warning(f"protocol {self.remote_host}", "closing %s: protocol error: %s", self, e)
            self.close(f"protocol error: {e}")
        except Exception:  # a decoder or dispatcher bug must not kill the server; log it loudly
            log.exception("closing %s after an unexpected error while reading", self)
            self.close("internal error")
        finally:
            self._in_frames = False
            self._uncork()

    def _uncork(self) -> None:
        """Hand the answers held for this receive buffer to the transport in one write."""
        cork, self._cork = self._cork, None
        self._cork_bytes = 0
        vectored, self._cork_vectored = self._cork_vectored, False
        if not cork or self._closed or self._transport is None:
            return
        if vectored:
            self._transport.writelines(cork)
            return
        self._transport.write(cork[0] if len(cork) == 1 else b"".join(cork))

    def _write_frame(self, data: bytes | memoryview) -> None:
        cork = self._cork
        if cork is None:
            self._transport.write(data)  # type: ignore[union-attr]  # checked by the callers
            return
        cork.append(data)
        self._cork_bytes += len(data)
        if self._cork_bytes > _CORK_BYTES:
            self._transport.write(b"".join(cork))  # type: ignore[union-attr]
            cork.clear()
            self._cork_bytes = 0

    def _uncork_now(self) -> None:
        """Write what is held now (a large answer goes out uncopied, after the ones before it)."""
        cork = self._cork
        if cork:
            self._transport.write(b"".join(cork))  # type: ignore[union-attr]
            cork.clear()
            self._cork_bytes = 0

    def _on_budget(self) -> None:
        if self._closed:
            return
        self._read_paused.discard(_PAUSE_BUDGET)
        waited_since, self.budget_wait_since = self.budget_wait_since, None
        self._process_frames()  # retries the large frame; may wait again
        if self.budget_wait_since is not None:  # still waiting: since the first wait
            self.budget_wait_since = waited_since
        if not self._read_paused and self._transport is not None and not self._closed:
            self._transport.resume_reading()

    def _pause_reading(self, reason: str) -> None:
        was = bool(self._read_paused)
        self._read_paused.add(reason)
        if not was and self._transport is not None and not self._closed:
            self._transport.pause_reading()

    def _resume_reading(self, reason: str) -> None:
        if reason not in self._read_paused:
            return
        self._read_paused.discard(reason)
        if self._read_paused or self._closed:
            return
        self._process_frames()  # frames that arrived before the pause
        if not self._read_paused and self._transport is not None and not self._closed:
            self._transport.resume_reading()

    def _on_response(self, cmd: RemotingCommand) -> None:
        future = self._answered(cmd.opaque)
        if future is not None:
            future.set_result(cmd)

    def _answered(self, opaque: int) -> asyncio.Future[Any] | None:
        """The future of our request ``opaque`` whose answer arrived (its timer stopped), or
        None when nobody waits for it any more."""
        timer = self._timers.pop(opaque, None)
        if timer is not None:
            timer.cancel()
        future = self._pending.pop(opaque, None)
        if future is None or future.done():
            log.debug("%s: response for unknown opaque %d (timed out?) dropped", self, opaque)
            return None
        return future

    def _decode_frame(self, view: memoryview, start: int, end: int) -> Any:
        """The receiver's decoder while answers with a decoder are awaited: such an answer is
        decoded from ``view`` by its decoder and settled here (``_SETTLED``); any other frame
        becomes a command with a copied body, as the receiver's default decoder does."""
        if self._flat and self._flat_answer(view, start, end):
            return _SETTLED
        cmd, body_start = FrameReceiver.decode_head(view, start, end)
        if self._flat and cmd.is_response and cmd.opaque in self._flat:
            # an invoke_flat answer the kernel declined (a header it does not read flat, e.g.
            # with members it does not know): its waiter gets the same tuple from the command
            self._settle_flat(cmd.opaque, (int(cmd.code), cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields))
            return _SETTLED
        decode = self._answer_decoders.pop(cmd.opaque, None) if cmd.is_response else None
        if decode is None:
            cmd.body = bytes(view[body_start:end]) if body_start < end else b""
            return cmd
        future = self._answered(cmd.opaque)
        if future is None:
            return _SETTLED
        try:
            value = decode(cmd, view, body_start, end)
        except Exception as e:  # the request's failure (a broker error, malformed records), not the connection's
            tb = e.__traceback__
            e.__traceback__ = tb.tb_next if tb is not None else None  # from the decoder down: not this frame
            _forget_views(e)
            future.set_exception(e)
        else:
            future.set_result(value)
        return _SETTLED

    # --- writing ------------------------------------------------------------------------
    def write_nowait(self, cmd: RemotingCommand) -> None:
        """Frame and hand ``cmd`` to the transport now (no flow control wait: the
        channel stops reading instead while the peer is behind). A ``memoryview`` body,
        or a list of buffers, is handed over without joining when it is large."""
        transport = self._transport
        if self._closed or transport is None:
            raise RemotingSendRequestError(f"{self} is closed")
        prefix, body = encode(cmd)
        if isinstance(body, list):
            if sum(len(b) for b in body) <= _JOIN_BODY_BYTES:
                self._write_frame(b"".join([prefix, *body]))
            else:
                self._uncork_now()
                transport.writelines([prefix, *body])
        elif not body:
            self._write_frame(prefix)
        elif len(body) <= _JOIN_BODY_BYTES:
            # one write for a small frame: the transport issues one send() instead of two
            self._write_frame(prefix + body)
        else:
            self._uncork_now()
            transport.write(prefix)  # no await between the two writes: frames never interleave
            transport.write(body)
        self.last_activity = self._loop.time()

    def write_frame_nowait(self, frame: bytes) -> None:
        """Hand whole frames their sender already encoded (length prefixes included) to the
        transport: answers written in one step by a hot path (the send pipeline). While the
        channel handles a receive buffer, answers are held and leave in one write at its end."""
        transport = self._transport
        if self._closed or transport is None:
            raise RemotingSendRequestError(f"{self} is closed")
        self._write_frame(frame)
        self.last_activity = self._loop.time()

    def write_buffers_nowait(self, buffers: list[bytes | memoryview], nbytes: int) -> None:
        """Hand one whole frame given as ``buffers`` (``nbytes`` in all: its prefix, then views
        of its body) to the transport without joining them: the pull pipeline's answers, whose
        bodies are views of the mapped commitlog. While the channel handles a receive buffer
        they are held with the other answers, which then leave in one ``writelines``."""
        transport = self._transport
        if self._closed or transport is None:
            raise RemotingSendRequestError(f"{self} is closed")
        cork = self._cork
        if cork is None:
            transport.writelines(buffers)
        else:
            cork.extend(buffers)
            self._cork_vectored = True
            self._cork_bytes += nbytes
            if self._cork_bytes > _CORK_BYTES:
                transport.writelines(cork)
                cork.clear()
                self._cork_bytes = 0
        self.last_activity = self._loop.time()

    async def write(self, cmd: RemotingCommand) -> None:
        """Frame and send ``cmd``, then wait while the peer is behind (flow control)."""
        self.write_nowait(cmd)
        if self._write_paused:
            await self._drain()

    async def _drain(self) -> None:
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter
        if self._closed:
            raise RemotingSendRequestError(f"{self} closed while writing")

    def _wake_drain_waiters(self) -> None:
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def send_response(self, response: RemotingCommand) -> None:
        """Send an answer produced later (e.g. after long polling)."""
        response.flag |= FLAG_RESPONSE
        await self.write(response)

    def _new_opaque(self) -> int:
        while True:
            self._next_opaque = (self._next_opaque + 1) & _OPAQUE_MASK
            if self._next_opaque not in self._pending and self._next_opaque not in self._flat:
                return self._next_opaque

    def invoke_flat(self, build: Callable[[int], bytes | None], timeout_ms: float, waiter: FlatWaiter,
                    read_header: Callable[[Any], AnswerTuple | None]) -> bool:
        """Send the request frame ``build(opaque)`` makes and have ``waiter`` settled with its
        answer's header as ``read_header`` (the ``decode_json_answer`` kernel) reads it:
        ``waiter.set_result((code, opaque, flag, remark, ext))``, or ``set_exception`` with
        RemotingTimeoutError / RemotingError (closed) as ``invoke_future``. False, with
        nothing sent, when ``build`` declines. For answers without a body that need no
        command object (a producer's plain sends): the frames of one loop iteration go out in
        one write, and an answer costs a kernel call and two dict pops.

        Thread model: loop thread only."""
        if self._closed or self._transport is None:
            raise RemotingSendRequestError(f"{self} is closed")
        opaque = self._new_opaque()
        frame = build(opaque)
        if frame is None:
            return False
        self._flat[opaque] = waiter
        self._read_flat = read_header
        self._timers[opaque] = self._loop.call_later(timeout_ms / 1000.0, self._expire_flat, opaque, timeout_ms)
        out = self._flat_out
        out.append(frame)
        if len(out) == 1:
            self._loop.call_soon(self._write_flat)
        return True

    def _write_flat(self) -> None:
        out = self._flat_out
        if not out:
            return
        self._flat_out = []
        if self._closed or self._transport is None:
            return  # close() failed their waiters
        self._transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _flat_answer(self, view: memoryview, start: int, end: int) -> bool:
        """Settle the ``invoke_flat`` waiter of the frame ``view[start:end]``; False when the
        frame is not such an answer (the general decoder reads it)."""
        word = int.from_bytes(view[start + FRAME_LENGTH_SIZE:start + _PREFIX_SIZE], "big")
        header_len = word & HEADER_LENGTH_MASK
        if word >> SERIALIZE_TYPE_SHIFT != 0 or header_len > end - start - _PREFIX_SIZE:
            return False  # not JSON (0), or malformed: the general decoder says what is wrong
        read = self._read_flat
        assert read is not None
        answer = read(view[start + _PREFIX_SIZE:start + _PREFIX_SIZE + header_len])
        if answer is None or not answer[2] & FLAG_RESPONSE:
            return False
        if answer[1] not in self._flat:
            return False
        self._settle_flat(answer[1], answer)
        return True

    def _settle_flat(self, opaque: int, answer: AnswerTuple) -> None:
        waiter = self._flat.pop(opaque)
        timer = self._timers.pop(opaque, None)
        if timer is not None:
            timer.cancel()
        if not waiter.done():
            try:
                waiter.set_result(answer)
            except Exception:  # the waiter's bug, not the connection's
                log.exception("%s: settling the answer to opaque %d failed", self, opaque)

    def _expire_flat(self, opaque: int, timeout_ms: float) -> None:
        self._timers.pop(opaque, None)
        waiter = self._flat.pop(opaque, None)
        if waiter is not None and not waiter.done():
            waiter.set_exception(RemotingTimeoutError(
                f"no response from {self.remote_addr} within {timeout_ms} ms (opaque {opaque})"))

    def invoke_future(self, cmd: RemotingCommand, timeout_ms: float,
                      decode: AnswerDecoder | None = None) -> asyncio.Future[Any]:
        """Send a request now and return the future of its response (no coroutine, no
        task: the cheapest way to have many requests in flight). The future fails with
        RemotingTimeoutError, or RemotingError when the connection closes first. With
        ``decode`` (see :data:`AnswerDecoder`) the future gets what it returns for the answer,
        read straight from the receive buffer, instead of the answer with a copied body."""
        if self._closed:
            raise RemotingSendRequestError(f"{self} is closed")
        opaque = self._new_opaque()
        cmd.opaque = opaque
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending[opaque] = future
        if decode is not None:
            self._answer_decoders[opaque] = decode
        # a timer instead of asyncio.wait_for: wait_for wraps every call in a new task,
        # which costs more than the rest of a request's round trip on loopback
        self._timers[opaque] = self._loop.call_later(timeout_ms / 1000.0, self._expire, opaque, cmd, timeout_ms)
        try:
            self.write_nowait(cmd)
        except BaseException:
            self._forget(opaque)
            raise
        return future

    def _forget(self, opaque: int) -> None:
        """Drop a request of ours that will not be answered (cancelled, failed to write)."""
        future = self._pending.pop(opaque, None)
        self._answer_decoders.pop(opaque, None)
        timer = self._timers.pop(opaque, None)
        if timer is not None:
            timer.cancel()
        if future is not None and not future.done():
            future.cancel()

    async def invoke(self, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        """Send a request and wait for its response.

        Assigns ``cmd.opaque``. Raises RemotingTimeoutError, RemotingSendRequestError,
        or RemotingError when the connection closes before the answer arrives.
        """
        future = self.invoke_future(cmd, timeout_ms)
        try:
            answer: RemotingCommand = await future
            return answer
        finally:
            if not future.done():
                self._forget(cmd.opaque)  # the caller was cancelled

    async def invoke_decoded(self, cmd: RemotingCommand, timeout_ms: float, decode: Callable[..., T]) -> T:
        """``invoke``, the answer read by ``decode(answer, view, start, end)`` (an
        :data:`AnswerDecoder`) straight from the receive buffer; returns what it returns and
        raises what it raises (plus ``invoke``'s errors)."""
        future = self.invoke_future(cmd, timeout_ms, decode)
        try:
            value: T = await future
            return value
        finally:
            if not future.done():
                self._forget(cmd.opaque)  # the caller was cancelled

    def _expire(self, opaque: int, cmd: RemotingCommand, timeout_ms: float) -> None:
        self._timers.pop(opaque, None)
        self._answer_decoders.pop(opaque, None)
        future = self._pending.pop(opaque, None)
        if future is not None and not future.done():
            future.set_exception(RemotingTimeoutError(
                f"no response from {self.remote_addr} within {timeout_ms} ms (code {int(cmd.code)}, "
                f"opaque {cmd.opaque})"))

    async def send_request_oneway(self, cmd: RemotingCommand, timeout_ms: float = 3000) -> None:
        """Send a request flagged oneway; the peer must not answer."""
        cmd.opaque = self._new_opaque()
        cmd.flag = (cmd.flag & ~FLAG_RESPONSE) | FLAG_ONEWAY
        try:
            await asyncio.wait_for(self.write(cmd), timeout_ms / 1000.0)
        except asyncio.TimeoutError:
            raise RemotingTimeoutError(f"oneway write to {self.remote_addr} blocked for {timeout_ms} ms") from None

    # --- inbound request tasks ------------------------------------------------------------
    def track(self, task: asyncio.Task[Any]) -> None:
        """Remember a request-processing task (for in-flight limits and shutdown)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def request_task_count(self) -> int:
        return len(self._tasks)

    def cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def wait_tasks(self, timeout_s: float) -> bool:
        """Wait until in-flight request tasks finish; False if some remain."""
        if not self._tasks:
            return True
        _done, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
        return not pending

    # --- closing ------------------------------------------------------------------------
    @property
    def transport(self) -> asyncio.Transport | None:
        """The connection's transport (None before it is made)."""
        return self._transport

    def close(self, reason: str = "closed locally") -> None:
        """Close now (idempotent): free the buffers, fail pending invokes, run close
        listeners. In-flight request tasks keep running; their answers are dropped.
        Unsent answers are flushed when the peer is reading, discarded otherwise."""
        if self._closed:
            return
        transport = self._transport
        if self._cork and transport is not None:
            self._uncork_now()  # answers to the frames before the one that closes us
        self._closed = True
        log.debug("%s closed: %s", self, reason)
        if transport is not None:
            if transport.get_write_buffer_size() and (self._write_paused or reason.startswith(_ABORT_REASONS)):
                transport.abort()  # a peer that does not read must not pin our memory
            else:
                transport.close()
        self._receiver.release()
        self._budget.cancel(id(self))
        error = RemotingError(f"connection to {self.remote_addr} closed ({reason})")
        pending, self._pending = self._pending, {}
        flat, self._flat = self._flat, {}
        self._flat_out = []
        self._answer_decoders = {}
        timers, self._timers = self._timers, {}
        for timer in timers.values():
            timer.cancel()
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        for waiter in flat.values():
            if not waiter.done():
                waiter.set_exception(error)
        self._wake_drain_waiters()
        self._closed_future.set_result(None)
        for listener in self._close_listeners:
            self._run_listener(listener)

    def _run_listener(self, listener: Callable[[Channel], Any]) -> None:
        try:
            result = listener(self)
        except Exception:  # a faulty listener must not stop the others
            log.exception("close listener %r failed for %s", listener, self)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            task.add_done_callback(self._log_listener_failure)

    def _log_listener_failure(self, task: asyncio.Future[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("async close listener failed for %s", self, exc_info=task.exception())

    async def aclose(self, timeout_s: float = 2.0) -> None:
        """Close and wait (bounded) until the transport has let go of the socket."""
        self.close()
        if self._transport is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._lost_future), timeout_s)
        except asyncio.TimeoutError:
            self._transport.abort()  # a peer that never reads the rest


def _forget_views(error: BaseException) -> None:
    """Drop the frames' locals from ``error``'s tracebacks (its cause and context too): an
    answer decoder's frames hold views of the receive buffer, which the next frames overwrite
    (and a view of a large-frame mmap would keep it mapped while the error lives)."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if e.__traceback__ is not None:
            traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__
