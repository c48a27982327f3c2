"""asyncio remoting client with one pooled connection per address, plus a sync facade.

Usage (async)::

    client = RemotingClient()
    client.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_ids_changed)
    resp = await client.invoke("127.0.0.1:10911", create_request(RequestCode.HEART_BEAT, body=b"{}"), 3000)
    await client.shutdown()

Usage (blocking, e.g. scripts or the broker's name-server registration thread)::

    with SyncRemotingClient() as client:
        resp = client.invoke("127.0.0.1:9876", cmd, timeout_ms=3000)

Like Java's ``NettyRemotingClient`` there is one connection per address, opened on
first use and reused; a closed connection is dropped from the pool and the next call
reconnects. Requests the peer sends on that connection (broker -> client) go to the
registered processors and are answered on the same connection.

Errors: :class:`RemotingConnectError` (cannot connect), :class:`RemotingTimeoutError`
(no answer within ``timeout_ms``, connecting included), :class:`RemotingSendRequestError`
(write failed), :class:`RemotingError` (connection closed while waiting).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import ssl
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from mqcore.errors import (
    ClosedError,
    ConfigError,
    IllegalArgumentError,
    RemotingConnectError,
    RemotingTimeoutError,
)
from mqcore.remoting.blocking import BlockingPool, FieldsSigner
from mqcore.remoting.channel import Channel, parse_addr
from mqcore.remoting.codes import DEFAULT_MAX_FRAME_BYTES
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.eventloop import new_event_loop
from mqcore.remoting.framing import FrameBudget
from mqcore.remoting.dispatch import DEFAULT_MAX_INFLIGHT, Processor, ProcessorRegistry, ProcessorTable

log = logging.getLogger(__name__)

__all__ = ["RemotingClient", "SyncRemotingClient", "new_event_loop"]

T = TypeVar("T")


class RemotingClient(ProcessorRegistry):
    """Async client; all methods must be called on one event loop."""

    def __init__(
        self,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        connect_timeout_ms: float = 3000,
        max_inflight_per_connection: int = DEFAULT_MAX_INFLIGHT,
        name: str = "remoting-client",
        before_request: Callable[[RemotingCommand], None] | None = None,
        tls: ssl.SSLContext | None = None,
        sign_fields: FieldsSigner | None = None,
    ) -> None:
        """``tls``: connect over TLS with this context (``mqcore.remoting.tls.client_context``);
        the blocking pool (``invoke_blocking``) then refuses: its kernels write plaintext.
        ``sign_fields``: what ``before_request`` adds, for a request the blocking pool's
        ``call`` kernel writes from its fields (``SessionCredentials.sign_fields``)."""
        if connect_timeout_ms <= 0:
            raise ConfigError(f"connect_timeout_ms must be > 0, got {connect_timeout_ms}")
        self.name = name
        #: runs on every request just before it is sent (Java's client ``RPCHook``): the ACL
        #: signer (``mqcore.acl.SessionCredentials.sign``) when credentials are given
        self.before_request = before_request
        self._max_frame_bytes = max_frame_bytes
        self._connect_timeout_ms = connect_timeout_ms
        self._table = ProcessorTable(max_inflight=max_inflight_per_connection)
        self._budget = FrameBudget()
        self._channels: dict[str, Channel] = {}
        self._connecting: dict[str, asyncio.Task[Channel]] = {}
        self._close_listeners: list[Callable[[str, Channel], Any]] = []
        #: blocking sockets for callers' threads (``invoke_blocking``), apart from the loop's channels
        self.blocking = BlockingPool(max_frame_bytes=max_frame_bytes, connect_timeout_ms=connect_timeout_ms,
                                     name=f"{name} (blocking)",
                                     finalize=self._finalize_blocking if before_request is not None else None,
                                     sign_fields=sign_fields if before_request is not None else None)
        self._closed = False
        self.tls = tls

    def _finalize_blocking(self, addr: str, cmd: RemotingCommand) -> None:
        """``before_request`` on the blocking path too (a signed client signs every request)."""
        if self.before_request is not None:
            self.before_request(cmd)

    # --- configuration ------------------------------------------------------------------
    def add_close_listener(self, listener: Callable[[str, Channel], Any]) -> None:
        """``listener(addr, channel)`` runs when a pooled connection closes."""
        self._close_listeners.append(listener)

    # --- connections --------------------------------------------------------------------
    async def get_channel(self, addr: str, timeout_ms: float | None = None) -> Channel:
        """The pooled connection to ``addr``, connecting if needed (concurrent callers
        share one connect attempt)."""
        if self._closed:
            raise ClosedError(f"{self.name} is shut down")
        channel = self._channels.get(addr)
        if channel is not None and channel.is_active:
            return channel
        task = self._connecting.get(addr)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._connect(addr), name=f"connect {addr}")
            self._connecting[addr] = task
            task.add_done_callback(functools.partial(self._connect_done, addr))
        limit_ms = self._connect_timeout_ms if timeout_ms is None else min(timeout_ms, self._connect_timeout_ms)
        try:
            return await asyncio.wait_for(asyncio.shield(task), limit_ms / 1000.0)
        except asyncio.TimeoutError:
            raise RemotingTimeoutError(f"connect to {addr} did not finish within {limit_ms} ms") from None

    def _connect_done(self, addr: str, task: asyncio.Task[Channel]) -> None:
        if self._connecting.get(addr) is task:
            del self._connecting[addr]
        if not task.cancelled():
            task.exception()  # mark retrieved: every waiter may have timed out already

    async def _connect(self, addr: str) -> Channel:
        try:
            host, port = parse_addr(addr)
        except ValueError as e:
            raise IllegalArgumentError(str(e)) from e
        loop = asyncio.get_running_loop()
        try:
            _transport, channel = await asyncio.wait_for(
                loop.create_connection(self._new_channel, host, port, ssl=self.tls,
                                       server_hostname=host if self.tls is not None else None),
                self._connect_timeout_ms / 1000.0
            )
        except asyncio.TimeoutError:
            raise RemotingConnectError(f"connect to {addr} timed out after {self._connect_timeout_ms} ms") from None
        except (OSError, ssl.SSLError) as e:
            raise RemotingConnectError(f"connect to {addr} failed: {e}") from e
        if self._closed:
            channel.close("client shutdown")
            raise ClosedError(f"{self.name} is shut down")
        channel.add_close_listener(functools.partial(self._on_channel_closed, addr))
        self._channels[addr] = channel
        log.debug("%s: connected %s", self.name, channel)
        return channel

    def _new_channel(self) -> Channel:
        # a client's large frames (pull answers) come one after the other: reuse their buffer
        return Channel(self._table, max_frame_bytes=self._max_frame_bytes, budget=self._budget,
                       keep_large_buffer=True)

    def _on_channel_closed(self, addr: str, channel: Channel) -> None:
        if self._channels.get(addr) is channel:
            del self._channels[addr]
        for listener in self._close_listeners:
            try:
                listener(addr, channel)
            except Exception:  # one faulty listener must not skip the others
                log.exception("%s: close listener %r failed for %s", self.name, listener, addr)

    def connected(self, addr: str) -> Channel | None:
        """The pooled, open connection to ``addr``, or None (safe from any thread: a dict read)."""
        channel = self._channels.get(addr)
        return channel if channel is not None and channel.is_active else None

    async def close_channel(self, addr: str) -> None:
        channel = self._channels.pop(addr, None)
        if channel is not None:
            await channel.aclose()

    # --- requests -----------------------------------------------------------------------
    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: float = 3000) -> RemotingCommand:
        """Send ``cmd`` to ``addr`` and return the response (any response code: the
        caller maps non-SUCCESS codes to :class:`~mqcore.errors.BrokerError`)."""
        if self.before_request is not None:
            self.before_request(cmd)
        channel = self._channels.get(addr)
        if channel is not None and channel.is_active:  # the usual case: no connect, no deadline split
            return await channel.invoke(cmd, timeout_ms)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        channel = await self.get_channel(addr, timeout_ms)
        remaining_ms = (deadline - loop.time()) * 1000.0
        if remaining_ms <= 0:
            raise RemotingTimeoutError(f"connecting to {addr} used up the {timeout_ms} ms timeout")
        return await channel.invoke(cmd, remaining_ms)

    async def invoke_decoded(self, addr: str, cmd: RemotingCommand, timeout_ms: float,
                             decode: Callable[..., T]) -> T:
        """``invoke``, the answer read by ``decode(answer, view, start, end)`` straight from the
        connection's receive buffer (see ``Channel.invoke_decoded``: ``answer`` is its decoded
        header, ``view[start:end]`` its body, valid only during the call); returns what
        ``decode`` returns and raises what it raises, plus ``invoke``'s errors."""
        if self.before_request is not None:
            self.before_request(cmd)
        channel = self._channels.get(addr)
        if channel is not None and channel.is_active:
            return await channel.invoke_decoded(cmd, timeout_ms, decode)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000.0
        channel = await self.get_channel(addr, timeout_ms)
        remaining_ms = (deadline - loop.time()) * 1000.0
        if remaining_ms <= 0:
            raise RemotingTimeoutError(f"connecting to {addr} used up the {timeout_ms} ms timeout")
        return await channel.invoke_decoded(cmd, remaining_ms, decode)

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand, timeout_ms: float = 3000) -> None:
        """Send ``cmd`` flagged oneway; returns once written."""
        if self.before_request is not None:
            self.before_request(cmd)
        channel = await self.get_channel(addr, timeout_ms)
        await channel.send_request_oneway(cmd, timeout_ms)

    def invoke_blocking(self, addr: str, cmd: RemotingCommand, timeout_ms: float = 3000) -> RemotingCommand:
        """``invoke`` on the calling thread over a blocking socket, without the event loop
        (:mod:`mqcore.remoting.blocking`); from any thread but the loop's (it blocks). Same
        answers and errors as ``invoke``. Requests the peer sends to us, and oneway requests,
        stay on the loop's channels. A per-request hook (signing, extra ext fields) applies
        on this path through the pool's ``finalize``, called right before encoding."""
        if self.tls is not None:
            raise ConfigError(f"{self.name}: invoke_blocking speaks plaintext only; this client uses TLS "
                              "(call invoke on the loop)")
        return self.blocking.invoke(addr, cmd, timeout_ms)

    async def shutdown(self) -> None:
        """Close every connection; pending invokes fail. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.blocking.close()
        for task in list(self._connecting.values()):
            task.cancel()
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            channel.close("client shutdown")
            channel.cancel_tasks()
        await asyncio.gather(*(ch.aclose() for ch in channels), return_exceptions=True)

    async def __aenter__(self) -> RemotingClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()


class SyncRemotingClient:
    """Blocking facade over :class:`RemotingClient`, running its own event loop in a
    daemon thread. Thread-safe: any number of threads may call ``invoke`` at once.
    Processors registered here run on that private loop thread."""

    _SAFETY_MARGIN_S = 5.0  # the async timeout fires first; this only guards a stuck loop

    def __init__(self, **client_kwargs: Any) -> None:
        self._loop = new_event_loop()
        self._client = RemotingClient(**client_kwargs)
        self._thread = threading.Thread(target=self._run_loop, name=f"{self._client.name}-loop", daemon=True)
        self._closed = False
        self._thread.start()

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def client(self) -> RemotingClient:
        """The wrapped async client (use only on :attr:`loop`)."""
        return self._client

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        if self._closed:
            coro.close()
            raise ClosedError(f"{self._client.name} is shut down")
        if threading.current_thread() is self._thread:
            coro.close()
            raise IllegalArgumentError("SyncRemotingClient called from its own loop thread; use .client instead")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RemotingTimeoutError(f"event loop did not answer within {timeout_s} s") from None

    def register_processor(
        self, code: int, processor: Processor, *, executor: concurrent.futures.Executor | None = None
    ) -> None:
        self._loop.call_soon_threadsafe(lambda: self._client.register_processor(code, processor, executor=executor))

    def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: float = 3000) -> RemotingCommand:
        channel = self._client.connected(addr)
        if channel is None or self._closed or threading.current_thread() is self._thread:
            return self._call(self._client.invoke(addr, cmd, timeout_ms), timeout_ms / 1000.0 + self._SAFETY_MARGIN_S)
        return self._invoke_connected(channel, cmd, timeout_ms)

    def _invoke_connected(self, channel: Channel, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        """The usual case, a pooled connection: one callback on the loop writes the request
        and a lock wakes the caller at the answer, with no task and no coroutine (half
        of a sync round trip used to go into the hand-off between the two threads)."""
        if self._client.before_request is not None:
            self._client.before_request(cmd)
        done = threading.Lock()
        done.acquire()
        outcome: list[asyncio.Future[RemotingCommand]] = []

        def settle(future: asyncio.Future[RemotingCommand]) -> None:
            outcome.append(future)
            done.release()

        def start() -> None:
            try:
                channel.invoke_future(cmd, timeout_ms).add_done_callback(settle)
            except BaseException as e:  # closed meanwhile: report to the caller
                failed: asyncio.Future[RemotingCommand] = self._loop.create_future()
                failed.set_exception(e)
                settle(failed)

        self._loop.call_soon_threadsafe(start)
        if not done.acquire(timeout=timeout_ms / 1000.0 + self._SAFETY_MARGIN_S):
            raise RemotingTimeoutError(f"event loop did not answer within {timeout_ms} ms")
        future = outcome[0]
        if future.cancelled():
            raise RemotingTimeoutError(f"request to {channel.remote_addr} was cancelled")
        return future.result()

    def invoke_oneway(self, addr: str, cmd: RemotingCommand, timeout_ms: float = 3000) -> None:
        self._call(self._client.invoke_oneway(addr, cmd, timeout_ms), timeout_ms / 1000.0 + self._SAFETY_MARGIN_S)

    def close(self, timeout_s: float = 5.0) -> None:
        """Shut the client down and stop the loop thread. Idempotent."""
        if self._closed:
            return
        try:
            self._call(self._client.shutdown(), timeout_s)
        finally:
            self._closed = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> SyncRemotingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
