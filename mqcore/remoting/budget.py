"""One listening port's connection budget: how many connections it holds at once, and how long
a connection has to send a complete request head.

Every port of a broker process takes its limits from this one type (issue 36: "one resource
budget for every listening port"): the remoting port and the name server's (``RemotingServer``,
whose frames have their own deadline, the minimum frame rate), the dashboard
(``mqcore.dashboard.guard``), the Prometheus port (``mqcore.broker.metrics``) and the gRPC
endpoint (grpcio's connection quota and handshake deadline, set from it). The bytes a connection
may buffer are bounded per protocol, next to the code that buffers them (``FrameBudget`` and the
write high-water mark for remoting, the header size limits for HTTP, ``OutboundBudget`` and the
message size limit for gRPC).

A connection over the cap is closed at accept, with one log line per interval however many are
refused: a flood of connections must not flood the log. Not thread-safe: one event loop owns it.
"""
from __future__ import annotations

import logging

from mqcore.errors import ConfigError
from mqcore.remoting.ratelimit import RateLimitedLog

__all__ = ["ConnectionBudget", "HTTP_MAX_CONNECTIONS", "HEADER_TIMEOUT_S"]

log = logging.getLogger(__name__)

#: open connections an HTTP port (dashboard, metrics) holds at once by default
HTTP_MAX_CONNECTIONS = 256
#: seconds a connection has by default to send a request's line and headers
HEADER_TIMEOUT_S = 10.0


class ConnectionBudget:
    """At most ``max_connections`` open at once (0: no cap of its own - a remoting port is then
    bounded by the descriptor reserve alone); ``header_timeout_s`` for a request head."""

    def __init__(self, name: str, max_connections: int, header_timeout_s: float = HEADER_TIMEOUT_S, *,
                 key: str = "", logger: logging.Logger | None = None) -> None:
        if max_connections < 0:
            raise ConfigError(f"{name}: the connection cap must be >= 0 (0: none), got {max_connections}")
        if header_timeout_s <= 0:
            raise ConfigError(f"{name}: the header timeout must be > 0 s, got {header_timeout_s}")
        self.name = name
        self.max_connections = max_connections
        self.header_timeout_s = header_timeout_s
        #: the configuration key that raises the cap, named in the refusal's log line
        self.key = key
        self.open_connections = 0
        #: connections closed at accept because the cap was reached (for metrics and tests)
        self.refused = 0
        self._warn = RateLimitedLog(logger or log, 5.0)

    def admit(self) -> bool:
        """Count one more connection, or False (count it refused) when the cap is reached."""
        if self.max_connections and self.open_connections >= self.max_connections:
            self.refused += 1
            self.note("refused a connection: %d open, the cap%s", self.max_connections,
                      f" ({self.key})" if self.key else "")
            return False
        self.open_connections += 1
        return True

    def release(self) -> None:
        """An admitted connection closed."""
        self.open_connections -= 1

    def note(self, fmt: str, *args: object) -> None:
        """A log line at most every 5 s per kind of line (its format)."""
        self._warn.warning(fmt, "%s: " + fmt, self.name, *args)
