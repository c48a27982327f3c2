"""TLS on the 5.x endpoint's port, as RocketMQ's proxy serves it.

The proxy has three modes (``tls.server.mode``): ``disabled`` (plaintext only), ``enforcing``
(TLS only) and ``permissive``, its default, where one port serves both: it looks at the first
5 bytes of a connection (a TLS record header: content type 20-23, major version 3) and hands
the connection to its TLS or plaintext handler. Its certificate is a self-signed one made at
start-up (``tlsTestModeEnable``, the default) unless ``tlsCertPath``/``tlsKeyPath`` name one.

grpcio cannot pick the protocol per connection on one port, so in permissive mode the
endpoint's port is served by :class:`PermissiveFront`: it reads the first bytes, connects to
the gRPC server's plaintext or TLS listener on 127.0.0.1 and relays bytes both ways. Disabled
and enforcing modes bind grpcio to the port directly (no relay). The relay remembers which
client each of its loopback connections carries (:meth:`PermissiveFront.client_of`), so born
hosts and ACL white addresses see the real client.

The self-signed certificate is written once into ``<store>/grpc-tls/`` and reused after a
restart (so a client that pinned it keeps working).
"""
from __future__ import annotations

import asyncio
import enum
import logging
from typing import Any, cast

from mqcore.errors import ConfigError
from mqcore.remoting.budget import ConnectionBudget
from mqcore.remoting.tls import SELF_SIGNED_DIR, load_or_make_certificate, make_self_signed

__all__ = ["TlsMode", "looks_like_tls", "load_or_make_certificate", "make_self_signed", "SELF_SIGNED_DIR",
           "PermissiveFront"]

log = logging.getLogger(__name__)

#: bytes a TLS record header has; the decision waits for them, as the proxy's does
SNIFF_BYTES = 5
#: a connection that sends fewer bytes than that for this long is closed
SNIFF_TIMEOUT_S = 10.0
#: the relay stops reading one side while the other side's unsent bytes exceed this
_HIGH_WATER = 1 << 20


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"

    @classmethod
    def parse(cls, text: str) -> "TlsMode":
        try:
            return cls(text.strip().lower())
        except ValueError:
            raise ConfigError(f"grpcServerTlsMode {text!r} is not disabled, permissive or enforcing") from None


def looks_like_tls(head: bytes) -> bool:
    """A TLS record header (what Netty's ``SslHandler.isEncrypted`` accepts for TLS): a
    content type 20-23 (handshake 22 for a ClientHello) and major version 3. An HTTP/2
    client starts with ``PRI * HTTP/2.0``, which never matches."""
    return len(head) >= 3 and 20 <= head[0] <= 23 and head[1] == 3


class _Side(asyncio.Protocol):
    """One end of a relayed connection: what it receives goes to ``other``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.other: "_Side | None" = None
        self.ended = False  # its peer sent EOF

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's
        self.transport.set_write_buffer_limits(high=_HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        _transport_of(self.other).write(data)

    def eof_received(self) -> bool | None:
        self.ended = True
        other = self.other
        if other is not None and other.transport is not None:
            if other.ended:
                # both directions are done: asyncio closes neither half-closed transport by
                # itself, so each finished relay would keep its two descriptors (and its place
                # in the port's connection budget) for ever
                other.transport.close()
                return False
            if other.transport.can_write_eof():
                other.transport.write_eof()
        return True  # keep the other direction open until it ends too

    def connection_lost(self, exc: Exception | None) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.close()

    # our peer cannot take more: stop reading the side that feeds it
    def pause_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.other is not None and self.other.transport is not None:
            self.other.transport.resume_reading()


def _transport_of(side: _Side | None) -> asyncio.Transport:
    """``side``'s transport where the relay's order guarantees it is connected (typed only: no
    check, so a broken order fails as it would without this)."""
    return cast(asyncio.Transport, cast(_Side, side).transport)


class _Client(_Side):
    """The client's connection to the public port: sniffed first, then relayed."""

    def __init__(self, front: "PermissiveFront") -> None:
        super().__init__()
        self.front = front
        self.head = bytearray()
        self.timer: asyncio.TimerHandle | None = None
        self.relaying = False
        self.counted = False  # admitted by the front's connection budget

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        budget = self.front.connections
        if budget is not None and not budget.admit():
            cast(asyncio.Transport, transport).abort()
            return
        self.counted = True
        super().connection_made(transport)
        timeout = budget.header_timeout_s if budget is not None else SNIFF_TIMEOUT_S
        self.timer = asyncio.get_running_loop().call_later(timeout, transport.close)

    def data_received(self, data: bytes) -> None:
        if self.relaying:
            _transport_of(self.other).write(data)
            return
        self.head += data
        if len(self.head) >= SNIFF_BYTES and self.other is None:
            cast(asyncio.TimerHandle, self.timer).cancel()  # set by connection_made
            _transport_of(self).pause_reading()  # until the backend connection is up
            self.other = _Backend(self)  # placeholder: connection_lost before the connect ends closes it
            asyncio.get_running_loop().create_task(self._connect(looks_like_tls(bytes(self.head[:SNIFF_BYTES]))))

    def eof_received(self) -> bool | None:
        if not self.relaying:
            _transport_of(self).close()
            return False
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        if self.counted:
            self.counted = False
            cast(ConnectionBudget, self.front.connections).release()
        super().connection_lost(exc)

    async def _connect(self, tls: bool) -> None:
        loop = asyncio.get_running_loop()
        backend = cast(_Backend, self.other)  # data_received set it
        port = self.front.tls_port if tls else self.front.plain_port
        own = _transport_of(self)
        try:
            await loop.create_connection(lambda: backend, "127.0.0.1", port)
        except OSError as e:
            log.warning("gRPC TLS front: cannot reach the %s listener: %s", "TLS" if tls else "plaintext", e)
            own.close()
            return
        if own.is_closing():
            _transport_of(backend).close()
            return
        local_port: int = _transport_of(backend).get_extra_info("sockname")[1]
        self.front.clients[local_port] = own.get_extra_info("peername")
        backend.local_port = local_port
        self.relaying = True
        _transport_of(backend).write(bytes(self.head))
        self.head = bytearray()
        own.resume_reading()


class _Backend(_Side):
    def __init__(self, client: _Client) -> None:
        super().__init__()
        self.other = client
        self.local_port: int | None = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.local_port is not None:
            cast(_Client, self.other).front.clients.pop(self.local_port, None)
        super().connection_lost(exc)


class PermissiveFront:
    """The public port in permissive mode: TLS and plaintext clients on one port."""

    def __init__(self, plain_port: int, tls_port: int, connections: ConnectionBudget | None = None) -> None:
        self.plain_port = plain_port
        self.tls_port = tls_port
        #: the port's cap on open client connections and the deadline for their first bytes
        self.connections = connections
        #: local port of a relay connection to the gRPC server -> the client's (host, port)
        self.clients: dict[int, tuple[Any, ...]] = {}
        self.server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: _Client(self), host, port, reuse_address=True)
        bound: int = self.server.sockets[0].getsockname()[1]
        return bound

    def client_of(self, local_port: int) -> tuple[str, int] | None:
        """The client a relay connection from ``local_port`` (the port grpc sees as the
        caller's) carries, or None for a connection that did not come through the relay."""
        addr = self.clients.get(local_port)
        return (addr[0], addr[1]) if addr else None

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
            self.server = None
