"""The pop journal: checkpoint (CK) and ack (ACK) records in the revive topic, so that which
messages are invisible until when, and which were acked, survive a broker restart.

The layout is RocketMQ 5's: the records are messages of ``rmq_sys_REVIVE_LOG_{cluster}``
tagged ``ck`` / ``ack`` / ``bAck`` whose bodies are its ``PopCheckPoint`` / ``AckMsg`` /
``BatchAckMsg`` JSON (short
field names: ``so`` start offset, ``pt`` pop time, ``it`` invisible time, ``n`` count, ``d``
each message's offset minus ``so``, ``q`` queue id, ``t`` the topic read (the topic or the
group's retry topic), ``c`` the group, ``ao`` the acked offset, ``bn`` the broker name);
the replay position is the revive group's offset for the revive topic in
``consumerOffset.json``. One difference: RocketMQ routes a CK through its timer so that it
lands in the revive topic at its revive time; here both kinds are appended when made and
the broker keeps the deadlines in memory, reading the journal back only at start.

A message revived (its copy stored in the retry queue or the DLQ) gets an ACK as well: done
is done, however it ended. FIFO (orderly) pops write nothing: their queue hands out again
from the committed offset after a restart.
"""
from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterator

from mqcore.message import MessageExt, MessageExtBrokerInner, Prop

log = logging.getLogger(__name__)

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"
CK_TAG = "ck"
ACK_TAG = "ack"
BATCH_ACK_TAG = "bAck"
#: the one revive queue this broker writes (RocketMQ spreads CKs over reviveQueueNum queues)
REVIVE_QUEUE = 0


def revive_topic(cluster: str) -> str:
    return f"{REVIVE_TOPIC_PREFIX}{cluster}"


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    queue_id: int
    start_offset: int
    pop_time_ms: int
    invisible_ms: int
    offsets: tuple[int, ...]
    broker_name: str

    def body(self) -> bytes:
        return json.dumps({"so": self.start_offset, "pt": self.pop_time_ms, "it": self.invisible_ms, "bm": 0,
                           "n": len(self.offsets), "q": self.queue_id, "t": self.topic, "c": self.group, "ro": 0,
                           "d": [o - self.start_offset for o in self.offsets], "bn": self.broker_name},
                          separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True)
class Ack:
    group: str
    topic: str
    queue_id: int
    offset: int
    start_offset: int
    pop_time_ms: int
    broker_name: str

    def body(self) -> bytes:
        return json.dumps({"ao": self.offset, "so": self.start_offset, "c": self.group, "t": self.topic,
                           "q": self.queue_id, "pt": self.pop_time_ms, "bn": self.broker_name},
                          separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True)
class BatchAck:
    """Several acks of one queue in one record (RocketMQ's ``BatchAckMsg``: ``aol``, the
    acked offsets): what one BATCH_ACK_MESSAGE entry writes."""

    group: str
    topic: str
    queue_id: int
    offsets: tuple[int, ...]
    start_offset: int
    pop_time_ms: int
    broker_name: str

    def body(self) -> bytes:
        return json.dumps({"aol": list(self.offsets), "so": self.start_offset, "c": self.group, "t": self.topic,
                           "q": self.queue_id, "pt": self.pop_time_ms, "bn": self.broker_name},
                          separators=(",", ":")).encode()


Record = Checkpoint | Ack | BatchAck
_TAGS = {Checkpoint: CK_TAG, Ack: ACK_TAG, BatchAck: BATCH_ACK_TAG}


def to_message(record: Record, topic: str, born_ms: int, host: bytes) -> MessageExtBrokerInner:
    tag = _TAGS[type(record)]
    return MessageExtBrokerInner(topic=topic, body=record.body(), queue_id=REVIVE_QUEUE,
                                 properties={Prop.TAGS: tag, Prop.WAIT: "false"},
                                 born_timestamp=born_ms, born_host=host, store_host=host)


def from_message(msg: MessageExt) -> Record | None:
    """The record a revive topic message holds; None (logged) for one this broker cannot read."""
    tag = msg.properties.get(Prop.TAGS)
    try:
        b = json.loads(msg.body)
        if tag == CK_TAG:
            so = int(b["so"])
            return Checkpoint(str(b["c"]), str(b["t"]), int(b["q"]), so, int(b["pt"]), int(b["it"]),
                              tuple(so + int(d) for d in b.get("d") or range(int(b.get("n", 0)))),
                              str(b.get("bn", "")))
        if tag == ACK_TAG:
            return Ack(str(b["c"]), str(b["t"]), int(b["q"]), int(b["ao"]), int(b.get("so", b["ao"])),
                       int(b.get("pt", 0)), str(b.get("bn", "")))
        if tag == BATCH_ACK_TAG:
            return BatchAck(str(b["c"]), str(b["t"]), int(b["q"]), tuple(int(o) for o in b["aol"]),
                            int(b.get("so", 0)), int(b.get("pt", 0)), str(b.get("bn", "")))
    except (ValueError, KeyError, TypeError) as e:
        log.warning("revive record at %s:%d is not a CK/ACK record (%s): skipped", msg.topic, msg.queue_offset, e)
        return None
    return None  # a tag of RocketMQ's this broker does not write


def replay(read: Callable[[int, int], list[MessageExt]], start: int, end: int) -> Iterator[tuple[int, Record]]:
    """(revive queue offset, record) from ``start`` up to ``end``; ``read(offset, n)`` reads
    up to n messages of the revive queue from offset (fewer at its end)."""
    offset = start
    while offset < end:
        batch = read(offset, min(256, end - offset))
        if not batch:
            break
        for msg in batch:
            record = from_message(msg)
            if record is not None:
                yield msg.queue_offset, record
        offset = batch[-1].queue_offset + 1
