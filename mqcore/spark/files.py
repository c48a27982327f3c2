"""Store-directory discovery, read-only file access and the snapshot bound of a live store.

Everything here runs where the planner runs (a Spark driver-side Python worker) or in
an executor. Files are reached through a ``Storage`` (``mqcore.spark.storage``): the
local disk, which must then be visible at the same path to the driver and to every
executor (``local[*]``, or an NFS or other shared mount on a cluster), or a remote file
system (S3, GCS, ABFS, HDFS) named by the store URI. Nothing here writes to the store.

A *snapshot* fixes, at planning time, the commitlog offset below which every record is
complete (``end_offset``). Readers never look past it, so a store being written while
Spark reads yields a consistent prefix and never a torn record.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import struct
from typing import Iterable, Iterator, Mapping

import numpy as np

from mqcore._compat import default_column_kernels
from mqcore.errors import ConfigError, StoreError
from mqcore.format import layout as L
from mqcore.format import store_paths
from mqcore.format.files import is_data_file_name
from mqcore.kernel_api import ColumnKernels
from mqcore.format.files import open_view as open_view  # re-exported: the other Spark modules take it from here
from mqcore.spark.storage import LOCAL, Storage, resolve

log = logging.getLogger(__name__)

_STORE_MARKERS = (L.CHECKPOINT_FILE, L.CONSUME_QUEUE_DIR, L.LOCK_FILE, L.ABORT_FILE)


class NotAStoreError(StoreError, FileNotFoundError):
    """The path is not a RocketMQ store directory (nor its ``commitlog`` directory)."""


@dataclasses.dataclass(frozen=True)
class StoreDirs:
    """Where the parts of one store live; ``root`` is None for a bare commitlog directory."""

    root: str | None
    commitlog: str
    storage: Storage = LOCAL
    #: consume queue / index directories the store's ``config/storePaths.json`` names
    consumequeue_dir: str | None = None
    index_dir: str | None = None
    #: where the commitlog was looked for, and why (shown when it holds nothing)
    commitlog_origin: str = "the store root's commitlog/"

    def _sub(self, name: str, moved: str | None = None) -> str | None:
        if moved is not None and self.storage.isdir(moved):
            return moved
        if self.root is None:
            return None
        p = self.storage.join(self.root, name)
        return p if self.storage.isdir(p) else None

    @property
    def consumequeue(self) -> str | None:
        return self._sub(L.CONSUME_QUEUE_DIR, self.consumequeue_dir)

    @property
    def index(self) -> str | None:
        return self._sub(L.INDEX_DIR, self.index_dir)

    @property
    def config(self) -> str | None:
        return self._sub(L.CONFIG_DIR)


@dataclasses.dataclass(frozen=True)
class CommitLogFile:
    path: str
    base_offset: int
    size: int


def locate_store(path: str, fs_options: Mapping[str, str] | Iterable[tuple[str, str]] = (),
                 commitlog: str | None = None) -> StoreDirs:
    """Accept a store root (holding ``commitlog/``) or a commitlog directory itself, as a
    local path or a URI (``fs_options``: see ``mqcore.spark.storage.resolve``).

    A broker whose broker.conf moves the commitlog (``storePathCommitLog``), consume queues
    or index elsewhere notes where in the root's ``config/storePaths.json``; those places
    are used. ``commitlog`` (option ``commitLogPath``) names the commitlog directory
    explicitly, for a copied store whose recorded path is not valid here."""
    if not path:
        raise NotAStoreError("no path given: use .load('/path/to/store') or option('path', ...)")
    st, path = resolve(path, fs_options)
    shown = st.display(path)
    if not st.isdir(path):
        raise NotAStoreError(f"{shown} is not a directory: expected a RocketMQ store root "
                             "(the broker's storePathRootDir, holding commitlog/) or its commitlog/ directory")
    names = st.listdir(path)
    if "commitlog" in names or any(m in names for m in _STORE_MARKERS):
        moved = _moved_parts(st, path)
        log_dir, origin = st.join(path, "commitlog"), "the store root's commitlog/"
        if commitlog:
            log_dir, origin = resolve(commitlog, fs_options)[1], "option commitLogPath"
        elif "storePathCommitLog" in moved:
            log_dir = moved["storePathCommitLog"]
            origin = f"storePathCommitLog in {st.display(st.join(path, L.CONFIG_DIR, L.STORE_PATHS_FILE))}"
        # (a fresh store may have no commitlog yet)
        return StoreDirs(path, log_dir, st, moved.get("storePathConsumeQueue"), moved.get("storePathIndex"), origin)
    if any(is_data_file_name(n) for n in names):
        parent = st.dirname(path)
        root = parent if st.basename(path) == "commitlog" else None
        return StoreDirs(root, path, st)
    raise NotAStoreError(
        f"{shown} is not a RocketMQ store: it has no commitlog/ directory and no commitlog files "
        "(20-digit names such as 00000000000000000000)")


def _moved_parts(st: Storage, root: str) -> dict[str, str]:
    """The root's ``config/storePaths.json`` ({} when absent or unreadable: then the defaults)."""
    note = st.join(root, L.CONFIG_DIR, L.STORE_PATHS_FILE)
    if not st.exists(note):
        return {}
    try:
        return store_paths.parse(st.read_at(note, 0, st.size(note)).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, OSError) as e:
        log.warning("%s is unreadable (%s): the store's parts are looked for under its root", st.display(note), e)
        return {}


def check_not_misplaced(dirs: StoreDirs, snap: "Snapshot") -> None:
    """A store whose consume queues index messages but whose commitlog directory holds none
    is read from the wrong place: an error saying where to look, never 0 rows."""
    if snap.files or snap.dispatched <= 0:
        return
    if list_commitlog(dirs):
        # the files are there: a live store's snapshot took the commitlog's end before the
        # writer's next append reached the consume queues it read after, so nothing is misplaced
        return
    st = dirs.storage
    raise StoreError(
        f"{st.display(dirs.root or dirs.commitlog)} has consume queues indexing messages up to commitlog offset "
        f"{snap.dispatched}, but its commitlog directory {st.display(dirs.commitlog)} ({dirs.commitlog_origin}) "
        "holds no commitlog files: the broker keeps its commitlog elsewhere (storePathCommitLog in its "
        "broker.conf). Pass that directory with .option('commitLogPath', DIR), or give the commitlog directory "
        "itself as the path (to load() or to mqcore-analytics)")


def locate_local_store(path: str, what: str) -> StoreDirs:
    """``locate_store`` for readers that need the store on the local disk (mmap, live files)."""
    dirs = locate_store(path)
    if not dirs.storage.is_local:
        raise ConfigError(f"{what} reads a store on the local disk (or a shared mount), not "
                          f"{dirs.storage.display(dirs.root or dirs.commitlog)}; format('rocketmq') "
                          "reads remote stores")
    return dirs


def list_commitlog(dirs: StoreDirs) -> list[CommitLogFile]:
    """Commitlog files in offset order; names must be their 20-digit base offsets."""
    st = dirs.storage
    files: list[CommitLogFile] = []
    if not st.isdir(dirs.commitlog):
        return files
    for name in st.listdir(dirs.commitlog):
        if is_data_file_name(name):
            p = st.join(dirs.commitlog, name)
            files.append(CommitLogFile(p, int(name), st.size(p)))
    files.sort(key=lambda f: f.base_offset)
    for a, b in zip(files, files[1:]):
        if a.base_offset + a.size > b.base_offset:
            raise StoreError(f"commitlog files overlap: {a.path} ({a.size} bytes) runs into {b.path}")
    return files


def first_record(path: str, storage: Storage = LOCAL) -> tuple[bool, int]:
    """(file holds anything, store time of its first record or -1)."""
    return record_at(path, 0, storage)


def record_at(path: str, pos: int, storage: Storage = LOCAL) -> tuple[bool, int]:
    """(anything written at ``pos``, store time of the record there or -1 when it is none)."""
    head = storage.read_at(path, pos, L.REC_STOREHOST_V4 + L.HOST_V6_EXTRA)
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
    storage: Storage = LOCAL


def list_queues(dirs: StoreDirs, topics: set[str] | None = None) -> list[QueueFiles]:
    """Consume queues under ``consumequeue/<topic>/<queueId>/`` (numeric queue dirs only)."""
    root = dirs.consumequeue
    if root is None:
        return []
    st = dirs.storage
    found: dict[tuple[str, int], list[str]] = {}
    for rel in st.files_below(root):  # one recursive listing: one request on an object store
        parts = rel.split("/")
        if len(parts) != 3 or not parts[1].isdigit() or not is_data_file_name(parts[2]):
            continue
        if topics is None or parts[0] in topics:
            found.setdefault((parts[0], int(parts[1])), []).append(parts[2])
    return [QueueFiles(topic, q, tuple((st.join(root, topic, str(q), n), int(n) // L.CQ_UNIT_SIZE)
                                       for n in sorted(found[topic, q])), st)
            for topic, q in sorted(found)]


def _valid_units(view: memoryview) -> int:
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


def _first_at_or_after(view: memoryview, count: int, value: int) -> int:
    """First unit index in ``[0, count)`` whose commitlog offset is >= ``value``."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi) // 2
        if L.CQ_UNIT.unpack_from(view, mid * L.CQ_UNIT_SIZE)[0] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def read_units(path: str, storage: Storage = LOCAL) -> np.ndarray:
    """All valid units of a consume-queue file, copied into a native structured array."""
    with storage.open_view(path) as v:
        n = _valid_units(v)
        raw = bytes(v[:n * L.CQ_UNIT_SIZE])
    return np.frombuffer(raw, L.CQ_UNIT_DTYPE).astype(L.CQ_UNIT_NATIVE_DTYPE)


def queue_max_offset(q: QueueFiles) -> tuple[int, int]:
    """(max queue offset = next index to write, commitlog end of its last unit or -1)."""
    path, first = q.files[-1]
    with q.storage.open_view(path) as v:
        n = _valid_units(v)
        if n == 0:
            return first, -1
        phy, size, _ = L.CQ_UNIT.unpack_from(v, (n - 1) * L.CQ_UNIT_SIZE)
    return first + n, (phy + size if size != L.CQ_FILLER_SIZE else -1)


def _units_between(path: str, lo: int, hi: int, storage: Storage) -> np.ndarray | None:
    with storage.open_view(path) as v:
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
            units = _units_between(path, lo, hi, q.storage)
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


# --- windows over a commitlog file ------------------------------------------------------------
#: bytes fetched per ranged read of a remote commitlog file
WINDOW_BYTES = 8 << 20
#: no record is larger (RocketMQ's maxMessageSize is 4 MiB by default); a bigger TOTALSIZE is corrupt
MAX_RECORD_BYTES = 1 << 28
_MAGICS = (struct.pack(">i", L.MAGIC_V1), struct.pack(">i", L.MAGIC_V2))


class RecordWindows:
    """Access to one commitlog file as buffers the kernels decode.

    On the local disk the buffer is the whole file (mmap), so nothing changes for the
    kernels. On a remote file system it is a window of ``WINDOW_BYTES`` fetched with one
    ranged read, and a verdict the kernel gives at a window's edge (a record running past
    it, zeros that may be the start of a header) is re-asked with a window that starts at
    that record and holds all of it; only a window reaching ``limit`` (the end of the
    snapshot's data) gives final answers there. Positions are file positions throughout.
    """

    def __init__(self, storage: Storage, path: str, size: int) -> None:
        self.storage, self.path, self.size = storage, path, size
        self.window_bytes = WINDOW_BYTES
        self.buf = memoryview(b"")
        self.w0 = 0
        self._mapped = contextlib.ExitStack()

    def __enter__(self) -> "RecordWindows":
        if self.storage.is_local:
            self.buf = self._mapped.enter_context(open_view(self.path))
        return self

    def __exit__(self, *exc: object) -> None:
        self.buf = memoryview(b"")
        self._mapped.close()

    @property
    def w1(self) -> int:
        return self.w0 + len(self.buf)

    def window(self, pos: int, limit: int, need: int = 1) -> tuple[memoryview, int]:
        """A buffer holding file bytes ``[pos, min(limit, pos + need))``, and its file position."""
        want = min(limit, pos + need)
        if not (self.w0 <= pos and want <= self.w1):
            if self.storage.is_local:
                raise StoreError(f"{self.path} is shorter than its snapshot: {self.w1} < {want} bytes")
            n = min(limit, pos + max(need, self.window_bytes)) - pos
            self.buf, self.w0 = memoryview(self.storage.read_at(self.path, pos, n)), pos
            if self.w1 < want:
                raise StoreError(f"{self.storage.display(self.path)} is shorter than its snapshot: "
                                 f"{self.w1} < {want} bytes")
        return self.buf, self.w0

    def record_need(self, pos: int) -> int:
        """Bytes a window starting at ``pos`` needs for a final verdict on the record there."""
        if pos + 4 > self.w1 or pos < self.w0:
            return L.BLANK_HEADER_BYTES
        size = struct.unpack_from(">i", self.buf, pos - self.w0)[0]
        return size if L.BLANK_HEADER_BYTES < size <= MAX_RECORD_BYTES else L.BLANK_HEADER_BYTES

    def final_at(self, pos: int, limit: int) -> bool:
        """Whether the current window can judge the record at ``pos`` (it holds all of it)."""
        return self.w1 >= limit or (self.w0 <= pos and pos + self.record_need(pos) <= self.w1)

    def walk(self, start: int, limit: int, check_crc: bool,
             kernels: ColumnKernels | None = None) -> tuple[int, int, int, int, int]:
        """``kernels.walk_records`` over ``[start, limit)`` of the file, window by window:
        (stop position, records, stop reason, first store time, last store time)."""
        if kernels is None:
            kernels = default_column_kernels()
        pos, count, first_ts, last_ts = start, 0, -1, -1
        while True:
            buf, w0 = self.window(pos, limit)
            end = min(limit, self.w1)
            walk = kernels.walk_records(buf, pos - w0, end - w0, check_crc)
            reason = walk.reason
            if walk.records:
                first_ts = walk.first_ts if count == 0 else first_ts
                last_ts, count = walk.last_ts, count + walk.records
            pos = w0 + walk.stop
            if pos >= limit or (reason != L.ScanStop.END and self.final_at(pos, limit)):
                return pos, count, reason, first_ts, last_ts
            if reason != L.ScanStop.END:
                self.window(pos, limit, self.record_need(pos))  # a window starting at that record

    def _valid_at(self, pos: int, limit: int, base_offset: int, check_crc: bool, kernels: ColumnKernels) -> bool:
        self.window(pos, limit, L.REC_PHYOFFSET + 8)
        buf, w0 = self.window(pos, limit, self.record_need(pos))
        end = min(limit, self.w1)
        return kernels.find_record(buf, pos - w0, pos - w0 + 1, end - w0, base_offset + w0, check_crc) == pos - w0

    def find(self, start: int, stop: int, limit: int, base_offset: int, check_crc: bool,
             kernels: ColumnKernels | None = None) -> int:
        """First valid record starting in ``[start, stop)`` whose PHYSICALOFFSET names its own
        position (``kernels.find_record`` across windows), or -1."""
        if kernels is None:
            kernels = default_column_kernels()
        q = start
        while q < stop:
            buf, w0 = self.window(q, limit)
            end = min(limit, self.w1)
            r = kernels.find_record(buf, q - w0, min(stop, end) - w0, end - w0, base_offset + w0, check_crc)
            if r >= 0:
                return w0 + r
            if end >= limit:
                return -1
            # a record that starts in this window but runs past it was not judged: try the
            # headers (magic, and PHYSICALOFFSET where visible) with a window of their own
            data = bytes(buf)
            hits = sorted(h - L.REC_MAGIC for m in _MAGICS
                          for h in _find_all(data, m, q - w0 + L.REC_MAGIC, min(stop, end) - w0 + L.REC_MAGIC))
            for c in hits:
                at = c + L.REC_PHYOFFSET
                if at + 8 <= len(data) and struct.unpack_from(">q", data, at)[0] != base_offset + w0 + c:
                    continue
                if self._valid_at(w0 + c, limit, base_offset, check_crc, kernels):
                    return w0 + c
            q = max(q + 1, end - L.BLANK_HEADER_BYTES)  # a header cut by the window's end
        return -1


def _find_all(data: bytes, pattern: bytes, lo: int, hi: int) -> Iterator[int]:
    i = data.find(pattern, lo, hi + len(pattern))
    while 0 <= i < hi:
        yield i
        i = data.find(pattern, i + 1, hi + len(pattern))


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


def take_snapshot(dirs: StoreDirs, pinned_end: int | None = None, *,
                  kernels: ColumnKernels | None = None) -> Snapshot:
    """Walk the active file to find the end of complete records (CRC-checked, so a record
    being written right now is left out). ``pinned_end`` replays an earlier snapshot."""
    if kernels is None:
        kernels = default_column_kernels()
    files = list_commitlog(dirs)
    infos = [first_record(f.path, dirs.storage) for f in files]
    data = [f for f, (has, _) in zip(files, infos) if has]
    first_ts = tuple(ts for (has, ts) in infos if has)
    dispatched = dispatched_offset(dirs)
    if not data:
        snap = Snapshot((), 0, (), dispatched, L.ScanStop.NO_DATA)
        check_not_misplaced(dirs, snap)
        return snap
    last = data[-1]
    reason = L.ScanStop.END
    if pinned_end is not None:
        end = pinned_end
    else:
        inside = last.base_offset <= dispatched < last.base_offset + last.size
        start = dispatched - last.base_offset if inside else 0  # dispatched units end on a record
        with RecordWindows(dirs.storage, last.path, last.size) as w:
            pos, count, reason, _, _ = w.walk(start, last.size, True, kernels)
            if count == 0 and start > 0 and reason not in (L.ScanStop.NO_DATA, L.ScanStop.BLANK):
                pos, _, reason, _, _ = w.walk(0, last.size, True, kernels)  # not a boundary after all
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
              kernels: ColumnKernels | None = None, spots: list[tuple[int, int]] | None = None) -> FileStats:
    """Walk one file like a reader with ``onCorrupt=skip`` would, counting instead of decoding;
    ``spots`` (when given) gets each corrupt spot's [start, resync) file positions."""
    if kernels is None:
        kernels = default_column_kernels()
    with open_view(path) as v:
        limit = len(v) if limit is None else min(limit, len(v))
        pos = records = corrupt = corrupt_bytes = 0
        first_ts = last_ts = -1
        while True:
            walk = kernels.walk_records(v, pos, limit, check_crc)
            pos, reason = walk.stop, walk.reason
            if walk.records:
                records += walk.records
                first_ts = walk.first_ts if first_ts < 0 else first_ts
                last_ts = walk.last_ts
            if reason not in (L.ScanStop.CORRUPT, L.ScanStop.TRUNCATED):
                break
            q = kernels.find_record(v, pos + 1, limit, limit, base_offset, check_crc) if pos + 1 < limit else -1
            corrupt += 1
            corrupt_bytes += (q if q >= 0 else limit) - pos
            if spots is not None:
                spots.append((pos, q if q >= 0 else limit))
            if q < 0:
                pos, reason = limit, L.ScanStop.END
                break
            pos = q
        size = len(v)
    return FileStats(path, base_offset, size, pos, records, corrupt, corrupt_bytes, first_ts, last_ts,
                     L.ScanStop.NAMES[reason])
