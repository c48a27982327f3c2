"""Receipt handles: what a popped message carries so that its consumer can ack it or change
its invisible duration, over gRPC (``receipt_handle``) and over remoting (the ``POP_CK``
property and the ``extraInfo`` of ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME).

One format for both, RocketMQ 5's own, so a 5.x proxy in cluster mode and the 5.x remoting
client read what this broker writes and hand back what it understands. Fields, joined by
single spaces:

    ck offset, pop time (ms), invisible time (ms), revive queue id, topic type,
    broker name, queue id, queue offset[, commitlog offset]

``ck offset`` is the first queue offset of the pop (or change) that issued it; ``topic
type`` is ``0`` for the topic itself, ``1`` for the group's retry queue of the topic
(``%RETRY%{group}_{topic}``; ``2`` names RocketMQ's v2 retry topic, which this broker does
not create). A remoting client builds the handle itself from the pop answer's headers and
has no commitlog offset (8 fields); the gRPC endpoint and the proxy append it (9 fields).
The revive queue id ``POP_ORDER_REVIVE_QUEUE`` marks a FIFO (orderly) pop.

A handle names the message by where it sits, not by broker memory, so it still resolves
after a restart.
"""
from __future__ import annotations

import dataclasses

from mqcore.errors import IllegalArgumentError

TYPE_NORMAL = "0"
TYPE_RETRY = "1"
TYPE_RETRY_V2 = "2"
RETRY_PREFIX = "%RETRY%"
#: the revive queue id of an orderly pop's handles (RocketMQ's KeyBuilder.POP_ORDER_REVIVE_QUEUE)
POP_ORDER_REVIVE_QUEUE = 999
_MIN_FIELDS = 8
_MAX_FIELDS = 9


def pop_retry_topic(group: str, topic: str) -> str:
    """The group's retry topic for a topic it pops (RocketMQ 5's v1 name)."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def topic_type(store_topic: str) -> str:
    return TYPE_RETRY if store_topic.startswith(RETRY_PREFIX) else TYPE_NORMAL


@dataclasses.dataclass(frozen=True)
class PopHandle:
    ck_offset: int
    pop_time_ms: int
    invisible_ms: int
    revive_qid: int
    topic_type: str
    broker_name: str
    queue_id: int
    queue_offset: int
    #: -1 when the handle has none (built by a remoting client)
    commitlog_offset: int = -1

    @property
    def deadline_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms

    @property
    def retry(self) -> bool:
        return self.topic_type != TYPE_NORMAL

    @property
    def orderly(self) -> bool:
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    def store_topic(self, group: str, topic: str) -> str:
        """The topic the message was read from: ``topic`` or the group's retry topic."""
        return pop_retry_topic(group, topic) if self.retry else topic

    def encode(self) -> str:
        fields = [self.ck_offset, self.pop_time_ms, self.invisible_ms, self.revive_qid, self.topic_type,
                  self.broker_name, self.queue_id, self.queue_offset]
        if self.commitlog_offset >= 0:
            fields.append(self.commitlog_offset)
        return " ".join(str(f) for f in fields)

    @classmethod
    def decode(cls, text: str) -> "PopHandle":
        """Raises IllegalArgumentError for a handle that is not of this format."""
        parts = (text or "").split(" ")
        shown = (text or "")[:120]
        if not _MIN_FIELDS <= len(parts) <= _MAX_FIELDS:
            raise IllegalArgumentError(f"receipt handle {shown!r} has {len(parts)} fields, not 8 or 9")
        if parts[4] not in (TYPE_NORMAL, TYPE_RETRY, TYPE_RETRY_V2) or not parts[5]:
            raise IllegalArgumentError(f"receipt handle {shown!r} has a bad topic type or no broker name")
        try:
            ck, pop, inv, rq, qid, qoff = (int(parts[i]) for i in (0, 1, 2, 3, 6, 7))
            phy = int(parts[8]) if len(parts) == _MAX_FIELDS else -1
        except ValueError:
            raise IllegalArgumentError(f"receipt handle {shown!r} has a non-numeric field") from None
        if min(ck, pop, inv, rq, qid, qoff) < 0 or phy < -1:
            raise IllegalArgumentError(f"receipt handle {shown!r} has a negative field")
        return cls(ck, pop, inv, rq, parts[4], parts[5], qid, qoff, phy)


def start_offset_info(entries: list[tuple[str, int, int]]) -> str:
    """``type queueId startOffset`` per queue popped, ';'-joined (the pop answer's header)."""
    return ";".join(f"{topic_type(t)} {qid} {start}" for t, qid, start in entries)


def msg_offset_info(entries: list[tuple[str, int, list[int]]]) -> str:
    """``type queueId o1,o2,...`` per queue popped, the offsets in the body's order."""
    return ";".join(f"{topic_type(t)} {qid} {','.join(str(o) for o in offs)}" for t, qid, offs in entries)


def order_count_info(entries: list[tuple[str, int, int, int]]) -> str:
    """``type qo{queueId}%{offset} count`` per message popped orderly (topic, queue id,
    offset, count): the deliveries made before this one, which the client takes as the
    message's reconsume times."""
    return ";".join(f"{topic_type(t)} qo{qid}%{off} {count}" for t, qid, off, count in entries)
