"""Pop consumption for 5.x simple consumers: messages handed out with an invisible duration.

Each (group, topic, queue) has a ``PopQueue``: ``next`` is the next queue offset to hand
out; ``inflight`` holds the offsets handed out and not yet acked, each with its deadline.
Everything below ``next`` that is not in flight is done (acked, revived into the retry
queue, or filtered out by tag), so the group's committed offset for the queue — the one in
``consumerOffset.json`` that 4.x consumers of the same group also use — is the lowest
offset in flight, or ``next``.

A message not acked by its deadline is *revived* as RocketMQ's broker does: a copy goes to
the group's retry queue for the topic (``%RETRY%{group}_{topic}``, queue 0) with its
reconsume count one higher, or, once the group's ``retryMaxTimes`` is used up, to
``%DLQ%{group}``; then the original counts as done. Copies in the store survive a restart,
so delivery attempts keep counting across restarts. What lives only in memory is the set
of messages in flight: after a restart the queue starts again at the committed offset and
messages in flight at the crash are handed out again (at least once). A handle issued
before the restart still acks its message (see ``ack``).

Threads: the broker's event loop only. Time comes from the injected ``clock`` (ms).
"""
from __future__ import annotations

import dataclasses
import heapq
import logging
import random

from mqcore.clock import Clock
from mqcore.filter.sql92 import Sql92Filter
from mqcore.format import layout as L
from mqcore.format.compression import decompress_body as inflate
from mqcore.grpc.source import GrpcSource
from mqcore.message import MessageExt, MessageExtBrokerInner, Prop, dlq_topic, pack_host
from mqcore.permissions import PERM_READ, PERM_WRITE
from mqcore.store.results import GetMessageStatus
from mqcore.tags import split_tags, tag_codes
from mqcore.format.javahash import string_hash
from mqcore.netaddr import parse_host_port

log = logging.getLogger(__name__)

RETRY_TOPIC_PREFIX = "%RETRY%"


def pop_retry_topic(group: str, topic: str) -> str:
    """RocketMQ 5's per-group, per-topic retry topic for pop consumers."""
    return f"{RETRY_TOPIC_PREFIX}{group}_{topic}"


@dataclasses.dataclass
class Inflight:
    queue_offset: int
    commitlog_offset: int
    deadline_ms: int
    pop_time_ms: int
    attempt: int
    #: a push consumer's receive (auto renew): the client whose processing keeps it invisible
    renew_client: str | None = None
    #: renewed no later than this
    renew_until_ms: int = 0


class PopQueue:
    def __init__(self, start: int):
        self.next = start
        self.inflight: dict[int, Inflight] = {}
        #: offsets at or past ``next`` acked with a handle from before a restart, and, in a
        #: FIFO queue, offsets acked while an earlier one is still in flight
        self.acked_ahead: set[int] = set()
        #: a FIFO group's queue (``pop_orderly``): not revived into the retry queue on expiry
        self.orderly = False
        #: FIFO queues: deliveries made so far of the offsets not yet done
        self.attempts: dict[int, int] = {}

    def committed(self) -> int:
        # offsets adopted after a restart (``PopService.adopt``) may lie past ``next``
        return min(min(self.inflight), self.next) if self.inflight else self.next


@dataclasses.dataclass
class Popped:
    message: MessageExt
    kind: str
    flight: Inflight


class AckStatus:
    OK = "OK"
    NOT_FOUND = "NOT_FOUND"


class PopService:
    def __init__(self, source: GrpcSource, clock: Clock) -> None:
        self.src = source
        self.clock = clock
        self._queues: dict[tuple[str, str, int], PopQueue] = {}
        #: (deadline, group, topic, queue id, offset) — entries may be stale; checked on pop
        self._deadlines: list[tuple[int, str, str, int, int]] = []

    # --- queues ---------------------------------------------------------------------------------
    def queue(self, group: str, topic: str, queue_id: int) -> PopQueue:
        key = (group, topic, queue_id)
        q = self._queues.get(key)
        if q is None:
            start = self.src.offsets.query(group, topic, queue_id)
            if start is None:
                # a new group starts at the queue's first message, as RocketMQ 5's pop does while
                # the queue's head is still in the store
                start = max(0, self.src.store.get_min_offset_in_queue(topic, queue_id))
            q = self._queues[key] = PopQueue(start)
        return q

    def _commit(self, group: str, topic: str, queue_id: int, q: PopQueue) -> None:
        self.src.offsets.commit(group, topic, queue_id, q.committed())

    # --- receive ---------------------------------------------------------------------------------
    def pop(self, group: str, topic: str, queue_id: int, kind: str, max_count: int,
            expression: str | Sql92Filter, invisible_ms: int) -> list[Popped]:
        """Up to ``max_count`` messages, made invisible for ``invisible_ms``; ``expression`` is
        a tag expression ("*", "a || b") or a compiled SQL92 filter."""
        q = self.queue(group, topic, queue_id)
        q.orderly = False  # the group may have stopped being a FIFO group: expired ones are revived again
        return self._take(q, group, topic, queue_id, kind, max_count, expression, invisible_ms)

    def pop_orderly(self, group: str, topic: str, queue_id: int, kind: str, max_count: int,
                    expression: str | Sql92Filter, invisible_ms: int) -> list[Popped]:
        """A FIFO group's receive (RocketMQ 5's orderly pop): while any message handed out
        from this queue is in flight and still invisible, the queue hands out nothing, so a
        later message of a message group never overtakes an earlier one. When all of them
        are acked the queue moves on; when the invisible duration of one that was not acked
        runs out, the queue hands out again from it, in place (not through the retry
        queue), with its delivery attempt one higher, skipping those acked meanwhile."""
        q = self.queue(group, topic, queue_id)
        q.orderly = True
        if q.inflight:
            now = self.clock()
            if any(f.deadline_ms > now for f in q.inflight.values()):
                return []
            q.next = min(q.inflight)
            q.inflight.clear()  # their deadline entries are stale now: ``due`` skips them
        return self._take(q, group, topic, queue_id, kind, max_count, expression, invisible_ms)

    def is_orderly(self, group: str, topic: str, queue_id: int) -> bool:
        q = self._queues.get((group, topic, queue_id))
        return q is not None and q.orderly

    def _take(self, q: PopQueue, group: str, topic: str, queue_id: int, kind: str, max_count: int,
              expression: str | Sql92Filter, invisible_ms: int) -> list[Popped]:
        if isinstance(expression, Sql92Filter):  # a SQL92 receive: every record read, then matched
            sql, tags, codes = expression, None, None
        else:
            sql = None
            tags = frozenset(split_tags(expression))  # empty for "*" (and " || ": no tag filter)
            codes = frozenset(tag_codes(tags)) if tags else None
        now = self.clock()
        out: list[Popped] = []
        while len(out) < max_count:
            result = self.src.store.get_message(topic, queue_id, q.next, max_count - len(out), tag_codes=codes)
            status = result.status
            if status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
                log.info("pop %s %s:%d offset %d out of range [%d, %d]: moved to %d", group, topic, queue_id,
                         q.next, result.min_offset, result.max_offset, result.next_begin_offset)
                q.next = result.next_begin_offset
                continue
            if status is not GetMessageStatus.FOUND:
                if status in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING,
                              GetMessageStatus.OFFSET_FOUND_NULL) and result.next_begin_offset > q.next:
                    q.next = result.next_begin_offset  # nothing wanted in that window: it is done
                    continue
                break
            for buf in result.buffers:
                for rec in self.src.store.k.decode_records(buf, 0, len(buf), 1 << 30, False):
                    msg = MessageExt.from_decoded(rec)
                    if msg.queue_offset in q.acked_ahead:
                        q.acked_ahead.discard(msg.queue_offset)
                        continue
                    if msg.queue_offset in q.inflight:  # adopted by a handle from before a restart
                        continue
                    if tags and msg.tags not in tags:  # a tag hash collision
                        continue
                    if sql is not None and not sql.matches(msg.properties):
                        continue  # filtered out: done for this group, as a tag mismatch is
                    if msg.sys_flag & L.SYSFLAG_COMPRESSED:
                        msg.body = inflate(msg.body, msg.sys_flag)
                    attempt = msg.reconsume_times + 1
                    if q.orderly:  # handed out again in place: the count lives here, not in a copy
                        attempt = q.attempts.get(msg.queue_offset, msg.reconsume_times) + 1
                        q.attempts[msg.queue_offset] = attempt
                        msg.reconsume_times = attempt - 1
                    flight = Inflight(msg.queue_offset, msg.commitlog_offset, now + invisible_ms, now, attempt)
                    q.inflight[msg.queue_offset] = flight
                    heapq.heappush(self._deadlines, (flight.deadline_ms, group, topic, queue_id, msg.queue_offset))
                    out.append(Popped(msg, kind, flight))
            q.next = result.next_begin_offset
        self._commit(group, topic, queue_id, q)
        return out

    # --- ack / change invisible duration ------------------------------------------------------------
    def ack(self, group: str, topic: str, queue_id: int, queue_offset: int) -> str:
        """Done with a message. A handle from before a restart still works: its offset is
        at or past the committed one, so it is remembered and skipped when reached."""
        q = self.queue(group, topic, queue_id)
        if q.inflight.pop(queue_offset, None) is not None:
            if q.orderly:
                q.attempts.pop(queue_offset, None)
                if q.inflight and queue_offset > min(q.inflight):
                    q.acked_ahead.add(queue_offset)  # skipped if the earlier one is handed out again
                elif not q.inflight:
                    q.acked_ahead = {o for o in q.acked_ahead if o >= q.next}
            self._commit(group, topic, queue_id, q)
            return AckStatus.OK
        if queue_offset >= q.next:
            if queue_offset < self.src.store.get_max_offset_in_queue(topic, queue_id):
                q.acked_ahead.add(queue_offset)
                return AckStatus.OK
            return AckStatus.NOT_FOUND
        return AckStatus.OK  # already done (acked before, or revived): acking again is harmless

    def change_invisible(self, group: str, topic: str, queue_id: int, queue_offset: int,
                         invisible_ms: int) -> Inflight | None:
        """A new deadline from now; None when the message is not in flight (revived already,
        acked, or handed out before a restart and not yet handed out again)."""
        q = self.queue(group, topic, queue_id)
        flight = q.inflight.get(queue_offset)
        if flight is None:
            return None
        now = self.clock()
        flight.deadline_ms = now + invisible_ms
        flight.pop_time_ms = now
        heapq.heappush(self._deadlines, (flight.deadline_ms, group, topic, queue_id, queue_offset))
        return flight

    def adopt(self, group: str, topic: str, queue_id: int, queue_offset: int, commitlog_offset: int,
              attempt: int, invisible_ms: int) -> Inflight | None:
        """A handle from before a restart whose message is not handed out again yet: it is in
        flight again from now (``pop`` skips it). None if the message is done or gone."""
        q = self.queue(group, topic, queue_id)
        if queue_offset < q.next or queue_offset in q.acked_ahead \
                or queue_offset >= self.src.store.get_max_offset_in_queue(topic, queue_id):
            return None
        now = self.clock()
        flight = q.inflight[queue_offset] = Inflight(queue_offset, commitlog_offset, now + invisible_ms, now, attempt)
        heapq.heappush(self._deadlines, (flight.deadline_ms, group, topic, queue_id, queue_offset))
        return flight

    # --- revive ----------------------------------------------------------------------------------
    def next_deadline(self) -> int | None:
        return self._deadlines[0][0] if self._deadlines else None

    def due(self, now: int) -> list[tuple[str, str, int, Inflight]]:
        """Messages whose invisible duration ran out (removed from flight by ``revived``)."""
        out = []
        while self._deadlines and self._deadlines[0][0] <= now:
            deadline, group, topic, qid, offset = heapq.heappop(self._deadlines)
            q = self._queues.get((group, topic, qid))
            flight = q.inflight.get(offset) if q else None
            if flight is None or flight.deadline_ms != deadline:
                continue  # acked, or its deadline moved
            out.append((group, topic, qid, flight))
        return out

    def revived(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        q = self._queues.get((group, topic, queue_id))
        if q is not None and q.inflight.pop(offset, None) is not None:
            self._commit(group, topic, queue_id, q)

    def revive_copy(self, group: str, origin_topic: str, msg: MessageExt,
                    max_attempts: int) -> MessageExtBrokerInner:
        """The copy of a message whose invisible duration ran out: the retry queue, or the DLQ
        once ``max_attempts`` deliveries were made."""
        props = dict(msg.properties)
        props.pop(Prop.DELAY, None)
        props.pop(Prop.CLUSTER, None)
        props.setdefault(Prop.RETRY_TOPIC, origin_topic)
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, msg.offset_msg_id)
        props[Prop.WAIT] = "false"
        attempts_made = msg.reconsume_times + 1
        if attempts_made >= max_attempts:
            topic = dlq_topic(group)
            self.src.topics.create_group_topic(topic, 1, PERM_READ | PERM_WRITE)
        else:
            topic = pop_retry_topic(group, origin_topic)
            self.src.topics.create_group_topic(topic, 1, PERM_READ | PERM_WRITE)
        return MessageExtBrokerInner(topic=topic, body=msg.body, queue_id=0, flag=msg.flag, properties=props,
                                     sys_flag=msg.sys_flag & ~(L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6),
                                     born_timestamp=msg.born_timestamp, born_host=pack_host(*parse_host_port(msg.born_host)),
                                     store_host=self.src.store_host(), reconsume_times=attempts_made)

    def forget_group(self, group: str) -> None:
        for key in [k for k in self._queues if k[0] == group]:
            del self._queues[key]


def pick_queue(write_queue_nums: int, message_group: str | None) -> int:
    """The queue for a send: a message group always maps to the same queue (FIFO), as the
    proxy's selector does with the group's Java hash code; otherwise any queue."""
    if message_group:
        return abs(string_hash(message_group)) % write_queue_nums
    return random.randrange(write_queue_nums)
