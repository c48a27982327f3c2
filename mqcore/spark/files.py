"""Store-directory discovery, read-only file access and the snapshot bound of a live store.

Everything here runs where the planner runs (a Spark driver-side Python worker) or in
an executor, so it only uses plain POSIX files: the store directory must be visible at
the same path to the driver and to every executor (a local disk in ``local[*]``, an
NFS or other shared mount on a cluster). Nothing here writes to the store.

A *snapshot* fixes, at planning time, the commitlog offset below which every record is
complete (``end_offset``). Readers never look past it, so a store being written while
Spark reads yields a consistent prefix and never a torn record.
"""
from __future__ import annotations

import dataclasses
import os
import struct

import numpy as np

from mqcore._compat import kernels as default_kernels
from mqcore.errors import StoreError
from mqcore.format import layout as L
from mqcore.format.files import is_data_file_name, numbered_files, open_view

# open_view is imported from the shared reader and used from here by the other Spark modules

_STORE_MARKERS = (L.CHECKPOINT_FILE, L.CONSUME_QUEUE_DIR, L.LOCK_FILE, L.ABORT_FILE)


class NotAStoreError(StoreError, FileNotFoundError):
    """The path is not a RocketMQ store directory (nor its ``commitlog`` directory)."""


@dataclasses.dataclass(frozen=True)
class StoreDirs:
    """Where the parts of one store live; ``root`` is None for a bare commitlog directory."""

    root: str | None
    commitlog: str

    def _sub(self, name: str) -> str | None:
        if self.root is None:
            return None
        p = os.path.join(self.root, name)
        return p if os.path.isdir(p) else None

    @property
    def consumequeue(self) -> str | None:
        return self._sub(L.CONSUME_QUEUE_DIR)

    @property
    def index(self) -> str | None:
        return self._sub(L.INDEX_DIR)

    @property
    def config(self) -> str | None:
        return self._sub(L.CONFIG_DIR)


@dataclasses.dataclass(frozen=True)
class CommitLogFile:
    path: str
    base_offset: int
    size: int


def locate_store(path: str) -> StoreDirs:
    """Accept a store root (holding ``commitlog/``) or a commitlog directory itself."""
    if not path:
        raise NotAStoreError("no path given: use .load('/path/to/store') or option('path', ...)")
    path = os.path.abspath(os.path.expanduser(path.removeprefix("file://").removeprefix("file:")))
    if not os.path.isdir(path):
        raise NotAStoreError(f"{path} is not a directory: expected a RocketMQ store root "
                             "(the broker's storePathRootDir, holding commitlog/) or its commitlog/ directory")
    if os.path.isdir(os.path.join(path, "commitlog")) or any(
            os.path.exists(os.path.join(path, m)) for m in _STORE_MARKERS):
        return StoreDirs(path, os.path.join(path, "commitlog"))  # (a fresh store may have no commitlog yet)
    if any(is_data_file_name(n) for n in os.listdir(path)):
        parent = os.path.dirname(path)
        root = parent if os.path.basename(path) == "commitlog" else None
        return StoreDirs(root, path)
    raise NotAStoreError(
        f"{path} is not a RocketMQ store: it has no commitlog/ directory and no commitlog files "
        "(20-digit names such as 00000000000000000000)")


def list_commitlog(dirs: StoreDirs) -> list[CommitLogFile]:
    """Commitlog files in offset order; names must be their 20-digit base offsets."""
    files = []
    if not os.path.isdir(dirs.commitlog):
        return files
    for name in os.listdir(dirs.commitlog):
        if is_data_file_name(name):
            p = os.path.join(dirs.commitlog, name)
            files.append(CommitLogFile(p, int(name), os.path.getsize(p)))
    files.sort(key=lambda f: f.base_offset)
    for a, b in zip(files, files[1:]):
        if a.base_offset + a.size > b.base_offset:
            raise StoreError(f"commitlog files overlap: {a.path} ({a.size} bytes) runs into {b.path}")
    return files


def _read_at(path: str, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)


def first_record(path: str) -> tuple[bool, int]:
    """(file holds anything, store time of its first record or -1)."""
    return record_at(path, 0)


def record_at(path: str, pos: int) -> tuple[bool, int]:
    """(anything written at ``pos``, store time of the record there or -1 when it is none)."""
    head = _read_at(path, pos, L.REC_STOREHOST_V4 + L.HOST_V6_EXTRA)
    if len(head) < L.BLANK_HEADER_BYTES or not any(head[:L.BLANK_HEADER_BYTES]):
        return False, -1
    magic = struct.unpack_from(">i", head, L.REC_MAGIC)[0]
    if magic not in (L.MAGIC_V1, L.MAGIC_V2) or len(head) < L.REC_STOREHOST_V4 + L.HOST_V6_EXTRA:
        return True, -1
    sys_flag = struct.unpack_from(">i", head, L.REC_SYSFLAG)[0]
    at = L.REC_STORETIMESTAMP_V4 + (L.HOST_V6_EXTRA if sys_flag & L.SYSFLAG_BORNHOST_V6 else 0)
    return True, struct.unpack_from(">q", head, at)[0]


# --- consume queues ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class QueueFiles:
    """One consume queue: its files as (path, first unit index) in order."""

    topic: str
    queue_id: int
    files: tuple[tuple[str, int], ...]


def list_queues(dirs: StoreDirs, topics: set[str] | None = None) -> list[QueueFiles]:
    """Consume queues under ``consumequeue/<topic>/<queueId>/`` (numeric queue dirs only)."""
    root = dirs.consumequeue
    if root is None:
        return []
    out = []
    for topic in sorted(os.listdir(root)):
        if topics is not None and topic not in topics:
            continue
        tdir = os.path.join(root, topic)
        if not os.path.isdir(tdir):
            continue
        for q in sorted(os.listdir(tdir), key=lambda s: (len(s), s)):
            qdir = os.path.join(tdir, q)
            if not q.isdigit() or not os.path.isdir(qdir):
                continue
            files = tuple((p, int(os.path.basename(p)) // L.CQ_UNIT_SIZE) for p in numbered_files(qdir))
            if files:
                out.append(QueueFiles(topic, int(q), files))
    return out


def _valid_units(view) -> int:
    """Number of valid units in one consume-queue file.

    Valid units form a prefix (the rest is never-written zeros), so the boundary is
    found by binary search instead of a scan.
    """
    lo, hi = 0, len(view) // L.CQ_UNIT_SIZE
    while lo < hi:
        mid = (lo + hi) // 2
        phy, size, _ = L.CQ_UNIT.unpack_from(view, mid * L.CQ_UNIT_SIZE)
        if size > 0 and phy >= 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _first_at_or_after(view, count: int, value: int) -> int:
    """First unit index in ``[0, count)`` whose commitlog offset is >= ``value``."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if L.CQ_UNIT.unpack_from(view, mid * L.CQ_UNIT_SIZE)[0] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def read_units(path: str) -> np.ndarray:
    """All valid units of a consume-queue file, copied into a native structured array."""
    with open_view(path) as v:
        n = _valid_units(v)
        raw = bytes(v[:n * L.CQ_UNIT_SIZE])
    return np.frombuffer(raw, L.CQ_UNIT_DTYPE).astype(L.CQ_UNIT_NATIVE_DTYPE)


def queue_max_offset(q: QueueFiles) -> tuple[int, int]:
    """(max queue offset = next index to write, commitlog end of its last unit or -1)."""
    path, first = q.files[-1]
    with open_view(path) as v:
        n = _valid_units(v)
        if n == 0:
            return first, -1
        phy, size, _ = L.CQ_UNIT.unpack_from(v, (n - 1) * L.CQ_UNIT_SIZE)
    return first + n, (phy + size if size != L.CQ_FILLER_SIZE else -1)


def _units_between(path: str, lo: int, hi: int) -> np.ndarray | None:
    with open_view(path) as v:
        n = _valid_units(v)
        if n == 0:
            return None
        a = _first_at_or_after(v, n, lo)
        b = _first_at_or_after(v, n, hi)
        if a >= b:
            return None
        raw = bytes(v[a * L.CQ_UNIT_SIZE:b * L.CQ_UNIT_SIZE])
    return np.frombuffer(raw, L.CQ_UNIT_DTYPE)


def positions_in(queues: list[QueueFiles], lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Commitlog offsets (sorted, unique) and sizes of units pointing into ``[lo, hi)``.

    Units of one queue are in commitlog order, so each file is cut by binary search and
    only the matching slice is read: the cost follows the wanted messages, not the queue.
    """
    phys, sizes = [], []
    for q in queues:
        for path, _first in q.files:
            units = _units_between(path, lo, hi)
            if units is None:
                continue
            keep = units["size"] != L.CQ_FILLER_SIZE
            phys.append(units["phy_offset"][keep].astype(np.int64))
            sizes.append(units["size"][keep].astype(np.int64))
    if not phys:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    p, idx = np.unique(np.concatenate(phys), return_index=True)
    return p, np.concatenate(sizes)[idx]


def dispatched_offset(dirs: StoreDirs) -> int:
    """Commitlog offset up to which the consume queues are complete (-1 if unknown).

    The store dispatches records in commitlog order, so the furthest unit over all
    queues marks how far dispatch got; any record before it is in its queue.
    """
    best = -1
    for q in list_queues(dirs):
        best = max(best, queue_max_offset(q)[1])
    return best


# --- snapshot ---------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Snapshot:
    """What a read may see: data files and the offset every record below is complete.

    ``first_ts[i]`` is the store time of file ``i``'s first record (-1 unknown): store
    times grow along the commitlog, so they bound each file's time range for pruning.
    """

    files: tuple[CommitLogFile, ...]
    end_offset: int
    first_ts: tuple[int, ...]
    dispatched: int
    tail_reason: int

    def data_end(self, i: int) -> int:
        """Position in file ``i`` past which nothing belongs to the snapshot."""
        f = self.files[i]
        return max(0, min(f.size, self.end_offset - f.base_offset))


def take_snapshot(dirs: StoreDirs, pinned_end: int | None = None, *, kernels=default_kernels) -> Snapshot:
    """Walk the active file to find the end of complete records (CRC-checked, so a record
    being written right now is left out). ``pinned_end`` replays an earlier snapshot."""
    files = list_commitlog(dirs)
    infos = [first_record(f.path) for f in files]
    data = [f for f, (has, _) in zip(files, infos) if has]
    first_ts = tuple(ts for (has, ts) in infos if has)
    dispatched = dispatched_offset(dirs)
    if not data:
        return Snapshot((), 0, (), dispatched, L.ScanStop.NO_DATA)
    last = data[-1]
    reason = L.ScanStop.END
    if pinned_end is not None:
        end = pinned_end
    else:
        with open_view(last.path) as v:
            inside = last.base_offset <= dispatched < last.base_offset + last.size
            start = dispatched - last.base_offset if inside else 0  # dispatched units end on a record
            pos, count, reason, _, _ = kernels.walk_records(v, start, len(v), True)
            if count == 0 and start > 0 and reason not in (L.ScanStop.NO_DATA, L.ScanStop.BLANK):
                pos, _, reason, _, _ = kernels.walk_records(v, 0, len(v), True)  # not a boundary after all
        end = last.base_offset + (last.size if reason == L.ScanStop.BLANK else pos)
    kept = [i for i, f in enumerate(data) if f.base_offset < end]
    return Snapshot(tuple(data[i] for i in kept), end, tuple(first_ts[i] for i in kept), dispatched, reason)


# --- per-file health --------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FileStats:
    """What one walk over a commitlog file found (the ``rocketmq.files`` rows)."""

    file: str
    base_offset: int
    size: int
    data_end: int            # position after the last valid record (blank marker / zeros / limit)
    records: int
    corrupt_records: int     # corrupt spots skipped by resyncing on MAGIC + PHYSICALOFFSET
    corrupt_bytes: int
    first_store_timestamp: int
    last_store_timestamp: int
    end: str                 # why the walk stopped: BLANK (file full), NO_DATA, END (limit)


def scan_file(path: str, base_offset: int, limit: int | None = None, check_crc: bool = True, *,
              kernels=default_kernels) -> FileStats:
    """Walk one file like a reader with ``onCorrupt=skip`` would, counting instead of decoding."""
    with open_view(path) as v:
        limit = len(v) if limit is None else min(limit, len(v))
        pos = records = corrupt = corrupt_bytes = 0
        first_ts = last_ts = -1
        while True:
            pos, n, reason, f_ts, l_ts = kernels.walk_records(v, pos, limit, check_crc)
            if n:
                records += n
                first_ts = f_ts if first_ts < 0 else first_ts
                last_ts = l_ts
            if reason not in (L.ScanStop.CORRUPT, L.ScanStop.TRUNCATED):
                break
            q = kernels.find_record(v, pos + 1, limit, limit, base_offset, check_crc) if pos + 1 < limit else -1
            corrupt += 1
            corrupt_bytes += (q if q >= 0 else limit) - pos
            if q < 0:
                pos, reason = limit, L.ScanStop.END
                break
            pos = q
        size = len(v)
    return FileStats(path, base_offset, size, pos, records, corrupt, corrupt_bytes, first_ts, last_ts,
                     L.ScanStop.NAMES[reason])
