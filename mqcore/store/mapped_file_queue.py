"""MappedFileQueue: the ordered files of one logical log (RocketMQ's ``MappedFileQueue``).

The commitlog and every consume queue are a queue of equal-size files whose names
are the offsets of their first bytes. Offsets are contiguous from the first file to
the last; deleting old files moves the queue's minimum offset up.
"""
from __future__ import annotations

import logging
import errno
import os
import threading
from typing import Callable

from mqcore.errors import CorruptFileError, DiskFullError
from mqcore.store.mapped_file import DestroyOutcome, MappedFile

log = logging.getLogger(__name__)


#: ``space_check(directory, size)`` raises ``DiskFullError`` when a new ``size``-byte file
#: may not be created there (the disk-use ratio check before every new file)
SpaceCheck = Callable[[str, int], None]


class MappedFileQueue:
    """The numbered, fixed-size files of one log (commitlog or a consume queue) as one offset space."""

    def __init__(self, directory: str, file_size: int, space_check: SpaceCheck | None = None,
                 file_class: type[MappedFile] = MappedFile, reserve_step: int = 0):
        self.directory = directory
        #: the files' ``MappedFile.reserve_step``: 0, each reserved whole; else sparse files
        #: reserved in steps ahead of the write position (consume queues)
        self.reserve_step = reserve_step
        #: the class of the files (``MappedFile`` on the store kernels' base: ``hot_state``)
        self.file_class = file_class
        self.file_size = file_size
        self.space_check = space_check
        self.files: list[MappedFile] = []
        self._lock = threading.RLock()
        #: log each new file at DEBUG, not INFO (a consume queue's: one per queue, thousands of them)
        self.quiet = False
        #: files unlinked while a reader still had a view; closed later
        self._pending_close: list[MappedFile] = []
        #: called with a file appends may now go to (created, or a loaded one just reserved):
        #: the commitlog's PrefaultService starts on it at once instead of at its next look
        self.on_file_ready: Callable[[MappedFile], None] | None = None

    def load(self) -> list[str]:
        """Map the existing files; returns notes about files that were skipped or fixed."""
        notes: list[str] = []
        if not os.path.isdir(self.directory):
            return notes
        names = sorted(n for n in os.listdir(self.directory) if n.isdigit() and len(n) == 20)
        for other in sorted(set(os.listdir(self.directory)) - set(names)):
            notes.append(f"ignored {os.path.join(self.directory, other)}: not a store file name")
        for name in names:
            path = os.path.join(self.directory, name)
            size = os.path.getsize(path)
            if size < self.file_size and name == names[-1]:
                # a file cut short (crash while it was being created, or a copy): extend it with
                # zeros; the zeros read as "no data" so nothing is invented
                with open(path, "r+b") as f:
                    f.truncate(self.file_size)
                notes.append(f"extended short file {path} from {size} to {self.file_size} bytes")
            elif size != self.file_size:
                raise CorruptFileError(
                    f"{path} is {size} bytes but this queue's files are {self.file_size} bytes; "
                    "was the store written with another file size setting?")
            mf = self.file_class(path, self.file_size, reserve_step=self.reserve_step)
            if self.files and mf.file_from_offset != self.files[-1].end_offset:
                notes.append(f"{path} does not follow {self.files[-1].path} contiguously")
            # until recovery says otherwise, a loaded file counts as full
            mf.set_positions(self.file_size)
            self.files.append(mf)
        return notes

    def fill_gap(self, lo: int, hi: int, write_file: Callable[[str, int], None]) -> list[str]:
        """Create the missing files of [lo, hi) with ``write_file(path, size)`` and map them in
        order; returns their paths (a lost range closed once its loss was reported)."""
        made = []
        with self._lock:
            for at in range(lo, hi, self.file_size):
                path = os.path.join(self.directory, "%020d" % at)
                write_file(path, self.file_size)
                mf = self.file_class(path, self.file_size, reserve_step=self.reserve_step)
                mf.set_positions(self.file_size)
                i = next((i for i, f in enumerate(self.files) if f.file_from_offset > at), len(self.files))
                self.files.insert(i, mf)
                made.append(path)
        if made:  # the new names must survive a power cut like their contents
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return made

    # --- lookup ----------------------------------------------------------------------------
    @property
    def first(self) -> MappedFile | None:
        return self.files[0] if self.files else None

    @property
    def last(self) -> MappedFile | None:
        return self.files[-1] if self.files else None

    def min_offset(self) -> int:
        f = self.first
        return f.file_from_offset if f else 0

    def max_offset(self) -> int:
        """Offset one past the last written byte."""
        f = self.last
        return f.wrote_offset if f else 0

    def flushed_offset(self) -> int:
        with self._lock:
            for mf in reversed(self.files):
                if mf.flushed_position > 0:
                    return mf.file_from_offset + mf.flushed_position
            return self.min_offset()

    def find_by_offset(self, offset: int) -> MappedFile | None:
        files = self.files
        if not files:
            return None
        first = files[0]
        i = (offset - first.file_from_offset) // self.file_size
        if 0 <= i < len(files):
            mf = files[i]
            if mf.file_from_offset <= offset < mf.end_offset:
                return mf
        for mf in files:  # holes after a non-contiguous load
            if mf.file_from_offset <= offset < mf.end_offset:
                return mf
        return None

    def get_last_for_append(self, start_offset: int = 0) -> MappedFile:
        """The file to append to, creating the first or the next one as needed; its blocks
        are reserved (all of them, or with ``reserve_step`` at least the page at its write
        position). Raises ``DiskFullError`` when no file with room can be had."""
        with self._lock:
            last = self.last
            if last is not None and not last.is_full():
                if last.reserved_end <= last.wrote_position:  # a file loaded from disk may be sparse
                    last.ensure_reserved(last.wrote_position + 1)
                    if last.reserved:
                        self._file_ready(last)
                return last
            if last is None:
                base = start_offset - start_offset % self.file_size
            else:
                base = last.end_offset
            return self.adopt(self.make_file(base))

    def make_file(self, base: int) -> MappedFile:
        """A new file starting at ``base``, its directory made and its first blocks reserved,
        but not yet one of this queue's files (:meth:`adopt` makes it one): a caller may make
        it outside the lock its appends are under, since creating directory entries is the
        slow part (~0.3-0.8 ms each on some file systems). Raises ``DiskFullError``."""
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(e.errno, f"cannot create {self.directory}: the file system is full") from e
            raise
        if self.space_check is not None:
            self.space_check(self.directory, self.file_size)
        return self.file_class.create(self.directory, base, self.file_size, reserve_step=self.reserve_step)

    def adopt(self, mf: MappedFile) -> MappedFile:
        """Append ``mf`` (from :meth:`make_file`) as the last file."""
        with self._lock:
            self.files.append(mf)
        log.log(logging.DEBUG if self.quiet else logging.INFO, "created %s", mf.path)
        self._file_ready(mf)
        return mf

    def _file_ready(self, mf: MappedFile) -> None:
        if self.on_file_ready is not None:
            self.on_file_ready(mf)

    # --- flushing and truncation -------------------------------------------------------------
    def flush(self, least_pages: int = 0) -> int:
        """Flush the file holding the first unflushed byte; returns the flushed offset."""
        with self._lock:
            files = list(self.files)
        for mf in files:
            if mf.flushed_position < mf.wrote_position:
                mf.flush(least_pages)
                if mf.flushed_position < mf.wrote_position:
                    break
        return self.flushed_offset()

    def release_behind(self, keep_bytes: int) -> int:
        """Release (``MappedFile.release``) the flushed pages more than ``keep_bytes`` behind the
        write position, in every file; returns the bytes released by this call."""
        with self._lock:
            files = list(self.files)
        if not files:
            return 0
        limit = files[-1].wrote_offset - keep_bytes
        released = 0
        for mf in files:
            if mf.file_from_offset >= limit:
                break
            if mf.released_position >= min(mf.flushed_position, limit - mf.file_from_offset):
                continue
            before = mf.released_position
            released += mf.release(limit - mf.file_from_offset) - before
        return released

    def truncate_dirty(self, offset: int) -> list[str]:
        """Drop everything at or after ``offset``: later files deleted, the containing file's
        positions set (stale bytes beyond are not zeroed: readers stop at positions)."""
        deleted: list[str] = []
        with self._lock:
            keep: list[MappedFile] = []
            for mf in self.files:
                if mf.end_offset > offset:
                    if offset >= mf.file_from_offset:
                        mf.set_positions(offset - mf.file_from_offset)
                    else:
                        deleted.append(mf.path)
                        self._destroy(mf)
                        continue
                keep.append(mf)
            self.files = keep
        return deleted

    def _destroy(self, mf: MappedFile) -> None:
        if not mf.destroy():
            self._pending_close.append(mf)

    def delete_first(self, count: int = 1) -> list[MappedFile]:
        """Remove the oldest ``count`` files (cleanup); never the last one."""
        with self._lock:
            n = min(count, len(self.files) - 1)
            gone, self.files = self.files[:n], self.files[n:]
        for mf in gone:
            self._destroy(mf)
        self.retry_pending_close()
        return gone

    def destroy_first(self, now_ms: int, force_after_ms: int) -> tuple[MappedFile | None, DestroyOutcome | None]:
        """Delete the oldest file (disk cleanup) unless it is the last one or a reader holds it.

        Returns the file and what happened; (None, None) when only the last file is left.
        A HELD file stays first in the queue (the caller stops and retries later); a FORCED
        one leaves the queue and waits in the pending-close list for its last view.
        """
        with self._lock:
            if len(self.files) <= 1:
                return None, None
            mf = self.files[0]
            outcome = mf.try_destroy(now_ms, force_after_ms)
            if outcome is DestroyOutcome.HELD:
                return mf, outcome
            self.files = self.files[1:]
            if outcome is DestroyOutcome.FORCED:
                self._pending_close.append(mf)
        self.retry_pending_close()
        return mf, outcome

    def retry_pending_close(self) -> int:
        """Close files unlinked while views were out; returns how many are still pending."""
        with self._lock:
            self._pending_close = [mf for mf in self._pending_close if not mf.close()]
            return len(self._pending_close)

    def destroy_all(self) -> None:
        with self._lock:
            for mf in self.files:
                self._destroy(mf)
            self.files = []
        try:
            os.rmdir(self.directory)
        except OSError:
            pass  # not empty (foreign files) or already gone: leave it

    def close(self) -> None:
        with self._lock:
            for mf in self.files:
                mf.flush()
                if not mf.close():
                    self._pending_close.append(mf)
            self.files = []
        self.retry_pending_close()
