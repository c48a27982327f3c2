"""Headers and body of RocketMQ 5's POP requests over remoting (POP_MESSAGE 200050,
ACK_MESSAGE 200051, PEEK_MESSAGE 200052, CHANGE_MESSAGE_INVISIBLETIME 200053,
NOTIFICATION 200054, POLLING_INFO 200055, BATCH_ACK_MESSAGE 200151), field by field as
the 5.x Java client (``MQClientAPIImpl``) and proxy send and read them.

The batch ack body is fastjson's rendering of ``BatchAckMessageRequestBody``: short keys,
and the acked offsets as a ``java.util.BitSet`` (bit i: ``startOffset + i``) written as
its ``toByteArray()`` in base64.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
from dataclasses import dataclass
from typing import Any

from mqcore.errors import ProtocolError
from mqcore.jsonutil import loads_lenient
from mqcore.remoting.headers import BOOL, INT, LONG, STR, ExtHeader, _nn, _opt


@dataclass(slots=True)
class PopMessageRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    max_msg_nums: int = _nn("maxMsgNums", INT)
    invisible_time: int = _nn("invisibleTime", LONG)
    poll_time: int = _nn("pollTime", LONG)
    born_time: int = _nn("bornTime", LONG)
    init_mode: int = _nn("initMode", INT)
    exp_type: str | None = _opt("expType", STR)
    exp: str | None = _opt("exp", STR)
    order: bool | None = _opt("order", BOOL, False)
    attempt_id: str | None = _opt("attemptId", STR)


@dataclass(slots=True)
class PopMessageResponseHeader(ExtHeader):
    pop_time: int = _nn("popTime", LONG)
    invisible_time: int = _nn("invisibleTime", LONG)
    revive_qid: int = _nn("reviveQid", INT)
    rest_num: int = _nn("restNum", LONG)
    start_offset_info: str | None = _opt("startOffsetInfo", STR)
    msg_offset_info: str | None = _opt("msgOffsetInfo", STR)
    order_count_info: str | None = _opt("orderCountInfo", STR)


@dataclass(slots=True)
class PeekMessageRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    max_msg_nums: int = _nn("maxMsgNums", INT)


@dataclass(slots=True)
class AckMessageRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    extra_info: str = _nn("extraInfo", STR)
    offset: int = _nn("offset", LONG)


@dataclass(slots=True)
class ChangeInvisibleTimeRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    extra_info: str = _nn("extraInfo", STR)
    offset: int = _nn("offset", LONG)
    invisible_time: int = _nn("invisibleTime", LONG)


@dataclass(slots=True)
class ChangeInvisibleTimeResponseHeader(ExtHeader):
    pop_time: int = _nn("popTime", LONG)
    invisible_time: int = _nn("invisibleTime", LONG)
    revive_qid: int = _nn("reviveQid", INT)


@dataclass(slots=True)
class NotificationRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    poll_time: int = _nn("pollTime", LONG)
    born_time: int = _nn("bornTime", LONG)
    order: bool | None = _opt("order", BOOL, False)
    attempt_id: str | None = _opt("attemptId", STR)


@dataclass(slots=True)
class NotificationResponseHeader(ExtHeader):
    has_msg: bool = _nn("hasMsg", BOOL)
    polling_full: bool | None = _opt("pollingFull", BOOL, False)


@dataclass(slots=True)
class PollingInfoRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)


@dataclass(slots=True)
class PollingInfoResponseHeader(ExtHeader):
    polling_num: int = _nn("pollingNum", INT)


@dataclasses.dataclass(frozen=True)
class BatchAck:
    """One queue's acks of one pop: ``retry`` is the handle's topic type."""

    consumer_group: str
    topic: str
    retry: str
    start_offset: int
    queue_id: int
    revive_queue_id: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]


def _field(obj: dict[str, Any], short: str, long: str, kind: type) -> Any:
    value = obj.get(short, obj.get(long))
    if value is None:
        raise ProtocolError(f"batch ack entry has no {long!r}")
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ProtocolError(f"batch ack entry field {long!r} is not a {kind.__name__}: {value!r}") from None


def _bit_offsets(raw: Any, start: int) -> tuple[int, ...]:
    """The offsets a BitSet's ``toByteArray()`` (base64 in JSON, or a list of byte values) names."""
    if isinstance(raw, str):
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("batch ack bitSet is not base64") from None
    elif isinstance(raw, list) and all(isinstance(b, int) and -128 <= b <= 255 for b in raw):
        data = bytes(b & 0xFF for b in raw)
    else:
        raise ProtocolError("batch ack bitSet is neither base64 nor a byte list")
    return tuple(start + i * 8 + bit for i, byte in enumerate(data) for bit in range(8) if byte >> bit & 1)


def parse_batch_ack_body(body: bytes | None) -> tuple[str | None, list[BatchAck]]:
    """(broker name, acks) of a BATCH_ACK_MESSAGE body; ProtocolError for a malformed one."""
    if not body:
        return None, []
    try:
        obj = loads_lenient(body)
    except (ValueError, RecursionError):
        raise ProtocolError("batch ack body is not JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("acks", []), list):
        raise ProtocolError("batch ack body is not a BatchAckMessageRequestBody")
    out = []
    for a in obj.get("acks") or []:
        if not isinstance(a, dict):
            raise ProtocolError("batch ack entry is not an object")
        start = _field(a, "so", "startOffset", int)
        out.append(BatchAck(_field(a, "c", "consumerGroup", str), _field(a, "t", "topic", str),
                            _field(a, "r", "retry", str), start, _field(a, "q", "queueId", int),
                            _field(a, "rq", "reviveQueueId", int), _field(a, "pt", "popTime", int),
                            _field(a, "it", "invisibleTime", int), _bit_offsets(a.get("b", a.get("bitSet", "")), start)))
    name = obj.get("brokerName")
    return (name if isinstance(name, str) else None), out
