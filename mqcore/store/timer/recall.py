"""Recall handles (RocketMQ 5.3 ``RecallMessageHandle.HandleV1``) and the marker that recalls.

A handle is URL-safe Base64 of ``"v1 <topic> <brokerName> <slot time + 1> <UNIQ_KEY>"``;
the send answer of a held timer carries it. Recalling puts a marker message into the
same topic with ``TIMER_DEL_UNIQKEY`` = the UNIQ_KEY and ``TIMER_DELIVER_MS`` = the
handle's time: the put-time rewrite rounds that time down into the recalled message's
slot, and when the slot comes the timer service skips every message of the slot whose
UNIQ_KEY a marker names.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import enum

from mqcore.errors import IllegalArgumentError
from mqcore.format import timer as T
from mqcore.message import MessageExtBrokerInner, Prop

_VERSION_1 = "v1"
RECALL_TAG = "_RECALL_TAG_"


@dataclasses.dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp: str
    message_id: str


def build_recall_handle(topic: str, broker_name: str, timestamp_ms: int, message_id: str) -> str:
    raw = " ".join((_VERSION_1, topic, broker_name, str(timestamp_ms), message_id))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii")


def decode_recall_handle(handle: str | None) -> RecallHandle:
    """The handle's fields; ``IllegalArgumentError("recall handle is invalid")`` otherwise."""
    if not handle:
        raise IllegalArgumentError("recall handle is invalid")
    try:
        padded = handle + "=" * (-len(handle) % 4)
        raw = base64.b64decode(padded.encode("ascii"), altchars=b"-_", validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise IllegalArgumentError("recall handle is invalid") from None
    items = raw.split(" ")
    if items[0] != _VERSION_1 or len(items) < 5:
        raise IllegalArgumentError("recall handle is invalid")
    return RecallHandle(items[1], items[2], items[3], items[4])


def recall_marker(handle: RecallHandle, producer_group: str | None, now_ms: int, born_host: bytes,
                  store_host: bytes) -> MessageExtBrokerInner:
    """The message a recall puts (``RecallMessageProcessor.buildMessage``)."""
    props = {Prop.TAGS: RECALL_TAG, T.PROP_TIMER_DEL_UNIQKEY: handle.message_id, Prop.UNIQ_KEY: handle.message_id,
             T.PROP_TIMER_DELIVER_MS: handle.timestamp, "BORN_TIMESTAMP": str(now_ms)}
    if producer_group:
        props[Prop.PGROUP] = producer_group
    return MessageExtBrokerInner(topic=handle.topic, body=b"0", queue_id=0, properties=props, born_timestamp=now_ms,
                                 born_host=born_host, store_host=store_host)


class RecallRefusal(enum.Enum):
    """Why a recall is refused (the endpoint maps each to its protocol's code)."""

    BAD_HANDLE = "bad handle"            # does not decode, or names another topic / broker
    TIMESTAMP_INVALID = "timestamp invalid"  # its time has passed, or is beyond timerMaxDelaySec


@dataclasses.dataclass(frozen=True, slots=True)
class RecallCheck:
    handle: RecallHandle | None
    refusal: RecallRefusal | None = None
    remark: str = ""


def check_recall(text: str | None, topic: str, broker_name: str, now_ms: int, max_delay_sec: int) -> RecallCheck:
    """The Java broker's checks of a recall handle (``RecallMessageProcessor``), in its order
    and words."""
    try:
        handle = decode_recall_handle(text)
    except IllegalArgumentError as e:
        return RecallCheck(None, RecallRefusal.BAD_HANDLE, str(e))
    if handle.topic != topic:
        return RecallCheck(None, RecallRefusal.BAD_HANDLE, "recall failed, topic not match")
    if handle.broker_name != broker_name:
        return RecallCheck(None, RecallRefusal.BAD_HANDLE, "recall failed, broker service not available")
    try:
        left = int(handle.timestamp) - now_ms
    except ValueError:
        left = -1
    if left <= 0 or left >= max_delay_sec * 1000:
        return RecallCheck(None, RecallRefusal.TIMESTAMP_INVALID, "recall failed, timestamp invalid")
    return RecallCheck(handle)
