"""Pop consumption: messages handed out with an invisible duration, one implementation
behind the 5.x gRPC endpoint and the remoting POP_MESSAGE / ACK_MESSAGE family.

Each (group, topic, queue) has a ``PopQueue``: ``next`` is the next queue offset to hand
out; ``inflight`` holds the offsets handed out and not yet acked, each with its deadline.
Everything below ``next`` that is not in flight is done (acked, revived into the retry
queue, or filtered out by tag), so the group's committed offset for the queue — the one in
``consumerOffset.json`` that 4.x consumers of the same group also use — is the lowest
offset in flight, or ``next``.

A message not acked by its deadline is *revived* as RocketMQ's broker does: a copy goes to
the group's retry queue for the topic (``%RETRY%{group}_{topic}``, queue 0) with its
reconsume count one higher, or, once the group's ``retryMaxTimes`` is used up, to
``%DLQ%{group}``; then the original counts as done. Every pop, ack, change of invisible
duration and revive also writes a record to the pop journal (``mqcore.pop.journal``): at
start the broker reads it back, so messages in flight at a restart stay invisible until
their deadline and those acked stay acked. FIFO (orderly) queues keep their state in
memory only: after a restart they hand out again from the committed offset (at least once).

Threads: the broker's event loop only. Time comes from the injected ``clock`` (ms).
"""
from __future__ import annotations

import asyncio
import dataclasses
import heapq
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

from mqcore.clock import Clock
from mqcore.errors import MQError
from mqcore.filter.sql92 import Sql92Filter
from mqcore.format import layout as L
from mqcore.format.compression import decompress_body as inflate
from mqcore.format.javahash import string_hash
from mqcore.message import MessageExt, MessageExtBrokerInner, Prop, dlq_topic, pack_host
from mqcore.netaddr import parse_host_port
from mqcore.permissions import PERM_READ, PERM_WRITE
from mqcore.pop import journal
from mqcore.pop.arrivals import Arrivals
from mqcore.pop.handle import RETRY_PREFIX, pop_retry_topic
from mqcore.service import cancel_and_wait, wait_for_wake
from mqcore.store.message_store import MessageStore
from mqcore.store.results import GetMessageStatus, PutMessageResult
from mqcore.tags import split_tags, tag_codes

log = logging.getLogger(__name__)

#: the longest the revive task sleeps with nothing due (it also checkpoints the journal then)
IDLE_CHECK_S = 1.0

Put = Callable[[MessageExtBrokerInner], Awaitable[PutMessageResult]]


@dataclasses.dataclass
class PopSource:
    """What the pop service uses of a broker: its store, topic/group/offset tables (typed
    by use, as the remoting processors are: the broker's managers), stats, and callables
    for what changes while it runs (``store_host`` is known once it listens)."""

    clock: Callable[[], int]
    store: MessageStore
    topics: Any
    groups: Any
    offsets: Any
    stats: Any
    store_host: Callable[[], bytes]
    schedule_register: Callable[[], None]


@dataclasses.dataclass
class Inflight:
    queue_offset: int
    #: -1 until read back (a flight restored from the journal knows its queue offset only)
    commitlog_offset: int
    deadline_ms: int
    pop_time_ms: int
    #: the delivery this is (1 = first); 0 when restored from the journal (read from the message)
    attempt: int
    #: the first queue offset of the pop (or change) that made it invisible: the handle's ck offset
    ck_offset: int = 0
    #: where that pop's CK record sits in the revive queue (-1: none, a FIFO pop)
    ck_at: int = -1
    #: a push consumer's receive (auto renew): the client whose processing keeps it invisible
    renew_client: str | None = None
    #: renewed no later than this
    renew_until_ms: int = 0
    #: given back without reaching its consumer (``give_back``): its revive is no delivery attempt
    undelivered: bool = False


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
    #: the topic it was read from (the topic or the group's retry topic)
    store_topic: str
    queue_id: int
    flight: Inflight


class AckStatus:
    OK = "OK"
    NOT_FOUND = "NOT_FOUND"


class PopService:
    """``broker_name``: read per record (a renamed broker writes its new name); ``cluster``
    names the revive topic; ``put``: the broker's store put for revived copies (through its
    put pool under SYNC_FLUSH), set before ``start``."""

    def __init__(self, source: PopSource, clock: Clock, *, broker_name: Callable[[], str], cluster: str) -> None:
        self.src = source
        self.clock = clock
        self.broker_name = broker_name
        self.revive_topic = journal.revive_topic(cluster)
        self._queues: dict[tuple[str, str, int], PopQueue] = {}
        #: (deadline, group, topic, queue id, offset) — entries may be stale; checked on pop
        self._deadlines: list[tuple[int, str, str, int, int]] = []
        self.arrivals: Arrivals | None = None
        self.put: Put | None = None
        #: a flight's renewal (the gRPC endpoint's auto renew of a live push consumer's
        #: messages): the new invisible duration, or None to let it be revived
        self.renewal: Callable[[Inflight, int], int | None] | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

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

    # --- the journal -------------------------------------------------------------------------------
    def _record(self, record: journal.Record) -> int:
        """Append a CK/ACK record; its revive queue offset, or -1 when the store refused it
        (logged: the pop itself still holds, only a restart would forget it)."""
        self.src.topics.create_group_topic(self.revive_topic, 1, PERM_READ | PERM_WRITE)
        result = self.src.store.put_message(journal.to_message(record, self.revive_topic, self.clock(),
                                                               self.src.store_host()))
        if not result.status.stored:
            log.warning("pop journal record not stored (%s): %s", result.status.value, record)
            return -1
        return int(result.queue_offset)

    def _ack_record(self, group: str, topic: str, queue_id: int, flight: Inflight) -> None:
        if flight.ck_at >= 0:
            self._record(journal.Ack(group, topic, queue_id, flight.queue_offset, flight.ck_offset,
                                     flight.pop_time_ms, self.broker_name()))

    def _read(self, topic: str, queue_id: int, offset: int, n: int) -> list[MessageExt]:
        result = self.src.store.get_message(topic, queue_id, offset, n)
        out: list[MessageExt] = []
        for buf in result.buffers if result.status is GetMessageStatus.FOUND else ():
            out += [MessageExt.from_decoded(r) for r in self.src.store.k.decode_records(buf, 0, len(buf), 1 << 30, False)]
        return out

    def load(self) -> int:
        """Read the journal back (at start, after the offsets): the flights it left open are
        in flight again until their deadlines. Returns how many."""
        topic = self.revive_topic
        if self.src.topics.get(topic) is None:
            return 0
        end = self.src.store.get_max_offset_in_queue(topic, journal.REVIVE_QUEUE)
        start = self.src.offsets.query(journal.REVIVE_GROUP, topic, journal.REVIVE_QUEUE)
        start = max(start or 0, self.src.store.get_min_offset_in_queue(topic, journal.REVIVE_QUEUE))
        open_: dict[tuple[str, str, int, int], tuple[int, int, int, int]] = {}
        popped_to: dict[tuple[str, str, int], int] = {}
        for at, rec in journal.replay(lambda o, n: self._read(topic, journal.REVIVE_QUEUE, o, n), start, end):
            if isinstance(rec, journal.Checkpoint):
                key3 = (rec.group, rec.topic, rec.queue_id)
                for off in rec.offsets:
                    open_[key3 + (off,)] = (rec.pop_time_ms + rec.invisible_ms, rec.pop_time_ms, rec.start_offset, at)
                    popped_to[key3] = max(popped_to.get(key3, 0), off + 1)
            elif isinstance(rec, journal.Ack):
                open_.pop((rec.group, rec.topic, rec.queue_id, rec.offset), None)
            else:
                for off in rec.offsets:
                    open_.pop((rec.group, rec.topic, rec.queue_id, off), None)
        n = 0
        for (group, t, qid, off), (deadline, pop_time, ck, at) in open_.items():
            q = self.queue(group, t, qid)
            if off < q.next:
                continue  # below the committed offset: done (an offset reset, or acked before the last flush)
            q.inflight[off] = Inflight(off, -1, deadline, pop_time, 0, ck_offset=ck, ck_at=at)
            heapq.heappush(self._deadlines, (deadline, group, t, qid, off))
            n += 1
        for (group, t, qid), nxt in popped_to.items():
            q = self.queue(group, t, qid)
            q.next = max(q.next, nxt)
            self._commit(group, t, qid, q)
        log.info("pop journal %s: %d records read from %d, %d messages still invisible", topic, end - start, start, n)
        self.checkpoint()
        return n

    def checkpoint(self) -> None:
        """The journal's replay position: the oldest CK of a message still in flight (the
        records before it are settled), kept as the revive group's offset."""
        topic = self.revive_topic
        if self.src.topics.get(topic) is None:
            return
        ats = [f.ck_at for q in self._queues.values() for f in q.inflight.values() if f.ck_at >= 0]
        pos = min(ats) if ats else self.src.store.get_max_offset_in_queue(topic, journal.REVIVE_QUEUE)
        self.src.offsets.commit(journal.REVIVE_GROUP, topic, journal.REVIVE_QUEUE, pos)

    # --- receive ---------------------------------------------------------------------------------
    def pop(self, group: str, topic: str, queue_id: int, max_count: int,
            expression: str | Sql92Filter, invisible_ms: int, max_bytes: int | None = None) -> list[Popped]:
        """Up to ``max_count`` messages, made invisible for ``invisible_ms``; ``expression`` is
        a tag expression ("*", "a || b") or a compiled SQL92 filter. ``max_bytes``: stop once
        the messages taken reach that many stored bytes (the first one is always taken)."""
        q = self.queue(group, topic, queue_id)
        q.orderly = False  # the group may have stopped being a FIFO group: expired ones are revived again
        return self._take(q, group, topic, queue_id, max_count, expression, invisible_ms, max_bytes)

    def pop_orderly(self, group: str, topic: str, queue_id: int, max_count: int,
                    expression: str | Sql92Filter, invisible_ms: int, max_bytes: int | None = None) -> list[Popped]:
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
        return self._take(q, group, topic, queue_id, max_count, expression, invisible_ms, max_bytes)

    def pop_topic(self, group: str, topic: str, queue_ids: range | list[int], batch: int,
                  expression: str | Sql92Filter, invisible_ms: int, orderly: bool = False,
                  max_bytes: int | None = None) -> list[Popped]:
        """One receive of a topic: the group's retry copies first (they waited longest), then
        ``queue_ids`` in order, until ``batch`` messages are out (or, with ``max_bytes``, that
        many stored bytes: a message larger than what is left is taken only as the first)."""
        take = self.pop_orderly if orderly else self.pop
        out: list[Popped] = []
        size = 0
        retry = pop_retry_topic(group, topic)
        queues = ([(retry, 0)] if self.src.topics.get(retry) is not None else []) + [(topic, q) for q in queue_ids]
        for store_topic, qid in queues:
            if len(out) >= batch or (max_bytes is not None and size >= max_bytes):
                break
            got = take(group, store_topic, qid, batch - len(out), expression, invisible_ms,
                       None if max_bytes is None else max(1, max_bytes - size))
            out += got
            size += sum(p.message.store_size for p in got)
        return out

    def is_orderly(self, group: str, topic: str, queue_id: int) -> bool:
        q = self._queues.get((group, topic, queue_id))
        return q is not None and q.orderly

    def rest(self, group: str, topic: str, queue_id: int) -> int:
        """Messages of the queue not yet handed out (the pop answer's ``restNum``)."""
        q = self._queues.get((group, topic, queue_id))
        nxt = q.next if q is not None else (self.src.offsets.query(group, topic, queue_id) or 0)
        return max(0, self.src.store.get_max_offset_in_queue(topic, queue_id) - nxt)

    def _take(self, q: PopQueue, group: str, topic: str, queue_id: int, max_count: int,
              expression: str | Sql92Filter, invisible_ms: int, max_bytes: int | None = None) -> list[Popped]:
        if isinstance(expression, Sql92Filter):  # a SQL92 receive: every record read, then matched
            sql, tags, codes = expression, None, None
        else:
            sql = None
            tags = frozenset(split_tags(expression))  # empty for "*" (and " || ": no tag filter)
            codes = frozenset(tag_codes(tags)) if tags else None
        now = self.clock()
        out: list[Popped] = []
        start = q.next
        taken = 0  # stored bytes of the records read (``max_bytes`` counts them as the store does)
        while len(out) < max_count and (max_bytes is None or taken < max_bytes):
            # the store never exceeds its byte cap but for a first record larger than it
            cap = None if max_bytes is None else max_bytes - taken
            result = self.src.store.get_message(topic, queue_id, q.next, max_count - len(out), max_bytes=cap,
                                                tag_codes=codes)
            status = result.status
            if status in (GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY):
                log.info("pop %s %s:%d offset %d out of range [%d, %d]: moved to %d", group, topic, queue_id,
                         q.next, result.min_offset, result.max_offset, result.next_begin_offset)
                q.next = start = result.next_begin_offset
                continue
            if status is not GetMessageStatus.FOUND:
                if status in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING,
                              GetMessageStatus.OFFSET_FOUND_NULL) and result.next_begin_offset > q.next:
                    q.next = result.next_begin_offset  # nothing wanted in that window: it is done
                    continue
                break
            taken += result.buffer_total_size if cap is not None else 0
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
                    flight = Inflight(msg.queue_offset, msg.commitlog_offset, now + invisible_ms, now, attempt,
                                      ck_offset=start)
                    q.inflight[msg.queue_offset] = flight
                    heapq.heappush(self._deadlines, (flight.deadline_ms, group, topic, queue_id, msg.queue_offset))
                    out.append(Popped(msg, topic, queue_id, flight))
            q.next = result.next_begin_offset
        if out and not q.orderly:
            at = self._record(journal.Checkpoint(group, topic, queue_id, start, now, invisible_ms,
                                                 tuple(p.flight.queue_offset for p in out), self.broker_name()))
            for p in out:
                p.flight.ck_at = at
        self._commit(group, topic, queue_id, q)
        return out

    # --- ack / change invisible duration ------------------------------------------------------------
    def ack(self, group: str, topic: str, queue_id: int, queue_offset: int) -> str:
        """Done with a message. A handle from before a restart still works: its offset is
        at or past the committed one, so it is remembered and skipped when reached."""
        q = self.queue(group, topic, queue_id)
        flight = q.inflight.pop(queue_offset, None)
        if flight is not None:
            self._ack_record(group, topic, queue_id, flight)
            if q.orderly:
                q.attempts.pop(queue_offset, None)
                if q.inflight and queue_offset > min(q.inflight):
                    q.acked_ahead.add(queue_offset)  # skipped if the earlier one is handed out again
                elif not q.inflight:
                    q.acked_ahead = {o for o in q.acked_ahead if o >= q.next}
                self._free(topic)
            self._commit(group, topic, queue_id, q)
            return AckStatus.OK
        if queue_offset >= q.next:
            if queue_offset < self.src.store.get_max_offset_in_queue(topic, queue_id):
                q.acked_ahead.add(queue_offset)
                return AckStatus.OK
            return AckStatus.NOT_FOUND
        return AckStatus.OK  # already done (acked before, or revived): acking again is harmless

    def ack_many(self, group: str, topic: str, queue_id: int, offsets: list[int]) -> None:
        """Several acks of one queue (a BATCH_ACK_MESSAGE entry): one journal record for them
        all, as RocketMQ writes one ``BatchAckMsg``; offsets not in flight are handled as
        ``ack`` handles them."""
        q = self.queue(group, topic, queue_id)
        if q.orderly:  # FIFO state: one by one (no records)
            for off in offsets:
                self.ack(group, topic, queue_id, off)
            return
        done = [f for f in (q.inflight.pop(off, None) for off in offsets) if f is not None]
        for off in offsets:
            if off >= q.next and off not in q.inflight and off < self.src.store.get_max_offset_in_queue(topic, queue_id):
                q.acked_ahead.add(off)
        recorded = [f for f in done if f.ck_at >= 0]
        if recorded:
            self._record(journal.BatchAck(group, topic, queue_id, tuple(f.queue_offset for f in recorded),
                                          recorded[0].ck_offset, recorded[0].pop_time_ms, self.broker_name()))
        if done:
            self._commit(group, topic, queue_id, q)

    def _free(self, topic: str) -> None:
        if self.arrivals is not None:
            self.arrivals.wake(topic)  # a FIFO queue may be free: parked receives look again

    def change_invisible(self, group: str, topic: str, queue_id: int, queue_offset: int,
                         invisible_ms: int) -> Inflight | None:
        """A new deadline from now; None when the message is not in flight (revived already,
        acked, or handed out before a restart and not yet handed out again)."""
        q = self.queue(group, topic, queue_id)
        flight = q.inflight.get(queue_offset)
        if flight is None:
            return None
        self._move_deadline(group, topic, queue_id, flight, invisible_ms)
        return flight

    def give_back(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        """A message popped for a consumer that never got it (its stream stalled or ended
        first): visible again now, and not counted as a delivery, so a consumer that keeps
        not reading cannot walk messages to the DLQ. (After a restart the journal has only
        the new deadline: it then counts as one.)"""
        flight = self.change_invisible(group, topic, queue_id, queue_offset, 0)
        if flight is None:
            return
        flight.renew_client = None
        q = self.queue(group, topic, queue_id)
        if q.orderly:  # handed out again in place: this pop's attempt is taken back
            if q.attempts.get(queue_offset, 0) > 0:
                q.attempts[queue_offset] -= 1
        else:
            flight.undelivered = True

    def _move_deadline(self, group: str, topic: str, queue_id: int, flight: Inflight, invisible_ms: int) -> None:
        now = self.clock()
        if flight.ck_at >= 0:  # as RocketMQ does: a CK of this message alone, then an ACK of the old one
            at = self._record(journal.Checkpoint(group, topic, queue_id, flight.queue_offset, now, invisible_ms,
                                                 (flight.queue_offset,), self.broker_name()))
            self._ack_record(group, topic, queue_id, flight)
            flight.ck_at = at
        flight.ck_offset = flight.queue_offset
        flight.deadline_ms = now + invisible_ms
        flight.pop_time_ms = now
        heapq.heappush(self._deadlines, (flight.deadline_ms, group, topic, queue_id, flight.queue_offset))
        self.wake()

    def adopt(self, group: str, topic: str, queue_id: int, queue_offset: int, commitlog_offset: int,
              invisible_ms: int) -> Inflight | None:
        """A handle from before a restart whose message is not in flight (a FIFO queue's, whose
        state the journal does not keep): it is in flight again from now (``pop`` skips it).
        None if the message is done or gone."""
        q = self.queue(group, topic, queue_id)
        if queue_offset < q.next or queue_offset in q.acked_ahead \
                or queue_offset >= self.src.store.get_max_offset_in_queue(topic, queue_id):
            return None
        now = self.clock()
        flight = q.inflight[queue_offset] = Inflight(queue_offset, commitlog_offset, now + invisible_ms, now, 0,
                                                     ck_offset=queue_offset)
        heapq.heappush(self._deadlines, (flight.deadline_ms, group, topic, queue_id, queue_offset))
        self.wake()
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
        flight = q.inflight.pop(offset, None) if q is not None else None
        if q is not None and flight is not None:
            self._ack_record(group, topic, queue_id, flight)
            self._commit(group, topic, queue_id, q)

    def message_of(self, topic: str, queue_id: int, flight: Inflight) -> MessageExt | None:
        """The stored message a flight names (by commitlog offset, or by queue offset for one
        restored from the journal, which then learns both)."""
        if flight.commitlog_offset >= 0:
            return self.src.store.look_message_by_offset(flight.commitlog_offset)
        found = self._read(topic, queue_id, flight.queue_offset, 1)
        if not found or found[0].queue_offset != flight.queue_offset:
            return None
        flight.commitlog_offset = found[0].commitlog_offset
        if not flight.attempt:
            flight.attempt = found[0].reconsume_times + 1
        return found[0]

    def revive_copy(self, group: str, origin_topic: str, msg: MessageExt,
                    max_attempts: int, undelivered: bool = False) -> MessageExtBrokerInner:
        """The copy of a message whose invisible duration ran out: the retry queue, or the DLQ
        once ``max_attempts`` deliveries were made. ``undelivered``: the last pop never reached
        a consumer (``give_back``), so it is not one of them."""
        props = dict(msg.properties)
        props.pop(Prop.DELAY, None)
        props.pop(Prop.CLUSTER, None)
        props.setdefault(Prop.RETRY_TOPIC, origin_topic)
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, msg.offset_msg_id)
        props[Prop.WAIT] = "false"
        attempts_made = msg.reconsume_times + (0 if undelivered else 1)
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

    async def revive_due(self) -> int:
        """Revive every message whose invisible duration ran out (or renew it, or wake the
        receives parked on its FIFO queue). Returns how many were revived."""
        assert self.put is not None, "PopService.put is set before start"
        n = 0
        now = self.clock()
        for group, store_topic, qid, flight in self.due(now):
            renew = self.renewal(flight, now) if self.renewal is not None else None
            if renew is not None:
                self._move_deadline(group, store_topic, qid, flight, renew)
                continue
            if self.is_orderly(group, store_topic, qid):
                # a FIFO queue hands the message out again in place (``pop_orderly``): no copy,
                # but receives parked on the blocked queue look again now
                self._free(store_topic)
                continue
            msg = self.message_of(store_topic, qid, flight)
            if msg is not None:
                origin = msg.properties.get(Prop.RETRY_TOPIC, store_topic) if store_topic.startswith(RETRY_PREFIX) \
                    else store_topic
                copy = self.revive_copy(group, origin, msg, self.src.groups.retry_max_times(group) + 1,
                                        flight.undelivered)
                result = await self.put(copy)
                self.src.stats.on_send_back(group, copy.topic, result)  # counted as a 4.x send-back is
                if not result.status.stored:
                    log.warning("revive of %s:%d@%d for %s failed (%s): retried later", store_topic, qid,
                                flight.queue_offset, group, result.status.value)
                    self._move_deadline(group, store_topic, qid, flight, 1000)
                    continue
                if copy.topic == dlq_topic(group):
                    log.info("%s:%d@%d for %s moved to %s after %d deliveries", store_topic, qid,
                             flight.queue_offset, group, copy.topic, msg.reconsume_times + 1)
                self.src.schedule_register()
            self.revived(group, store_topic, qid, flight.queue_offset)
            n += 1
        return n

    # --- the revive task ---------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop, put: Put) -> None:
        """Serve: parked receives learn of arrivals; the revive task runs until ``shutdown``."""
        self.put = put
        self.arrivals = Arrivals(loop, install=self.src.store.add_arrival_listener)  # at the first receive
        self._wake = asyncio.Event()
        self._task = loop.create_task(self._run(self._wake))

    def wake(self) -> None:
        """A deadline earlier than the revive task expects."""
        if self._wake is not None:
            self._wake.set()

    async def _run(self, wake: asyncio.Event) -> None:
        while True:
            await wait_for_wake(wake, self.next_deadline(), self.clock(), IDLE_CHECK_S)
            try:
                await self.revive_due()
                self.checkpoint()
            except (MQError, OSError) as e:
                log.warning("pop revive failed: %s", e)

    async def shutdown(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        self.checkpoint()

    def forget_group(self, group: str) -> None:
        for key in [k for k in self._queues if k[0] == group]:
            del self._queues[key]


def pick_queue(write_queue_nums: int, message_group: str | None) -> int:
    """The queue for a send: a message group always maps to the same queue (FIFO), as the
    proxy's selector does with the group's Java hash code; otherwise any queue."""
    if message_group:
        return abs(string_hash(message_group)) % write_queue_nums
    return random.randrange(write_queue_nums)
