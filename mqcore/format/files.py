"""Read-only access to store files: the one reader the tools and Spark share.

Why not ``MessageStore``: it takes the directory lock, recovers and may truncate. An
operator looking at a running broker's files must change nothing, so files here are
mapped with ``mmap.ACCESS_READ`` and decoded with the kernels directly. A live broker
keeps appending meanwhile; a scan simply sees the log as of the moment it reads it.

File sizes are taken from the files themselves (the store's settings are not recorded
on disk); the index file geometry (slots/entries) is inferred when it is not given.
"""
from __future__ import annotations

import contextlib
import dataclasses
import mmap
import os
from collections.abc import Iterator
from typing import Any, Protocol

import numpy as np

from mqcore.format.delays import DEFAULT_DELAY_LEVELS, parse_delay_levels
from mqcore.errors import CorruptFileError, IllegalArgumentError, StoreIOError
from mqcore.format import layout as L
from mqcore.format.scans import QueueUnits, RecordScan

#: a scan needs the delay levels to compute the tags code (deliver time) of
#: SCHEDULE_TOPIC_XXXX records; the store's settings are not on disk, so the default
DEFAULT_DELAYS_MS = parse_delay_levels(DEFAULT_DELAY_LEVELS)
SCAN_BATCH = 65536

CQ_UNIT_DTYPE = L.CQ_UNIT_DTYPE
INDEX_ENTRY_DTYPE = L.INDEX_ENTRY_DTYPE
#: a brute-force geometry search reads one entry per candidate: only for small files
_GEOMETRY_SEARCH_MAX_BYTES = 64 << 20


class FileKernels(Protocol):
    """The store kernels these readers call: a subset of ``mqcore.kernel_api.StoreKernels``,
    spelled here because the format layer imports nothing above it."""

    def scan_records(self, buf: Any, start: int, end: int, base_offset: int, check_crc: bool,
                     delay_ms: Any, max_count: int) -> RecordScan: ...
    def cq_count_valid(self, buf: Any, start: int, end: int) -> int: ...
    def cq_read(self, buf: Any, start: int, count: int) -> QueueUnits: ...


class ReadOnlyFile:
    """One store file mapped read-only. ``base`` is the offset in its name (0 for index files)."""

    def __init__(self, path: str):
        self.path = path
        self.name = os.path.basename(path)
        self.base = int(self.name) if is_data_file_name(self.name) else 0
        try:
            with open(path, "rb") as f:
                self.size = os.fstat(f.fileno()).st_size
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None
        except OSError as e:
            raise StoreIOError(e.errno, f"cannot read {path}: {e.strerror}") from e
        self.buf = memoryview(self._mm) if self._mm is not None else memoryview(b"")
        self.array = np.frombuffer(self.buf, dtype=np.uint8)

    @property
    def end(self) -> int:
        return self.base + self.size

    def close(self) -> None:
        """Unmap (callers must not keep views of ``buf``)."""
        self.array = np.empty(0, np.uint8)
        try:
            self.buf.release()
        except BufferError:
            # a caller still holds a numpy view: the mapping goes when that is garbage-collected
            self._mm = None
            return
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def __enter__(self) -> ReadOnlyFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: the fixed head of a commitlog record (IPv4 hosts), for gathering many heads at once
RECORD_HEAD_DTYPE = np.dtype({
    "names": ["size", "magic", "queue_id", "queue_offset", "phy_offset", "sys_flag", "body_length_v4"],
    "formats": [">i4", ">i4", ">i4", ">i8", ">i8", ">i4", ">i4"],
    "offsets": [L.REC_TOTALSIZE, L.REC_MAGIC, L.REC_QUEUEID, L.REC_QUEUEOFFSET, L.REC_PHYOFFSET, L.REC_SYSFLAG,
                L.REC_BODYLENGTH_V4],
    "itemsize": L.REC_FIXED_V4})


def gather_rows(f: ReadOnlyFile, positions: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Copies of ``dtype``-shaped rows starting at arbitrary byte ``positions`` of ``f``.

    Why: a view whose stride is one byte makes "the row at byte p" an ordinary index, so
    one fancy-indexing pass copies whole rows (e.g. record heads) instead of one pass per
    field and byte. Positions must leave ``dtype.itemsize`` bytes before the file end.
    """
    rows = np.ndarray(shape=(max(0, f.size - dtype.itemsize + 1),), dtype=dtype, buffer=f.buf, offset=0,
                      strides=(1,))
    out = rows[np.asarray(positions, np.int64)]
    del rows
    return out


def gather_int(arr: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed ints of ``width`` bytes at ``positions`` of a uint8 array (vectorised)."""
    positions = np.asarray(positions, dtype=np.int64)
    raw = arr[positions[:, None] + np.arange(width)]
    return np.ascontiguousarray(raw).view(">i%d" % width).ravel().astype(np.int64)


@dataclasses.dataclass
class FileScan:
    """Records of one commitlog file from ``start``, in batches; ``reason``/``stop`` afterwards."""

    kernels: FileKernels
    file: ReadOnlyFile
    start: int = 0
    check_crc: bool = False
    batch: int = SCAN_BATCH
    stop: int = 0
    reason: int = L.ScanStop.END

    def __iter__(self) -> Iterator[tuple[np.ndarray, list[bytes]]]:
        pos = self.start
        while True:
            scan = self.kernels.scan_records(
                self.file.buf, pos, self.file.size, self.file.base, self.check_crc, DEFAULT_DELAYS_MS, self.batch)
            if len(scan.table):
                yield scan.table, scan.topics
            pos = scan.stop
            if scan.reason != L.ScanStop.MAX_COUNT:
                self.stop, self.reason = pos, scan.reason
                return


@dataclasses.dataclass(frozen=True)
class StorePaths:
    """Where the parts of a store directory live (RocketMQ's ``StorePathConfigHelper``)."""

    store_path: str

    @property
    def commitlog_dir(self) -> str:
        return os.path.join(self.store_path, L.COMMITLOG_DIR)

    @property
    def consume_queue_dir(self) -> str:
        return os.path.join(self.store_path, L.CONSUME_QUEUE_DIR)

    @property
    def index_dir(self) -> str:
        return os.path.join(self.store_path, L.INDEX_DIR)

    @property
    def config_dir(self) -> str:
        return os.path.join(self.store_path, L.CONFIG_DIR)

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.store_path, L.CHECKPOINT_FILE)

    @property
    def abort_path(self) -> str:
        return os.path.join(self.store_path, L.ABORT_FILE)


def is_data_file_name(name: str) -> bool:
    """A commitlog or consume-queue file name: its base offset in 20 digits."""
    return len(name) == L.DATA_FILE_NAME_DIGITS and name.isdigit()


def is_index_file_name(name: str) -> bool:
    """An index file name: its creation time as ``yyyyMMddHHmmssSSS``."""
    return len(name) == L.INDEX_FILE_NAME_DIGITS and name.isdigit()


def numbered_files(directory: str | None, index: bool = False) -> list[str]:
    """Paths of the data (or index) files in ``directory`` in name order; [] if it is missing."""
    if directory is None or not os.path.isdir(directory):
        return []
    accept = is_index_file_name if index else is_data_file_name
    return [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if accept(n)]


@contextlib.contextmanager
def open_view(path: str) -> Iterator[memoryview]:
    """A read-only memoryview over the whole file (mmap); released on exit."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield memoryview(b"")
            return
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        view = memoryview(mm)
        try:
            yield view
        finally:
            view.release()
            mm.close()


def read_index_header(buf: bytes | bytearray | memoryview) -> tuple[int, int, int, int, int, int]:
    """(begin ts, end ts, begin phy, end phy, hash slot count, index count) of an index file."""
    if len(buf) < L.INDEX_HEADER_SIZE:
        raise CorruptFileError(f"{len(buf)} bytes are shorter than an index header")
    begin_ts, end_ts, begin_phy, end_phy, slot_count, count = L.INDEX_HEADER.unpack_from(buf, 0)
    return begin_ts, end_ts, begin_phy, end_phy, slot_count, count


class StoreFiles:
    """The files of one store directory."""

    def __init__(self, root: str, *, index_slots: int | None = None, index_entries: int | None = None):
        self.root = root
        self.paths = StorePaths(root)
        self.index_slots = index_slots
        self.index_entries = index_entries
        if not os.path.isdir(root):
            raise IllegalArgumentError(f"{root} is not a directory (expected a store directory holding "
                                       "commitlog/, consumequeue/, index/)")
        parts = [p for p in (self.paths.commitlog_dir, self.paths.consume_queue_dir, self.paths.index_dir)
                 if os.path.isdir(p)]
        if not parts:
            raise IllegalArgumentError(f"{root} is not a store directory: it has no commitlog/, consumequeue/ "
                                       "or index/ inside (point at storePathRootDir, e.g. ~/store)")

    # --- listing -------------------------------------------------------------------------------------
    def commitlog_paths(self) -> list[str]:
        return numbered_files(self.paths.commitlog_dir)

    def open_commitlog(self) -> list[ReadOnlyFile]:
        return [ReadOnlyFile(p) for p in self.commitlog_paths()]

    def consume_queues(self) -> list[tuple[str, int, str]]:
        """(topic, queue id, directory) of every consume queue on disk."""
        root = self.paths.consume_queue_dir
        out: list[tuple[str, int, str]] = []
        if not os.path.isdir(root):
            return out
        for topic in sorted(os.listdir(root)):
            tdir = os.path.join(root, topic)
            if os.path.isdir(tdir):
                out.extend((topic, int(q), os.path.join(tdir, q)) for q in sorted(os.listdir(tdir), key=_qid_key)
                           if q.isdigit())
        return out

    def cq_paths(self, topic: str, queue_id: int) -> list[str]:
        directory = os.path.join(self.paths.consume_queue_dir, topic, str(queue_id))
        if not os.path.isdir(directory):
            raise IllegalArgumentError(f"no consume queue {topic}/{queue_id} in {self.root}")
        return numbered_files(directory)

    def index_paths(self) -> list[str]:
        return numbered_files(self.paths.index_dir, index=True)

    def resolve_index(self, name: str) -> str:
        for candidate in (name, os.path.join(self.paths.index_dir, name)):
            if os.path.isfile(candidate):
                return candidate
        raise IllegalArgumentError(f"no index file {name!r} (looked in {self.paths.index_dir}); "
                                   f"files there: {', '.join(os.path.basename(p) for p in self.index_paths()) or 'none'}")

    # --- index geometry ------------------------------------------------------------------------------
    def index_geometry(self, f: ReadOnlyFile) -> tuple[int, int]:
        """(slots, entries) of an index file: given, default, or inferred from its content."""
        return index_geometry(f, self.index_slots, self.index_entries)


def _qid_key(name: str) -> tuple[int, str]:
    return (int(name), name) if name.isdigit() else (-1, name)


def index_header(f: ReadOnlyFile) -> tuple[int, int, int, int, int, int]:
    """(begin ts, end ts, begin phy, end phy, hash slot count, index count)."""
    if f.size < L.INDEX_HEADER_SIZE:
        raise CorruptFileError(f"{f.path} is {f.size} bytes, shorter than an index header")
    return read_index_header(f.buf)


def index_geometry(f: ReadOnlyFile, slots: int | None = None, entries: int | None = None) -> tuple[int, int]:
    size = f.size - L.INDEX_HEADER_SIZE
    if slots is not None or entries is not None:
        if slots is None:
            assert entries is not None  # one of the two is given
            slots = (size - entries * L.INDEX_ENTRY_SIZE) // L.INDEX_SLOT_SIZE
        if entries is None:
            entries = (size - slots * L.INDEX_SLOT_SIZE) // L.INDEX_ENTRY_SIZE
        if L.index_file_size(slots, entries) != f.size:
            raise IllegalArgumentError(f"{f.path} is {f.size} bytes, which does not fit {slots} slots and "
                                       f"{entries} entries ({L.index_file_size(slots, entries)} bytes)")
        return slots, entries
    if f.size == L.index_file_size():
        return L.DEFAULT_INDEX_SLOTS, L.DEFAULT_INDEX_ENTRIES
    found = _infer_geometry(f)
    if found is None:
        raise IllegalArgumentError(f"cannot tell the slot/entry counts of {f.path} ({f.size} bytes, not the "
                                   "default 420000040); pass --index-slots and --index-entries")
    return found


def _candidates(size: int, count: int) -> np.ndarray:
    slots = np.arange(1, size // L.INDEX_SLOT_SIZE + 1, dtype=np.int64)
    rest = size - slots * L.INDEX_SLOT_SIZE
    ok = (rest % L.INDEX_ENTRY_SIZE == 0) & (rest // L.INDEX_ENTRY_SIZE >= max(count, 2))
    fitting: np.ndarray = slots[ok]
    return fitting


def _infer_geometry(f: ReadOnlyFile) -> tuple[int, int] | None:
    """Try slot counts whose entry area fits exactly; keep the one where entry #1 and the
    newest entry agree with the header (begin/end phy offsets) and entry #1's slot points
    into the chain. RocketMQ's 1:4 ratio is tried first; the search is for small files."""
    size = f.size - L.INDEX_HEADER_SIZE
    _, _, begin_phy, end_phy, _, count = index_header(f)
    ratio_slots = size // (L.INDEX_SLOT_SIZE + 4 * L.INDEX_ENTRY_SIZE)
    ratio_ok = L.index_file_size(ratio_slots, 4 * ratio_slots) == f.size
    if count <= 1:  # no entries: any geometry reads the same (nothing)
        return (ratio_slots, 4 * ratio_slots) if ratio_ok else (1, (size - L.INDEX_SLOT_SIZE) // L.INDEX_ENTRY_SIZE)
    cands = np.array([ratio_slots], np.int64) if ratio_ok else np.empty(0, np.int64)
    good = _matching(f, cands, begin_phy, end_phy, count)
    if not len(good) and f.size <= _GEOMETRY_SEARCH_MAX_BYTES:
        good = _matching(f, _candidates(size, count), begin_phy, end_phy, count)
    if len(good) != 1:
        return None
    slots = int(good[0])
    return slots, (size - slots * L.INDEX_SLOT_SIZE) // L.INDEX_ENTRY_SIZE


def _matching(f: ReadOnlyFile, slots: np.ndarray, begin_phy: int, end_phy: int, count: int) -> np.ndarray:
    if not len(slots):
        return slots
    entries_at = L.INDEX_HEADER_SIZE + slots * L.INDEX_SLOT_SIZE
    first = entries_at + L.INDEX_ENTRY_SIZE
    last = entries_at + (count - 1) * L.INDEX_ENTRY_SIZE
    inside = last + L.INDEX_ENTRY_SIZE <= f.size
    slots, first, last = slots[inside], first[inside], last[inside]
    arr = f.array
    h = gather_int(arr, first + L.IDXE_KEY_HASH, 4)
    ok = (gather_int(arr, first + L.IDXE_PHYOFFSET, 8) == begin_phy) & (h >= 0)
    ok &= gather_int(arr, first + L.IDXE_PREV_INDEX, 4) == 0
    ok &= gather_int(arr, last + L.IDXE_PHYOFFSET, 8) == end_phy
    head = gather_int(arr, L.INDEX_HEADER_SIZE + (np.maximum(h, 0) % slots) * L.INDEX_SLOT_SIZE, 4)
    ok &= (head >= 1) & (head < count)
    return _chains_agree(f, slots[ok], count)


def _chains_agree(f: ReadOnlyFile, slots: np.ndarray, count: int, samples: int = 64) -> np.ndarray:
    """Keep geometries under which sampled entries chain correctly: each entry's prev is
    older and in the same slot, and the slot's head is at least as new as the entry. A
    wrong geometry reads entries shifted, which breaks this almost surely."""
    if not len(slots):
        return slots
    ns = np.unique(np.linspace(1, count - 1, min(samples, count - 1)).astype(np.int64))
    keep = []
    for s in slots.tolist():
        base = L.INDEX_HEADER_SIZE + s * L.INDEX_SLOT_SIZE
        at = base + ns * L.INDEX_ENTRY_SIZE
        h = gather_int(f.array, at + L.IDXE_KEY_HASH, 4)
        prev = gather_int(f.array, at + L.IDXE_PREV_INDEX, 4)
        if (h < 0).any() or (prev < 0).any() or (prev >= ns).any():
            continue
        linked = prev > 0
        prev_h = gather_int(f.array, base + prev[linked] * L.INDEX_ENTRY_SIZE + L.IDXE_KEY_HASH, 4)
        head = gather_int(f.array, L.INDEX_HEADER_SIZE + (h % s) * L.INDEX_SLOT_SIZE, 4)
        if (prev_h % s == h[linked] % s).all() and (head >= ns).all() and (head < count).all():
            keep.append(s)
    return np.array(keep, np.int64)


def index_entries(f: ReadOnlyFile, slots: int, first: int, count: int) -> np.ndarray:
    """Entries ``first .. first+count-1`` as an ``INDEX_ENTRY_DTYPE`` array (zero-copy)."""
    at = L.INDEX_HEADER_SIZE + slots * L.INDEX_SLOT_SIZE + first * L.INDEX_ENTRY_SIZE
    return np.frombuffer(f.buf, dtype=INDEX_ENTRY_DTYPE, count=count, offset=at)


def index_slot_heads(f: ReadOnlyFile, slots: int) -> np.ndarray:
    return np.frombuffer(f.buf, dtype=">i4", count=slots, offset=L.INDEX_HEADER_SIZE)


def cq_units(f: ReadOnlyFile) -> np.ndarray:
    """All 20-byte units of a consume-queue file as a ``CQ_UNIT_DTYPE`` array (zero-copy)."""
    return np.frombuffer(f.buf, dtype=CQ_UNIT_DTYPE, count=f.size // L.CQ_UNIT_SIZE)


def iter_cq(kernels: FileKernels, paths: list[str], start_offset: int = 0) -> Iterator[tuple[int, np.ndarray, np.ndarray,
                                                                                 np.ndarray]]:
    """(first queue offset, phys, sizes, tags) chunks of valid units from ``start_offset``.

    Stops at the first never-written unit (``phy < 0 or size <= 0``), as recovery does.
    """
    chunk = 4096
    for path in paths:
        with ReadOnlyFile(path) as f:
            if f.size % L.CQ_UNIT_SIZE:
                raise CorruptFileError(f"{path} is {f.size} bytes, not a multiple of {L.CQ_UNIT_SIZE}")
            base_unit = f.base // L.CQ_UNIT_SIZE
            n_units = f.size // L.CQ_UNIT_SIZE
            if base_unit + n_units <= start_offset:
                continue
            valid = kernels.cq_count_valid(f.buf, 0, f.size)
            i = max(0, start_offset - base_unit)
            while i < valid:
                n = min(chunk, valid - i)
                phys, sizes, tags = kernels.cq_read(f.buf, i * L.CQ_UNIT_SIZE, n)
                yield base_unit + i, phys, sizes, tags
                i += n
            if valid < n_units:
                return
