"""One remoting TCP connection, used identically by server and client.

Either peer may send requests on a connection (the broker sends
NOTIFY_CONSUMER_IDS_CHANGED / CHECK_TRANSACTION_STATE on the connection the client
opened), so a :class:`Channel` both answers requests (through a dispatcher) and keeps
an opaque -> future table for the requests it sent itself; frame flag bit 0 tells the
two directions apart.

All methods must be called from the event loop that owns the connection.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import socket
from collections.abc import Callable
from typing import Any, Protocol

from mqcore.errors import (
    FrameTooLargeError,
    ProtocolError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from mqcore.netaddr import parse_host_port as parse_addr
from mqcore.remoting.codes import DEFAULT_MAX_FRAME_BYTES, FLAG_ONEWAY, FLAG_RESPONSE
from mqcore.remoting.command import (
    FRAME_LENGTH_SIZE,
    HEADER_WORD_SIZE,
    RemotingCommand,
    decode_header,
    encode,
    parse_header_word,
)

log = logging.getLogger(__name__)

#: bodies up to this size are copied into the prefix's write (cheaper than a second send())
_JOIN_BODY_BYTES = 16 * 1024

__all__ = ["Channel", "RequestSink", "format_addr", "parse_addr"]

_OPAQUE_MASK = 0x7FFFFFFF  # opaques stay positive int32, as Java's counter does for 2^31 requests
_PREFIX_SIZE = FRAME_LENGTH_SIZE + HEADER_WORD_SIZE


class RequestSink(Protocol):
    """What a channel hands inbound requests to (the processor table)."""

    def submit(self, channel: Channel, request: RemotingCommand) -> None: ...


def format_addr(sockaddr: Any) -> str:
    """``ip:port`` (IPv6 in brackets) from a socket address tuple."""
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        host, port = sockaddr[0], sockaddr[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return str(sockaddr)


class Channel:
    """A framed connection: reads frames, dispatches requests, matches responses.

    ``attributes`` is free for the owner (the broker stores the client id there).
    Processors get the channel so they can answer later (``send_response``) or call
    back into the peer (``invoke``, ``send_request_oneway``).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        sink: RequestSink,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._sink = sink
        self._max_frame_bytes = max_frame_bytes
        self._loop = asyncio.get_running_loop()
        self.remote_addr: str = format_addr(writer.get_extra_info("peername"))
        self.local_addr: str = format_addr(writer.get_extra_info("sockname"))
        self.attributes: dict[str, Any] = {}
        self.last_activity: float = self._loop.time()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._next_opaque = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._close_listeners: list[Callable[[Channel], Any]] = []
        self._closed = False
        self._closed_future: asyncio.Future[None] = self._loop.create_future()
        self._read_task: asyncio.Task[None] | None = None
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

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
        return len(self._tasks) + len(self._pending)

    def add_close_listener(self, listener: Callable[[Channel], Any]) -> None:
        """``listener(channel)`` (sync or async) runs once when the connection closes."""
        self._close_listeners.append(listener)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_future)

    # --- reading ------------------------------------------------------------------------
    def start(self) -> asyncio.Task[None]:
        """Start the read loop as a task and return it."""
        if self._read_task is None:
            self._read_task = self._loop.create_task(self.serve(), name=f"remoting-read {self.remote_addr}")
        return self._read_task

    async def serve(self) -> None:
        """Read frames until EOF or error, then close. Never raises (but propagates
        cancellation): network input cannot crash the process."""
        reason = "peer closed"
        try:
            while True:
                cmd = await self._read_command()
                self.last_activity = self._loop.time()
                if cmd.is_response:
                    self._on_response(cmd)
                else:
                    self._sink.submit(self, cmd)
        except asyncio.IncompleteReadError:
            reason = "peer closed"
        except FrameTooLargeError as e:
            reason = f"frame too large: {e}"
            log.warning("closing %s: %s", self, e)
        except ProtocolError as e:
            reason = f"protocol error: {e}"
            log.warning("closing %s: protocol error: %s", self, e)
        except (ConnectionError, OSError) as e:
            reason = f"I/O error: {e!r}"
            log.debug("closing %s: %r", self, e)
        except asyncio.CancelledError:
            reason = "cancelled"
            raise
        except Exception:  # a decoder bug must not kill the server; log it loudly
            reason = "internal error"
            log.exception("closing %s after an unexpected error in the read loop", self)
        finally:
            self.close(reason)

    async def _read_command(self) -> RemotingCommand:
        prefix = await self._reader.readexactly(_PREFIX_SIZE)
        length = int.from_bytes(prefix[:FRAME_LENGTH_SIZE], "big")
        if length > self._max_frame_bytes:
            raise FrameTooLargeError(f"frame length {length} exceeds the limit {self._max_frame_bytes}")
        if length < HEADER_WORD_SIZE:
            raise ProtocolError(f"frame length {length} is shorter than the header word")
        word = int.from_bytes(prefix[FRAME_LENGTH_SIZE:], "big")
        serialize_type, header_len = parse_header_word(word, length)
        header = await self._reader.readexactly(header_len) if header_len else b""
        body_len = length - HEADER_WORD_SIZE - header_len
        body = await self._reader.readexactly(body_len) if body_len else b""
        cmd = decode_header(serialize_type, header)
        cmd.body = body
        return cmd

    def _on_response(self, cmd: RemotingCommand) -> None:
        future = self._pending.pop(cmd.opaque, None)
        if future is None or future.done():
            log.debug("%s: response for unknown opaque %d (timed out?) dropped", self, cmd.opaque)
            return
        future.set_result(cmd)

    # --- writing ------------------------------------------------------------------------
    async def write(self, cmd: RemotingCommand) -> None:
        """Frame and send ``cmd``. A ``memoryview`` body is handed to the transport as
        is; the transport may keep referencing it until it is flushed."""
        if self._closed:
            raise RemotingSendRequestError(f"{self} is closed")
        prefix, body = encode(cmd)
        writer = self._writer
        if body and len(body) <= _JOIN_BODY_BYTES:
            # one write for a small frame: the transport issues one send() instead of two
            writer.write(prefix + body)
        else:
            writer.write(prefix)  # no await between the two writes: frames never interleave
            if body:
                writer.write(body)
        self.last_activity = self._loop.time()
        try:
            await writer.drain()
        except (ConnectionError, OSError) as e:
            self.close(f"write failed: {e!r}")
            raise RemotingSendRequestError(f"write to {self.remote_addr} failed: {e!r}") from e

    async def send_response(self, response: RemotingCommand) -> None:
        """Send an answer produced later (e.g. after long polling)."""
        response.flag |= FLAG_RESPONSE
        await self.write(response)

    def _new_opaque(self) -> int:
        while True:
            self._next_opaque = (self._next_opaque + 1) & _OPAQUE_MASK
            if self._next_opaque not in self._pending:
                return self._next_opaque

    async def invoke(self, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        """Send a request and wait for its response.

        Assigns ``cmd.opaque``. Raises RemotingTimeoutError, RemotingSendRequestError,
        or RemotingError when the connection closes before the answer arrives.
        """
        if self._closed:
            raise RemotingSendRequestError(f"{self} is closed")
        opaque = self._new_opaque()
        cmd.opaque = opaque
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        future: asyncio.Future[RemotingCommand] = self._loop.create_future()
        self._pending[opaque] = future
        # a timer instead of asyncio.wait_for: wait_for wraps every call in a new task,
        # which costs more than the rest of a request's round trip on loopback
        timer = self._loop.call_later(timeout_ms / 1000.0, self._expire, future, cmd, timeout_ms)
        try:
            await self.write(cmd)
            return await future
        finally:
            timer.cancel()
            self._pending.pop(opaque, None)

    def _expire(self, future: asyncio.Future[RemotingCommand], cmd: RemotingCommand, timeout_ms: float) -> None:
        if not future.done():
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
    def close(self, reason: str = "closed locally") -> None:
        """Close now (idempotent): fail pending invokes, run close listeners.
        In-flight request tasks keep running; their answers are dropped."""
        if self._closed:
            return
        self._closed = True
        log.debug("%s closed: %s", self, reason)
        self._writer.close()
        error = RemotingError(f"connection to {self.remote_addr} closed ({reason})")
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        if self._read_task is not None and self._read_task is not asyncio.current_task():
            self._read_task.cancel()
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

    async def aclose(self) -> None:
        """Close and wait for the transport to finish closing."""
        self.close()
        try:
            await self._writer.wait_closed()
        except (ConnectionError, OSError) as e:
            log.debug("%s: error while closing: %r", self, e)
