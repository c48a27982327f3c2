"""Stored messages <-> ``apache.rocketmq.v2.Message`` (what the proxy's converter does).

System properties a 5.x client sets travel in RocketMQ's 4.x property keys, so 4.x clients
of the same topic see them: tag -> ``TAGS``, keys -> ``KEYS`` (space-separated), message id
-> ``UNIQ_KEY``, message group -> ``__SHARDINGKEY``, delivery time -> ``TIMER_DELIVER_MS``.
Every other stored property is a user property.
"""
from __future__ import annotations

import hashlib
import zlib
from collections.abc import Mapping
from types import ModuleType
from typing import Protocol

from mqcore.errors import RecordDecodeError
from mqcore.format import layout as L
from mqcore.format.compression import decompress_body as inflate  # noqa: F401 (the gRPC name of the one decompression)
from mqcore.format.timer import PROP_TIMER_DELIVER_MS
from mqcore.message import KEY_SEPARATOR, MessageExt, Prop
from mqcore.netaddr import parse_host_port

PROP_SHARDING_KEY = "__SHARDINGKEY"
PROP_TRACE_CONTEXT = "TRACE_CONTEXT"

#: keys a user property may not use: the broker's own (MessageConst's reserved names)
SYSTEM_PROPERTY_KEYS = frozenset({
    Prop.KEYS, Prop.TAGS, Prop.WAIT, Prop.DELAY, Prop.RETRY_TOPIC, Prop.REAL_TOPIC, Prop.REAL_QID, Prop.TRAN_MSG,
    Prop.PGROUP, Prop.MIN_OFFSET, Prop.MAX_OFFSET, Prop.ORIGIN_MESSAGE_ID, Prop.RECONSUME_TIME, Prop.MSG_REGION,
    Prop.TRACE_ON, Prop.UNIQ_KEY, Prop.MAX_RECONSUME_TIMES, Prop.CONSUME_START_TIME, Prop.CLUSTER,
    Prop.TRAN_PREPARED_QUEUE_OFFSET, PROP_SHARDING_KEY, PROP_TIMER_DELIVER_MS, PROP_TRACE_CONTEXT,
    "TIMER_DELAY_SEC", "TIMER_DELAY_MS", "TIMER_OUT_MS", "INNER_NUM", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET",
    "BORNHOST", "TRANSACTION_ID", "TRANSACTION_CHECK_TIMES", "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "SHARDING_KEY", "MSG_TYPE", "REPLY_TO_CLIENT", "CORRELATION_ID", "TTL", "ARRIVE_TIME", "PUSH_REPLY_TIME",
    "BUYER_ID", "__STARTDELIVERTIME",
})
#: stored properties shown through system fields, never as user properties
_HIDDEN = SYSTEM_PROPERTY_KEYS


class SecondsNanos(Protocol):
    """A ``google.protobuf`` Timestamp or Duration (protobuf ships no annotations)."""

    seconds: int
    nanos: int


def body_digest(body: bytes) -> str:
    """The ``body_digest.checksum`` of a delivered body (type MD5)."""
    return hashlib.md5(body).hexdigest().upper()


def _timestamp(ts: SecondsNanos, ms: int) -> None:
    ts.seconds, ts.nanos = divmod(ms, 1000)
    ts.nanos *= 1_000_000


def _duration(d: SecondsNanos, ms: int) -> None:
    d.seconds, rem = divmod(ms, 1000)
    d.nanos = rem * 1_000_000


def duration_ms(d: SecondsNanos) -> int:
    return d.seconds * 1000 + d.nanos // 1_000_000


def timestamp_ms(ts: SecondsNanos) -> int:
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def message_type_of(d: ModuleType, props: Mapping[str, str]) -> int:
    """``d`` is ``definition_pb2`` (loaded at run time); its enum values are ints."""
    if props.get(Prop.TRAN_MSG) == "true":
        return int(d.TRANSACTION)
    if props.get(PROP_SHARDING_KEY):
        return int(d.FIFO)
    if props.get(PROP_TIMER_DELIVER_MS) or props.get(Prop.DELAY):
        return int(d.DELAY)
    return int(d.NORMAL)


def to_pb(d: ModuleType, msg: MessageExt, *, topic: str, namespace: str, receipt_handle: str, invisible_ms: int,
          attempt: int) -> object:
    """A stored message as a 5.x client receives it. ``topic`` is the name the client asked
    for (a retry copy is shown under its original topic)."""
    props = msg.properties
    m = d.Message()
    m.topic.name = topic
    m.topic.resource_namespace = namespace
    for k, v in props.items():
        if k not in _HIDDEN:
            m.user_properties[k] = v
    sp = m.system_properties
    tag = props.get(Prop.TAGS)
    if tag:
        sp.tag = tag
    sp.keys.extend(k for k in props.get(Prop.KEYS, "").split(KEY_SEPARATOR) if k)
    sp.message_id = props.get(Prop.UNIQ_KEY) or msg.offset_msg_id
    # MD5 in upper-case hex, as Apache's proxy labels a body: every official client computes
    # that string alike, while CRC32 renderings differ (Node.js: decimal; Java: hex without
    # padding), and a push consumer discards a message whose digest it reads as a mismatch
    sp.body_digest.type = d.MD5
    sp.body_digest.checksum = body_digest(msg.body)
    sp.body_encoding = d.IDENTITY
    sp.message_type = message_type_of(d, props)
    _timestamp(sp.born_timestamp, msg.born_timestamp)
    sp.born_host = parse_host_port(msg.born_host)[0]
    _timestamp(sp.store_timestamp, msg.store_timestamp)
    sp.store_host = msg.store_host
    deliver = props.get(PROP_TIMER_DELIVER_MS)
    if deliver and deliver.isdigit():
        _timestamp(sp.delivery_timestamp, int(deliver))
    sp.receipt_handle = receipt_handle
    sp.queue_id = msg.queue_id
    sp.queue_offset = msg.queue_offset
    _duration(sp.invisible_duration, invisible_ms)
    sp.delivery_attempt = attempt
    group = props.get(PROP_SHARDING_KEY)
    if group:
        sp.message_group = group
    trace = props.get(PROP_TRACE_CONTEXT)
    if trace:
        sp.trace_context = trace
    m.body = msg.body
    return m
