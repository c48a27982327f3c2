"""Receipt handles: what a 5.x consumer gets with each received message and hands back
to ack it or change its invisible duration.

A handle names the message by where it sits, not by an id in broker memory, so it can
still be resolved after a broker restart: ``queue kind, queue id, queue offset,
commitlog offset, pop time, invisible duration, delivery attempt, broker name``, joined by
spaces as RocketMQ's proxy joins the fields of its own handles. The queue kind says whether
the message was read from the topic itself (``N``) or from the group's retry queue for the
topic (``R``). ``pop time`` (ms) tells one delivery of the same message from the next.
"""
from __future__ import annotations

import dataclasses

from mqcore.errors import IllegalArgumentError

VERSION = "1"
KIND_NORMAL = "N"
KIND_RETRY = "R"
_FIELDS = 9


@dataclasses.dataclass(frozen=True)
class ReceiptHandle:
    kind: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    pop_time_ms: int
    invisible_ms: int
    attempt: int
    broker_name: str

    @property
    def deadline_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms

    def encode(self) -> str:
        return " ".join((VERSION, self.kind, str(self.queue_id), str(self.queue_offset), str(self.commitlog_offset),
                         str(self.pop_time_ms), str(self.invisible_ms), str(self.attempt), self.broker_name))

    @classmethod
    def decode(cls, text: str) -> "ReceiptHandle":
        """Raises IllegalArgumentError for anything this broker did not make."""
        parts = (text or "").split(" ")
        if len(parts) != _FIELDS or parts[0] != VERSION or parts[1] not in (KIND_NORMAL, KIND_RETRY):
            raise IllegalArgumentError(f"receipt handle {text[:80]!r} is not one this broker issued")
        try:
            qid, qoff, phy, pop, inv, attempt = (int(p) for p in parts[2:8])
        except ValueError as e:
            raise IllegalArgumentError(f"receipt handle {text[:80]!r} has a non-numeric field") from e
        if min(qid, qoff, phy, pop, inv, attempt) < 0 or not parts[8]:
            raise IllegalArgumentError(f"receipt handle {text[:80]!r} has a negative or empty field")
        return cls(parts[1], qid, qoff, phy, pop, inv, attempt, parts[8])
