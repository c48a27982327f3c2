"""User-facing messages and results: ``Message``, ``MessageExt``, ``SendResult``,
``PullResult`` and the codecs between them and the wire.

``Message`` is what a producer sends (topic, body, tags, keys, properties).
``MessageExt`` is what a consumer receives: a ``Message`` plus where it is stored
(queue, offsets, hosts, times). Bodies compressed by a producer (sysFlag bit 0 and
compression-type bits 8-10, store-format §1.3) are decompressed when decoded, so
listeners always see the original bytes. Properties of received messages are parsed
lazily: most consumers never read more than the tags.

Objects here are plain values: not thread-safe, but safe to hand between threads.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from typing import Any, Sequence

from mqcore._compat import default_kernels
from mqcore.errors import IllegalArgumentError, MessageDecodeError, RecordDecodeError
from mqcore.format import layout as L
from mqcore.format.timer import PROP_TIMER_DELAY_MS, PROP_TIMER_DELAY_SEC, PROP_TIMER_DELIVER_MS
from mqcore.format.compression import (  # noqa: F401 (re-exported: the client's public names)
    COMPRESSION_LZ4,
    COMPRESSION_ZLIB,
    COMPRESSION_ZSTD,
    compress_body,
)
from mqcore.format.compression import decompress_body as _decompress_body
from mqcore.format.layout import PROPERTY_SEPARATOR
from mqcore.format.properties import format_pair
from mqcore.kernel_api import StoreKernels
from mqcore.message import (
    KEY_SEPARATOR,
    Prop,
    offset_msg_id,
    pack_host,
    string_to_properties,
)
from mqcore.netaddr import parse_host_port
from mqcore.remoting.bodies import MessageQueue

__all__ = [
    "Message",
    "MessageExt",
    "MessageQueue",
    "SendStatus",
    "SendResult",
    "PullStatus",
    "PullResult",
    "decode_messages",
    "encode_batch_body",
    "compress_body",
    "decompress_body",
    "SYSTEM_PROPERTIES",
]

_BODY_REPR_BYTES = 48
_WAIT = Prop.WAIT

#: property names a user may not set with ``put_user_property`` (``MessageConst.STRING_HASH_SET``)
SYSTEM_PROPERTIES = frozenset({
    Prop.KEYS, Prop.TAGS, Prop.WAIT, Prop.DELAY, Prop.RETRY_TOPIC, Prop.REAL_TOPIC, Prop.REAL_QID,
    Prop.TRAN_MSG, Prop.PGROUP, Prop.MIN_OFFSET, Prop.MAX_OFFSET, Prop.ORIGIN_MESSAGE_ID,
    Prop.RECONSUME_TIME, Prop.MSG_REGION, Prop.TRACE_ON, Prop.UNIQ_KEY, Prop.MAX_RECONSUME_TIMES,
    Prop.CONSUME_START_TIME, Prop.CLUSTER, Prop.TRAN_PREPARED_QUEUE_OFFSET, "BUYER_ID",
    "TRANSFER_FLAG", "CORRECTION_FLAG", "MQ2_FLAG", "TRANSACTION_CHECK_TIMES",
    "CHECK_IMMUNITY_TIME_IN_SECONDS", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
    "ARRIVE_TIME", "PUSH_REPLY_TIME", "MSG_TYPE",
})


def _as_body(body: bytes | bytearray | memoryview | str) -> bytes:
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    raise IllegalArgumentError(f"message body must be bytes or str, got {type(body).__name__}")


def _short_body(body: bytes) -> str:
    if len(body) <= _BODY_REPR_BYTES:
        return repr(body)
    return f"{body[:_BODY_REPR_BYTES]!r}... ({len(body)} bytes)"


class Message:
    """A message to send.

    ``Message("Orders", b'{"id": 1}', tags="created", keys=["order-1"])``. A ``str``
    body is encoded as UTF-8. ``properties`` holds everything else, including the
    system ones (``TAGS``, ``KEYS``, ``DELAY``, ``WAIT``, ``UNIQ_KEY``...); use
    :meth:`put_user_property` for your own.
    """

    __slots__ = ("topic", "body", "flag", "_properties", "transaction_id")

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str = b"",
        *,
        tags: str | None = None,
        keys: str | Iterable[str] | None = None,
        flag: int = 0,
        delay_level: int = 0,
        properties: dict[str, str] | None = None,
        wait_store_msg_ok: bool = True,
    ) -> None:
        # (the usual bytes body and int flag skip the conversions: a pipelining producer
        # makes one Message per send)
        self.topic = topic
        self.body = body if type(body) is bytes else _as_body(body)
        self.flag = flag if type(flag) is int else int(flag)
        self._properties: dict[str, str] = dict(properties) if properties else {}
        self.transaction_id: str | None = None
        if tags is not None:
            self.tags = tags
        if keys is not None:
            self.keys = keys
        if delay_level:
            self.delay_level = delay_level
        if _WAIT not in self._properties:
            self._properties[_WAIT] = "true" if wait_store_msg_ok else "false"

    # --- properties --------------------------------------------------------------------
    @property
    def properties(self) -> dict[str, str]:
        return self._properties

    def get_property(self, name: str, default: str | None = None) -> str | None:
        return self.properties.get(name, default)

    def put_user_property(self, name: str, value: str) -> None:
        """Set an application property; system names are refused."""
        if not name or value is None or value == "":
            raise IllegalArgumentError("a user property needs a non-empty name and value")
        if name in SYSTEM_PROPERTIES:
            raise IllegalArgumentError(f"{name!r} is a reserved system property name")
        self.properties[name] = str(value)

    def _set(self, name: str, value: str | None) -> None:
        if value is None or value == "":
            self.properties.pop(name, None)
        else:
            self.properties[name] = value

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @tags.setter
    def tags(self, value: str | None) -> None:
        self._set(Prop.TAGS, value)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(Prop.KEYS, "").split(KEY_SEPARATOR) if k]

    @keys.setter
    def keys(self, value: str | Iterable[str] | None) -> None:
        if value is None:
            self._set(Prop.KEYS, None)
        elif isinstance(value, str):
            self._set(Prop.KEYS, value)
        else:
            self._set(Prop.KEYS, KEY_SEPARATOR.join(str(k) for k in value))

    @property
    def delay_level(self) -> int:
        raw = self.properties.get(Prop.DELAY)
        try:
            return int(raw) if raw else 0
        except ValueError:
            return 0

    @delay_level.setter
    def delay_level(self, level: int) -> None:
        self._set(Prop.DELAY, str(int(level)) if level else None)

    # --- timer messages (RocketMQ 5: held by the broker until due, second precision) ------
    @property
    def deliver_time_ms(self) -> int | None:
        """The epoch ms the broker delivers the message at (``TIMER_DELIVER_MS``, Java 5.x
        ``setDeliverTimeMs``); None: at once. At most the broker's ``timerMaxDelaySec`` away."""
        return _int_or_none(self.properties.get(PROP_TIMER_DELIVER_MS))

    @deliver_time_ms.setter
    def deliver_time_ms(self, when_ms: int | None) -> None:
        self._set(PROP_TIMER_DELIVER_MS, None if when_ms is None else str(_non_negative(when_ms, "deliver_time_ms")))

    @property
    def delay_time_sec(self) -> int | None:
        """Deliver this many seconds after the broker stores it (``TIMER_DELAY_SEC``, Java 5.x
        ``setDelayTimeSec``)."""
        return _int_or_none(self.properties.get(PROP_TIMER_DELAY_SEC))

    @delay_time_sec.setter
    def delay_time_sec(self, seconds: int | None) -> None:
        self._set(PROP_TIMER_DELAY_SEC, None if seconds is None else str(_non_negative(seconds, "delay_time_sec")))

    @property
    def delay_time_ms(self) -> int | None:
        """Deliver this many ms after the broker stores it (``TIMER_DELAY_MS``, Java 5.x
        ``setDelayTimeMs``); the broker rounds to its timer precision (1 s)."""
        return _int_or_none(self.properties.get(PROP_TIMER_DELAY_MS))

    @delay_time_ms.setter
    def delay_time_ms(self, ms: int | None) -> None:
        self._set(PROP_TIMER_DELAY_MS, None if ms is None else str(_non_negative(ms, "delay_time_ms")))

    @property
    def wait_store_msg_ok(self) -> bool:
        return self.properties.get(Prop.WAIT, "true") != "false"

    @property
    def uniq_key(self) -> str | None:
        """The client-generated message id (``UNIQ_KEY``), set when the message is sent."""
        return self.properties.get(Prop.UNIQ_KEY)

    def __repr__(self) -> str:
        parts = [f"topic={self.topic!r}"]
        if self.tags:
            parts.append(f"tags={self.tags!r}")
        if self.keys:
            parts.append(f"keys={self.keys!r}")
        if self.delay_level:
            parts.append(f"delay_level={self.delay_level}")
        if self.flag:
            parts.append(f"flag={self.flag}")
        user = {k: v for k, v in self.properties.items() if k not in SYSTEM_PROPERTIES}
        if user:
            parts.append(f"properties={user!r}")
        parts.append(f"body={_short_body(self.body)}")
        return f"{type(self).__name__}({', '.join(parts)})"


class MessageExt(Message):
    """A received message: a :class:`Message` plus its storage coordinates.

    ``msg_id`` is what Java's ``MessageClientExt.getMsgId`` returns (the producer's
    ``UNIQ_KEY``, else the broker's offset id). For messages redelivered from
    ``%RETRY%<group>`` the topic is the original one again (``RETRY_TOPIC``).
    """

    __slots__ = ("queue_id", "queue_offset", "commitlog_offset", "store_size", "body_crc",
                 "sys_flag", "born_timestamp", "born_host", "store_timestamp", "store_host",
                 "reconsume_times", "prepared_transaction_offset", "broker_name", "_props_raw")

    def __init__(self, topic: str, body: bytes, props_raw: bytes, broker_name: str | None = None) -> None:
        # deliberately skips Message.__init__: no WAIT default, lazy properties
        self.topic = topic
        self.body = body
        self.flag = 0
        self._properties = None  # type: ignore[assignment]
        self._props_raw = props_raw
        self.transaction_id = None
        self.broker_name = broker_name
        self.queue_id = 0
        self.queue_offset = 0
        self.commitlog_offset = 0
        self.store_size = 0
        self.body_crc = 0
        self.sys_flag = 0
        self.born_timestamp = 0
        self.born_host = ""
        self.store_timestamp = 0
        self.store_host = ""
        self.reconsume_times = 0
        self.prepared_transaction_offset = 0

    @property
    def properties(self) -> dict[str, str]:
        props = self._properties
        if props is None:
            props = self._properties = string_to_properties(self._props_raw)
        return props

    def stamp_property(self, name: str, value: str) -> None:
        """``properties[name] = value`` without parsing the properties when nobody has
        read them yet (the consumer stamps every message it hands to a listener): the pair
        is appended to the raw string, where a repeated name's last value wins, as when
        parsing a stored message."""
        props = self._properties
        if props is not None:
            props[name] = value
            return
        pair = format_pair(name, value).encode()
        raw = self._props_raw
        self._props_raw = raw + PROPERTY_SEPARATOR + pair if raw else pair

    @property
    def message_queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name or "", self.queue_id)

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(pack_host(*parse_host_port(self.store_host)), self.commitlog_offset)

    @property
    def msg_id(self) -> str:
        return self.properties.get(Prop.UNIQ_KEY) or self.offset_msg_id

    def __repr__(self) -> str:
        parts = [f"topic={self.topic!r}", f"queue={self.broker_name}:{self.queue_id}",
                 f"offset={self.queue_offset}", f"msg_id={self.msg_id!r}"]
        if self.tags:
            parts.append(f"tags={self.tags!r}")
        if self.keys:
            parts.append(f"keys={self.keys!r}")
        if self.reconsume_times:
            parts.append(f"reconsume_times={self.reconsume_times}")
        parts.append(f"body={_short_body(self.body)}")
        return f"MessageExt({', '.join(parts)})"


# --- compression ---------------------------------------------------------------------------
# the codec is mqcore.format.compression's; the client names its failures MessageDecodeError
def decompress_body(body: bytes, sys_flag: int) -> bytes:
    """Undo producer compression according to sysFlag bits 8-10 (0 and 3 = zlib)."""
    try:
        return _decompress_body(body, sys_flag)
    except RecordDecodeError as e:
        raise MessageDecodeError(str(e)) from e


# --- wire codecs ------------------------------------------------------------------------------
def decode_messages(body: bytes | bytearray | memoryview, broker_name: str | None = None,
                    max_count: int = 1 << 30, *, kernels: StoreKernels | None = None,
                    props_suffix: bytes = b"", start: int = 0, end: int | None = None) -> list[MessageExt]:
    """PULL (or QUERY/VIEW) response body -> messages, decompressed. The store kernels
    write each record straight into a ``MessageExt`` (properties parsed when first read);
    ``props_suffix`` (encoded properties) is appended to every message's properties.
    ``body[start:end]`` (default: all of it) holds the records; every message gets its own
    copies (a view of a receive buffer may be reused once this returns)."""
    if end is None:
        end = len(body)
    if start >= end:
        return []
    try:
        out, compressed = (kernels or default_kernels()).decode_message_objects(
            body, start, end, max_count, MessageExt, broker_name, props_suffix)
    except (ValueError, RecordDecodeError) as e:
        raise MessageDecodeError(f"malformed message records from {broker_name}: {e}") from e
    if compressed:
        flag = L.SYSFLAG_COMPRESSED
        for m in out:
            if m.sys_flag & flag:
                m.body = decompress_body(m.body, m.sys_flag)
    return out


def encode_batch_body(messages: Sequence[Message], *, kernels: StoreKernels | None = None) -> bytes:
    """SEND_BATCH_MESSAGE body: each message's flag, body and own properties
    (``MessageDecoder.encodeMessages``)."""
    k = kernels or default_kernels()
    return k.encode_batch_messages([(m.flag, m.body, m.properties) for m in messages])


# --- results ------------------------------------------------------------------------------------
class SendStatus(str, enum.Enum):
    """Outcome of a successful send; anything else raises (``SendStatus.java``)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


def _int_or_none(raw: str | None) -> int | None:
    try:
        return int(raw) if raw else None
    except ValueError:
        return None


def _non_negative(value: int, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise IllegalArgumentError(f"{what} must be a non-negative int, not {value!r}")
    return value


@dataclasses.dataclass(slots=True)
class SendResult:
    """What a send returns. ``msg_id`` is the producer's UNIQ_KEY (comma-joined for an
    explicit batch, see ``msg_ids``); ``offset_msg_id`` is the broker's id."""

    status: SendStatus
    msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    offset_msg_id: str
    transaction_id: str | None = None
    region_id: str | None = None
    trace_on: bool = True

    @property
    def ok(self) -> bool:
        return self.status is SendStatus.SEND_OK

    @property
    def msg_ids(self) -> list[str]:
        return self.msg_id.split(",") if self.msg_id else []

    @property
    def offset_msg_ids(self) -> list[str]:
        return self.offset_msg_id.split(",") if self.offset_msg_id else []


class PullStatus(str, enum.Enum):
    """``PullStatus.java``: mapping of PULL response codes (remoting §5)."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


@dataclasses.dataclass(slots=True)
class PullResult:
    """One pull. ``messages`` are already tag-filtered and decompressed."""

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = dataclasses.field(default_factory=list)
    suggest_which_broker_id: int = 0

    def __repr__(self) -> str:
        return (f"PullResult(status={self.status.value}, next_begin_offset={self.next_begin_offset}, "
                f"min_offset={self.min_offset}, max_offset={self.max_offset}, messages={len(self.messages)})")


def clone_for_send(msg: Message, topic: str | None = None) -> Message:
    """A shallow copy with its own properties dict (the sender adds UNIQ_KEY etc.
    without touching the caller's object beyond what Java also sets)."""
    out = Message.__new__(Message)
    out.topic = topic if topic is not None else msg.topic
    out.body = msg.body
    out.flag = msg.flag
    out._properties = dict(msg.properties)
    out.transaction_id = msg.transaction_id
    return out


def as_message(value: Any) -> Message:
    if isinstance(value, Message):
        return value
    raise IllegalArgumentError(f"expected a Message, got {type(value).__name__}")
