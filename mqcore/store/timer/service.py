"""TimerMessageStore: moves timer messages into the wheel and due ones out to their topics.

Enqueue: the consume queue of ``rmq_sys_wheel_timer`` queue 0 is read from the queue offset
in ``timercheck``; each message's ``TIMER_OUT_MS`` picks its slot, a 52-byte unit is
appended to ``timerlog`` pointing back at the slot's previous unit, and the slot's last
position moves to it. A message already due when read is put to its topic at once
(``TIMER_ENQUEUE_MS`` = Long.MAX_VALUE, as Apache marks it).

Dequeue: the read time walks the wheel one slot (``timerPrecisionMs``) at a time, never
past the write time (the current second, moved only once every timer that arrived before
it is in the wheel). A slot's chain is walked back from its last unit: recall markers
(``TIMER_DEL_UNIQKEY``) first, then every other unit in arrival order: its message is
re-read from the commitlog and held until its own due time (the millisecond its property
names: a slot only rounds it down to the second, and delivering a slot when its second is
over made every timer up to a second late), then put to ``REAL_TOPIC``/``REAL_QID`` with ``TIMER_ENQUEUE_MS``
(the write second it entered the wheel) and ``TIMER_DEQUEUE_MS`` added; ``TIMER_DELIVER_MS``,
``TIMER_OUT_MS``, ``REAL_TOPIC`` and ``REAL_QID`` stay (what Apache 5.3.3 stores), unless a
marker recalled its ``UNIQ_KEY``. A unit due farther away than the wheel spans (rolled)
is put back into the timer topic and comes round again.

Memory: nothing per pending timer is held in Python; a turn holds one slot's unit
offsets, and the current second's messages are read ahead of their millisecond up to
``HELD_BYTES_MAX`` of bodies (the rest are read when the second is over). Restart: the read time, queue offset and timerlog
flush position are in ``timercheck`` (written after every slot, flushed every
``timerFlushIntervalMs``); at load the units after the flush position relink their slots
and the queue offset resumes after the newest unit's message. A slot delivered in part
when the process died is delivered again in whole (at least once).

Threads: one service thread (``ServiceThread``) does both; tests drive ``turn(now)``.
"""
from __future__ import annotations

import contextlib
import dataclasses
import heapq
import logging
import os
from typing import Any, Callable

import numpy as np

from mqcore.errors import MQError, RecordDecodeError
from mqcore.format import layout as L
from mqcore.format import timer as T
from mqcore.message import MessageExtBrokerInner, Prop, string_to_properties
from mqcore.service import ServiceThread
from mqcore.store import config_files
from mqcore.store.results import PutMessageStatus
from mqcore.store.timer import rewrite
from mqcore.store.timer.files import TimerCheckpoint, TimerLog, TimerMetrics, TimerWheel, topic_hash

log = logging.getLogger(__name__)

#: statuses that will never succeed for this message: dropped (Apache PUT_NO_RETRY)
_PERMANENT = frozenset({PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                        PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL, PutMessageStatus.WHEEL_TIMER_NOT_ENABLE})
IDLE_MS = 100
RETRY_AFTER_FAILURE_MS = 1000
METRICS_PERSIST_MS = 10_000
#: body bytes of the current slot's messages read ahead of their due time, at most (the rest
#: is read when the slot's second is over)
HELD_BYTES_MAX = 16 << 20
#: how often timerlog files whose units all point below the commitlog's first offset are deleted
CLEAN_INTERVAL_MS = 30_000


@dataclasses.dataclass(slots=True)
class _Stored:
    """A timer message read back from the commitlog: its record, decoded fields, properties."""

    rec: memoryview
    decoded: Any
    props: dict[str, str]


class TimerMessageStore(ServiceThread):
    """The timer wheel of one store (RocketMQ 5 ``TimerMessageStore``)."""

    name = "mqcore-timer"

    def __init__(self, store: Any, *, clock: Callable[[], int] | None = None, batch: int = 256):
        super().__init__()
        self.store = store
        self.clock = clock or store.clock
        cfg = store.config
        self.precision_ms = cfg.timer_precision_ms
        self.flush_interval_ms = cfg.timer_flush_interval_ms
        self.batch = batch
        self.root = cfg.store_path
        self.log_file_size = cfg.timerlog_file_size_bytes
        self.roll_window_ms = (T.SLOTS_TOTAL - T.BLANK_SLOTS) * self.precision_ms
        self.wheel: TimerWheel | None = None
        self.timerlog: TimerLog | None = None
        self.check: TimerCheckpoint | None = None
        self.metrics = TimerMetrics(os.path.join(cfg.config_dir, T.TIMERMETRICS_FILE))
        self.queue_offset = 0
        self.read_time_ms = 0
        self.write_time_ms = 0
        self.delivered = 0
        self.recalled = 0
        self._last_flush = 0
        self._last_metrics = 0
        self._metrics_dirty = False
        self._pause_until = 0
        self._last_clean = 0
        # the slot being delivered in part (the current second's): the newest unit read from
        # it, its messages held until their own due millisecond, and the recalled UNIQ_KEYs
        self._open_slot: int | None = None
        self._open_pos = -1
        self._held: list[tuple[int, int, MessageExtBrokerInner, str | None, int]] = []
        self._held_seq = 0
        self._held_bytes = 0
        self._open_done = 0  # messages of the open slot put already (the wheel still counts them)
        self._put_units: set[int] = set()  # their unit positions (saved at a clean stop)
        self._skip: set[int] = set()  # unit positions put before the last clean stop
        self._recalled: set[str] = set()

    # --- lifecycle ------------------------------------------------------------------------------
    @property
    def opened(self) -> bool:
        return self.wheel is not None

    def _files_exist(self) -> bool:
        return os.path.exists(os.path.join(self.root, T.TIMERWHEEL_FILE)) or os.path.isdir(
            os.path.join(self.root, T.TIMERLOG_DIR))

    def load(self) -> None:
        """Open the timer files if the store has them (a store that never held a timer
        gets them when its first timer arrives)."""
        if self._files_exist():
            self._open()

    def _open(self) -> None:
        now = self.clock()
        self.check = TimerCheckpoint(os.path.join(self.store.config.config_dir, T.TIMERCHECK_FILE))
        self.wheel = TimerWheel(os.path.join(self.root, T.TIMERWHEEL_FILE), self.precision_ms)
        self.timerlog = TimerLog(os.path.join(self.root, T.TIMERLOG_DIR), self.log_file_size)
        self.timerlog.load()
        self.metrics.load()
        self._recover(now)

    def _recover(self, now: int) -> None:
        c, tl, wheel = self.check, self.timerlog, self.wheel
        assert c is not None and tl is not None and wheel is not None
        relinked = 0
        last_of_slot: dict[int, int] = {}
        for base, units in tl.units_from(max(0, c.flush_pos - self.log_file_size)):
            ok = (units["size"] == T.UNIT_SIZE) & ((units["magic"] | 0xF) == 0xF)
            due = units["write_ms"].astype(np.int64) + units["delta"].astype(np.int64)
            for i in np.flatnonzero(ok):
                last_of_slot[int(due[i])] = base + int(i) * T.UNIT_SIZE
        for due_ms, pos in last_of_slot.items():
            first, last, _num, _magic = wheel.get(due_ms)
            if last < pos:
                wheel.revise_last(due_ms, pos)
                relinked += 1
        offset = c.queue_offset
        newest = tl.last_unit_offset()
        if newest >= 0:
            u = tl.unit(newest)
            rec = self.store.select_one_message_by_offset(u[5]) if u else None
            if rec is not None and len(rec) >= L.REC_QUEUEOFFSET + 8:
                offset = max(offset, T.INT64.unpack_from(rec, L.REC_QUEUEOFFSET)[0] + 1)
        lo = self.store.get_min_offset_in_queue(T.TIMER_TOPIC, 0)
        hi = self.store.get_max_offset_in_queue(T.TIMER_TOPIC, 0)
        self.queue_offset = min(max(offset, lo), hi)
        floor = now // self.precision_ms * self.precision_ms
        earliest = floor - (T.SLOTS_TOTAL - T.BLANK_SLOTS) * self.precision_ms
        self.read_time_ms = max(c.read_time_ms, earliest) if c.existed and c.read_time_ms else floor
        self.write_time_ms = self.read_time_ms
        self._load_open_slot()
        pending = wheel.pending(self.read_time_ms)
        log.info("timer: read time %d, timer queue offset %d, %d timer(s) pending, %d slot(s) relinked",
                 self.read_time_ms, self.queue_offset, pending, relinked)

    def start(self) -> None:
        self.load()
        super().start()

    def shutdown(self, timeout_s: float = 10) -> None:
        super().shutdown(timeout_s)
        self.close()

    def close(self) -> None:
        if self.wheel is not None and self.timerlog is not None and self.check is not None:
            self._finish_open_slot(self.clock())
            self._save_open_slot()
            self._checkpoint(self.clock())
            self.flush(force_metrics=True)
            left = self.pending()
            if left > 0:  # said at every stop: a 4.9 broker given this store would never deliver them
                log.warning("timer: %d timer message(s) still pending in %s (Apache RocketMQ 5.x delivers "
                            "them from this store; a 4.9 broker would not)", left, T.TIMER_TOPIC)
            self.timerlog.close()
            self.wheel.close()
            self.check.close()
        self.wheel = None
        self.timerlog = None
        self.check = None

    def run(self) -> None:
        while not self.stopped:
            now = self.clock()
            try:
                busy = self.turn(now)
            except (MQError, OSError) as e:  # keep going; the checkpoint says where to resume
                log.exception("timer turn failed, retrying in %d ms: %s", RETRY_AFTER_FAILURE_MS, e)
                self.wait_for_running(RETRY_AFTER_FAILURE_MS / 1000)
                continue
            if not busy:
                now = self.clock()
                wait = min(IDLE_MS, self.precision_ms - now % self.precision_ms + 1)
                held = self.next_due_ms()
                if held is not None:  # a message of the current slot comes due before that
                    wait = min(wait, held - now)
                self.wait_for_running(max(1, wait) / 1000)

    # --- one turn ---------------------------------------------------------------------------------
    def turn(self, now: int) -> bool:
        """Enqueue what arrived, deliver the due slots, flush when due; True if work remains."""
        if not self.opened:
            if self.store.get_max_offset_in_queue(T.TIMER_TOPIC, 0) <= 0:
                return False
            self._open()
        more = self.enqueue(now)
        if not more:  # every timer sent before this second is in the wheel
            self.write_time_ms = max(self.write_time_ms, now // self.precision_ms * self.precision_ms)
        more = self.dequeue(now) or more
        if now - self._last_flush >= self.flush_interval_ms:
            self.flush()
            self._last_flush = now
        if now - self._last_clean >= CLEAN_INTERVAL_MS and self.timerlog is not None:
            self._last_clean = now
            dropped = self.timerlog.delete_below(self.store.get_min_phy_offset())
            if dropped:
                log.info("timer: deleted %d timerlog file(s) whose messages the commitlog no longer has", dropped)
        return more

    def enqueue(self, now: int) -> bool:
        """Move up to ``batch`` timers from the timer queue into the wheel; True if more wait."""
        lo = self.store.get_min_offset_in_queue(T.TIMER_TOPIC, 0)
        if self.queue_offset < lo:
            log.warning("timer: queue offset %d below the timer queue's min %d (deleted by cleanup)",
                        self.queue_offset, lo)
            self.queue_offset = lo
        units = self.store.get_consume_queue_units(T.TIMER_TOPIC, 0, self.queue_offset, self.batch)
        if units is None:
            return False
        phys, sizes, _tags = units
        due_now: list[MessageExtBrokerInner] = []
        for i in range(len(phys)):
            phy, size = int(phys[i]), int(sizes[i])
            if size == L.CQ_FILLER_SIZE:
                continue
            stored = self._read(phy)
            if stored is None:
                continue
            props = stored.props
            try:  # (a timer stored by mqcore before it had the wheel carries TIMER_DELIVER_MS only)
                out_ms = int(props.get(T.PROP_TIMER_OUT_MS) or props.get(T.PROP_TIMER_DELIVER_MS, ""))
            except ValueError:
                log.error("timer message at commitlog offset %d has no TIMER_OUT_MS; dropped", phy)
                continue
            if out_ms < self.write_time_ms:  # due already (read late): put it now, never in the wheel
                if T.PROP_TIMER_DEL_UNIQKEY in props:
                    continue  # a recall marker past its slot recalls nothing (Apache drops it too)
                msg = self._convert(stored, T.NEVER_ENQUEUED, now, roll=False)
                if msg is not None:
                    due_now.append(msg)
                continue
            self._append(phy, size, out_ms, props, now)
        if due_now and self._put_all(due_now) < len(due_now):
            return True  # the store refuses puts for now: the same units again next turn
        self.queue_offset += len(phys)
        return len(phys) == self.batch

    def _append(self, phy: int, size: int, out_ms: int, props: dict[str, str], now: int) -> None:
        assert self.wheel is not None and self.timerlog is not None
        write_ms = self.write_time_ms
        magic = T.MAGIC_DEFAULT
        if out_ms - write_ms >= self.roll_window_ms:  # beyond the wheel: park it at its far end
            magic |= T.MAGIC_ROLL
            out_ms = write_ms + self.roll_window_ms
        delete = T.PROP_TIMER_DEL_UNIQKEY in props
        if delete:
            magic |= T.MAGIC_DELETE
        first, last, num, slot_magic = self.wheel.get(out_ms)
        real_topic = props.get(Prop.REAL_TOPIC)
        pos = self.timerlog.append(T.UNIT.pack(T.UNIT_SIZE, last, magic, write_ms, out_ms - write_ms, phy, size,
                                               topic_hash(real_topic), 0))
        self.wheel.put(out_ms, pos if first == -1 else first, pos, num - 1 if delete else num + 1, slot_magic)
        if real_topic:
            self.metrics.add(real_topic, -1 if delete else 1, now)
            self._metrics_dirty = True

    def dequeue(self, now: int) -> bool:
        """Deliver what is due: the slots before the write time whole, oldest first, then the
        messages of the current slot whose own due time has come; True if a due slot remains."""
        assert self.wheel is not None
        if now < self._pause_until:
            return False
        while not self.stopped:
            end = self.write_time_ms
            if self.read_time_ms >= end:
                break
            nxt = self.wheel.next_busy(self.read_time_ms, end)
            if nxt != self.read_time_ms and self._open_slot != self.read_time_ms:
                self.read_time_ms = nxt
                self._checkpoint(now)
                continue
            # every timer of this slot is in the wheel (the write time is past it): all are due
            if not self._take_slot(self.read_time_ms, now, closing=True):
                self._pause_until = now + RETRY_AFTER_FAILURE_MS
                return False
            self._reset_open()
            self.read_time_ms += self.precision_ms
            self._checkpoint(now)
        if self.read_time_ms == self.write_time_ms and not self.stopped:
            # the slot of the current second: its messages go at their own millisecond, not
            # when the second is over (the slot only rounds a due time down to its second)
            if not self._take_slot(self.read_time_ms, now, closing=False):
                self._pause_until = now + RETRY_AFTER_FAILURE_MS
        return False

    def next_due_ms(self) -> int | None:
        """The due time of the earliest message held from the current slot (None: none held)."""
        return self._held[0][0] if self._held else None

    def _reset_open(self) -> None:
        self._open_slot = None
        self._open_pos = -1
        self._held.clear()
        self._held_bytes = 0
        self._open_done = 0
        self._put_units = set()
        self._skip = set()
        self._recalled.clear()

    def _take_slot(self, slot_ms: int, now: int, *, closing: bool) -> bool:
        """Read the slot's units not read yet, hold their messages by due time and put those due
        (all of them when ``closing``); False when the store refused a put (what was not put
        stays held, the slot is kept)."""
        assert self.wheel is not None and self.timerlog is not None
        if self._open_slot != slot_ms:
            self._reset_open()
            self._open_slot = slot_ms
        _first, pos, _num, _magic = self.wheel.get(slot_ms)
        chain: list[tuple[int, int, int, int]] = []  # (position, magic, write_ms, offset_py), newest first
        seen = 0
        while pos > self._open_pos and seen < (1 << 26):
            u = self.timerlog.unit(pos)
            if u is None:
                break
            chain.append((pos, u[2], u[3], u[5]))
            pos = u[1]
            seen += 1
        for _pos, magic, _w, phy in chain:
            if magic & T.MAGIC_DELETE and not magic & T.MAGIC_ROLL:
                marker = self._read(phy)
                if marker is not None and marker.props.get(T.PROP_TIMER_DEL_UNIQKEY):
                    self._recalled.add(marker.props[T.PROP_TIMER_DEL_UNIQKEY])
        last = slot_ms + self.precision_ms
        for unit_pos, magic, write_ms, phy in reversed(chain):
            if not closing and self._held_bytes >= HELD_BYTES_MAX:
                break  # the rest is read in a later turn (or when the slot closes)
            self._open_pos = unit_pos
            if magic & T.MAGIC_DELETE and not magic & T.MAGIC_ROLL:
                continue
            if unit_pos in self._skip:  # put before a clean stop (TIMEROPEN_FILE; counted in _open_done)
                self._put_units.add(unit_pos)
                continue
            stored = self._read(phy)
            if stored is None:
                continue
            msg = self._convert(stored, write_ms, now, roll=bool(magic & T.MAGIC_ROLL))
            if msg is None:
                continue
            due = rewrite.due_ms(stored.props, stored.decoded.store_timestamp)
            # within the slot's second whatever a property says (a rolled unit: at its start)
            due = slot_ms if due is None or magic & T.MAGIC_ROLL else min(max(due, slot_ms), last)
            heapq.heappush(self._held, (due, self._held_seq, msg, stored.props.get(Prop.REAL_TOPIC), unit_pos))
            self._held_seq += 1
            self._held_bytes += len(msg.body)
        return self._put_due(now, closing)

    def _put_due(self, now: int, everything: bool) -> bool:
        """Put the held messages due by ``now`` (all when ``everything``), ``batch`` at a time;
        a message whose UNIQ_KEY a recall marker of the slot names is dropped instead."""
        held = self._held
        while held and (everything or held[0][0] <= now):
            batch: list[tuple[int, int, MessageExtBrokerInner, str | None, int]] = []
            while held and len(batch) < self.batch and (everything or held[0][0] <= now):
                entry = heapq.heappop(held)
                msg, topic = entry[2], entry[3]
                if msg.properties.get(Prop.UNIQ_KEY) in self._recalled:
                    self._held_bytes -= len(msg.body)
                    self.recalled += 1
                    if topic:
                        self.metrics.add(topic, -1, now)
                    self._metrics_dirty = True
                    continue
                msg.properties[T.PROP_TIMER_DEQUEUE_MS] = str(now)
                batch.append(entry)
            if not batch:
                continue
            done = self._put_all([e[2] for e in batch])
            self._open_done += done
            for _due, _seq, msg, topic, unit_pos in batch[:done]:
                self._put_units.add(unit_pos)
                self._held_bytes -= len(msg.body)
                if topic:
                    self.metrics.add(topic, -1, now)
            self._metrics_dirty = True
            if done < len(batch):  # what the store refused stays held, first, for the next try
                for entry in batch[done:]:
                    heapq.heappush(held, entry)
                return False
        return True

    def _put_all(self, msgs: list[MessageExtBrokerInner]) -> int:
        """Put the messages; returns how many were done with (stored, or dropped for good), the
        rest refused for now (nothing is dropped then: they come again)."""
        for i, (msg, result) in enumerate(zip(msgs, self.store.put_messages(msgs))):
            if result.status.stored:
                self.delivered += 1
            elif result.status in _PERMANENT:
                log.error("timer message for %s-%d cannot be delivered: %s %s; dropped", msg.topic, msg.queue_id,
                          result.status.value, result.remark)
            else:
                log.warning("timer delivery paused: the store refused a put (%s %s)", result.status.value,
                            result.remark)
                return i
        return len(msgs)

    # --- messages ---------------------------------------------------------------------------------
    def _read(self, phy: int) -> _Stored | None:
        rec = self.store.select_one_message_by_offset(phy)
        if rec is None:
            return None
        try:
            stored = self.store.k.decode_records(rec, 0, len(rec), 1, False)[0]
        except RecordDecodeError as e:
            log.error("timer message at commitlog offset %d is corrupt (%s); dropped", phy, e)
            return None
        return _Stored(rec, stored, string_to_properties(stored.properties))

    def _convert(self, read: _Stored, enqueue_ms: int, now: int, *, roll: bool) -> MessageExtBrokerInner | None:
        """The message to put (``convert``/``convertMessage``): for its real topic, or back into
        the timer topic when rolled."""
        rec, stored = read.rec, read.decoded
        props = dict(read.props)
        props[T.PROP_TIMER_ENQUEUE_MS] = str(enqueue_ms)
        props[T.PROP_TIMER_DEQUEUE_MS] = str(now)
        props[Prop.WAIT] = "false"
        topic: str | None
        if roll:
            props[T.PROP_TIMER_ROLL_TIMES] = str(int(props.get(T.PROP_TIMER_ROLL_TIMES, "0") or 0) + 1)
            topic, queue_id = T.TIMER_TOPIC, 0
        else:
            # REAL_TOPIC/REAL_QID stay on the delivered message, as Apache 5.3.3 stores it
            topic = props.get(Prop.REAL_TOPIC)
            try:
                queue_id = int(props.get(Prop.REAL_QID, ""))
            except ValueError:
                queue_id = -1
            if not topic or queue_id < 0 or topic == T.TIMER_TOPIC:
                log.error("timer message has no usable REAL_TOPIC/REAL_QID (%r, %d); dropped", topic, queue_id)
                return None
        sys_flag = stored.sys_flag
        born_host, store_host = L.record_hosts(rec, sys_flag)
        return MessageExtBrokerInner(topic=topic, body=stored.body, queue_id=queue_id, flag=stored.flag,
                                     properties=props, sys_flag=sys_flag, born_timestamp=stored.born_timestamp,
                                     born_host=born_host, store_host=store_host,
                                     reconsume_times=stored.reconsume_times)

    # --- progress ---------------------------------------------------------------------------------
    def _finish_open_slot(self, now: int) -> None:
        """At a clean stop: when every timer of the slot being delivered in part has been put,
        the read time moves past it, so the checkpoint says so to any broker that opens this
        store (Apache 5.3.3 too, which would otherwise deliver the whole slot again). The timer
        queue is read to its end first: a unit for the slot still in it would be missed."""
        if self._open_slot is None or self._open_slot != self.read_time_ms:
            return
        for _ in range(1 << 20):
            if not self.enqueue(now):
                break
        if self._take_slot(self.read_time_ms, now, closing=False) and not self._held:
            self._reset_open()
            self.read_time_ms += self.precision_ms

    def _open_slot_path(self) -> str:
        return os.path.join(self.store.config.config_dir, T.TIMEROPEN_FILE)

    def _save_open_slot(self) -> None:
        """At a clean stop: which units of the slot being delivered in part were put (the
        checkpoint's read time is that slot's, so a restart would put them all again)."""
        path = self._open_slot_path()
        try:
            if self._open_slot is not None and self._put_units:
                config_files.persist(path, {"slotMs": self._open_slot, "putUnits": sorted(self._put_units)})
            else:
                self._drop_open_slot_file()
        except MQError as e:  # the slot is then delivered again in whole: at least once
            log.warning("timer: cannot save the current slot's progress (%s); its timers may come twice", e)

    def _drop_open_slot_file(self) -> None:
        for name in (self._open_slot_path(), self._open_slot_path() + config_files.BAK_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                os.remove(name)

    def _load_open_slot(self) -> None:
        try:
            saved = config_files.load(self._open_slot_path())
        except MQError as e:
            log.warning("timer: %s is unreadable (%s); the current slot is delivered again in whole",
                        T.TIMEROPEN_FILE, e)
            saved = None
        if isinstance(saved, dict) and saved.get("slotMs") == self.read_time_ms and \
                isinstance(saved.get("putUnits"), list):
            self._open_slot = self.read_time_ms
            self._skip = {u for u in saved["putUnits"] if isinstance(u, int) and not isinstance(u, bool)}
            self._open_done = len(self._skip)
            log.info("timer: %d timer(s) of slot %d were delivered before the stop", len(self._skip),
                     self.read_time_ms)
        # used once: a later crash (no clean stop) delivers the slot again from the checkpoint
        self._drop_open_slot_file()

    def _checkpoint(self, now: int) -> None:
        c = self.check
        if c is None:
            return
        c.read_time_ms = self.read_time_ms
        c.queue_offset = c.master_queue_offset = self.queue_offset
        c.flush_pos = self.timerlog.flushed() if self.timerlog is not None else 0
        c.write(now)

    def flush(self, force_metrics: bool = False) -> None:
        if self.timerlog is None or self.wheel is None or self.check is None:
            return
        now = self.clock()
        self.timerlog.flush()
        if self.store.config.resident_behind_bytes:
            self.timerlog.q.release_behind(self.store.config.resident_behind_bytes // 16)
        self.wheel.flush()
        self._checkpoint(now)
        self.check.flush()
        if self._metrics_dirty and (force_metrics or now - self._last_metrics >= METRICS_PERSIST_MS):
            self.metrics.persist(now)
            self._metrics_dirty = False
            self._last_metrics = now

    # --- facts ------------------------------------------------------------------------------------
    def pending(self) -> int:
        """Timers in the wheel not yet delivered (recall markers count -1), plus those not yet read."""
        waiting = int(self.store.get_max_offset_in_queue(T.TIMER_TOPIC, 0)) - self.queue_offset
        in_wheel = self.wheel.pending(self.read_time_ms) - self._open_done if self.wheel is not None else 0
        return max(0, in_wheel) + max(0, waiting)
