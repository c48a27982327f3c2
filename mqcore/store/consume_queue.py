"""ConsumeQueue: per (topic, queue id) index of 20-byte units into the commitlog.

Unit ``i`` (the queue offset) lives at byte ``i*20`` of the logical queue: file
``floor(i*20 / file_size)``. Min offset = first unit whose message still exists;
max offset = next unit to be written.

Files are sparse, as RocketMQ's: their blocks are reserved a page at first, then in growing
steps ahead of the write position (``MappedFile.ensure_reserved``), so a queue costs disk in
proportion to what it holds. Every write through a file's map stays below its
``reserved_end``: ``ensure_room_locked`` reserves the room a put's units need before the
commitlog append (a full disk refuses the put), and the writes themselves reserve any
rest (a dispatch that cannot fails as a logged dispatch failure, never a SIGBUS).

Threads: units are appended by the dispatcher under the store's put lock; reads
from any thread see a unit only after ``wrote_position`` covers it.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from typing import Callable

import numpy as np

from mqcore.errors import IllegalArgumentError, StoreIOError
from mqcore.format import layout as L
from mqcore.kernel_api import StoreKernels
from mqcore.store.mapped_file import PAGE_SIZE, DestroyOutcome, MappedFile
from mqcore.store.mapped_file_queue import MappedFileQueue, SpaceCheck
from mqcore.store.hot_state import on_kernels
from mqcore.store.paths import under_root

log = logging.getLogger(__name__)

UNIT = L.CQ_UNIT_SIZE


class ConsumeQueue:
    """One queue's 20-byte units (commitlog offset, size, tags code) across its files."""

    def __init__(self, topic: str, queue_id: int, root_dir: str, file_size: int, kernels: StoreKernels,
                 space_check: SpaceCheck | None = None) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.file_size = file_size
        self.k = kernels
        self.queue = on_kernels(MappedFileQueue, kernels)(under_root(root_dir, topic, str(queue_id)), file_size,
                                                          space_check, on_kernels(MappedFile, kernels),
                                                          reserve_step=PAGE_SIZE)
        #: commitlog offset one past the last message this queue points at
        self.max_physic_offset = 0
        #: byte offset of the first live unit
        self.min_logic_offset = 0
        self.queue.quiet = True
        self.root_dir = root_dir
        #: units put while the queue waits for its first file (``ConsumeQueueTable.pending``):
        #: (queue offset, commitlog offset, size, tags code), written when the file exists;
        #: None once the queue has its files (or was never deferred)
        self.pending_units: list[tuple[int, int, int, int]] | None = None

    def load(self) -> list[str]:
        return self.queue.load()

    # --- recovery -----------------------------------------------------------------------------
    def recover(self) -> None:
        """Find the last valid unit (store-format.md §6.1) and truncate after it."""
        files = self.queue.files
        if not files:
            return
        i = max(0, len(files) - 3)
        end = files[i].file_from_offset
        while i < len(files):
            mf = files[i]
            n = self.k.cq_count_valid(mf.buf, 0, self.file_size)
            end = mf.file_from_offset + n * UNIT
            if n * UNIT < self.file_size:
                break
            i += 1
        self.queue.truncate_dirty(end)
        self._refresh_max_physic()
        if self.min_logic_offset < self.queue.min_offset():
            self.min_logic_offset = self.queue.min_offset()

    def _refresh_max_physic(self) -> None:
        mf = self.queue.last
        self.max_physic_offset = 0
        if mf is None:
            return
        # scan back to the last unit with a real message (fillers have size 0x7fffffff)
        for f in reversed(self.queue.files):
            if f.wrote_position == 0:
                continue
            phys, sizes, _ = self.k.cq_read(f.buf, f.wrote_position - UNIT, 1)
            self.max_physic_offset = int(phys[0]) + int(sizes[0])
            return

    def truncate_dirty_logic(self, phy_offset: int) -> None:
        """Drop units pointing at or past ``phy_offset`` (commitlog was truncated there)."""
        for mf in reversed(list(self.queue.files)):
            n = mf.wrote_position // UNIT
            if n == 0:
                continue
            phys, sizes, _ = self.k.cq_read(mf.buf, 0, n)
            # units are ordered by phy offset; fillers (phy 0) sort first and stay
            keep = int((phys < phy_offset).sum())
            if keep == n:
                break
            self.queue.truncate_dirty(mf.file_from_offset + keep * UNIT)
            if not mf.closed:  # kept (not deleted): zero the dropped units, or they come back
                mf.zero(keep * UNIT, n * UNIT)  # as phantoms at the next clean start
        self._refresh_max_physic()

    # --- writing ------------------------------------------------------------------------------
    def put_units_locked(self, queue_offsets: np.ndarray, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray, *,
                         consecutive: bool = False) -> int:
        """Append units whose queue offsets follow on; returns how many were written.

        Units already present (queue offset below the max offset, or commitlog range
        already covered) are skipped: dispatch may replay a range after a crash.
        ``consecutive``: the caller vouches that the queue offsets are ascending by one
        (a batch the writer numbered itself); when they start at the max offset the
        units are written without the replay checks' array work.
        """
        n = len(phys)
        if n == 0:
            return 0
        if self.pending_units is not None:
            self.pending_units.extend(zip(map(int, queue_offsets), map(int, phys), map(int, sizes), map(int, tags)))
            return 0  # readers learn of them when they are written (ConsumeQueueTable.make_ready)
        if consecutive and int(queue_offsets[0]) == self.max_offset() \
                and int(phys[0]) + int(sizes[0]) > self.max_physic_offset:
            return self._append_run_locked(int(queue_offsets[0]), phys, sizes, tags)
        qo = np.asarray(queue_offsets, dtype=np.int64)
        ends = np.asarray(phys, dtype=np.int64) + np.asarray(sizes, dtype=np.int64)
        max_off = self.max_offset()
        present = (qo < max_off) | (ends <= self.max_physic_offset)
        i = int(np.argmin(present))  # first unit not yet in the queue
        if present[i]:
            return 0
        if int(qo[i]) > max_off:
            self._fill_gap_locked(max_off, int(qo[i]))
        written = 0
        while i < n:
            expected = self.max_offset()
            if int(qo[i]) != expected:
                log.warning("consume queue %s-%d: unit for queue offset %d arrived, expected %d; skipped",
                            self.topic, self.queue_id, int(qo[i]), expected)
                i += 1
                continue
            # the consecutive run from i (it may cross into the next file)
            breaks = np.flatnonzero(qo[i + 1:] != qo[i:-1] + 1)
            j = i + 1 + int(breaks[0]) if len(breaks) else n
            written += self._append_run_locked(expected, phys[i:j], sizes[i:j], tags[i:j])
            i = j
        return written

    def _append_run_locked(self, first: int, phys: np.ndarray, sizes: np.ndarray, tags: np.ndarray) -> int:
        """Append units for queue offsets ``first``, ``first + 1``, ... (``first`` is the max
        offset), file after file; returns how many."""
        n = len(phys)
        i = 0
        while i < n:
            mf = self.queue.get_last_for_append((first + i) * UNIT)
            lim = min(n, i + mf.remaining() // UNIT)
            mf.ensure_reserved(mf.wrote_position + (lim - i) * UNIT)
            mf.wrote_position += self.k.cq_write(mf.buf, mf.wrote_position, phys[i:lim], sizes[i:lim], tags[i:lim])
            i = lim
        self.max_physic_offset = int(phys[n - 1]) + int(sizes[n - 1])
        return n

    def ensure_room_locked(self, queue_offset: int, count: int) -> None:
        """Before the commitlog append: make sure units from ``queue_offset`` on have a
        reserved file, so a full disk refuses the put instead of failing its dispatch
        after the record is already in the commitlog. Raises ``DiskFullError``."""
        if self.pending_units is not None:
            # the first file is made off the put's path: ask the partition whether it may be,
            # once for that file (its first unit's put; a statvfs per put to a queue waiting for
            # its file made those puts several times dearer than the rest)
            if not self.pending_units and self.queue.space_check is not None:
                self.queue.space_check(self.root_dir, self.file_size)
            return
        last = self.queue.last
        if last is None or last.is_full():
            if last is None and queue_offset > 0:
                return  # a recreated queue: the gap filler creates its first file (see _fill_gap_locked)
            last = self.queue.get_last_for_append(queue_offset * UNIT)
        # the units' room in the file (fillers of a gap before them included)
        end = (queue_offset + count) * UNIT - last.file_from_offset
        last.ensure_reserved(min(last.file_size, max(end, last.wrote_position + UNIT)))
        if (queue_offset + count) * UNIT > last.end_offset and self.queue.space_check is not None:
            # a batch crossing into the next file: that file is created during dispatch;
            # at least ask whether it may be
            self.queue.space_check(self.queue.directory, self.file_size)

    def next_unit_locked(self, queue_offset: int) -> MappedFile | None:
        """The mapped file whose write position is where unit ``queue_offset`` goes, when it
        is the plain next unit (the queue's end, room in the last file): the send pipeline
        then writes it with its record (one after ``max_physic_offset``) and calls
        :meth:`unit_written_locked`. None: ``put_one_locked`` decides (gaps, rolls, repeats)."""
        mf = self.queue.last
        if mf is None or mf.wrote_offset != queue_offset * UNIT or mf.reserved_end - mf.wrote_position < UNIT:
            return None
        return mf

    def unit_written_locked(self, mf: MappedFile, phy_end: int) -> None:
        """The unit at ``mf``'s write position was written (see :meth:`next_unit_locked`)."""
        mf.wrote_position += UNIT
        self.max_physic_offset = phy_end

    def put_one_locked(self, queue_offset: int, phy: int, size: int, tags_code: int) -> int:
        """``put_units_locked`` for one unit without array work (the single-message put)."""
        if self.pending_units is not None:
            self.pending_units.append((queue_offset, phy, size, tags_code))
            return 0
        max_off = self.max_offset()
        if queue_offset < max_off or phy + size <= self.max_physic_offset:
            return 0
        if queue_offset > max_off:
            self._fill_gap_locked(max_off, queue_offset)
        mf = self.queue.get_last_for_append(queue_offset * UNIT)
        mf.ensure_reserved(mf.wrote_position + UNIT)
        L.CQ_UNIT.pack_into(mf.buf, mf.wrote_position, phy, size, tags_code)
        mf.wrote_position += UNIT
        self.max_physic_offset = phy + size
        return 1

    def _fill_gap_locked(self, have: int, want: int) -> None:
        """Queue recreated after its files were deleted: pre-blank fillers up to ``want``."""
        if self.queue.last is None:
            base_bytes = want * UNIT - (want * UNIT) % self.file_size
            mf = self.queue.get_last_for_append(base_bytes)
            n = (want * UNIT - base_bytes) // UNIT
            if n:
                mf.ensure_reserved(n * UNIT)
                self.k.cq_write(mf.buf, 0, [0] * n, [L.CQ_FILLER_SIZE] * n, [0] * n)
                mf.wrote_position = n * UNIT
            self.min_logic_offset = want * UNIT
            return
        log.warning("consume queue %s-%d has a gap from %d to %d; filling with blanks",
                    self.topic, self.queue_id, have, want)
        while self.max_offset() < want:
            mf = self.queue.get_last_for_append(self.max_offset() * UNIT)
            n = min(want - self.max_offset(), mf.remaining() // UNIT)
            mf.ensure_reserved(mf.wrote_position + n * UNIT)
            mf.wrote_position += self.k.cq_write(mf.buf, mf.wrote_position, [0] * n,
                                                 [L.CQ_FILLER_SIZE] * n, [0] * n)

    # --- reading ------------------------------------------------------------------------------
    def max_offset(self) -> int:
        return self.queue.max_offset() // UNIT

    def min_offset(self) -> int:
        return max(self.min_logic_offset, self.queue.min_offset()) // UNIT

    def units_at(self, offset: int, max_units: int) -> tuple[memoryview, int, int] | None:
        """(buffer, byte position, unit count) of readable units from ``offset`` within one file.

        The buffer is a view of just those units, so a file deleted by disk cleanup
        meanwhile stays readable for the caller (None once it is gone).
        """
        mf = self.queue.find_by_offset(offset * UNIT)
        if mf is None:
            return None
        pos = offset * UNIT - mf.file_from_offset
        count = min(max_units, (mf.wrote_position - pos) // UNIT)
        if count <= 0:
            return None
        view = mf.view(pos, count * UNIT)
        if view is None:
            return None
        return view, 0, count

    def unit(self, offset: int) -> tuple[int, int, int] | None:
        """(phy, size, tags) of one unit, or None."""
        got = self.units_at(offset, 1)
        if got is None:
            return None
        buf, pos, _ = got
        phys, sizes, tags = self.k.cq_read(buf, pos, 1)
        return int(phys[0]), int(sizes[0]), int(tags[0])

    def drop_units(self, first: int, end: int) -> int:
        """Turn units [first, end) into fillers whose messages are gone for good (a lost
        commitlog range): size ``CQ_FILLER_SIZE``, tags 0, the phy offset kept so units stay
        in commitlog order for the binary searches. Queue offsets keep their numbering and a
        pull skips them. Returns how many were real units before."""
        changed = 0
        off = first
        while off < end:
            mf = self.queue.find_by_offset(off * UNIT)
            if mf is None:
                break
            pos = off * UNIT - mf.file_from_offset
            n = min(end - off, (mf.wrote_position - pos) // UNIT)
            if n <= 0:
                break
            phys, sizes, _ = self.k.cq_read(mf.buf, pos, n)
            changed += int((sizes != L.CQ_FILLER_SIZE).sum())
            mf.ensure_reserved(pos + n * UNIT)  # written units have blocks; a copied store may not
            self.k.cq_write(mf.buf, pos, phys, np.full(n, L.CQ_FILLER_SIZE, np.int32), np.zeros(n, np.int64))
            mf.flushed_position = min(mf.flushed_position, pos)  # the rewritten units go to disk now:
            mf.flush()  # the lost range is closed after this and never reported again
            off += n
        return changed

    def offsets_in_phy_range(self, lo: int, hi: int) -> tuple[int, int]:
        """Queue offsets [a, b) of the units pointing into commitlog [lo, hi) (units are
        in commitlog order, so two binary searches over the live units find them)."""
        first, end = self.min_offset(), self.max_offset()

        def first_at_or_after(phy: int) -> int:
            a, b = first, end
            while a < b:
                mid = (a + b) // 2
                u = self.unit(mid)
                if u is None or u[0] >= phy:
                    b = mid
                else:
                    a = mid + 1
            return a

        return first_at_or_after(lo), first_at_or_after(hi)

    def next_file_offset(self, offset: int) -> int:
        """Queue offset where the file after the one holding ``offset`` starts."""
        units_per_file = self.file_size // UNIT
        return offset + units_per_file - offset % units_per_file

    def offset_by_time(self, timestamp: int, store_time_of: Callable[[int, int], int]) -> int:
        """``getOffsetInQueueByTime``: first file modified at/after ``timestamp``, then binary search."""
        files = self.queue.files
        if not files:
            return 0
        target = files[-1]
        for mf in files:
            if mf.last_modified_ms() >= timestamp:
                target = mf
                break
        lo_bytes = max(self.min_logic_offset - target.file_from_offset, 0)
        lo = lo_bytes // UNIT
        hi = target.wrote_position // UNIT
        buf = target.view(0, target.file_size)
        if hi <= lo or buf is None:
            return self.min_offset()
        i = self.k.cq_search_time(buf, lo, hi, timestamp, store_time_of)
        return (target.file_from_offset // UNIT) + i

    def correct_min_offset(self, commitlog_min: int) -> None:
        """Move min offset up to the first unit whose message still exists.

        Units point at increasing commitlog offsets, so a file whose first unit is live
        ends the search and one whose last unit is dead is skipped whole; only the file
        holding the boundary is read unit by unit.
        """
        for mf in self.queue.files:
            n = mf.wrote_position // UNIT
            buf = mf.view(0, n * UNIT) if n else None
            if buf is None:
                continue
            first_phy, first_size, _ = self.k.cq_read(buf, 0, 1)
            if first_phy[0] >= commitlog_min and first_size[0] != L.CQ_FILLER_SIZE:
                self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset)
                return
            last_phy, _, _ = self.k.cq_read(buf, (n - 1) * UNIT, 1)
            if last_phy[0] < commitlog_min:
                self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + n * UNIT)
                continue
            phys, sizes, _ = self.k.cq_read(buf, 0, n)
            live = (phys >= commitlog_min) & (sizes != L.CQ_FILLER_SIZE)
            if live.any():
                first = int(live.argmax())
                self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + first * UNIT)
                return
            self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset + n * UNIT)

    def delete_expired(self, commitlog_min: int, now_ms: int = 0, force_after_ms: int = 0,
                       last_modified_ms: Callable[[MappedFile], int] = MappedFile.last_modified_ms,
                       ) -> list[tuple[MappedFile, DestroyOutcome, int, int]]:
        """Delete files (never the last) whose last unit points below ``commitlog_min``.

        Stops at a file a reader holds (retried on a later pass; forced after
        ``force_after_ms``). Returns (file, outcome, last unit's phy offset, last modified
        ms taken just before the deletion) per deleted file.
        """
        deleted: list[tuple[MappedFile, DestroyOutcome, int, int]] = []
        while len(self.queue.files) > 1:
            mf = self.queue.files[0]
            n = mf.wrote_position // UNIT
            last = mf.view((n - 1) * UNIT, UNIT) if n else None
            if last is None:
                break
            last_phy = int(self.k.cq_read(last, 0, 1).phys[0])
            del last
            if last_phy >= commitlog_min:
                break
            modified = last_modified_ms(mf)
            gone, outcome = self.queue.destroy_first(now_ms, force_after_ms)
            if gone is None or outcome is DestroyOutcome.HELD:
                break
            assert outcome is not None  # (None only with no file to delete)
            deleted.append((gone, outcome, last_phy, modified))
        self.correct_min_offset(commitlog_min)
        return deleted

    def flush(self, least_pages: int = 0) -> None:
        self.queue.flush(least_pages)

    def destroy(self) -> None:
        self.queue.destroy_all()
        self.max_physic_offset = 0
        self.min_logic_offset = 0

    def close(self) -> None:
        self.queue.close()


class ConsumeQueueTable:
    """All consume queues of a store, found on disk at load and created on first dispatch.

    A queue's first file is made off the put's path once the store runs (``defer_new``): a
    new directory entry costs ~0.3-0.8 ms on some file systems, two or three of them for a
    new queue, and the Java broker makes them in its dispatch thread too. Until then the queue
    is *pending*: its units wait in memory (``ConsumeQueue.pending_units``), the
    ``QueueFileService`` thread makes the file and writes them, and a reader that asks for
    the queue first (:meth:`get`) makes it itself, so a read still sees every put before it.
    Pending queues are not in ``queues`` (what the compiled send and pull paths read)."""

    def __init__(self, root_dir: str, file_size: int, kernels: StoreKernels,
                 space_check: SpaceCheck | None = None) -> None:
        self.root_dir = root_dir
        self.file_size = file_size
        self.k = kernels
        self.space_check = space_check
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        #: queues waiting for their first file, by key (see the class's docstring)
        self.pending: dict[tuple[str, int], ConsumeQueue] = {}
        #: ``wake()`` of the thread that makes pending queues' files; None: a new queue's
        #: file is made inline, under the put lock (loading, recovery, offline tools)
        self.defer_new: Callable[[], None] | None = None
        #: the lock puts hold (the writer's), taken to hand a pending queue its file and units
        self.put_lock: threading.Lock | None = None
        #: ``(cq)`` after a pending queue's units were written (the dispatcher's arrival listeners)
        self.on_ready: Callable[[ConsumeQueue], None] | None = None
        self._making = threading.Lock()
        #: the last try to make a pending queue's file failed (no descriptor, no space): new
        #: queues are made inline again, so their puts get the error as an answer, until a
        #: pending queue's file is made
        self.making_failed = False
        #: ``ConsumeQueue`` on the kernels' base (``hot_state``)
        self._queue_class = on_kernels(ConsumeQueue, kernels)

    def load(self) -> list[str]:
        notes: list[str] = []
        if not os.path.isdir(self.root_dir):
            return notes
        for topic in sorted(os.listdir(self.root_dir)):
            tdir = os.path.join(self.root_dir, topic)
            if not os.path.isdir(tdir):
                continue
            for qid in sorted(os.listdir(tdir)):
                if not qid.isdigit():  # RocketMQ skips non-numeric queue dirs too
                    notes.append(f"ignored {os.path.join(tdir, qid)}: not a queue id")
                    continue
                try:
                    cq = self._queue_class(topic, int(qid), self.root_dir, self.file_size, self.k, self.space_check)
                except IllegalArgumentError as e:  # e.g. a symlink leading out of the store
                    notes.append(f"ignored {os.path.join(tdir, qid)}: {e}")
                    continue
                notes.extend(cq.load())
                self.queues[(topic, int(qid))] = cq
        return notes

    def get(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue for reading: a pending one is given its file first (never call this
        holding the put lock: :meth:`lookup` is for the put's path)."""
        cq = self.queues.get((topic, queue_id))
        if cq is None and self.pending:
            self.make_ready((topic, queue_id))
            cq = self.queues.get((topic, queue_id))
        return cq

    def lookup(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue, pending or not, as it is (the put's path)."""
        key = (topic, queue_id)
        cq = self.queues.get(key)
        return cq if cq is not None else self.pending.get(key)

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self.queues.get(key)
        if cq is None:
            cq = self.pending.get(key)
            if cq is None:
                cq = self._queue_class(topic, queue_id, self.root_dir, self.file_size, self.k, self.space_check)
                if self.defer_new is not None and not self.making_failed:
                    cq.pending_units = []
                    self.pending[key] = cq
                    self.defer_new()
                else:
                    self.queues[key] = cq
        return cq

    def make_ready(self, key: tuple[str, int]) -> bool:
        """Give the pending queue ``key`` its first file (made outside the put lock) and write
        its waiting units; False when it could not be made (logged; it stays pending)."""
        with self._making:
            cq = self.pending.get(key)
            if cq is None:
                return True
            mf = None
            units = cq.pending_units
            if units and units[0][0] == 0:  # else a recreated queue: put_one_locked's gap filler decides
                try:
                    mf = cq.queue.make_file(0)
                except OSError as e:
                    if not self.making_failed:
                        log.error("consume queue %s-%d: cannot create its first file (its units wait in "
                                  "memory and are retried; new queues are made inline until one is made): %s",
                                  key[0], key[1], e)
                    self.making_failed = True
                    return False
                self.making_failed = False
            assert self.put_lock is not None
            with self.put_lock:
                if self.pending.get(key) is not cq:  # its topic was deleted meanwhile
                    if mf is not None:  # the file and the directories made for it go too
                        cq.queue.adopt(mf)
                        cq.destroy()
                        try:
                            os.rmdir(under_root(self.root_dir, key[0]))
                        except OSError:
                            pass  # other queues' directories (or foreign files) in it
                    return True
                if mf is not None:
                    cq.queue.adopt(mf)
                units, cq.pending_units = cq.pending_units or [], None
                added = 0
                for unit in units:
                    try:
                        added += cq.put_one_locked(*unit)
                    except StoreIOError as e:  # as a failed dispatch: the next start rebuilds it
                        log.error("consume queue %s-%d: units not written: %s", key[0], key[1], e)
                        break
                # published once its units are in: readers that take no lock look here first
                # (a reader that finds it in neither waits on ``_making`` above)
                self.queues[key] = cq
                del self.pending[key]
                if added and self.on_ready is not None:
                    self.on_ready(cq)
            return True

    def make_all_ready(self) -> bool:
        """:meth:`make_ready` of every pending queue; False when one could not be made."""
        ok = True
        for key in list(self.pending):
            ok = self.make_ready(key) and ok
        return ok

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.queues.values()), default=0)

    def remove_topic(self, topic: str) -> None:
        path = under_root(self.root_dir, topic)
        for key in [k for k in self.pending if k[0] == topic]:
            del self.pending[key]  # no file yet: its units go with the topic
        for key in [k for k in self.queues if k[0] == topic]:
            self.queues.pop(key).destroy()
        try:
            os.rmdir(path)
        except OSError:
            pass  # foreign files left in it: keep the directory

    def __iter__(self) -> Iterator[ConsumeQueue]:
        return iter(list(self.queues.values()))
