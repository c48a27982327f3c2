"""Recovery at start-up (store-format.md §6), reporting what it dropped.

1. Consume queues: keep the valid prefix of units.
2. Commitlog: find the end of valid data with a CRC-checked scan, from the third-last
   file (normal shutdown) or from the file the checkpoint points at (``abort`` left
   behind). A torn or corrupt tail is cut off; its bytes are first copied to
   ``<store>/quarantine/`` so nothing is silently lost.
3. Consume queues and index files that point past the end are truncated.
4. Everything after the oldest dispatch position (consume queues, index) is
   re-dispatched from the commitlog, rebuilding missing units and index entries.
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import os
import time
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from mqcore.config import FlushDiskType, StoreConfig
from mqcore.format import layout as L
from mqcore.kernel_api import Buffer, StoreKernels
from mqcore.store.checkpoint import StoreCheckpoint
from mqcore.store.commitlog import CommitLog, scan_file
from mqcore.store.consume_queue import ConsumeQueueTable
from mqcore.store.dispatch import Dispatcher
from mqcore.store.index import IndexService

log = logging.getLogger(__name__)

SCAN_BATCH = 65536
#: ``progress(done_bytes, total_bytes)`` while a recovery scans
Progress = Callable[[int, int], None]


@dataclasses.dataclass
class RecoveryReport:
    """What loading found and did: where valid data ends, what was dropped, quarantined or rebuilt."""

    abnormal: bool = False
    commitlog_min_offset: int = 0
    commitlog_max_offset: int = 0
    #: why the commitlog scan stopped (ScanStop name) and where
    stop_reason: str = "END"
    stop_offset: int = 0
    #: non-zero bytes found past the end of valid data (a torn or corrupt tail)
    dropped_bytes: int = 0
    quarantined: list[str] = dataclasses.field(default_factory=list)
    deleted_files: list[str] = dataclasses.field(default_factory=list)
    cq_units_dropped: int = 0
    #: consume-queue units that pointed into a lost commitlog range, turned into fillers
    cq_units_lost: int = 0
    #: after a crash under ASYNC_FLUSH: store time of the newest message kept (later ones were unflushed)
    last_store_timestamp: int = 0
    records_scanned: int = 0
    bytes_scanned: int = 0
    records_redispatched: int = 0
    #: commitlog ranges whose files are missing (deleted by hand, lost): messages gone for good
    data_loss: list[str] = dataclasses.field(default_factory=list)
    #: consume queues found missing units at start and rebuilt from the commitlog
    rebuilt_queues: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    duration_ms: float = 0.0

    @property
    def clean(self) -> bool:
        return not (self.dropped_bytes or self.deleted_files or self.cq_units_dropped or self.data_loss
                    or self.rebuilt_queues)

    def summary(self) -> str:
        kind = "abnormal (abort file found)" if self.abnormal else "normal"
        lines = [f"{kind} recovery in {self.duration_ms:.0f} ms: commitlog [{self.commitlog_min_offset}, "
                 f"{self.commitlog_max_offset}), scanned {self.records_scanned} records / {self.bytes_scanned} "
                 f"bytes, re-dispatched {self.records_redispatched}"]
        if self.dropped_bytes:
            lines.append(f"dropped a {self.stop_reason} tail at offset {self.stop_offset}: {self.dropped_bytes} "
                         f"bytes, copied to {', '.join(self.quarantined) or '(nothing to copy)'}")
        if self.cq_units_dropped:
            lines.append(f"dropped {self.cq_units_dropped} consume-queue units past the commitlog end")
        lines.extend(f"DATA LOSS: {d}" for d in self.data_loss)
        if self.cq_units_lost:
            lines.append(f"dropped {self.cq_units_lost} consume-queue units pointing into lost commitlog ranges")
        lines.extend(f"rebuilt consume queue {q}" for q in self.rebuilt_queues)
        lines.extend(f"deleted {p}" for p in self.deleted_files)
        lines.extend(self.notes)
        return "\n".join(lines)


class Recovery:
    """Finds the end of valid commitlog data, cuts what lies past it and re-dispatches the tail."""

    def __init__(self, config: StoreConfig, commitlog: CommitLog, queues: ConsumeQueueTable, index: IndexService | None,
                 dispatcher: Dispatcher, checkpoint: StoreCheckpoint, kernels: StoreKernels,
                 progress: Progress | None = None) -> None:
        self.cfg = config
        #: ``progress(done_bytes, total_bytes)`` while scanning (a long recovery shows it), or None
        self.progress = progress
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.dispatcher = dispatcher
        self.checkpoint = checkpoint
        self.k = kernels
        self.delays = config.delay_levels_ms
        #: (phy offset, size) of the last valid record the scan found
        self._last_record: tuple[int, int] | None = None
        #: queues recreated by the start-up check (their consume queue is gone on purpose)
        self._rebuilding: set[tuple[str, int]] = set()

    def run(self, abnormal: bool, report: RecoveryReport,
            manifest: dict[tuple[str, int], tuple[int, int]] | None = None) -> RecoveryReport:
        t0 = time.perf_counter()
        report.abnormal = abnormal
        for cq in self.queues:
            cq.recover()
        files = self.commitlog.queue.files
        if not files:
            for cq in self.queues:
                cq.destroy()
            self.queues.queues.clear()
            report.duration_ms = (time.perf_counter() - t0) * 1000
            return report
        self._report_holes(report)
        start_i = self._start_file(abnormal)
        seen: dict[tuple[str, int], list[int]] = {}
        end = self._find_end(start_i, report, seen)
        self._cut_tail(end, report)
        if abnormal and self.cfg.flush_disk_type is FlushDiskType.ASYNC_FLUSH:
            self._report_unflushed(end, report)
        for cq in self.queues:
            if cq.max_physic_offset > end:
                before = cq.max_offset()
                cq.truncate_dirty_logic(end)
                report.cq_units_dropped += before - cq.max_offset()
        index_from = self.index.truncate_beyond(end) if self.index is not None else end
        # dispatch from a record boundary; index only what the index may be missing
        dispatch_from = min(self.queues.max_physic_offset(), index_from, end)
        index_from = self._index_threshold(index_from, abnormal)
        if abnormal:
            dispatch_from = min(dispatch_from, files[start_i].file_from_offset)
        rebuild_from = self._queues_missing_units(seen, manifest or {}, report)
        if rebuild_from is not None:
            dispatch_from = min(dispatch_from, rebuild_from)
        dispatch_from = max(dispatch_from, self.commitlog.min_offset)
        # after a clean stop every record before the furthest consume-queue unit was
        # dispatched: a queue missing there was deleted (DELETE_TOPIC), not lost - re-dispatch
        # (the index lagging behind, say) must not bring it back; queues rebuilt above may
        self.dispatcher.no_new_queues_below = -1 if abnormal else self.queues.max_physic_offset()
        self.dispatcher.new_queues_allowed = set(self._rebuilding)
        # what counts as re-dispatched: records that were missing a unit or an index entry. A
        # clean stop's last indexed record is re-read (dispatch starts on a record boundary)
        # but needs nothing, so "re-dispatched 1" after every clean restart was wrong; nor do
        # the records after it that carry no key (the index's end only moves on a keyed one)
        needed = _Needed(dispatch_from, dispatch_from)
        if not abnormal and rebuild_from is None:
            needed = _Needed(unit=max(dispatch_from, min(self.queues.max_physic_offset(), end)),
                             index_at=max(dispatch_from, index_from))
        try:
            report.records_redispatched = self._redispatch(dispatch_from, end, index_from, needed)
        finally:
            self.dispatcher.no_new_queues_below = -1
            self.dispatcher.new_queues_allowed = set()
        cl_min = self.commitlog.min_offset
        for cq in self.queues:
            cq.correct_min_offset(cl_min)
        report.commitlog_min_offset = cl_min
        report.commitlog_max_offset = self.commitlog.max_offset
        report.duration_ms = (time.perf_counter() - t0) * 1000
        return report

    def _report_unflushed(self, end: int, report: RecoveryReport) -> None:
        """After a crash under ASYNC_FLUSH, say where the kept messages end: what was
        acknowledged later had not been flushed (a power cut, not a process crash, loses it)."""
        if self._last_record is None:
            return
        ts = self.commitlog.store_timestamp(*self._last_record)
        if ts <= 0:
            return
        report.last_store_timestamp = ts
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts / 1000)) + ".%03d" % (ts % 1000)
        report.notes.append(f"ASYNC_FLUSH: the log kept ends at offset {end} with a message stored at {when} "
                            f"({ts}); any message acknowledged after it had not been flushed and is lost")

    def _report_holes(self, report: RecoveryReport) -> None:
        """A commitlog file missing between two others: the messages in it are gone. Say so
        loudly, with the range and, per queue, how many messages its units point into it."""
        files = list(self.commitlog.queue.files)  # closing a gap inserts files
        for prev, nxt in zip(files, files[1:]):
            lo, hi = prev.end_offset, nxt.file_from_offset
            if hi <= lo:
                continue
            lost = []
            for cq in self.queues:
                a, b = cq.offsets_in_phy_range(lo, hi)
                if b > a:
                    lost.append(f"{cq.topic}-{cq.queue_id}: {b - a} (queue offsets {a}..{b - 1})")
            what = f"commitlog range [{lo}, {hi}) is missing ({(hi - lo) // self.commitlog.file_size} file(s) " \
                   f"between {prev.name} and {nxt.name}); messages stored there are lost"
            if lost:
                what += ": " + "; ".join(lost)
            report.data_loss.append(what)
            log.error("DATA LOSS in %s: %s", self.commitlog.queue.directory, what)
            self._forget_range(lo, hi, report)

    def _forget_range(self, lo: int, hi: int, report: RecoveryReport) -> None:
        """After the loss of commitlog [lo, hi) is reported: units pointing into it become
        fillers (queue offsets keep their numbering, consumers skip them), index files with
        entries from it on are rebuilt, and the range is closed with files holding only an
        end-of-file marker, so the store reads as one contiguous log again (``mqstore verify``
        is clean) and the loss is not reported twice."""
        for cq in self.queues:
            a, b = cq.offsets_in_phy_range(lo, hi)
            dropped = cq.drop_units(a, b) if b > a else 0
            if dropped:
                report.cq_units_lost += dropped
                report.notes.append(f"dropped {dropped} consume-queue units of {cq.topic}-{cq.queue_id} "
                                    f"(queue offsets {a}..{b - 1}) pointing into the lost range [{lo}, {hi})")
        if self.index is not None:
            self.index.truncate_beyond(lo)
        for path in self.commitlog.queue.fill_gap(lo, hi, self._blank_file):
            report.notes.append(f"wrote {path} holding only an end-of-file marker in place of the lost file")

    def _blank_file(self, path: str, size: int) -> None:
        """A sparse commitlog file whose first record is the end-of-file marker."""
        with open(path, "xb") as f:
            head = bytearray(L.BLANK_HEADER_BYTES)
            self.k.write_blank(head, 0, size)
            f.write(head)
            f.truncate(size)
            os.fsync(f.fileno())

    def _queues_missing_units(self, seen: dict[tuple[str, int], list[int]],
                              manifest: dict[tuple[str, int], tuple[int, int]], report: RecoveryReport) -> int | None:
        """Check each queue against what it held at the last clean stop (the manifest) and
        against what the scanned commitlog range holds for it. A queue that lost units
        (a file deleted or cut short) is rebuilt by re-dispatching: appended from its first
        record in the scanned range when only its end is missing there, recreated from the
        start of the commitlog otherwise. Returns where dispatch must start (None: no queue
        is short)."""
        start = None
        cl_min = self.commitlog.min_offset
        for (topic, qid), (lo, hi) in sorted(manifest.items()):
            cq = self.queues.get(topic, qid)
            have_lo, have_hi = (cq.min_offset(), cq.max_offset()) if cq is not None else (hi, 0)
            if have_hi >= hi and have_lo <= lo:
                continue
            if cq is not None:
                cq.destroy()
                del self.queues.queues[(topic, qid)]
            self._rebuilding.add((topic, qid))
            start = cl_min
            what = (f"{topic}-{qid}: held queue offsets [{lo}, {hi}) at the last clean stop, found "
                    f"{'no files' if cq is None or have_hi == 0 else f'[{have_lo}, {have_hi})'}; "
                    f"recreated from the commitlog (from offset {cl_min})")
            report.rebuilt_queues.append(what)
            log.warning("consume queue %s", what)
        rebuilt = {w.split(":", 1)[0] for w in report.rebuilt_queues}
        for (topic, qid), (lo_qo, hi_qo, first_phy) in sorted(seen.items()):
            if f"{topic}-{qid}" in rebuilt:
                continue
            cq = self.queues.get(topic, qid)
            if cq is None:
                # no directory at all: the topic was deleted (DELETE_TOPIC removes it) - or
                # removed by hand; either way not resurrected, but said
                report.notes.append(f"commitlog holds messages of {topic}-{qid} (queue offsets up to {hi_qo}) but "
                                    "there is no consume queue directory for it (topic deleted?); not rebuilt")
                continue
            have = cq.max_offset()
            if have > hi_qo:
                continue
            frm = first_phy
            if have < lo_qo:  # the gap reaches before the scanned range: recreate the queue
                frm = cl_min
                cq.destroy()
                del self.queues.queues[(topic, qid)]
                self._rebuilding.add((topic, qid))
            start = frm if start is None else min(start, frm)
            what = (f"{topic}-{qid}: units end at queue offset {have} but the commitlog holds its messages up to "
                    f"{hi_qo}; re-dispatched from commitlog offset {frm}")
            report.rebuilt_queues.append(what)
            log.warning("consume queue %s", what)
        return start

    def _index_threshold(self, resume: int, abnormal: bool) -> int:
        """Lowest commitlog offset to index again, given the index ends at message ``resume``."""
        if not abnormal and self.index is not None and self.index.files \
                and self.index.files[-1].entry_count() > 0:
            # after a clean shutdown the newest indexed message was indexed whole
            return resume + 1
        return resume

    def _start_file(self, abnormal: bool) -> int:
        files = self.commitlog.queue.files
        if not abnormal:
            return max(0, len(files) - 3)
        min_ts = self.checkpoint.min_timestamp()
        for i in range(len(files) - 1, -1, -1):
            head = files[i].buf[:L.REC_FIXED_V4]
            magic = int.from_bytes(head[L.REC_MAGIC:L.REC_MAGIC + 4], "big", signed=True)
            if magic != L.MAGIC_V1:
                continue
            sys_flag = int.from_bytes(head[L.REC_SYSFLAG:L.REC_SYSFLAG + 4], "big", signed=True)
            at = L.REC_STORETIMESTAMP_V4 + (L.HOST_V6_EXTRA if sys_flag & L.SYSFLAG_BORNHOST_V6 else 0)
            ts = int.from_bytes(files[i].buf[at:at + 8], "big", signed=True)
            if ts != 0 and ts <= min_ts:
                return i
        return 0

    def _find_end(self, start_i: int, report: RecoveryReport, seen: dict[tuple[str, int], list[int]]) -> int:
        """CRC-checked scan from file ``start_i``; returns the offset after the last valid record.
        ``seen`` gets, per queue with records in the scanned range, [lowest queue offset,
        highest queue offset, commitlog offset of its first record there]."""
        files = self.commitlog.queue.files
        end = files[start_i].file_from_offset
        counter = [0]
        progress = self.progress
        # the files to scan: full ones, and the newest up to its last allocated byte (sparse files)
        total = sum(mf.file_size for mf in files[start_i:-1]) + _last_data_offset(files[-1].path, 0, files[-1].file_size)
        base = [0, 0]  # bytes scanned in earlier files, commitlog offset the current file starts at

        def count(table: np.ndarray, topics: list[bytes], buf: Buffer) -> None:
            counter[0] += len(table)
            _note_queues(table, topics, seen)
            if len(table):
                self._last_record = (int(table["phy_offset"][-1]), int(table["size"][-1]))
            if progress is not None and len(table):
                last = int(table["phy_offset"][-1]) + int(table["size"][-1]) - base[1]
                progress(base[0] + last, total)

        for mf in files[start_i:]:
            base[1] = mf.file_from_offset
            stop, reason = scan_file(self.k, mf, 0, mf.file_size, self.cfg.check_crc_on_recover, self.delays,
                                     SCAN_BATCH, count)
            report.bytes_scanned += stop
            base[0] += stop
            if progress is not None:
                progress(base[0], total)
            end = mf.file_from_offset + stop
            if reason == L.ScanStop.BLANK:
                end = mf.end_offset  # the file is full: continue in the next one
                continue
            report.stop_reason = L.ScanStop.NAMES[reason]
            report.stop_offset = end
            break
        report.records_scanned = counter[0]
        return end

    def _cut_tail(self, end: int, report: RecoveryReport) -> None:
        """Truncate the commitlog at ``end``, quarantining any data found past it."""
        qdir = os.path.join(os.path.dirname(self.commitlog.queue.directory), "quarantine")
        for mf in self.commitlog.queue.files:
            if mf.end_offset <= end:
                continue
            start = max(0, end - mf.file_from_offset)
            last = _data_length(mf.buf, start, _last_data_offset(mf.path, start, mf.file_size))
            if last:
                report.dropped_bytes += last
                path = os.path.join(qdir, f"{mf.name}.{start}")
                try:
                    os.makedirs(qdir, exist_ok=True)
                    with open(path, "wb") as f:
                        f.write(mf.buf[start:start + last])
                except OSError as e:  # a full disk must not stop the start; the bytes stay in place
                    report.notes.append(f"could not copy the dropped tail of {mf.path} to {path}: {e}")
                    continue
                report.quarantined.append(path)
                if mf.file_from_offset <= end:
                    # copied away: zero it, so neither a later restart nor ``mqstore verify``
                    # finds the torn bytes (later files are deleted whole below)
                    try:
                        mf.zero(start, start + last)
                    except OSError as e:
                        report.notes.append(f"could not zero the dropped tail of {mf.path}: {e}")
        report.deleted_files.extend(self.commitlog.queue.truncate_dirty(end))
        if report.dropped_bytes:
            log.warning("commitlog tail after offset %d dropped (%s, %d bytes); copies in %s",
                        end, report.stop_reason, report.dropped_bytes, qdir)

    def _redispatch(self, start: int, end: int, index_from: int, needed: _Needed) -> int:
        """Dispatch the records in [start, end); returns how many lacked a unit or an index
        entry (``needed``)."""
        n = [0]

        def dispatch(table: np.ndarray, topics: list[bytes], buf: Buffer) -> None:
            self.dispatcher.dispatch_locked(table, topics, buf, index_from_phy=index_from)
            phy = table["phy_offset"]
            keyed = (table["uniq_len"] > 0) | (table["keys_len"] > 0)
            n[0] += int(np.count_nonzero((phy >= needed.unit) | ((phy >= needed.index_at) & keyed)))

        for mf, pos in self.commitlog.iter_files_from(start):
            stop_at = min(mf.wrote_position, end - mf.file_from_offset)
            if stop_at <= pos:
                continue
            scan_file(self.k, mf, pos, stop_at, False, self.delays, SCAN_BATCH, dispatch)
        return n[0]


class _Needed(NamedTuple):
    """Where recovery's re-dispatch starts to matter: from ``unit`` on records lacked their
    consume-queue unit, from ``index_at`` on their keys lacked index entries (not ``index``:
    that is tuple's method)."""
    unit: int
    index_at: int


def _note_queues(table: np.ndarray, topics: list[bytes], seen: dict[tuple[str, int], list[int]]) -> None:
    """Fold one scanned batch into ``seen`` (records that get a consume-queue unit only)."""
    if not len(table):
        return
    tx = table["sys_flag"] & L.SYSFLAG_TRANSACTION_MASK
    counted = table[(tx == L.SYSFLAG_TRANSACTION_NOT) | (tx == L.SYSFLAG_TRANSACTION_COMMIT)]
    if not len(counted):
        return
    keys = (counted["topic_idx"].astype(np.int64) << 32) | (counted["queue_id"].astype(np.int64) & 0xFFFFFFFF)
    uniq, first_idx = np.unique(keys, return_index=True)
    for key, i in zip(uniq.tolist(), first_idx.tolist()):
        rows = counted[keys == key]
        qos = rows["queue_offset"]
        name = (topics[key >> 32].decode("utf-8", "replace"), int(np.int32(key & 0xFFFFFFFF)))
        lo, hi, phy = int(qos.min()), int(qos.max()), int(rows["phy_offset"][0])
        got = seen.get(name)
        if got is None:
            seen[name] = [lo, hi, phy]
        else:
            got[0], got[1], got[2] = min(got[0], lo), max(got[1], hi), min(got[2], phy)


def _last_data_offset(path: str, start: int, size: int) -> int:
    """End of the last allocated extent at or after ``start`` (files are sparse: the
    never-written tail of a 1 GiB file need not be read to know it holds zeros)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return size
    try:
        end = start
        pos = start
        while pos < size:
            try:
                pos = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:  # no data after pos
                    break
                return size  # SEEK_DATA unsupported here: read it all
            pos = end = min(os.lseek(fd, pos, os.SEEK_HOLE), size)
        return end
    finally:
        os.close(fd)


def _data_length(buf: Buffer, start: int, hi: int, chunk: int = 16 << 20) -> int:
    """Bytes from ``start`` up to the last non-zero byte of ``buf[:hi]`` (0 if all zeros)."""
    while hi > start:
        lo = max(start, hi - chunk)
        part = np.frombuffer(buf[lo:hi], dtype=np.uint8)
        if part.any():
            return lo + int(np.flatnonzero(part)[-1]) + 1 - start
        hi = lo
    return 0
