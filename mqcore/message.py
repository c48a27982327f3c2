"""Messages as the store and the wire see them, and the helpers around them.

Shared by the store, the broker and the client: property keys (RocketMQ's
``MessageConst``), the properties string codec, topic/group validation, and the
two message ids (offsetMsgId made by the broker, UNIQ_KEY made by the client).
"""
from __future__ import annotations

import dataclasses
import ipaddress
import socket
import struct
from typing import TYPE_CHECKING, Mapping

from mqcore.errors import IllegalArgumentError
from mqcore.format import layout as L
from mqcore.format.names import MAX_GROUP_LENGTH, NAME_CHARS_TEXT, valid_name_chars
from mqcore.format.properties import format_properties, parse_properties
from mqcore.format.record import DecodedRecord
from mqcore.netaddr import parse_host_port

if TYPE_CHECKING:  # numpy is imported where a batch needs it
    from numpy.typing import ArrayLike


class Prop:
    """Well-known property keys (``MessageConst``)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MSG_REGION = "MSG_REGION"
    TRACE_ON = "TRACE_ON"
    UNIQ_KEY = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CONSUME_START_TIME = "CONSUME_START_TIME"
    CLUSTER = "CLUSTER"
    TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"


KEY_SEPARATOR = " "
NAME_VALUE_SEPARATOR = L.NAME_VALUE_SEPARATOR.decode()
PROPERTY_SEPARATOR = L.PROPERTY_SEPARATOR.decode()

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_TOPIC = "TBW102"
#: the other system topics a 4.9 broker creates at start (the broker creates them; the
#: dashboard and the admin checks name them, so they live here, below both)
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
BENCHMARK_TOPIC = "BenchmarkTest"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
#: topics no producer may send to (``TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET``, 4.9)
NOT_ALLOWED_SEND_TOPICS = frozenset({
    SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC",
    SELF_TEST_TOPIC, OFFSET_MOVED_EVENT,
})
#: topics an admin may not create or redefine (``TopicValidator.SYSTEM_TOPIC_SET``); the admin
#: request and the dashboard's form refuse the same names
SYSTEM_TOPICS = NOT_ALLOWED_SEND_TOPICS | {DEFAULT_TOPIC, BENCHMARK_TOPIC, "RMQ_SYS_TRACE_TOPIC"}
SYSTEM_TOPIC_PREFIX = "rmq_sys_"


def is_system_topic(topic: str) -> bool:
    """A topic the broker owns: an admin (request or dashboard) may not create or redefine it."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def system_topic_refusal(topic: str) -> str:
    """Apache's remark refusing UPDATE_AND_CREATE_TOPIC for a system topic."""
    return f"The topic[{topic}] is conflict with system topic."


RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"



properties_to_string = format_properties
string_to_properties = parse_properties


def properties_to_bytes(props: Mapping[str, str]) -> bytes:
    return format_properties(props).encode("utf-8")


def validate_topic(topic: str) -> None:
    """Topic names: ``[%|a-zA-Z0-9_-]``, 1..127 characters (``TopicValidator``)."""
    if not topic or not topic.strip():
        raise IllegalArgumentError("the topic name is empty")
    if len(topic) > L.MAX_TOPIC_LENGTH:
        raise IllegalArgumentError(f"the topic name is longer than {L.MAX_TOPIC_LENGTH} characters: {topic[:40]}...")
    if not valid_name_chars(topic):
        raise IllegalArgumentError(
            f"the topic name {topic!r} has characters outside {NAME_CHARS_TEXT}")


def validate_group(group: str) -> None:
    """Group names: ``[%|a-zA-Z0-9_-]``, 1..255 characters."""
    if not group or len(group) > MAX_GROUP_LENGTH or not valid_name_chars(group):
        raise IllegalArgumentError(
            f"the group name {group!r} must be 1..{MAX_GROUP_LENGTH} characters from {NAME_CHARS_TEXT}")


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


# --- hosts and message ids --------------------------------------------------------------------
def pack_host(host: str, port: int) -> bytes:
    """Socket address -> the record's host field: 4 (or 16) address bytes + int32 port."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = ipaddress.ip_address(socket.gethostbyname(host))
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.packed + struct.pack(">i", port)


def unpack_host(raw: bytes) -> tuple[str, int]:
    port = struct.unpack(">i", raw[-4:])[0]
    return str(ipaddress.ip_address(bytes(raw[:-4]))), port


def host_sys_flag(born_host: bytes, store_host: bytes) -> int:
    """The V6 sysflag bits implied by packed host lengths."""
    flag = 0
    if len(born_host) == L.HOST_V6_BYTES:
        flag |= L.SYSFLAG_BORNHOST_V6
    if len(store_host) == L.HOST_V6_BYTES:
        flag |= L.SYSFLAG_STOREHOST_V6
    return flag


def offset_msg_id(store_host: bytes, phy_offset: int) -> str:
    """Broker message id: store address + port + commitlog offset, uppercase hex."""
    return (bytes(store_host) + struct.pack(">q", phy_offset)).hex().upper()


def offset_msg_ids(store_host: bytes, phy_offsets: ArrayLike) -> list[str]:
    """``offset_msg_id`` for many offsets with one hex conversion (a batch's ids)."""
    import numpy as np
    prefix = bytes(store_host).hex().upper()
    hexed = np.asarray(phy_offsets, dtype=">i8").tobytes().hex().upper()
    return [prefix + hexed[i:i + 16] for i in range(0, len(hexed), 16)]


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """offsetMsgId -> (ip, port, commitlog offset); 32 hex chars for IPv4, 56 for IPv6."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError as e:
        raise IllegalArgumentError(f"{msg_id!r} is not a hex message id") from e
    if len(raw) not in (16, 28):
        raise IllegalArgumentError(f"{msg_id!r} is not an offset message id (32 or 56 hex chars)")
    ip, port = unpack_host(raw[:-8])
    return ip, port, struct.unpack(">q", raw[-8:])[0]


@dataclasses.dataclass
class MessageExtBrokerInner:
    """A message as the broker hands it to the store (``MessageExtBrokerInner``).

    ``properties`` is the decoded map; the store serialises it. Hosts are packed
    (``pack_host``); the V6 sysflag bits are derived from their lengths.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    flag: int = 0
    properties: dict[str, str] = dataclasses.field(default_factory=dict)
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x00\x00"
    store_host: bytes = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    #: set by the store at put time when 0
    store_timestamp: int = 0
    #: a delay delivery (``messageTimeup``): the record keeps its ``DELAY`` property, as a
    #: 4.9 consumer sees it, and the store must not park it in SCHEDULE_TOPIC_XXXX again
    delay_delivered: bool = False

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def delay_level(self) -> int:
        try:
            return int(self.properties.get(Prop.DELAY, 0))
        except ValueError:
            return 0


@dataclasses.dataclass
class MessageExt:
    """A stored message as read back (``MessageExt``)."""

    topic: str
    body: bytes
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    store_size: int
    body_crc: int
    flag: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    store_timestamp: int
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    properties: dict[str, str]

    @classmethod
    def from_decoded(cls, r: DecodedRecord) -> "MessageExt":
        """From what ``decode_records`` returns (the body stays as stored)."""
        return cls(topic=r.topic, body=r.body, queue_id=r.queue_id, queue_offset=r.queue_offset,
                   commitlog_offset=r.phy_offset, store_size=r.store_size, body_crc=r.body_crc, flag=r.flag,
                   sys_flag=r.sys_flag, born_timestamp=r.born_timestamp, born_host=r.born_host,
                   store_timestamp=r.store_timestamp, store_host=r.store_host,
                   reconsume_times=r.reconsume_times, prepared_transaction_offset=r.prepared_offset,
                   properties=string_to_properties(r.properties))

    @property
    def tags(self) -> str | None:
        return self.properties.get(Prop.TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(Prop.KEYS, "").split(KEY_SEPARATOR) if k]

    @property
    def msg_id(self) -> str:
        """What Java's ``MessageClientExt.getMsgId`` gives: UNIQ_KEY, else offsetMsgId."""
        return self.properties.get(Prop.UNIQ_KEY) or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(pack_host(*parse_host_port(self.store_host)), self.commitlog_offset)
