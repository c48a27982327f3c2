"""ScheduleMessageService: delivers delayed messages when their time comes (delay levels).

The store parks a message with ``DELAY=n`` in ``SCHEDULE_TOPIC_XXXX`` queue ``n-1`` with
``REAL_TOPIC``/``REAL_QID`` kept and its deliver time as the unit's tagsCode
(``writer.py``). Every message of a level waits the same time, so each level's queue is
ordered by deliver time: delivery walks it from the level's offset in
``config/delayOffset.json`` and stops at the first message not yet due.

A due message is rebuilt as a new message for its real topic and queue (same body,
flag, sysFlag, born time/host, store host, reconsume times; properties as stored, with
``DELAY``, ``REAL_TOPIC`` and ``REAL_QID`` left in as a 4.9 broker leaves them, so a consumer
sees the level it was delayed by; ``delay_delivered`` keeps the store from parking it again) and put
through the store's normal put path, so it gets a new queue offset, is indexed under the
real topic, its tagsCode is recomputed from ``TAGS`` and long polls wake. The due
messages of a turn go in one ``put_messages`` call (one put-lock hold, one dispatch
scan), which is what keeps 100,000 messages due at once within a second or two. A deliver
time later than ``now + level delay`` (the clock went back, or a foreign store) is
corrected to now (store-format.md §7).

Progress is at-least-once: a level's offset moves only after its message was stored,
and is persisted every ``persist_interval_ms`` and at shutdown; after a crash the
messages delivered since the last persist are delivered again.

Threads: one service thread serves all levels (the machine has 2 cores and every
delivery serialises on the store's put lock anyway). Each turn gives each due level up
to ``batch_max`` messages, so 100,000 messages due on one level do not starve the
others. Without due work the thread sleeps until the earliest known deliver time,
checking idle levels every 100 ms. Tests drive ``deliver_due(now_ms)`` directly with an
injected clock instead of starting the thread (never both).
"""
from __future__ import annotations

import dataclasses
import enum
import logging
from typing import TYPE_CHECKING, Callable

import numpy as np

from mqcore.broker.metadata import DelayOffsetTable
from mqcore.errors import MQError, RecordDecodeError
from mqcore.format import layout as L
from mqcore.message import (
    SCHEDULE_TOPIC,
    MessageExtBrokerInner,
    Prop,
    string_to_properties,
)
from mqcore.service import ServiceThread
from mqcore.store.results import PutMessageStatus

if TYPE_CHECKING:
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)

#: RocketMQ ``FIRST_DELAY_TIME``: first check after start
FIRST_DELAY_MS = 1000
#: RocketMQ ``DELAY_FOR_A_WHILE``: idle check interval
IDLE_CHECK_MS = 100
#: RocketMQ ``DELAY_FOR_A_PERIOD``: retry after the store refused a delivery
RETRY_AFTER_FAILURE_MS = 10_000
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
#: statuses that will never succeed for this message: skip it rather than block the level
_PERMANENT = frozenset({PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED})


class Skip(enum.Enum):
    """Why a due message is not put (its unit is passed over)."""

    GONE = "gone"            # its record was deleted (disk cleanup) or is unreadable
    DROPPED = "dropped"      # malformed (no REAL_TOPIC/REAL_QID, corrupt): logged


@dataclasses.dataclass
class LevelState:
    """One delay level: its queue offset (next unit to deliver) and when to look again."""

    level: int
    delay_ms: int
    offset: int = 0
    next_check_ms: int = 0
    delivered: int = 0

    @property
    def queue_id(self) -> int:
        return self.level - 1


class ScheduleMessageService(ServiceThread):
    """Delay levels: moves due messages from SCHEDULE_TOPIC_XXXX back to their real topic."""

    name = "mqcore-schedule"

    def __init__(self, store: MessageStore, offsets: DelayOffsetTable, *, clock: Callable[[], int] | None = None,
                 persist_interval_ms: int = 10_000, first_delay_ms: int = FIRST_DELAY_MS, batch_max: int = 512,
                 retry_after_failure_ms: int = RETRY_AFTER_FAILURE_MS) -> None:
        super().__init__()
        self.store = store
        self.offsets = offsets
        self.clock = clock or store.clock
        self.persist_interval_ms = persist_interval_ms
        self.first_delay_ms = first_delay_ms
        self.batch_max = batch_max
        self.retry_after_failure_ms = retry_after_failure_ms
        self.levels = [LevelState(i + 1, d) for i, d in enumerate(store.config.delay_levels_ms)]
        self._k = store.k

    # --- lifecycle ------------------------------------------------------------------------------
    def load(self) -> None:
        """Take each level's offset from ``delayOffset.json``, corrected into the queue's
        [min, max] range (RocketMQ ``correctDelayOffset``)."""
        for st in self.levels:
            stored = self.offsets.query(st.level)
            st.offset = stored or 0
            lo, hi = self._bounds(st)
            if st.offset < lo:
                if stored is not None:
                    log.warning("delay level %d: offset %d is below the queue's min offset %d "
                                "(messages deleted by disk cleanup); starting at %d", st.level, st.offset, lo, lo)
                st.offset = lo
            elif st.offset > hi:
                log.error("delay level %d: offset %d is beyond the queue's max offset %d; starting at %d",
                          st.level, st.offset, hi, hi)
                st.offset = hi
            if stored != st.offset:
                self.offsets.update(st.level, st.offset)

    def start(self) -> None:
        self.load()
        now = self.clock()
        for st in self.levels:
            st.next_check_ms = now
        super().start()

    def shutdown(self, timeout_s: float = 10) -> None:
        super().shutdown(timeout_s)
        self.persist()

    def persist(self) -> None:
        self.offsets.persist()

    def run(self) -> None:
        if self.wait_first():
            return
        last_persist = self.clock()
        while not self.stopped:
            now = self.clock()
            try:
                self.deliver_due(now)
                if now - last_persist >= self.persist_interval_ms:
                    self.persist()
                    last_persist = now
            except (MQError, OSError) as e:  # keep delivering; the offsets say where to resume
                log.exception("delay delivery failed, retrying in %d ms: %s", self.retry_after_failure_ms, e)
                if self._stopped.wait(self.retry_after_failure_ms / 1000):
                    return
            wait_ms = min(min(st.next_check_ms for st in self.levels) - self.clock(), IDLE_CHECK_MS)
            if wait_ms > 0:
                self.wait_for_running(wait_ms / 1000)

    def wait_first(self) -> bool:
        """Sleep ``first_delay_ms``; True when shut down meanwhile."""
        self.wait_for_running(self.first_delay_ms / 1000)
        return self.stopped

    # --- delivery ---------------------------------------------------------------------------------
    def deliver_due(self, now_ms: int | None = None) -> int:
        """One turn: every level whose check time has come delivers up to ``batch_max`` due
        messages. Returns how many were delivered."""
        now = self.clock() if now_ms is None else now_ms
        total = 0
        for st in self.levels:
            if st.next_check_ms <= now and not self.stopped:
                total += self._deliver_level(st, now)
        return total

    def _bounds(self, st: LevelState) -> tuple[int, int]:
        lo = self.store.get_min_offset_in_queue(SCHEDULE_TOPIC, st.queue_id)
        hi = self.store.get_max_offset_in_queue(SCHEDULE_TOPIC, st.queue_id)
        return max(lo, 0), hi

    def _deliver_level(self, st: LevelState, now: int) -> int:
        lo, hi = self._bounds(st)
        if st.offset < lo:
            log.warning("delay level %d: messages %d..%d were deleted by disk cleanup before delivery; "
                        "skipping to %d", st.level, st.offset, lo - 1, lo)
            self._advance(st, lo)
        units = self.store.get_consume_queue_units(SCHEDULE_TOPIC, st.queue_id, st.offset, self.batch_max) \
            if st.offset < hi else None
        if units is None:
            st.next_check_ms = now + IDLE_CHECK_MS
            return 0
        phys, sizes, tags = units
        deliver_at = np.where(tags > now + st.delay_ms, now, tags)  # a deliver time too far ahead: now
        not_due = np.flatnonzero(deliver_at > now)
        n_due = int(not_due[0]) if len(not_due) else len(phys)
        msgs, units_of = [], []
        gone = 0
        for i in range(n_due):
            if sizes[i] == L.CQ_FILLER_SIZE:  # a blank unit (queue re-created after deletion): no message
                continue
            msg = self._time_up(int(phys[i]))
            if msg is Skip.GONE:
                gone += 1
            elif isinstance(msg, MessageExtBrokerInner):
                msgs.append(msg)
                units_of.append(i)
        delivered = 0
        for i, msg, result in zip(units_of, msgs, self.store.put_messages(msgs) if msgs else ()):
            if result.status.stored:
                delivered += 1
            elif result.status in _PERMANENT:
                log.error("delayed message at commitlog offset %d cannot be delivered to %s-%d: %s %s; dropped",
                          int(phys[i]), msg.topic, msg.queue_id, result.status.value, result.remark)
            else:  # refused for now (disk full, shutting down): resume from this message later
                log.warning("delivery of delay level %d paused for %d ms: the store refused a put (%s %s)",
                            st.level, self.retry_after_failure_ms, result.status.value, result.remark)
                st.next_check_ms = now + self.retry_after_failure_ms
                self._advance(st, st.offset + i)
                self._note(st, delivered, gone)
                return delivered
        self._advance(st, st.offset + n_due)
        self._note(st, delivered, gone)
        # the first message not yet due tells when to look again; a full batch: at once
        st.next_check_ms = int(deliver_at[n_due]) if n_due < len(phys) else now
        return delivered

    def _advance(self, st: LevelState, offset: int) -> None:
        st.offset = offset
        self.offsets.update(st.level, offset)

    @staticmethod
    def _note(st: LevelState, delivered: int, gone: int) -> None:
        st.delivered += delivered
        if gone:
            log.warning("delay level %d: %d due message(s) were no longer in the commitlog (deleted by disk "
                        "cleanup); skipped", st.level, gone)

    def _time_up(self, phy_offset: int) -> MessageExtBrokerInner | Skip:
        """The message to put for its real topic (RocketMQ ``messageTimeup``), or why
        there is nothing to deliver."""
        rec = self.store.select_one_message_by_offset(phy_offset)
        if rec is None:
            return Skip.GONE
        try:
            stored = self._k.decode_records(rec, 0, len(rec), 1, False)[0]
        except RecordDecodeError as e:
            log.error("delayed message at commitlog offset %d is corrupt (%s); dropped", phy_offset, e)
            return Skip.DROPPED
        props = string_to_properties(stored.properties)
        real_topic = props.get(Prop.REAL_TOPIC)
        try:
            real_qid = int(props.get(Prop.REAL_QID, ""))
        except ValueError:
            real_qid = -1
        # a real topic of SCHEDULE_TOPIC itself (sent there before such sends were refused)
        # would come back as due at once, forever: drop it
        if not real_topic or real_qid < 0 or real_topic in (TRANS_HALF_TOPIC, SCHEDULE_TOPIC):
            log.error("delayed message at commitlog offset %d has no usable REAL_TOPIC/REAL_QID (%r, %r); dropped",
                      phy_offset, real_topic, props.get(Prop.REAL_QID))
            return Skip.DROPPED
        props[Prop.WAIT] = "false"  # as RocketMQ: a delivery never waits for a sync flush
        sys_flag = stored.sys_flag
        born_host, store_host = L.record_hosts(rec, sys_flag)
        return MessageExtBrokerInner(topic=real_topic, body=stored.body, queue_id=real_qid, flag=stored.flag,
                                     properties=props, sys_flag=sys_flag, born_timestamp=stored.born_timestamp,
                                     born_host=born_host, store_host=store_host,
                                     reconsume_times=stored.reconsume_times, delay_delivered=True)

    # --- facts ------------------------------------------------------------------------------------
    def max_delay_level(self) -> int:
        return len(self.levels)

    def pending(self) -> dict[int, int]:
        """Messages waiting per level (queue max offset minus delivery offset)."""
        return {st.level: self._bounds(st)[1] - st.offset for st in self.levels}
