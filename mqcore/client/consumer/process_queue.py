"""``ProcessQueue``: the messages pulled from one queue and not yet consumed.

Messages are kept ordered by queue offset (Java uses a ``TreeMap``; here a dict plus
the offsets in order with lazy deletion). Pulls put each queue's offsets in ascending
order, so the offsets are usually a sorted list read from a moving head (a batch of
offsets appended with one ``extend``, the lowest found by stepping over consumed ones);
only an offset put back below the highest one (an orderly consumer's rollback) turns the
list into a min-heap until the queue is empty again. The lowest offset still held is what the
consumer may commit: everything below it is done, whatever order the consume threads
finish in, so the committed offset is always the lowest unconsumed one.

Orderly consumption moves messages to a second map while they are being consumed
(``take_messages``) and either ``commit``s them or puts them back
(``make_messages_to_consume_again``).

Thread model: the pull task (event-loop thread) puts messages; consume threads take
and remove them; the rebalance drops the queue. Every method takes ``self._lock``.
``consume_lock`` is held by an orderly consume thread while its listener runs, so a
rebalance does not unlock the broker lock in the middle of a batch.
"""
from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Iterable, Sequence

from mqcore.client.message import MessageExt
from mqcore.clock import Clock, system_clock_ms
from mqcore.message import Prop

__all__ = ["ProcessQueue"]


class ProcessQueue:
    """Per-queue buffer between pulling and consuming."""

    def __init__(self, clock: Clock = system_clock_ms, *, lock_max_live_time_ms: int = 30_000,
                 pull_max_idle_time_ms: int = 120_000) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._msgs: dict[int, MessageExt] = {}
        #: the offsets held (consumed ones are skipped lazily): sorted from ``_head`` on while
        #: ``_sorted``, else a min-heap (from index 0)
        self._heap: list[int] = []
        self._head = 0
        self._sorted = True
        self._consuming_msgs: dict[int, MessageExt] = {}
        self.msg_count = 0
        self.msg_size = 0
        self.queue_offset_max = 0
        self.msg_acc_cnt = 0
        self.consuming = False
        self.dropped = False
        self.locked = False
        self.last_lock_timestamp = clock()
        self.last_pull_timestamp = clock()
        self.last_consume_timestamp = clock()
        self.try_unlock_times = 0
        self.consume_lock = threading.Lock()
        self.lock_max_live_time_ms = lock_max_live_time_ms
        self.pull_max_idle_time_ms = pull_max_idle_time_ms
        #: (count, size, callback): a flow-controlled pull waiting for the queue to hold at most
        #: ``count`` messages and ``size`` bytes (see ``notify_when_room``)
        self._room_waiter: tuple[int, int, Callable[[], None]] | None = None

    # --- heap helpers (caller holds the lock) ---------------------------------------------
    def _first_key_locked(self) -> int | None:
        heap, msgs = self._heap, self._msgs
        if not msgs:  # empty: start over sorted
            heap.clear()
            self._head = 0
            self._sorted = True
            return None
        if self._sorted:
            head = self._head
            while heap[head] not in msgs:  # a key held is in the list: this stops
                head += 1
            if head > 1024 and head * 2 > len(heap):  # drop the consumed prefix now and then
                del heap[:head]
                head = 0
            self._head = head
            return heap[head]
        while heap[0] not in msgs:
            heapq.heappop(heap)
        return heap[0]

    def _pop_first_locked(self) -> MessageExt | None:
        key = self._first_key_locked()
        if key is None:
            return None
        if self._sorted:
            self._head += 1
        else:
            heapq.heappop(self._heap)
        return self._msgs.pop(key)

    def _add_offsets_locked(self, offsets: list[int]) -> None:
        """Offsets not held yet; ascending ones above everything held are appended."""
        heap = self._heap
        if self._sorted:
            last = heap[-1] if len(heap) > self._head else None
            if (last is None or offsets[0] > last) and (len(offsets) == 1 or sorted(set(offsets)) == offsets):
                heap.extend(offsets)
                return
            del heap[:self._head]  # out of order: a heap from now on (until the queue is empty)
            self._head = 0
            self._sorted = False
            heapq.heapify(heap)
        for offset in offsets:
            heapq.heappush(heap, offset)

    # --- pulling side --------------------------------------------------------------------
    def put_messages(self, msgs: Sequence[MessageExt]) -> bool:
        """Add pulled messages; True when an orderly consumer should be dispatched
        (there are messages and nobody is consuming this queue)."""
        with self._lock:
            held = self._msgs
            if not held:
                self._first_key_locked()  # start over sorted
            new: list[int] = []
            size = 0
            top = self.queue_offset_max
            for msg in msgs:
                offset = msg.queue_offset
                if offset not in held:
                    new.append(offset)
                    size += len(msg.body)
                held[offset] = msg
                if offset > top:
                    top = offset
            self.queue_offset_max = top
            if new:
                self._add_offsets_locked(new)
            self.msg_size += size
            self.msg_count += len(new)
            dispatch = False
            if self._msgs and not self.consuming:
                dispatch = True
                self.consuming = True
            if msgs:
                raw = msgs[-1].properties.get(Prop.MAX_OFFSET)
                if raw and raw.lstrip("-").isdigit():
                    acc = int(raw) - msgs[-1].queue_offset
                    if acc > 0:
                        self.msg_acc_cnt = acc
            return dispatch

    def max_span(self) -> int:
        """Distance between the lowest and highest offset held (flow control)."""
        with self._lock:
            first = self._first_key_locked()
            if first is None:
                return 0
            return self.queue_offset_max - first  # highest pulled - lowest unconsumed

    def cached_offsets(self) -> tuple[int, int]:
        """(lowest, highest) offset of the messages held, (0, 0) when none (running info)."""
        with self._lock:
            first = self._first_key_locked()
            return (0, 0) if first is None else (first, self.queue_offset_max)

    # --- concurrent consuming ----------------------------------------------------------------
    def remove_messages(self, msgs: Iterable[MessageExt]) -> int:
        """Forget consumed messages; returns the offset to commit (lowest still held,
        else one past the highest seen), or -1 if nothing was held."""
        with self._lock:
            self.last_consume_timestamp = self._clock()
            if not self._msgs:
                return -1
            result = self.queue_offset_max + 1
            removed = 0
            for msg in msgs:
                prev = self._msgs.pop(msg.queue_offset, None)
                if prev is not None:
                    removed += 1
                    self.msg_size -= len(prev.body)
            self.msg_count -= removed
            first = self._first_key_locked()
            if first is not None:
                result = first
            wake = self._room_made_locked()
        if wake is not None:
            wake()
        return result

    # --- flow control ------------------------------------------------------------------------------
    def notify_when_room(self, count: int, size: int, callback: Callable[[], None]) -> bool:
        """Have ``callback`` called once (on the thread that frees the room, without the lock)
        when the queue holds at most ``count`` messages and ``size`` bytes; False (and no call)
        when it already does. A second call replaces the first one's callback."""
        with self._lock:
            if self.msg_count <= count and self.msg_size <= size:
                return False
            self._room_waiter = (count, size, callback)
            return True

    def cancel_room_notification(self) -> None:
        with self._lock:
            self._room_waiter = None

    def _room_made_locked(self) -> Callable[[], None] | None:
        waiter = self._room_waiter
        if waiter is not None and self.msg_count <= waiter[0] and self.msg_size <= waiter[1]:
            self._room_waiter = None
            return waiter[2]
        return None

    def first_message(self) -> MessageExt | None:
        with self._lock:
            key = self._first_key_locked()
            return None if key is None else self._msgs[key]

    def remove_if_first(self, msg: MessageExt) -> bool:
        """Remove ``msg`` only if it is still the lowest one (consume-timeout sweep)."""
        with self._lock:
            if self._first_key_locked() == msg.queue_offset:
                self.remove_messages([msg])
                return True
            return False

    # --- orderly consuming ---------------------------------------------------------------------
    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """Move up to ``batch_size`` lowest messages to the consuming map; an empty
        result clears ``consuming`` (the next pull dispatches again)."""
        with self._lock:
            now = self._clock()
            self.last_consume_timestamp = now
            out: list[MessageExt] = []
            while len(out) < batch_size:
                msg = self._pop_first_locked()
                if msg is None:
                    break
                out.append(msg)
                self._consuming_msgs[msg.queue_offset] = msg
            if not out:
                self.consuming = False
            return out

    def commit(self) -> int:
        """The consuming batch succeeded: forget it, return the offset to commit."""
        with self._lock:
            if not self._consuming_msgs:
                return -1
            offset = max(self._consuming_msgs)
            self.msg_count -= len(self._consuming_msgs)
            self.msg_size -= sum(len(m.body) for m in self._consuming_msgs.values())
            self._consuming_msgs.clear()
            wake = self._room_made_locked()
        if wake is not None:
            wake()
        return offset + 1

    def make_messages_to_consume_again(self, msgs: Iterable[MessageExt]) -> None:
        with self._lock:
            if not self._msgs:
                self._first_key_locked()  # start over sorted
            back = []
            for msg in msgs:
                self._consuming_msgs.pop(msg.queue_offset, None)
                if msg.queue_offset not in self._msgs:
                    back.append(msg.queue_offset)
                self._msgs[msg.queue_offset] = msg
            if back:
                self._add_offsets_locked(back)

    def rollback(self) -> None:
        with self._lock:
            self.make_messages_to_consume_again(list(self._consuming_msgs.values()))

    def has_temp_messages(self) -> bool:
        with self._lock:
            return bool(self._msgs)

    def clear(self) -> None:
        with self._lock:
            self._msgs.clear()
            self._first_key_locked()  # empty: start over sorted
            self._consuming_msgs.clear()
            self.msg_count = 0
            self.msg_size = 0
            self.queue_offset_max = 0

    # --- timing ---------------------------------------------------------------------------------
    def is_lock_expired(self) -> bool:
        return self._clock() - self.last_lock_timestamp > self.lock_max_live_time_ms

    def is_pull_expired(self) -> bool:
        return self._clock() - self.last_pull_timestamp > self.pull_max_idle_time_ms

    def mark_locked(self, locked: bool) -> None:
        self.locked = locked
        if locked:
            self.last_lock_timestamp = self._clock()

    def touch_pull(self) -> None:
        self.last_pull_timestamp = self._clock()

    @property
    def now_ms(self) -> int:
        return self._clock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._msgs)

    def __repr__(self) -> str:
        return (f"ProcessQueue(count={self.msg_count}, size={self.msg_size}, max={self.queue_offset_max}, "
                f"dropped={self.dropped}, locked={self.locked}, consuming={self.consuming})")
