"""Blocking request/response on the caller's own thread, with no event loop involved.

A blocking client call (``Producer.send``) used to hand its request to the client's
event-loop thread and wait for the loop to hand the answer back: two thread hand-offs
per request, about half of a sync round trip's client CPU (bench/bench_floor.py,
``remoting-sync``). A :class:`BlockingPool` instead keeps plain blocking sockets per
address; the calling thread takes an idle one (or opens one), writes the frame, reads
frames until its answer arrives, and puts the socket back.

* One socket serves one caller at a time, so a thread never reads another's answer; a
  single caller thread reuses one connection, ``max_idle_per_addr`` threads keep one
  each, more threads open extra sockets that are closed when they are returned. The
  socket returned last per address waits in a "hot" slot taken and returned with one
  atomic dict operation (no lock): a thread sending in a loop pays no lock round trips.
* The sockets block, with one wait slice (``EXCHANGE_WAIT_SLICE_MS``) as SO_RCVTIMEO and
  SO_SNDTIMEO: the kernels' read of an answer waits inside ``recv`` itself, so a send is
  two system calls (``sendto``, ``recvfrom``), not three with a ``poll`` before the read;
  the last slice before a deadline is waited in ``poll``, and every other read and write
  here passes MSG_DONTWAIT, so no call outlives its deadline.
* Frames are split by the same :class:`~mqcore.remoting.framing.FrameReceiver` as the
  loop's channels (same frame limit, same decoder), so the wire format and the
  handling of malformed or oversized answers do not depend on the path.
* A socket whose request timed out, failed or whose answer was malformed is closed,
  never reused: a late answer could otherwise be read as the next caller's.
* An idle socket the peer has meanwhile closed (the broker's idle sweep) is noticed
  before reuse (it polls readable) and replaced by a new connection. Only a socket idle
  for ``IDLE_CHECK_S`` or more is polled: a caller sending in a loop reuses its socket
  within microseconds, and the poll was one system call in four per round trip. Skipping
  it is safe: the poll never guaranteed a live peer (a close can land just after it), it
  only spared a failed attempt; and a peer that closed before our write cannot have read
  the request, so that attempt fails with a (retriable) ``RemotingError``, never silently,
  and is not processed twice.
* These sockets only carry the caller's requests: the broker sends its own requests
  (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE) on the connection a client's
  heartbeat used, which stays on the event loop. A request arriving here anyway is
  dropped (logged), as an unknown opaque would be.

``finalize`` (given to the pool) runs on every request right before it is encoded:
the one place a per-request hook (e.g. signing, adding ext fields) applies on this path.

Thread model: every method may be called from any thread; :meth:`close` also wakes
callers blocked in a read (their calls fail with :class:`~mqcore.errors.RemotingError`).
"""
from __future__ import annotations

import logging
import math
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, cast, overload

from mqcore._compat import default_wire_client_kernels

from mqcore.errors import (
    ClosedError,
    ConfigError,
    IllegalArgumentError,
    ProtocolError,
    RemotingConnectError,
    RemotingError,
    RemotingSendRequestError,
    RemotingTimeoutError,
)
from mqcore.netaddr import parse_host_port
from mqcore.remoting.codes import DEFAULT_MAX_FRAME_BYTES, FLAG_ONEWAY, FLAG_RESPONSE
from mqcore.remoting.command import Body, RemotingCommand, encode
from mqcore.remoting.framing import RECV_WAIT, FrameBudget, FrameDecoder, FrameReceiver
from mqcore.kernel_api import SendTemplate, WireClientKernels

log = logging.getLogger(__name__)

__all__ = ["AnswerHeader", "BlockingConnection", "BlockingPool", "DEFAULT_MAX_IDLE_PER_ADDR", "IDLE_CHECK_S"]

#: idle sockets kept per address (one per concurrently sending thread, up to this)
DEFAULT_MAX_IDLE_PER_ADDR = 4
#: receive ring per blocking socket: answers are small; larger ones get a buffer of their size
_RING_BYTES = 16 * 1024
_OPAQUE_MASK = 0x7FFFFFFF  # opaques stay positive int32, as on the loop's channels
#: bodies up to this size go out in one send() with the prefix (as on the loop's channels)
_JOIN_BODY_BYTES = 16 * 1024

#: the connection's socket blocks (the kernels' reads wait in recv): every other call passes this
_DONTWAIT = socket.MSG_DONTWAIT
#: poll events that end a wait for the answer: data, or the peer hanging up or failing
_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR
#: called with (addr, request) right before a request is encoded
Finalizer = Callable[[str, RemotingCommand], None]
#: (extFields keys, values, body) -> the keys and values with the finalizer's fields added, or None
FieldsSigner = Callable[[tuple[str, ...], tuple[Any, ...], bytes], "tuple[tuple[str, ...], tuple[Any, ...]] | None"]
#: an idle socket is polled for a peer close before reuse only after this long (module docstring)
IDLE_CHECK_S = 0.001
#: ``(code, opaque, flag, remark, ext_fields)`` of an answer read by the ``decode_json_answer`` kernel
AnswerHeader = tuple[int, int, int, "str | None", dict[str, str]]
#: ``build(opaque)``: a whole request frame carrying that opaque, or None when it cannot be built
FrameBuilder = Callable[[int], "bytes | None"]


class BlockingConnection:
    """One blocking TCP connection, used by one thread at a time (see the module docstring)."""

    def __init__(self, addr: str, sock: socket.socket, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 kernels: WireClientKernels | None = None) -> None:
        self.addr = addr
        self._sock = sock
        self._fd = sock.fileno()
        self._kernels = k = kernels or default_wire_client_kernels()
        self._kernel_exchange = k.exchange
        self._encode_frame = k.encode_request_frame
        # blocking, with SO_RCVTIMEO/SO_SNDTIMEO of one wait slice, set once: the kernels' read
        # of an answer waits inside recv (one system call per answer, no poll before it) and a
        # wait never outlasts a slice, so deadlines hold (the kernels poll for the last slice).
        # Every other read and write here passes MSG_DONTWAIT. (Python's settimeout would
        # cost an ioctl per call and a poll before every send.)
        sock.setblocking(True)
        slice_s = self._kernels.EXCHANGE_WAIT_SLICE_MS // 1000
        slice_us = self._kernels.EXCHANGE_WAIT_SLICE_MS % 1000 * 1000
        timeval = struct.pack("@ll", slice_s, slice_us)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
        self._poll = select.poll()
        self._poll.register(sock, _READABLE)
        # a private budget: one frame at a time on this socket, so it never waits
        # the whole ring from the start (no growth from 4 KiB as a server connection has): the
        # exchange kernel hands over up to EXCHANGE_BUFFER_BYTES at once, which must fit in one
        # get_buffer(), and a client holds few of these connections
        self._receiver = FrameReceiver(max_frame_bytes, FrameBudget(), ring_bytes=_RING_BYTES,
                                       initial_bytes=_RING_BYTES)
        self._next_opaque = 0
        self.closed = False
        #: ``time.monotonic()`` when it was last put back idle (see IDLE_CHECK_S)
        self.idle_since = 0.0

    @classmethod
    def connect(cls, addr: str, timeout_s: float, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                kernels: WireClientKernels | None = None) -> BlockingConnection:
        try:
            host, port = parse_host_port(addr)
        except ValueError as e:
            raise IllegalArgumentError(str(e)) from e
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except TimeoutError:
            raise RemotingConnectError(f"connect to {addr} timed out after {timeout_s * 1000:.0f} ms") from None
        except OSError as e:
            raise RemotingConnectError(f"connect to {addr} failed: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(addr, sock, max_frame_bytes=max_frame_bytes, kernels=kernels)

    def __repr__(self) -> str:
        return f"BlockingConnection({self.addr}, {'closed' if self.closed else 'open'})"

    def peer_closed(self) -> bool:
        """True when the idle socket is readable: the peer closed it (or sent something
        unasked, which makes the socket unusable for request/response just as well)."""
        if self.closed:
            return True
        try:
            return bool(self._poll.poll(0))
        except (OSError, ValueError):
            return True

    def invoke(self, cmd: RemotingCommand, deadline: float) -> RemotingCommand:
        """Send ``cmd`` and return its answer, by ``deadline`` (``time.monotonic()``).
        Any failure closes this connection (see the module docstring)."""
        self._next_opaque = (self._next_opaque + 1) & _OPAQUE_MASK
        opaque = cmd.opaque = self._next_opaque
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        prefix, body = encode(cmd)  # before any I/O: an unencodable request leaves the socket usable
        return self._exchange(prefix, body, cmd.code, opaque, deadline, None)

    def invoke_frame(self, code: int, build: FrameBuilder, deadline: float,
                     decode: FrameDecoder) -> AnswerHeader | RemotingCommand | None:
        """``invoke`` for a request written in one step: ``build(opaque)`` gives the whole
        frame (None: nothing is sent, None is returned, the socket stays usable) and
        ``decode`` reads the answer (an :data:`AnswerHeader`, or a RemotingCommand when it
        left an unusual answer to the generic decoder). Same errors as ``invoke``."""
        self._next_opaque = opaque = (self._next_opaque + 1) & _OPAQUE_MASK
        frame = build(opaque)
        if frame is None:
            return None
        return self._exchange_frame(frame, code, opaque, deadline, decode)

    def call(self, code: int, language: str, version: int, keys: tuple[str, ...], values: tuple[Any, ...],
             body: bytes, deadline: float, decode: FrameDecoder) -> AnswerHeader | RemotingCommand | None:
        """``invoke_frame`` with the frame written by the ``encode_request_frame`` kernel
        (a JSON request; the arguments are the kernel's): None, with nothing sent, when
        the kernel declines."""
        self._next_opaque = opaque = (self._next_opaque + 1) & _OPAQUE_MASK
        frame = self._encode_frame(code, language, version, opaque, 0, keys, values, body)
        if frame is None:
            return None
        return self._exchange_frame(frame, code, opaque, deadline, decode)

    def send_template(self, template: SendTemplate, code: int, born: int, flag: int, properties: dict[str, str],
                      body: bytes, uniq_id: str, deadline: float, decode: FrameDecoder) -> Any:
        """``call`` for a send written from a :class:`SendTemplate` (the frame of one
        queue with the message's fields filled in): the SendResult of the usual answer
        (the template's ``send`` builds it), else an :data:`AnswerHeader` or a
        RemotingCommand as ``call`` gives; None, with nothing sent, when the template
        declines the message. Same errors as ``invoke``."""
        self._next_opaque = opaque = (self._next_opaque + 1) & _OPAQUE_MASK
        if self._receiver.buffered_bytes:  # bytes of an earlier answer still wait: read in order
            frame = template.frame(opaque, born, flag, properties, body)
            if frame is None:
                return None
            return self._exchange(frame, b"", code, opaque, deadline, decode)
        try:
            answer = template.send(self._fd, opaque, born, flag, properties, body, deadline, uniq_id)
        except BaseException:
            self.close()
            raise
        kind = type(answer)
        if kind is bytes:
            return self._carry_on(answer, code, opaque, deadline, decode)
        if kind is int:
            self.close()
            raise self._exchange_error(answer, code, opaque)
        return answer  # the SendResult, an answer the template left to the caller, or None

    def _exchange_frame(self, frame: bytes, code: int, opaque: int, deadline: float,
                        decode: FrameDecoder) -> AnswerHeader | RemotingCommand:
        """Write ``frame`` and read its answer: the ``exchange`` kernel does both in one call
        (the usual send answer comes back decoded); what it leaves (a long or unusual answer,
        other frames first) continues in the frame reader; its failures close the socket."""
        if self._receiver.buffered_bytes:  # bytes of an earlier answer still wait: read in order
            return self._exchange(frame, b"", code, opaque, deadline, decode)
        try:
            answer = self._kernel_exchange(self._fd, frame, opaque, deadline)
        except BaseException:
            self.close()
            raise
        if type(answer) is tuple:
            return answer
        if type(answer) is int:
            self.close()
            raise self._exchange_error(answer, code, opaque)
        # neither a tuple nor an int: the kernel's undecoded bytes (``type(...) is`` does not narrow)
        return self._carry_on(cast(bytes, answer), code, opaque, deadline, decode)

    def _carry_on(self, answer: bytes, code: int, opaque: int, deadline: float,
                  decode: FrameDecoder) -> AnswerHeader | RemotingCommand:
        """The bytes a kernel read but left undecoded go to the frame reader, which reads on."""
        try:  # (its ring is larger than the kernel's buffer)
            room = self._receiver.get_buffer()
            if len(room) < len(answer):  # the ring is sized for this (see __init__)
                raise ProtocolError(f"{len(answer)} bytes from the exchange kernel do not fit the "
                                    f"frame reader's {len(room)} bytes of room")
            room[:len(answer)] = answer
            self._receiver.received(len(answer))
            return self._read_answer(code, opaque, deadline, decode)
        except ProtocolError as e:
            self.close()
            raise RemotingError(f"connection to {self.addr} closed (protocol error: {e})") from e
        except BaseException:
            self.close()
            raise

    def _exchange_error(self, failure: int, code: int, opaque: int) -> RemotingError:
        kind, err = failure & 0xFF, failure >> 8
        k = self._kernels
        reason = os.strerror(err) if err else ""
        if kind == k.EXCHANGE_WRITE_TIMEOUT:
            return RemotingTimeoutError(f"write to {self.addr} blocked until the deadline")
        if kind == k.EXCHANGE_READ_TIMEOUT:
            return RemotingTimeoutError(f"no response from {self.addr} in time (code {int(code)}, opaque {opaque})")
        if kind == k.EXCHANGE_PEER_CLOSED:
            return RemotingError(f"connection to {self.addr} closed (peer closed) while waiting for the answer")
        if kind == k.EXCHANGE_WRITE_FAILED:
            return RemotingSendRequestError(f"write to {self.addr} failed: [Errno {err}] {reason}")
        return RemotingError(f"connection to {self.addr} failed while waiting: [Errno {err}] {reason}")

    @overload
    def _exchange(self, prefix: bytes, body: Body, code: int, opaque: int, deadline: float,
                  decode: None) -> RemotingCommand: ...
    @overload
    def _exchange(self, prefix: bytes, body: Body, code: int, opaque: int, deadline: float,
                  decode: FrameDecoder) -> AnswerHeader | RemotingCommand: ...

    def _exchange(self, prefix: bytes, body: Body, code: int, opaque: int, deadline: float,
                  decode: FrameDecoder | None) -> AnswerHeader | RemotingCommand:
        """Write the request and read frames until the answer to ``opaque`` (an
        :data:`AnswerHeader` when ``decode`` read it, else a RemotingCommand). Any failure
        closes this connection."""
        try:
            self._send(prefix, body, deadline)
            return self._read_answer(code, opaque, deadline, decode)
        except ProtocolError as e:  # as on the loop: a malformed answer closes the connection
            self.close()
            raise RemotingError(f"connection to {self.addr} closed (protocol error: {e})") from e
        except BaseException:
            self.close()
            raise

    def _read_answer(self, code: int, opaque: int, deadline: float,
                     decode: FrameDecoder | None) -> AnswerHeader | RemotingCommand:
        """Read frames until the answer to ``opaque``, dropping any other (the caller closes on errors)."""
        while True:
            answer = self._read_frame(deadline, code, opaque, decode)
            if type(answer) is tuple:
                if answer[2] & FLAG_RESPONSE and answer[1] == opaque:
                    return answer
            elif answer.is_response and answer.opaque == opaque:
                return cast(RemotingCommand, answer)  # not a tuple: a decoded command
            log.debug("%s: dropped an unexpected frame %r", self, answer)

    def _remaining(self, deadline: float, code: int, opaque: int) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise RemotingTimeoutError(f"no response from {self.addr} in time (code {int(code)}, "
                                       f"opaque {opaque})")
        return left

    def _send(self, prefix: bytes, body: Body, deadline: float) -> None:
        if isinstance(body, list):
            parts = [prefix, *body]
        elif len(body) <= _JOIN_BODY_BYTES:
            parts = [prefix + bytes(body) if body else prefix]
        else:  # a large body is not copied just to save one send()
            parts = [prefix, body]
        sock = self._sock
        for part in parts:
            view = memoryview(part).cast("B")
            while view:
                try:
                    sent = sock.send(view, _DONTWAIT)
                except BlockingIOError:
                    sent = 0
                except OSError as e:
                    raise RemotingSendRequestError(f"write to {self.addr} failed: {e}") from e
                view = view[sent:]
                if view:  # the socket buffer is full: wait until it drains, at most until the deadline
                    self._wait_writable(deadline)

    def _wait_writable(self, deadline: float) -> None:
        """Wait in poll() (not select(): no limit on the descriptor number) until the socket
        takes more bytes; past ``deadline`` the write has timed out."""
        poll = self._poll
        poll.modify(self._sock, select.POLLOUT | select.POLLERR | select.POLLHUP)
        try:
            ready = poll.poll(max(math.ceil((deadline - time.monotonic()) * 1000.0), 0))
        except OSError as e:
            raise RemotingSendRequestError(f"write to {self.addr} failed: {e}") from e
        finally:
            poll.modify(self._sock, _READABLE)
        if not ready:
            raise RemotingTimeoutError(f"write to {self.addr} blocked until the deadline")

    def _read_frame(self, deadline: float, code: int, opaque: int, decode: FrameDecoder | None = None) -> Any:
        receiver, sock, poll = self._receiver, self._sock, self._poll
        while True:
            frame = receiver.next_frame(decode)  # raises ProtocolError / FrameTooLargeError on bad input
            if frame is RECV_WAIT:  # cannot happen with a private budget; never spin on it
                raise ProtocolError(f"{self.addr}: frame budget exhausted on a blocking connection")
            if frame is not None:
                return frame
            # poll's timeout is whole milliseconds: round up, so it never spins at 0
            wait_ms = math.ceil(self._remaining(deadline, code, opaque) * 1000.0)
            try:
                ready = poll.poll(wait_ms)
                n = sock.recv_into(receiver.get_buffer(), 0, _DONTWAIT) if ready else -1
            except BlockingIOError:
                continue  # woken without data: wait again
            except OSError as e:
                raise RemotingError(f"connection to {self.addr} failed while waiting: {e}") from e
            if n < 0:
                self._remaining(deadline, code, opaque)  # raises when the deadline has passed
                continue
            if n == 0:
                raise RemotingError(f"connection to {self.addr} closed (peer closed) while waiting for the answer")
            receiver.received(n)

    def wake(self) -> None:
        """Make a read blocked in another thread return (it then fails): used at shutdown."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # not connected any more: nothing blocks on it

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._sock.close()
        finally:
            self._receiver.release()


class BlockingPool:
    """Blocking sockets per address for callers' threads; see the module docstring."""

    def __init__(self, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, connect_timeout_ms: float = 3000,
                 max_idle_per_addr: int = DEFAULT_MAX_IDLE_PER_ADDR, finalize: Finalizer | None = None,
                 name: str = "blocking-pool", kernels: WireClientKernels | None = None,
                 sign_fields: FieldsSigner | None = None) -> None:
        if connect_timeout_ms <= 0:
            raise ConfigError(f"connect_timeout_ms must be > 0, got {connect_timeout_ms}")
        if max_idle_per_addr < 1:
            raise ConfigError(f"max_idle_per_addr must be >= 1, got {max_idle_per_addr}")
        self.name = name
        self._max_frame_bytes = max_frame_bytes
        self._connect_timeout_s = connect_timeout_ms / 1000.0
        self._max_idle = max_idle_per_addr
        #: called with (addr, request) right before a request is encoded; may be set later
        self.finalize = finalize
        #: ``finalize``'s change for a request the ``call`` kernel writes from keys and values
        #: (the ACL signer's ``sign_fields``): with it ``call`` still runs under ``finalize``
        self.sign_fields = sign_fields
        self._idle: dict[str, list[BlockingConnection]] = {}
        #: the idle socket last given back per address, outside the lock: a caller sending in a
        #: loop takes and returns it with one atomic dict operation each (``dict.pop``,
        #: ``dict.setdefault``), not two lock round trips; it counts toward ``max_idle_per_addr``
        self._hot: dict[str, BlockingConnection] = {}
        self._busy: set[BlockingConnection] = set()
        self._lock = threading.Lock()
        self._closed = False
        #: the kernels this pool's fast path uses (the caller's frame builder uses the same)
        self.kernels = kernels or default_wire_client_kernels()
        self._decode_answer = _answer_decoder(self.kernels)

    @property
    def closed(self) -> bool:
        return self._closed

    def idle_count(self, addr: str) -> int:
        with self._lock:
            return len(self._idle.get(addr, ())) + (addr in self._hot)

    def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and return the answer (any response code), within
        ``timeout_ms`` connecting included. Errors as :class:`RemotingClient.invoke`."""
        now = time.monotonic()
        deadline = now + timeout_ms / 1000.0
        finalize = self.finalize
        if finalize is not None:
            finalize(addr, cmd)
        conn = self._take(addr, deadline, timeout_ms, now)
        try:
            answer = conn.invoke(cmd, deadline)
        finally:
            self._give_back(conn)
        return answer

    def invoke_frame(self, addr: str, code: int, build: FrameBuilder,
                     timeout_ms: float) -> AnswerHeader | RemotingCommand | None:
        """``invoke`` for a request the caller writes in one step (``build(opaque)``, see
        :meth:`BlockingConnection.invoke_frame`); the answer comes back as an
        :data:`AnswerHeader` when the ``decode_json_answer`` kernel reads it (the usual
        case), else as a RemotingCommand. None, with nothing sent, when ``build`` gives
        None or a ``finalize`` hook is set (it needs a RemotingCommand): the caller then
        uses :meth:`invoke`."""
        if self.finalize is not None:
            return None
        now = time.monotonic()
        deadline = now + timeout_ms / 1000.0
        conn = self._take(addr, deadline, timeout_ms, now)
        try:
            answer = conn.invoke_frame(code, build, deadline, self._decode_answer)
        finally:
            self._give_back(conn)
        return answer

    def call(self, addr: str, code: int, language: str, version: int, keys: tuple[str, ...],
             values: tuple[Any, ...], body: bytes, timeout_ms: float) -> AnswerHeader | RemotingCommand | None:
        """``invoke_frame`` with the frame written by the ``encode_request_frame`` kernel from
        these arguments (see :meth:`BlockingConnection.call`): the send path's one call per
        request. None, with nothing sent, when the kernel declines or a ``finalize`` hook is set
        without ``sign_fields`` (which then adds its fields)."""
        if self.finalize is not None:
            if self.sign_fields is None:
                return None
            signed = self.sign_fields(keys, values, body)
            if signed is None:
                return None
            keys, values = signed
        now = time.monotonic()
        deadline = now + timeout_ms / 1000.0
        conn = self._take(addr, deadline, timeout_ms, now)
        try:
            answer = conn.call(code, language, version, keys, values, body, deadline, self._decode_answer)
        finally:
            self._give_back(conn)
        return answer

    def send_template(self, addr: str, template: SendTemplate, code: int, born: int, flag: int,
                      properties: dict[str, str], body: bytes, uniq_id: str, timeout_ms: float) -> Any:
        """``call`` for a send written from a :class:`SendTemplate` (see
        :meth:`BlockingConnection.send_template`): the send path's one call per request,
        with the usual answer already a SendResult. None, with nothing sent, when the
        template declines or a ``finalize`` hook is set (a signed template, with the ACL
        signer as that hook - ``sign_fields`` set beside it -, signs itself)."""
        if self.finalize is not None and (self.sign_fields is None or not template.signed):
            return None
        now = time.monotonic()
        deadline = now + timeout_ms / 1000.0
        conn = self._hot.pop(addr, None)  # _take's usual case without its call (one per send)
        if conn is not None and now - conn.idle_since < IDLE_CHECK_S:
            self._busy.add(conn)
            if self._closed:  # as in _take
                self._discard(conn)
                raise ClosedError(f"{self.name} is shut down")
        else:
            conn = self._take(addr, deadline, timeout_ms, now, conn)
        try:
            return conn.send_template(template, code, born, flag, properties, body, uniq_id, deadline,
                                      self._decode_answer)
        finally:
            self._give_back(conn, now)

    def _take(self, addr: str, deadline: float, timeout_ms: float, now: float,
              hot: BlockingConnection | None = None) -> BlockingConnection:
        """A connection to ``addr``: the hot one (``hot``: already taken from the hot slot),
        an idle one, or a new one; an idle one the peer closed is replaced."""
        conn = hot if hot is not None else self._hot.pop(addr, None)  # atomic: no other thread gets it
        if conn is not None:
            self._busy.add(conn)
            if self._closed:  # close() ran while it was neither hot nor busy: it is ours to close
                self._discard(conn)
                raise ClosedError(f"{self.name} is shut down")
        else:
            with self._lock:
                if self._closed:
                    raise ClosedError(f"{self.name} is shut down")
                idle = self._idle.get(addr)
                conn = idle.pop() if idle else None
                if conn is not None:
                    self._busy.add(conn)
        if conn is not None and now - conn.idle_since >= IDLE_CHECK_S and conn.peer_closed():
            log.debug("%s: %s was closed by the peer while idle; reconnecting", self.name, conn)
            self._discard(conn)
            conn = None
        if conn is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RemotingTimeoutError(f"no time left to connect to {addr} within {timeout_ms} ms")
            conn = BlockingConnection.connect(addr, min(left, self._connect_timeout_s),
                                              max_frame_bytes=self._max_frame_bytes, kernels=self.kernels)
            with self._lock:
                if self._closed:
                    conn.close()
                    raise ClosedError(f"{self.name} is shut down")
                self._busy.add(conn)
        return conn

    def _discard(self, conn: BlockingConnection) -> None:
        with self._lock:
            self._busy.discard(conn)
        conn.close()

    def _give_back(self, conn: BlockingConnection, now: float | None = None) -> None:
        """Return a taken socket: into the hot slot of its address when that is free, else
        the idle list (``max_idle_per_addr`` in all), else closed. ``now``: when its request
        started (its idle time then counts from there: at worst one early peer check)."""
        self._busy.discard(conn)
        if not conn.closed and not self._closed:
            conn.idle_since = time.monotonic() if now is None else now
            addr = conn.addr
            if self._hot.setdefault(addr, conn) is conn:
                if self._closed and self._hot.pop(addr, None) is conn:  # close() raced with us: close it
                    conn.close()
                return
            with self._lock:
                if not self._closed:
                    idle = self._idle.setdefault(addr, [])
                    if len(idle) < self._max_idle - 1:  # the hot slot holds one
                        idle.append(conn)
                        return
        conn.close()

    def close_addr(self, addr: str) -> None:
        """Close the idle sockets to ``addr`` (e.g. after its broker went away)."""
        with self._lock:
            idle = self._idle.pop(addr, [])
            hot = self._hot.pop(addr, None)
            if hot is not None:
                idle.append(hot)
        for conn in idle:
            conn.close()

    def close(self) -> None:
        """Close every idle socket and wake callers blocked on busy ones. Idempotent."""
        with self._lock:
            self._closed = True
            idle = [c for conns in self._idle.values() for c in conns]
            self._idle.clear()
            idle += self._hot.values()  # after _closed is set: a socket put back later is closed by its caller
            self._hot.clear()
            busy = list(self._busy)
        for conn in idle:
            conn.close()
        for conn in busy:
            conn.wake()  # its caller's read fails now; the caller closes it


def _answer_decoder(kernels: WireClientKernels) -> FrameDecoder:
    """A frame decoder for answers: a JSON header with no body goes to the
    ``decode_json_answer`` kernel; anything it declines, and every other frame, to the
    generic decoder (which also raises on malformed input)."""
    read_header = kernels.decode_json_answer
    generic = FrameReceiver.decode_command

    def decode(view: memoryview, start: int, end: int) -> AnswerHeader | RemotingCommand:
        word = int.from_bytes(view[start + 4:start + 8], "big")
        if word >> 24 == 0 and 8 + word == end - start:  # JSON, header up to the end (no body)
            header = read_header(view[start + 8:end])
            if header is not None:
                return header
        return generic(view, start, end)

    return decode
