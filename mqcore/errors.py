"""The one error hierarchy of mqcore.

Leaf module: imports nothing from the package, so every layer can use it.

Expected outcomes (a pull that found nothing, a put refused because the disk is
full) are *status enums* on result objects, not exceptions. Exceptions are for
misuse, corruption, I/O failures and closed resources. Every class says whether
retrying the same operation may succeed (``retriable``).
"""
from __future__ import annotations


class MQError(Exception):
    """Base of every error raised by mqcore."""

    retriable: bool = False


# --- configuration and misuse ------------------------------------------------
class ConfigError(MQError, ValueError):
    """A configuration value is missing, malformed or out of range."""


class SettingTypeError(ConfigError, TypeError):
    """A setting was given a value of the wrong type (``send_msg_timeout_ms="3000"``); names the
    setting, the type it takes and the value given. Also a ``TypeError``, as Python's own are."""


class FieldConfigError(ConfigError):
    """A value of one config field is out of range. ``field`` is the Python field, so
    ``mqcore.broker.conf`` can restate the error under the RocketMQ key the user wrote."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field} {problem}")
        self.field = field
        self.problem = problem


class AclConfigError(ConfigError):
    """A ``plain_acl.yml`` that cannot be used (bad YAML, a bad permission, address pattern
    or account): refused at start, and at reload the previous good file stays in force."""


class IllegalArgumentError(MQError, ValueError):
    """An argument is invalid (bad topic name, empty body, oversized message...)."""


class FilterExpressionError(IllegalArgumentError):
    """A subscription expression (SQL92) that does not parse; the message says where."""


class ClosedError(MQError):
    """The resource (store, file, connection, client) is already shut down."""


# --- store -------------------------------------------------------------------
class StoreError(MQError):
    """Base for store failures."""


class StoreLockedError(StoreError):
    """Another process holds the store directory's ``lock`` file."""


class CorruptFileError(StoreError):
    """A store file has bytes that cannot be what the format allows."""


class RecordDecodeError(CorruptFileError):
    """A commitlog record (or wire batch item) is malformed."""


class StoreIOError(StoreError, OSError):
    """An operating-system level I/O failure in the store (disk full, EIO...)."""

    retriable = True


class DiskFullError(StoreIOError):
    """A new store file cannot be created or its blocks reserved: the file system is full
    (or above ``diskSpaceWarningLevelRatio``). Puts are refused, reads keep working."""


# --- protocol and network ----------------------------------------------------
class ProtocolError(MQError):
    """A frame or header on the wire violates the remoting protocol."""


class FrameTooLargeError(ProtocolError):
    """A frame announces more bytes than the configured maximum."""


class RemotingError(MQError):
    """Network-level failure talking to a peer."""

    retriable = True


class RemotingConnectError(RemotingError):
    """Could not connect to the peer."""


class RemotingTimeoutError(RemotingError):
    """The peer did not answer in time."""


class RemotingSendRequestError(RemotingError):
    """Writing the request to the connection failed."""


class BrokerError(MQError):
    """The broker or name server answered with a non-success response code."""

    #: response codes a producer retries on another broker (client-defaults.md §1)
    RETRIABLE_CODES = frozenset({1, 14, 16, 17, 204, 205})

    def __init__(self, code: int, remark: str | None = None, addr: str | None = None):
        self.code = int(code)
        self.remark = remark or ""
        self.addr = addr
        where = f" from {addr}" if addr else ""
        super().__init__(f"broker answered code {self.code}{where}: {self.remark}")

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        return self.code in self.RETRIABLE_CODES


class ClientError(MQError):
    """Client-side failure that is not a network or broker answer."""


class NoRouteError(ClientError):
    """No route (or no writable queue) is known for a topic."""

    retriable = True


# --- client (mqcore.client) --------------------------------------------------------
class IllegalStateError(ClientError):
    """The client is not in a state that allows the call (not started, started twice,
    a blocking call made from the client's own event-loop thread...)."""


class SendTimeoutError(RemotingTimeoutError):
    """A send used up its whole ``send_msg_timeout_ms`` budget (all attempts included)."""


class MessageDecodeError(ClientError):
    """A received message body cannot be decoded (unknown compression, corrupt data)."""
