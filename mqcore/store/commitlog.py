"""CommitLog: the one append-only log every message is written to first.

Appends happen under the store's put lock (``*_locked`` methods); the kernels
encode straight into the mapped page cache. A record that does not fit the rest
of a file (with 8 bytes to spare) is preceded by an end-of-file blank record and
written at the start of the next file, so a file that holds records always ends
with at least 8 unused bytes (store-format.md §1.5).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from mqcore.format import layout as L
from mqcore.kernel_api import Buffer, StoreKernels
from mqcore.store.mapped_file import MappedFile
from mqcore.store.mapped_file_queue import MappedFileQueue, SpaceCheck
from mqcore.store.hot_state import on_kernels

log = logging.getLogger(__name__)


class CommitLog:
    """Threads: appends under the put lock; reads and flushes from any thread."""

    def __init__(self, directory: str, file_size: int, kernels: StoreKernels,
                 space_check: SpaceCheck | None = None) -> None:
        self.queue = on_kernels(MappedFileQueue, kernels)(directory, file_size, space_check,
                                                          on_kernels(MappedFile, kernels))
        self.file_size = file_size
        self.k = kernels

    def load(self) -> list[str]:
        return self.queue.load()

    # --- writing -------------------------------------------------------------------------------
    def reserve_locked(self, size: int) -> tuple[MappedFile, int]:
        """The file and position where a ``size``-byte append goes, rolling over as needed.
        Raises ``DiskFullError`` when the next file cannot be created (nothing is appended)."""
        if size + L.END_FILE_MIN_BLANK > self.file_size:
            raise ValueError(f"a {size}-byte record can never fit a {self.file_size}-byte commitlog file")
        mf = self.queue.get_last_for_append()
        if size + L.END_FILE_MIN_BLANK > mf.remaining():
            self.k.write_blank(mf.buf, mf.wrote_position, mf.remaining())
            log.info("commitlog file %s full at %d, rolling over", mf.name, mf.wrote_position)
            mf.wrote_position = mf.file_size
            mf = self.queue.get_last_for_append()
        return mf, mf.wrote_position

    def last_locked(self) -> MappedFile | None:
        """The file appends go to now, when it exists with its blocks reserved (a kernel
        that writes a record only when it ends before ``file_size - END_FILE_MIN_BLANK``
        uses it; otherwise ``reserve_locked`` rolls over)."""
        mf = self.queue.last
        return mf if mf is not None and mf.reserved else None

    def commit_locked(self, mf: MappedFile, size: int) -> None:
        mf.wrote_position += size

    # --- reading -----------------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        return self.queue.min_offset()

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset()

    def view(self, phy_offset: int, size: int) -> memoryview | None:
        """Zero-copy view of ``size`` bytes at ``phy_offset`` if they are written."""
        mf = self.queue.find_by_offset(phy_offset)
        if mf is None:
            return None
        pos = phy_offset - mf.file_from_offset
        if size <= 0 or pos + size > mf.wrote_position:
            return None
        return mf.view(pos, size)

    def record_at(self, phy_offset: int) -> memoryview | None:
        """The whole record at ``phy_offset`` (length from its TOTALSIZE)."""
        head = self.view(phy_offset, 8)
        if head is None:
            return None
        size = int.from_bytes(head[:4], "big", signed=True)
        magic = int.from_bytes(head[4:8], "big", signed=True)
        if magic not in (L.MAGIC_V1, L.MAGIC_V2) or size <= 0:
            return None
        return self.view(phy_offset, size)

    def store_timestamp(self, phy_offset: int, size: int) -> int:
        """Store time of the record at ``phy_offset``; -1 when it is gone."""
        rec = self.view(phy_offset, size)
        if rec is None or size < L.REC_FIXED_V4:
            return -1
        sys_flag = int.from_bytes(rec[L.REC_SYSFLAG:L.REC_SYSFLAG + 4], "big", signed=True)
        at = L.REC_STORETIMESTAMP_V4 + (L.HOST_V6_EXTRA if sys_flag & L.SYSFLAG_BORNHOST_V6 else 0)
        return int.from_bytes(rec[at:at + 8], "big", signed=True)

    def iter_files_from(self, phy_offset: int) -> Iterator[tuple[MappedFile, int]]:
        """(file, start position) pairs covering the log from ``phy_offset`` on."""
        for mf in list(self.queue.files):
            if mf.end_offset <= phy_offset:
                continue
            yield mf, max(0, phy_offset - mf.file_from_offset)

    def flush(self, least_pages: int = 0) -> int:
        return self.queue.flush(least_pages)

    def close(self) -> None:
        self.queue.close()


#: ``on_batch(table, topics, buf)`` of ``scan_file``: a dispatch table, its topics, the file's buffer
OnBatch = Callable[[np.ndarray, list[bytes], Buffer], None]


def scan_file(kernels: StoreKernels, mf: MappedFile, start: int, end: int, check_crc: bool, delays: Sequence[int],
              batch: int, on_batch: OnBatch) -> tuple[int, int]:
    """Scan records of ``mf`` in [start, end) in batches of ``batch``; calls
    ``on_batch(table, topics, buf)`` for each. Returns (stop position, ScanStop reason)."""
    pos = start
    while True:
        table, topics, stop, reason = kernels.scan_records(mf.buf, pos, end, mf.file_from_offset,
                                                           check_crc, delays, batch)
        if len(table):
            on_batch(table, topics, mf.buf)
        pos = stop
        if reason != L.ScanStop.MAX_COUNT:
            return pos, reason
