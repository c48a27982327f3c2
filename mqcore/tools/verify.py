"""``mqstore verify``: check a store's files against each other, read-only.

What is checked, and why each matters to a broker:

* commitlog: every record's CRC and length fields (what recovery checks), that its
  PHYSICALOFFSET field says where it really is (msg ids and lookups use it), that files
  are equal-sized and contiguous and end with a blank marker;
* consume queues: every unit points at the start of a record (magic, TOTALSIZE and
  PHYSICALOFFSET agree) of the queue's topic and queue id with the unit's queue offset
  and size; units below the commitlog minimum are expired, not errors;
* index files: header sanity, slot heads and chains stay inside the file and in their
  slot, entries point at record starts.

Unit and entry checks read the record header at the pointed-to offset instead of
keeping a table of every record, so memory stays flat on large stores. Problems make
the exit status non-zero; warnings (things recovery repairs) do not.
"""
from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from typing import IO

import numpy as np

from mqcore.errors import CorruptFileError, IllegalArgumentError, StoreIOError
from mqcore.format import layout as L
from mqcore.format.damage import file_gaps
from mqcore.format.files import (
    RECORD_HEAD_DTYPE,
    FileScan,
    ReadOnlyFile,
    StoreFiles,
    gather_int,
    gather_rows,
    index_entries,
    index_header,
    iter_cq,
)
from mqcore.format.index_chains import chain_problems
from mqcore.kernel_api import StoreKernels

EXAMPLES_PER_KIND = 20
_ENTRY_CHUNK = 1 << 20
_I32 = struct.Struct(">i")


class Findings:
    """Problems and warnings by kind; the first ``EXAMPLES_PER_KIND`` messages of each are kept."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], int] = {}
        self.examples: list[tuple[str, str, str]] = []

    def add(self, severity: str, kind: str, message: str) -> None:
        key = (severity, kind)
        n = self.counts.get(key, 0)
        self.counts[key] = n + 1
        if n < EXAMPLES_PER_KIND:
            self.examples.append((severity, kind, message))

    def bulk(self, severity: str, kind: str, count: int, examples: list[str]) -> None:
        """``count`` findings of one kind, of which ``examples`` are described."""
        if count <= 0:
            return
        key = (severity, kind)
        n = self.counts.get(key, 0)
        self.counts[key] = n + count
        self.examples.extend((severity, kind, m) for m in examples[:max(0, EXAMPLES_PER_KIND - n)])

    def problem(self, kind: str, message: str) -> None:
        self.add("problem", kind, message)

    def warning(self, kind: str, message: str) -> None:
        self.add("warning", kind, message)

    def total(self, severity: str) -> int:
        return sum(n for (s, _), n in self.counts.items() if s == severity)


@dataclasses.dataclass
class Summary:
    commitlog_files: int = 0
    records: int = 0
    record_bytes: int = 0
    log_min: int = 0
    log_end: int = 0
    queues: int = 0
    units: int = 0
    expired_units: int = 0
    index_files: int = 0
    index_entries: int = 0


class Verifier:
    def __init__(self, kernels: StoreKernels, store: StoreFiles) -> None:
        self.k = kernels
        self.store = store
        self.found = Findings()
        self.summary = Summary()
        self.files: list[ReadOnlyFile] = []
        self._bases = np.empty(0, np.int64)
        #: (topic, queue id) -> highest queue offset of a consumable record in the commitlog
        self.record_max_qoff: dict[tuple[str, int], int] = {}

    def run(self) -> Findings:
        self.files = self.store.open_commitlog()
        try:
            self._bases = np.array([f.base for f in self.files], np.int64)
            self._commitlog()
            self._consume_queues()
            self._index_files()
            self._checkpoint()
        finally:
            for f in self.files:
                f.close()
        return self.found

    # --- commitlog -------------------------------------------------------------------------------------
    def _commitlog(self) -> None:
        s, found = self.summary, self.found
        s.commitlog_files = len(self.files)
        if not self.files:
            return
        size = self.files[0].size
        s.log_min = s.log_end = self.files[0].base
        for i, f in enumerate(self.files):
            if f.size != size:
                found.problem("file size", f"{f.path} is {f.size} bytes, the first commitlog file {size}")
            if i and f.base < self.files[i - 1].end:
                found.problem("file order", f"{f.path} starts inside {self.files[i - 1].name}, which ends at "
                                            f"{self.files[i - 1].end}")
        for gap in file_gaps([(f.name, f.base, f.size) for f in self.files]):  # what the Spark reader refuses too
            found.problem(gap.kind, gap.describe())
        for i, f in enumerate(self.files):
            stop, reason = self._scan_file(f)
            if stop > 0:
                s.log_end = f.base + stop
            if reason == L.ScanStop.BLANK:
                blank_size = _I32.unpack_from(f.buf, stop)[0]
                if blank_size != f.size - stop:
                    found.warning("blank size", f"{f.path}: end-of-file marker at {f.base + stop} says "
                                                f"{blank_size} bytes, {f.size - stop} are left")
                s.log_end = f.end
            elif reason == L.ScanStop.END:
                found.warning("no blank", f"{f.path}: records fill the file with no end-of-file marker")
            else:
                # the log ends here; later files holding data would be deleted by recovery (a
                # pre-allocated empty next file is normal). They are still checked below.
                later = [g.name for g in self.files[i + 1:] if g.array[:L.REC_FIXED_V4].any()]
                if later:
                    found.problem("data after end", f"the log stops at offset {f.base + stop} in {f.name} "
                                                     f"({L.ScanStop.NAMES[reason]}), but later file(s) "
                                                     f"{', '.join(later)} hold data; recovery would delete them")

    def _scan_file(self, f: ReadOnlyFile) -> tuple[int, int]:
        """CRC-checked scan of one file; returns (stop position, ScanStop reason)."""
        pos = 0
        while True:
            scan = FileScan(self.k, f, pos, check_crc=True)
            for table, topics in scan:
                self._records(f, table, topics)
            if scan.reason not in (L.ScanStop.CORRUPT, L.ScanStop.TRUNCATED):
                return scan.stop, scan.reason
            at = f.base + scan.stop
            if scan.reason == L.ScanStop.TRUNCATED:
                self.found.problem("truncated record", f"{f.path}: the record at offset {at} runs past the file end")
                return scan.stop, scan.reason
            crc = self._crc_only(f, scan.stop)
            if crc is None:
                size, magic = struct.unpack_from(">ii", f.buf, scan.stop)
                self.found.problem("corrupt record", f"{f.path}: corrupt record at offset {at} (TOTALSIZE {size}, "
                                                     f"magic 0x{magic & 0xFFFFFFFF:08X}); the rest of this file "
                                                     "was not checked")
                return scan.stop, scan.reason
            size, stored, actual = crc
            self.found.problem("crc", f"{f.path}: BODYCRC mismatch in the record at offset {at}: stored {stored}, "
                                      f"body gives {actual}")
            pos = scan.stop + size

    def _crc_only(self, f: ReadOnlyFile, pos: int) -> tuple[int, int, int] | None:
        """(size, stored, computed CRC) if the record at ``pos`` is sound except for its CRC."""
        table, topics, _, _ = self.k.scan_records(f.buf, pos, f.size, f.base, False, (1000,), 1)
        if not len(table):
            return None
        self._records(f, table, topics)
        size = int(table["size"][0])
        rec = self.k.decode_records(f.buf, pos, pos + size, 1, False)[0]
        return size, rec.body_crc, zlib.crc32(rec.body) & 0x7FFFFFFF

    def _records(self, f: ReadOnlyFile, table: np.ndarray, topics: list[bytes]) -> None:
        s = self.summary
        s.records += len(table)
        s.record_bytes += int(table["size"].sum())
        stored = gather_int(f.array, table["phy_offset"] - f.base + L.REC_PHYOFFSET, 8)
        for i in np.flatnonzero(stored != table["phy_offset"])[:EXAMPLES_PER_KIND * 2]:
            self.found.problem("physical offset", f"{f.path}: the record at offset {int(table['phy_offset'][i])} "
                                                  f"says PHYSICALOFFSET {int(stored[i])}")
        tx = table["sys_flag"] & L.SYSFLAG_TRANSACTION_MASK
        keep = (tx == L.SYSFLAG_TRANSACTION_NOT) | (tx == L.SYSFLAG_TRANSACTION_COMMIT)
        key = (table["topic_idx"].astype(np.int64) << 32) | table["queue_id"].astype(np.int64) & 0xFFFFFFFF
        for k in np.unique(key[keep]):
            top = int(table["queue_offset"][keep & (key == k)].max())
            name = (topics[int(k >> 32)].decode("utf-8", "replace"), int(np.int32(k & 0xFFFFFFFF)))
            self.record_max_qoff[name] = max(self.record_max_qoff.get(name, -1), top)

    # --- record lookups by offset ------------------------------------------------------------------------
    def _record_heads(self, phys: np.ndarray, sizes: np.ndarray | None = None,
                      topic: bytes | None = None) -> dict[str, np.ndarray]:
        """Header fields of the records ``phys`` point at.

        ``ok`` is False where there is no record start (magic and PHYSICALOFFSET must agree
        with the offset); ``topic_ok`` (when ``topic`` is given) says the record's topic is it.
        """
        n = len(phys)
        out = {name: np.zeros(n, np.int64) for name in _FIELDS}
        out["ok"] = np.zeros(n, bool)
        out["topic_ok"] = np.zeros(n, bool)
        idx = np.searchsorted(self._bases, phys, side="right") - 1
        for fi in np.unique(idx[idx >= 0]):
            f = self.files[int(fi)]
            sel = np.flatnonzero(idx == fi)
            pos = phys[sel] - f.base
            fits = pos + L.REC_FIXED_V4 <= f.size
            if sizes is not None:
                fits &= pos + np.maximum(sizes[sel], 0) <= f.size
            sel, pos = sel[fits], pos[fits]
            head = gather_rows(f, pos, RECORD_HEAD_DTYPE)
            magic = head["magic"].astype(np.int64)
            good = (magic == L.MAGIC_V1) | (magic == L.MAGIC_V2)
            good &= head["phy_offset"] == phys[sel]
            out["ok"][sel] = good
            for name in _FIELDS:
                out[name][sel] = head[name]
            if topic is not None:
                out["topic_ok"][sel] = good & _topic_is(f, pos, head, topic)
        return out

    # --- consume queues -------------------------------------------------------------------------------------
    def _consume_queues(self) -> None:
        s = self.summary
        queues = self.store.consume_queues()
        s.queues = len(queues)
        seen = set()
        for topic, qid, directory in queues:
            seen.add((topic, qid))
            top = self._one_queue(topic, qid)
            want = self.record_max_qoff.get((topic, qid), -1) + 1
            if top is not None and top < want:
                self.found.warning("units missing", f"consume queue {topic}/{qid} ends at queue offset {top} but "
                                                    f"the commitlog holds offsets up to {want - 1}; a broker "
                                                    "re-dispatches them at start-up")
        for (topic, qid), top in sorted(self.record_max_qoff.items()):
            if (topic, qid) not in seen:
                self.found.warning("queue missing", f"the commitlog holds {topic}/{qid} messages (queue offsets up "
                                                    f"to {top}) but there is no consume queue for it")

    def _one_queue(self, topic: str, qid: int) -> int | None:
        """Check one queue's units; returns its max offset (next unit), None if unreadable."""
        s, found = self.summary, self.found
        name = f"{topic}/{qid}"
        paths = self.store.cq_paths(topic, qid)
        sizes_on_disk = {os.path.getsize(p) for p in paths}
        if len(sizes_on_disk) > 1:
            found.problem("file size", f"consume queue {name} has files of different sizes {sorted(sizes_on_disk)}")
        topic_b = topic.encode("utf-8")
        top = 0
        seen_real = False
        try:
            for first, phys, sizes, _tags in iter_cq(self.k, paths):
                qoffs = np.arange(first, first + len(phys), dtype=np.int64)
                top = first + len(phys)
                filler = sizes == L.CQ_FILLER_SIZE
                real = ~filler
                # pre-blank fillers belong before the first real unit (a queue recreated mid-way)
                first_real = int(np.argmax(real)) if real.any() else len(real)
                if filler.any() and (seen_real or filler[first_real:].any()):
                    found.warning("filler", f"consume queue {name} has filler units after real ones")
                seen_real = seen_real or bool(real.any())
                expired = real & (phys < s.log_min)
                s.expired_units += int(expired.sum())
                beyond = real & (phys + sizes > s.log_end)
                for i in np.flatnonzero(beyond)[:EXAMPLES_PER_KIND]:
                    found.problem("unit past end", f"consume queue {name} unit {int(qoffs[i])} points at "
                                                   f"{int(phys[i])}+{int(sizes[i])}, past the log end {s.log_end}")
                live = real & ~expired & ~beyond
                s.units += int(real.sum())
                if live.any():
                    self._check_units(name, qid, topic_b, qoffs[live], phys[live], sizes[live])
        except CorruptFileError as e:
            found.problem("consume queue", str(e))
            return None
        return top

    def _check_units(self, name: str, qid: int, topic: bytes, qoffs: np.ndarray, phys: np.ndarray,
                     sizes: np.ndarray) -> None:
        heads = self._record_heads(phys, sizes, topic)
        checks = (
            (~heads["ok"], "is not the start of a record"),
            (heads["size"] != sizes, "the record's size differs"),
            (~heads["topic_ok"], "the record is of another topic"),
            (heads["queue_id"] != qid, "the record is of another queue id"),
            (heads["queue_offset"] != qoffs, "the record has another queue offset"),
        )
        bad = np.zeros(len(phys), bool)
        for mask, why in checks:
            mask = mask & ~bad
            examples = [f"consume queue {name} unit {int(qoffs[i])} -> offset {int(phys[i])} size {int(sizes[i])}: "
                        f"{why} (record: size {int(heads['size'][i])}, queue {int(heads['queue_id'][i])}, "
                        f"queue offset {int(heads['queue_offset'][i])})"
                        for i in np.flatnonzero(mask)[:EXAMPLES_PER_KIND]]
            self.found.bulk("problem", "bad unit", int(mask.sum()), examples)
            bad |= mask

    # --- index files --------------------------------------------------------------------------------------
    def _index_files(self) -> None:
        for path in self.store.index_paths():
            self.summary.index_files += 1
            try:
                with ReadOnlyFile(path) as f:
                    self._one_index(f)
            except (CorruptFileError, IllegalArgumentError, StoreIOError) as e:
                self.found.problem("index file", str(e))

    def _one_index(self, f: ReadOnlyFile) -> None:
        found = self.found
        begin_ts, end_ts, begin_phy, end_phy, slot_count, count = index_header(f)
        slots, entries = self.store.index_geometry(f)
        if not 1 <= count <= entries:
            found.problem("index header", f"{f.path}: indexCount {count} is outside [1, {entries}]")
            return
        if count > 1 and (end_ts < begin_ts or slot_count > count - 1 or slot_count < 1):
            found.problem("index header", f"{f.path}: header times [{begin_ts}, {end_ts}] or hashSlotCount "
                                          f"{slot_count} (of {count - 1} entries) are impossible")
        self.summary.index_entries += count - 1
        for kind, message in chain_problems(f.buf, slots, count, f.path, EXAMPLES_PER_KIND):
            found.problem(kind, message)
        if count <= 1:
            return
        if int(index_entries(f, slots, count - 1, 1)["phy_offset"][0]) != end_phy \
                or int(index_entries(f, slots, 1, 1)["phy_offset"][0]) != begin_phy:
            found.problem("index header", f"{f.path}: header phy offsets [{begin_phy}, {end_phy}] do not match the "
                                          "first and last entries")
        for lo in range(1, count, _ENTRY_CHUNK):
            hi = min(count, lo + _ENTRY_CHUNK)
            self._index_targets(f, lo, index_entries(f, slots, lo, hi - lo))

    def _index_targets(self, f: ReadOnlyFile, lo: int, chunk: np.ndarray) -> None:
        """Each live entry must point at the start of a record before the log end."""
        found = self.found
        n = np.arange(lo, lo + len(chunk), dtype=np.int64)
        phys = chunk["phy_offset"].astype(np.int64)
        live = phys >= self.summary.log_min
        past = live & (phys >= self.summary.log_end)
        for i in np.flatnonzero(past)[:EXAMPLES_PER_KIND]:
            found.problem("index entry", f"{f.path}: entry {int(n[i])} points at {int(phys[i])}, past the log end "
                                         f"{self.summary.log_end}")
        check = np.flatnonzero(live & ~past)
        if len(check):
            heads = self._record_heads(phys[check])
            bad = check[~heads["ok"]]
            found.bulk("problem", "index entry", len(bad),
                       [f"{f.path}: entry {int(n[i])} -> offset {int(phys[i])} is not the start of a record"
                        for i in bad[:EXAMPLES_PER_KIND]])

    def _checkpoint(self) -> None:
        path = self.store.paths.checkpoint_path
        if os.path.exists(path) and os.path.getsize(path) != L.CHECKPOINT_FILE_SIZE:
            self.found.problem("checkpoint", f"{path} is {os.path.getsize(path)} bytes, not "
                                             f"{L.CHECKPOINT_FILE_SIZE}")


#: record header fields reported for unit checks
_FIELDS = ("size", "queue_id", "queue_offset")


def _topic_is(f: ReadOnlyFile, pos: np.ndarray, head: np.ndarray, topic: bytes) -> np.ndarray:
    """Whether each record at ``pos`` (heads in ``head``) has exactly ``topic`` (vectorised)."""
    sys_flag = head["sys_flag"].astype(np.int64)
    extra = (np.where(sys_flag & L.SYSFLAG_BORNHOST_V6, L.HOST_V6_EXTRA, 0)
             + np.where(sys_flag & L.SYSFLAG_STOREHOST_V6, L.HOST_V6_EXTRA, 0))
    body_at = pos + L.REC_BODYLENGTH_V4 + extra
    body_len = head["body_length_v4"].astype(np.int64)
    shifted = (extra > 0) & (body_at + 4 <= f.size)  # IPv6 hosts move the body length
    if shifted.any():
        body_len[shifted] = gather_int(f.array, body_at[shifted], 4)
    v2 = head["magic"] == L.MAGIC_V2
    want_v1 = bytes((len(topic),)) + topic if len(topic) <= 127 else None
    want_v2 = len(topic).to_bytes(2, "big") + topic
    topic_at = body_at + 4 + body_len
    end = topic_at + np.where(v2, len(want_v2), len(want_v2) - 1)
    ok = (body_len >= 0) & (end <= pos + np.maximum(head["size"].astype(np.int64), 0)) & (end <= f.size)
    same = np.zeros(len(pos), bool)
    for is_v2, want in ((False, want_v1), (True, want_v2)):
        sel = np.flatnonzero(ok & (v2 == is_v2))
        if want is None or not len(sel):
            continue
        got = gather_rows(f, topic_at[sel], np.dtype((np.void, len(want))))
        same[sel] = (got.view(np.uint8).reshape(len(sel), len(want)) == np.frombuffer(want, np.uint8)).all(axis=1)
    return same


def report(found: Findings, summary: Summary, out: IO[str], abort_present: bool) -> int:
    """Print problems, warnings and a summary; returns the exit status (0 clean, 1 problems)."""
    for severity, kind, message in found.examples:
        out.write(f"{severity.upper()} [{kind}] {message}\n")
    for (severity, kind), n in sorted(found.counts.items()):
        if n > EXAMPLES_PER_KIND:
            out.write(f"{severity.upper()} [{kind}] ... {n - EXAMPLES_PER_KIND} more not shown\n")
    s = summary
    out.write(f"commitlog: {s.commitlog_files} file(s), {s.records} records, {s.record_bytes} bytes, "
              f"log [{s.log_min}, {s.log_end})\n")
    out.write(f"consume queues: {s.queues} queue(s), {s.units} units ({s.expired_units} expired)\n")
    out.write(f"index: {s.index_files} file(s), {s.index_entries} entries\n")
    if abort_present:
        out.write("note: the abort file is present (a broker is running, or the last one crashed)\n")
    problems, warnings = found.total("problem"), found.total("warning")
    if problems:
        out.write(f"FAILED: {problems} problem(s), {warnings} warning(s)\n")
        return 1
    out.write(f"OK: no problems, {warnings} warning(s)\n")
    return 0
