"""What keeps a web page the user opens, or a peer that never finishes a request, from using the
dashboard against its own broker.

- ``HostAllowList``: a browser sends the name it looked up in ``Host``. A page that rebinds its
  own name to 127.0.0.1 (DNS rebinding) reaches a loopback dashboard with *its* name there, and
  the Origin check passes because the Origin is that same name. Only the names the dashboard is
  known by are served: the bound address, the loopback names when bound to loopback or to every
  address, this host's names and addresses when bound to every address, and the names an
  operator lists in ``dashboardAllowedHosts``.
- ``ConnectionBudget`` (``mqcore.remoting.budget``, every port's): aiohttp closes an idle keep-alive connection but not one that sends half a
  request and stops; 1,100 of them took every descriptor of a broker at a 1,024 limit. Each
  connection gets a deadline to finish its request line and headers (and the request a
  deadline as a whole, in the middleware), and the number of open connections is capped: one
  over the cap is closed at once, with a log line at most every few seconds.
- ``SECURITY_HEADERS``: no other site may frame the dashboard (a framed page plus one click
  deleted a topic).
"""
from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from mqcore.remoting import budget
from mqcore.remoting.budget import ConnectionBudget

log = logging.getLogger(__name__)

#: on every response: no framing by another origin, no content sniffing
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

#: seconds a connection has to send a request's line and headers (dashboardHeaderTimeoutSeconds)
HEADER_TIMEOUT_S = budget.HEADER_TIMEOUT_S
#: seconds a request has as a whole (body read and the page answered)
REQUEST_TIMEOUT_S = 30.0
#: open connections at once; one more is closed at accept (httpMaxConnections)
MAX_CONNECTIONS = budget.HTTP_MAX_CONNECTIONS
#: a request line longer than this is answered 400 (static names of 5,000 characters made the
#: file system refuse the lookup, and the page failed with a traceback)
MAX_PATH_CHARS = 2048

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "ip6-localhost")


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::")


def is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _this_hosts_names() -> set[str]:
    """The names and addresses this machine answers to (for a dashboard bound to every address)."""
    names = {socket.gethostname(), socket.getfqdn()}
    for name in list(names):
        try:
            for info in socket.getaddrinfo(name, None):
                names.add(str(info[4][0]))
        except OSError:
            pass
    try:
        import psutil  # the broker's own dependency: every interface's address
        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family in (socket.AF_INET, socket.AF_INET6):
                    names.add(a.address.split("%")[0])
    except Exception:  # noqa: BLE001 - the names above still hold
        pass
    return {n.lower() for n in names if n}


class HostAllowList:
    """The host names (without port) a request's ``Host`` may carry."""

    def __init__(self, bound_host: str, extra: Iterable[str] = ()) -> None:
        allowed = {h.strip().lower().strip("[]") for h in extra if h.strip()}
        host = bound_host.strip().lower().strip("[]")
        if is_wildcard(host):
            allowed.update(_LOOPBACK_NAMES)
            allowed.update(_this_hosts_names())
        else:
            allowed.add(host)
            if is_loopback(host):
                allowed.update(_LOOPBACK_NAMES)
        self.allowed = frozenset(allowed)

    def allows(self, host_header: str | None) -> bool:
        if not host_header:
            return False  # HTTP/1.1 requires Host; a request without one is no browser's
        h = host_header.strip().lower()
        if h.startswith("["):  # [::1]:8080
            name = h[1:h.find("]")] if "]" in h else h[1:]
        elif h.count(":") == 1:
            name = h.rsplit(":", 1)[0]
        else:
            name = h
        return name in self.allowed


class GuardedHandler(RequestHandler):
    """aiohttp's connection handler with a header deadline and a place in the connection budget."""

    def __init__(self, guard: ConnectionBudget, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard = guard
        self._deadline: asyncio.TimerHandle | None = None
        self._busy = False
        self._counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._guard.admit():
            transport.close()
            return
        self._counted = True
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        if self._counted:
            self._counted = False
            self._guard.release()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self._busy and self._deadline is None:
            self._arm()  # the first bytes of the next request on a kept-alive connection
        super().data_received(data)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """A request aiohttp could not parse (a line or header too long, a bad method or
        Content-Length, bytes that are not HTTP) is the peer's error: one short line per few
        seconds, not a traceback per request (10^5 fuzzed requests wrote thousands)."""
        exc = kw.get("exc_info")
        if isinstance(exc, HttpProcessingError):
            self._guard.note("refused a malformed HTTP request: %s", (exc.message or str(exc)).splitlines()[0][:120])
            return
        super().log_exception(*args, **kw)

    # the middleware tells when a request's headers are in and when its answer went out
    def request_started(self) -> None:
        self._busy = True
        self._disarm()

    def request_done(self) -> None:
        self._busy = False

    def _arm(self) -> None:
        self._disarm()
        self._deadline = asyncio.get_running_loop().call_later(self._guard.header_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self._busy and self.transport is not None:
            self._guard.note("closed a connection that did not finish its request headers in %.0f s",
                             self._guard.header_timeout_s)
            self.transport.close()


def protocol_factory(budget: ConnectionBudget, server: web.Server) -> Callable[[], RequestHandler]:
    """What ``loop.create_server`` takes: aiohttp's connection handler for ``server``, guarded by ``budget``."""
    loop = asyncio.get_running_loop()
    # the runner's handler settings (access_log=None among them) as aiohttp's own factory passes them:
    # without them every request wrote an access line to broker.log
    kwargs = dict(getattr(server, "_kwargs", {}))
    return lambda: GuardedHandler(budget, server, loop=loop, **kwargs)
