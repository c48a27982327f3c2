"""asyncio remoting server (the listening side of a broker or name server).

Usage::

    server = RemotingServer(idle_timeout_s=120)
    server.register_processor(RequestCode.HEART_BEAT, on_heartbeat)   # sync or async
    server.add_close_listener(lambda ch: consumers.expire(ch))
    port = await server.start("0.0.0.0", 10911)     # port 0 => random, see .port
    ...
    await server.shutdown()

Every accepted connection becomes a :class:`~mqcore.remoting.channel.Channel` (the
connection's protocol) that serves until the peer disconnects, sends a malformed or
oversized frame, stays idle (no read, no write, nothing in flight) for
``idle_timeout_s``, or sends a frame slower than ``min_frame_bytes_per_s``. Nothing a peer
sends can stop the server, and its memory is bounded: large partial frames of all
connections together are capped by ``frame_budget_bytes`` (or by a ``frame_budget`` shared
with other servers of the process), a connection whose unsent answers exceed
``write_high_water`` stops being read until its peer catches up, and connections beyond
``max_connections`` (a :class:`~mqcore.remoting.budget.ConnectionBudget`) or into the
descriptor reserve are closed at accept.

All methods must be called on the server's event loop.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from typing import Any, cast

from mqcore.errors import ClosedError, ConfigError
from mqcore.remoting.channel import DEFAULT_WRITE_HIGH_WATER, Channel, FramesProcessor, format_addr
from mqcore.remoting.codes import DEFAULT_MAX_FRAME_BYTES
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.dispatch import DEFAULT_MAX_INFLIGHT, Processor, ProcessorRegistry, ProcessorResult, ProcessorTable
from mqcore.remoting.budget import ConnectionBudget
from mqcore.remoting.framing import DEFAULT_BUDGET_BYTES, FrameBudget
from mqcore.remoting.ratelimit import RateLimitedLog
from mqcore.remoting.tls import SNIFF_TIMEOUT_S, TLS_HANDSHAKE_BYTE, TlsMode, TlsServerConfig

log = logging.getLogger(__name__)

__all__ = ["RemotingServer"]

_SWEEP_MAX_INTERVAL_S = 5.0
#: a partial frame must arrive at least this fast (bytes per second, averaged since its first
#: byte) once it has been under way for ``DEFAULT_SLOW_FRAME_GRACE_S``, or the connection is
#: closed: a trickle (a 16 MiB frame at 2 bytes a second) is activity, but not progress
DEFAULT_MIN_FRAME_BYTES_PER_S = 1024
DEFAULT_SLOW_FRAME_GRACE_S = 10.0
#: with ``reserve_fds``: this many descriptors (at least; an eighth of the limit when that is
#: more) are left to the store's files, the logs and outgoing connections: a connection
#: accepted into one of them is closed at once
MIN_FD_RESERVE = 64
#: connections taken from the listening socket per wake-up with TLS on (asyncio's own loop
#: takes up to its backlog)
_ACCEPTS_PER_WAKEUP = 64

#: ``hook(channel, request)`` -> None to let the request through, or the answer refusing it
RequestHook = Callable[[Channel, RemotingCommand], "RemotingCommand | None"]


class RemotingServer(ProcessorRegistry):
    """Accepts connections and dispatches their requests to registered processors."""

    def __init__(
        self,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        idle_timeout_s: float | None = 120.0,
        max_inflight_per_connection: int = DEFAULT_MAX_INFLIGHT,
        frame_budget_bytes: int = DEFAULT_BUDGET_BYTES,
        write_high_water: int = DEFAULT_WRITE_HIGH_WATER,
        name: str = "remoting-server",
        before_request: RequestHook | None = None,
        min_frame_bytes_per_s: int = DEFAULT_MIN_FRAME_BYTES_PER_S,
        slow_frame_grace_s: float = DEFAULT_SLOW_FRAME_GRACE_S,
        reserve_fds: bool = False,
        tls: TlsServerConfig | None = None,
        max_connections: int = 0,
        frame_budget: FrameBudget | None = None,
    ) -> None:
        if max_frame_bytes < 8:
            raise ConfigError(f"max_frame_bytes must be >= 8, got {max_frame_bytes}")
        if idle_timeout_s is not None and idle_timeout_s <= 0:
            raise ConfigError(f"idle_timeout_s must be > 0 or None, got {idle_timeout_s}")
        self.name = name
        self._before_request = before_request
        self._frames: FramesProcessor | None = None
        self._channel_class: Callable[..., Channel] = Channel
        self._max_frame_bytes = max_frame_bytes
        self._idle_timeout_s = idle_timeout_s
        if min_frame_bytes_per_s < 0 or slow_frame_grace_s <= 0:
            raise ConfigError(f"min_frame_bytes_per_s must be >= 0 (0: off) and slow_frame_grace_s > 0, got "
                              f"{min_frame_bytes_per_s} and {slow_frame_grace_s}")
        self._min_frame_rate = min_frame_bytes_per_s
        self._slow_frame_grace_s = slow_frame_grace_s
        self._warn = RateLimitedLog(log)
        self._table = ProcessorTable(max_inflight=max_inflight_per_connection, warnings=self._warn)
        #: shared with the other remoting ports of the process when given (the broker's and its
        #: embedded name server's): their partial large frames are bounded once, together
        self._budget = frame_budget if frame_budget is not None else FrameBudget(frame_budget_bytes)
        #: open connections at most ``max_connections`` (0: as many as the descriptor reserve allows)
        self.connections = ConnectionBudget(name, max_connections, key="serverMaxConnections", logger=log)
        self._write_high_water = write_high_water
        self._channels: set[Channel] = set()
        self._connect_listeners: list[Callable[[Channel], Any]] = []
        self._close_listeners: list[Callable[[Channel], Any]] = []
        self._server: asyncio.AbstractServer | None = None
        #: more plaintext listeners on the same processors (``listen_also``: the broker's VIP port)
        self._also: list[asyncio.AbstractServer] = []
        self._sweeper: asyncio.Task[None] | None = None
        self._port = 0
        self._host = ""
        self._stopped = False
        self._reserve_fds = reserve_fds
        self._tls = tls if tls is not None and tls.mode is not TlsMode.DISABLED else None
        #: the listening socket when TLS is on (accepted by us, so the first byte can be peeked)
        self._listener: socket.socket | None = None
        self._sniffing: set[socket.socket] = set()
        #: connections whose descriptor number reaches this are refused (None: no guard)
        self.fd_ceiling: int | None = None
        #: connections refused because the descriptors left were the reserve (for metrics, tests)
        self.refused_for_fds = 0

    # --- configuration ------------------------------------------------------------------
    def register_processor(
        self, code: int, processor: Processor, *, executor: concurrent.futures.Executor | None = None
    ) -> None:
        """As :meth:`ProcessorRegistry.register_processor`; with a ``before_request`` hook
        the processor runs only when the hook lets the request through (Java's server
        ``RPCHook``, used for ACL). Without a hook nothing is wrapped: no cost."""
        if self._before_request is not None:
            processor = _behind(self._before_request, processor)
        self._table.register(code, processor, executor=executor)

    def register_default_processor(
        self, processor: Processor, *, executor: concurrent.futures.Executor | None = None
    ) -> None:
        if self._before_request is not None:
            processor = _behind(self._before_request, processor)
        self._table.register_default(processor, executor=executor)

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame a connection accepts (larger ones close it)."""
        return self._max_frame_bytes

    def register_frames_processor(self, processor: FramesProcessor,
                                  channel_class: Callable[..., Channel] | None = None, *,
                                  checks_before_request: bool = False) -> bool:
        """``processor`` reads complete frames straight from each connection's receive
        buffer before they are decoded (see :data:`~mqcore.remoting.channel.FramesProcessor`;
        the broker's send pipeline). Not installed when a ``before_request`` hook is set:
        every request must then pass the hook (ACL) as a decoded command, before anything
        of it is stored - unless ``checks_before_request``: the processor takes only frames
        the hook would let through (the send pipeline with plain ACL). ``channel_class``: a
        Channel subclass with the processor's connection core in C (the send pipeline's, with
        the compiled kernels). Returns whether it was installed; connections accepted later
        use it."""
        if self._before_request is not None and not checks_before_request:
            return False
        self._frames = processor
        if channel_class is not None:
            self._channel_class = channel_class
        return True

    def set_tls(self, tls: TlsServerConfig | None) -> None:
        """Serve TLS as ``tls`` says (before ``start``; None or disabled mode: plaintext)."""
        if self._server is not None or self._listener is not None:
            raise ConfigError(f"{self.name} is already started: TLS is set before start")
        self._tls = tls if tls is not None and tls.mode is not TlsMode.DISABLED else None

    def add_connect_listener(self, listener: Callable[[Channel], Any]) -> None:
        """``listener(channel)`` runs (sync; may return an awaitable) on every accept."""
        self._connect_listeners.append(listener)

    def add_close_listener(self, listener: Callable[[Channel], Any]) -> None:
        """``listener(channel)`` runs once when a connection closes, for any reason
        (the broker uses it to expire the channel's consumers and producers)."""
        self._close_listeners.append(listener)

    # --- lifecycle ----------------------------------------------------------------------
    async def start(self, host: str = "0.0.0.0", port: int = 0, *, backlog: int = 1024) -> int:
        """Listen and return the bound port (``port=0`` picks a free one)."""
        if self._stopped:
            raise ClosedError(f"{self.name} is shut down")
        if self._server is not None:
            raise ConfigError(f"{self.name} is already started")
        loop = asyncio.get_running_loop()
        if self._reserve_fds:
            self.fd_ceiling = fd_ceiling()
        if self._tls is None:
            self._server = await loop.create_server(self._new_channel, host, port, backlog=backlog, reuse_address=True)
            sockets = self._server.sockets or ()
        else:
            sockets = (self._listen_tls(loop, host, port, backlog),)
        self._port = sockets[0].getsockname()[1] if sockets else port
        self._host = host
        if self._idle_timeout_s is not None:
            self._sweeper = loop.create_task(self._sweep_idle(), name=f"{self.name} idle")
        log.info("%s listening on %s", self.name, ", ".join(format_addr(s.getsockname()) for s in sockets))
        return self._port

    async def listen_also(self, host: str, port: int, *, backlog: int = 1024) -> int:
        """Accept on one more address too (after ``start``): the same processors, limits and
        channels, plaintext only (TLS accepts through one listener). Returns the bound port."""
        if self._stopped or self._server is None and self._listener is None:
            raise ConfigError(f"{self.name}: listen_also comes after start and before shutdown")
        if self._tls is not None:
            raise ConfigError(f"{self.name}: a second listener is plaintext only; TLS is on")
        srv = await asyncio.get_running_loop().create_server(self._new_channel, host, port, backlog=backlog,
                                                             reuse_address=True)
        self._also.append(srv)
        bound = srv.sockets[0].getsockname()[1] if srv.sockets else port
        log.info("%s also listening on %s:%d", self.name, host, bound)
        return bound

    @property
    def port(self) -> int:
        return self._port

    @property
    def address(self) -> str:
        """``host:port`` as bound (a wildcard host is reported as given)."""
        return f"{self._host}:{self._port}"

    @property
    def channels(self) -> list[Channel]:
        return list(self._channels)

    @property
    def frame_budget(self) -> FrameBudget:
        """Large-frame receive memory held by all connections (for metrics and tests)."""
        return self._budget

    async def shutdown(self, grace_s: float = 2.0) -> None:
        """Stop accepting, give in-flight requests ``grace_s`` to finish, then close
        every connection and cancel what is still running. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._server is not None:
            self._server.close()
        for srv in self._also:
            srv.close()
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
            self._listener.close()
        for sock in list(self._sniffing):
            self._drop(sock)
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        channels = list(self._channels)
        if channels and grace_s > 0:
            await asyncio.gather(*(ch.wait_tasks(grace_s) for ch in channels))
        for ch in channels:
            ch.close("server shutdown")
            ch.cancel_tasks()
        await asyncio.gather(*(ch.aclose() for ch in channels), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        for srv in self._also:
            await srv.wait_closed()
        log.info("%s on port %d shut down", self.name, self._port)

    async def __aenter__(self) -> RemotingServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # --- connections ----------------------------------------------------------------------
    def _new_channel(self) -> Channel:
        return self._channel_class(self._table, max_frame_bytes=self._max_frame_bytes, budget=self._budget,
                       write_high_water=self._write_high_water, on_made=self._on_accept, warnings=self._warn,
                       frames=self._frames, keep_large_buffer=True)

    # --- TLS: our own accept, a peek at the first byte, then TLS or plaintext --------------------
    def _listen_tls(self, loop: asyncio.AbstractEventLoop, host: str, port: int, backlog: int) -> socket.socket:
        listener = socket.create_server((host, port), backlog=backlog, reuse_port=False,
                                        family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        listener.setblocking(False)
        self._listener = listener
        loop.add_reader(listener.fileno(), self._accept_ready, loop)
        return listener

    def _accept_ready(self, loop: asyncio.AbstractEventLoop) -> None:
        listener = cast(socket.socket, self._listener)
        for _ in range(_ACCEPTS_PER_WAKEUP):
            try:
                sock, _addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # EMFILE and friends: pause accepting for a while, as asyncio does
                self._warn.warning("accept", "%s: accept failed: %s; retrying in 1 s", self.name, e)
                loop.remove_reader(listener.fileno())
                loop.call_later(1.0, self._resume_accepting, loop)
                return
            sock.setblocking(False)
            self._sniffing.add(sock)
            timer = loop.call_later(SNIFF_TIMEOUT_S, self._drop, sock)
            loop.add_reader(sock.fileno(), self._first_byte, loop, sock, timer)

    def _resume_accepting(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self._stopped and self._listener is not None:
            loop.add_reader(self._listener.fileno(), self._accept_ready, loop)

    def _drop(self, sock: socket.socket) -> None:
        if sock in self._sniffing:
            self._sniffing.discard(sock)
            try:
                asyncio.get_running_loop().remove_reader(sock.fileno())
            except (ValueError, OSError):
                pass
            sock.close()

    def _first_byte(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, timer: asyncio.TimerHandle) -> None:
        try:
            head = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            head = b""
        timer.cancel()
        loop.remove_reader(sock.fileno())
        self._sniffing.discard(sock)
        tls = cast(TlsServerConfig, self._tls)
        if not head or (tls.mode is TlsMode.ENFORCING and head[0] != TLS_HANDSHAKE_BYTE):
            if head:
                self._warn.warning("plaintext", "%s: closing a plaintext connection from %s: tls.server.mode is "
                                   "enforcing", self.name, _peer(sock))
            sock.close()
            return
        loop.create_task(self._serve_accepted(loop, sock, head[0] == TLS_HANDSHAKE_BYTE))

    async def _serve_accepted(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, encrypted: bool) -> None:
        tls = cast(TlsServerConfig, self._tls)
        peer = _peer(sock)
        try:
            if encrypted:
                await loop.connect_accepted_socket(self._new_channel, sock, ssl=tls.context,
                                                   ssl_handshake_timeout=tls.handshake_timeout_s)
            else:
                await loop.connect_accepted_socket(self._new_channel, sock)
        except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError) as e:
            log.info("%s: TLS handshake with %s failed: %s", self.name, peer, e or type(e).__name__)
            sock.close()

    def _on_accept(self, channel: Channel) -> None:
        if self._stopped:
            channel.close("server shutdown")
            return
        if self.fd_ceiling is not None and self._over_fd_ceiling(channel):
            return
        if not self.connections.admit():
            channel.close("connection cap")
            return
        channel.add_close_listener(self._release_connection)
        self._channels.add(channel)
        channel.add_close_listener(self._channels.discard)
        for listener in self._close_listeners:
            channel.add_close_listener(listener)
        log.debug("%s: accepted %s", self.name, channel)
        for listener in self._connect_listeners:
            _call_listener(listener, channel)

    def _release_connection(self, channel: Channel) -> None:
        self.connections.release()

    def _over_fd_ceiling(self, channel: Channel) -> bool:
        """Close ``channel`` when its descriptor is one of the reserve. Descriptors are handed
        out lowest first, so a connection numbered at the ceiling means every number below
        is taken: connections never hold one of the reserved numbers, which stay for the
        store (a new file per roll or queue) whatever the peers do."""
        sock = channel.transport.get_extra_info("socket") if channel.transport is not None else None
        fd = sock.fileno() if sock is not None else -1
        if fd < cast(int, self.fd_ceiling):
            return False
        self.refused_for_fds += 1
        self._warn.warning("fd reserve", "%s: refusing connections: %d file descriptors in use, the last %d are "
                           "kept for the store (raise RLIMIT_NOFILE: ulimit -n)", self.name, fd + 1,
                           fd_limit() - cast(int, self.fd_ceiling))
        channel.close("descriptor reserve")
        return True

    async def _sweep_idle(self) -> None:
        """Every few seconds: close channels idle for ``idle_timeout_s`` (no traffic and
        nothing in flight), waiting that long for the frame budget, or receiving a frame
        slower than ``min_frame_bytes_per_s``; give quiet channels' receive rings back."""
        assert self._idle_timeout_s is not None
        interval = min(_SWEEP_MAX_INTERVAL_S, self._idle_timeout_s / 4)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for ch in list(self._channels):
                self._sweep_one(ch, now, interval)

    def _sweep_one(self, ch: Channel, now: float, interval: float) -> None:
        idle = self._idle_timeout_s
        assert idle is not None
        quiet = now - ch.last_activity
        if quiet > idle and (ch.inflight_count == 0 or ch.receiving):
            # a request in flight (a parked long poll) keeps a quiet connection open, but not
            # one whose peer started a frame and stopped sending
            log.info("%s: closing idle %s (%.1f s without traffic)", self.name, ch, quiet)
            ch.close("idle")
        elif ch.budget_wait_since is not None and now - ch.budget_wait_since > idle:
            # it waits for other connections' large frames to complete, not for its peer,
            # so it is quiet; its peer gets the same treatment as any idle one
            log.info("%s: closing %s, waiting %.1f s for the frame budget", self.name, ch, now - ch.budget_wait_since)
            ch.close("idle")
        elif self._min_frame_rate and (rate := ch.frame_rate(now)) is not None \
                and rate[0] > self._slow_frame_grace_s and rate[1] < self._min_frame_rate:
            self._warn.warning(f"slow frame {ch.remote_host}", "%s: closing %s: a frame has been arriving for "
                               "%.0f s at %.1f bytes/s, below the minimum %d (serverFrameMinBytesPerSecond)",
                               self.name, ch, rate[0], rate[1], self._min_frame_rate)
            ch.close("slow frame")
        elif quiet >= interval:
            ch.trim_buffers()


def _peer(sock: socket.socket) -> str:
    try:
        return format_addr(sock.getpeername())
    except OSError:
        return "?"


def fd_limit() -> int:
    """The process's soft RLIMIT_NOFILE."""
    import resource

    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def fd_ceiling() -> int:
    """The first descriptor number a connection may not hold: the soft limit less the reserve."""
    limit = fd_limit()
    return limit - max(MIN_FD_RESERVE, limit // 8)


def _behind(hook: RequestHook, processor: Processor) -> Processor:
    """``processor`` run only when ``hook(channel, request)`` returns None; otherwise the
    hook's answer is the response. Keeps the processor's kind (coroutine or plain)."""
    if inspect.iscoroutinefunction(processor):
        async def checked_async(channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
            refused = hook(channel, request)
            return refused if refused is not None else await processor(channel, request)
        return checked_async

    def checked(channel: Channel, request: RemotingCommand) -> ProcessorResult | Awaitable[ProcessorResult]:
        refused = hook(channel, request)
        return refused if refused is not None else processor(channel, request)
    return checked


def _call_listener(listener: Callable[[Channel], Any], channel: Channel) -> None:
    try:
        result = listener(channel)
    except Exception:  # one faulty listener must not refuse the connection
        log.exception("connect listener %r failed for %s", listener, channel)
        return
    if inspect.isawaitable(result):
        asyncio.ensure_future(result).add_done_callback(_log_failure)


def _log_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("async connect listener failed", exc_info=task.exception())
