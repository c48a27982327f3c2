"""MappedFile: one fixed-size store file mapped into memory (RocketMQ's ``MappedFile``).

Files are created at their full configured size and named by the 20-digit offset of
their first byte. A store into a mapped page with no block behind it kills the process
with SIGBUS when the file system is full, so every byte we may write to through the map is
reserved (``posix_fallocate``) before it is written; ``reserved_end`` is where the reserved
range ends. Two ways (``reserve_step``):

* 0 (commitlog, index, timer files): the whole file when it is created, as one call;
* > 0 (consume queues): the file is created sparse, as RocketMQ's are, and reserved in
  steps ahead of its write position (``ensure_reserved``): first ``reserve_step`` bytes
  (a page), each later step as large as what is reserved already, at most
  ``MAX_RESERVE_STEP``. A queue then costs disk in proportion to what it holds (a
  one-message queue one page, not 6 MB), and a full disk still surfaces as
  ``DiskFullError`` from the reservation, before the put that needs the room is
  written, never as a SIGBUS. Such a file is also mapped with MADV_RANDOM: the first fault
  on a new file otherwise reads around it (``read_ahead_kb``, up to the whole file) and
  zero-fills every hole it covers, about 2 ms per new queue.

A file that cannot be reserved at creation is removed again and ``DiskFullError`` raised;
files found at load (ours, or sparse ones from RocketMQ) are reserved before they are
appended to. Three positions per file: ``wrote``
(bytes appended), ``committed`` (= wrote: there is no transient store pool) and
``flushed`` (bytes known to be on disk), and one more, ``released``: the pages below it are
flushed and were dropped from this process's page tables (``release``), so a long store
does not keep every page it ever wrote counted in the broker's resident memory (the
kernel's page cache still holds them; a reader faults them back in). A mapped file holds one file descriptor, the
map's own, from open to ``close``: a store of N files needs N descriptors (RLIMIT_NOFILE).

Threads: the writer (under the store's put lock) appends; the flush thread calls
``flush``; readers take ``view`` slices at any time. A view handed out keeps the
mapping alive ("a reader holds the file"). Deleting (disk cleanup, the cleanup
thread): ``try_destroy`` deletes the file only when no view is out, and after
``force_after_ms`` of refusals unlinks it anyway; ``destroy`` unlinks at once. Either
way the mapping is closed as soon as no view is left (Linux keeps an unlinked mapped
file readable), so a reader never sees its bytes disappear. ``view`` and ``close``
share a small lock, so a reader on another thread never slices the base view while
``close`` has it released.
"""
from __future__ import annotations

import contextlib
import ctypes
import enum
import errno
import logging
import mmap
import os
import threading
from collections.abc import Iterator

from mqcore.errors import CorruptFileError, DiskFullError, StoreIOError
from mqcore.format.layout import offset_to_file_name

log = logging.getLogger(__name__)

PAGE_SIZE = mmap.PAGESIZE
#: the largest step a growing reservation takes (``reserve_step`` > 0): at most this much is
#: reserved ahead of what a consume queue holds, one reservation per this many bytes written
MAX_RESERVE_STEP = 1 << 20
_MS_SYNC = 4  # MS_SYNC of <sys/mman.h> on Linux (the mmap module does not name it)
_libc = ctypes.CDLL(None, use_errno=True)
_msync = _libc.msync
_msync.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_msync.restype = ctypes.c_int


class DestroyOutcome(enum.Enum):
    """What ``MappedFile.try_destroy`` did."""

    DESTROYED = "destroyed"    # unmapped and unlinked
    FORCED = "forced"          # held past the grace period: unlinked, unmapped once the last view goes
    HELD = "held"              # a reader holds a view: kept, try again later


class MappedFile:
    """One mmap'ed store file with its wrote and flushed positions."""

    def __init__(self, path: str, file_size: int, *, create: bool = False, reserve_step: int = 0):
        self.path = path
        self.file_size = file_size
        self.file_from_offset = int(os.path.basename(path))
        self.wrote_position = 0
        self.flushed_position = 0
        #: pages below this (a page boundary) were released from the process (``release``)
        self.released_position = 0
        self._closed = False
        self._flush_lock = threading.Lock()
        #: guards the base view against ``close`` releasing it while a reader slices it
        self._view_lock = threading.Lock()
        #: clock time of the first refused ``try_destroy`` (None: never refused)
        self.first_destroy_attempt_ms: int | None = None
        #: every block of the file is allocated: writes into the map cannot fault
        self.reserved = False
        #: blocks below this are allocated: writes into the map below it cannot fault
        self.reserved_end = 0
        #: 0: reserve the whole file at once; else the first step of a growing reservation
        self.reserve_step = reserve_step
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        try:
            fd = os.open(path, flags, 0o644)
        except OSError as e:
            raise StoreIOError(e.errno, f"cannot open {path}: {e.strerror}") from e
        try:
            actual = os.fstat(fd).st_size
            if create:
                os.ftruncate(fd, file_size)
                if reserve_step:
                    self._reserve_range_fd(fd, min(file_size, reserve_step))
                else:
                    self._reserve_fd(fd)
            elif actual != file_size:
                raise CorruptFileError(
                    f"{path} is {actual} bytes but files of this queue are {file_size} bytes")
            # the map keeps a descriptor of its own (Python's mmap dups the one it is given),
            # so ours is closed: one descriptor per mapped file, not two. What needs one later
            # (a sync, zeroing, a late reserve) opens the file for that call.
            self._mm = mmap.mmap(fd, file_size)
            if create and reserve_step:
                self._mm.madvise(mmap.MADV_RANDOM)  # no read-around of the holes (see the module doc)
        except DiskFullError:
            os.close(fd)
            self._unlink()  # a half-reserved file would be mistaken for a store file at the next start
            raise
        except OSError as e:
            os.close(fd)
            if create:  # made by us (O_EXCL) and unusable: the next try creates it again
                self._unlink()
            raise StoreIOError(e.errno, f"cannot map {path}: {e.strerror}") from e
        except CorruptFileError:
            os.close(fd)
            raise
        os.close(fd)
        self.buf = memoryview(self._mm)
        #: where the map starts, for msync (the ctypes view is dropped at once: a live export
        #: would keep ``close`` from unmapping)
        self._address = ctypes.addressof(ctypes.c_char.from_buffer(self._mm))

    @classmethod
    def create(cls, directory: str, file_from_offset: int, file_size: int, *,
               reserve_step: int = 0) -> "MappedFile":
        return cls(os.path.join(directory, offset_to_file_name(file_from_offset)), file_size, create=True,
                   reserve_step=reserve_step)

    def _reserve_fd(self, fd: int) -> None:
        self._reserve_range_fd(fd, self.file_size)

    def _reserve_range_fd(self, fd: int, end: int) -> None:
        """Allocate the blocks of [reserved_end, ``end``) (``end`` a page boundary or the file's end)."""
        start = self.reserved_end - self.reserved_end % PAGE_SIZE
        try:
            # glibc falls back to writing one byte per block where the file system has no
            # fallocate, so this reserves on every file system
            os.posix_fallocate(fd, start, end - start)
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(e.errno, f"no space to reserve {end - start} bytes for {self.path}: "
                                             f"the file system is full") from e
            raise StoreIOError(e.errno, f"cannot reserve blocks for {self.path}: {e.strerror}") from e
        self.reserved_end = end
        self.reserved = end >= self.file_size

    def reserve(self) -> None:
        """Allocate every block of the file (once), so writes into the map cannot SIGBUS.
        Raises ``DiskFullError`` when the file system has no room for the holes."""
        if self.reserved:
            return
        with self._flush_lock:
            if self._closed:
                raise StoreIOError(errno.EBADF, f"{self.path} is closed")
            with self._opened() as fd:
                self._reserve_fd(fd)

    def ensure_reserved(self, end: int) -> None:
        """Make [0, ``end``) safe to write through the map: the whole file (``reserve_step``
        0), or the next step of a growing reservation covering ``end``. Raises
        ``DiskFullError`` when the file system has no room (nothing is written then)."""
        if end <= self.reserved_end:
            return
        if not self.reserve_step:
            self.reserve()
            return
        step = min(max(self.reserved_end, self.reserve_step), MAX_RESERVE_STEP)
        want = max(end + (-end) % PAGE_SIZE, self.reserved_end + step)
        with self._flush_lock:
            if self._closed:
                raise StoreIOError(errno.EBADF, f"{self.path} is closed")
            with self._opened() as fd:
                self._reserve_range_fd(fd, min(self.file_size, want))

    @contextlib.contextmanager
    def _opened(self) -> Iterator[int]:
        """A descriptor of the file for one call (the map holds the only lasting one)."""
        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError as e:
            raise StoreIOError(e.errno, f"cannot open {self.path}: {e.strerror}") from e
        try:
            yield fd
        finally:
            os.close(fd)

    # --- positions ----------------------------------------------------------------------
    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def end_offset(self) -> int:
        """Offset one past this file's last byte."""
        return self.file_from_offset + self.file_size

    @property
    def wrote_offset(self) -> int:
        return self.file_from_offset + self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def set_positions(self, pos: int) -> None:
        """After recovery: everything up to ``pos`` is valid and on disk."""
        self.wrote_position = self.flushed_position = pos
        self.released_position = min(self.released_position, pos - pos % PAGE_SIZE)

    # --- I/O ----------------------------------------------------------------------------
    def view(self, pos: int, size: int) -> memoryview | None:
        """Zero-copy slice, valid while the caller holds it (even across ``destroy``);
        None once the file is closed."""
        with self._view_lock:
            if self._closed:
                return None
            return self.buf[pos:pos + size]

    @property
    def closed(self) -> bool:
        return self._closed

    def flush(self, least_pages: int = 0) -> int:
        """msync the written-but-unflushed range when at least ``least_pages`` are dirty."""
        with self._flush_lock:
            wrote = self.wrote_position
            dirty = wrote - self.flushed_position
            if self._closed or dirty <= 0:
                return self.flushed_position
            if least_pages > 0 and dirty // PAGE_SIZE < least_pages and wrote < self.file_size:
                return self.flushed_position
            # msync of the dirty pages, called through ctypes so the GIL is released while it
            # waits (mmap.flush holds it: every flush stalled all threads); it needs no
            # descriptor of its own, unlike fdatasync
            start = self.flushed_position - self.flushed_position % PAGE_SIZE
            self._sync(start, min(wrote, self.file_size))
            self.flushed_position = wrote
            return wrote

    def release(self, end: int) -> int:
        """Drop the process's mappings of the flushed pages in [released, ``end``); returns
        the new released position.

        MADV_DONTNEED on a shared file mapping only unmaps: the pages stay in the page cache
        with their data (a dirty one is marked dirty in the cache first), and the next read
        maps them again from there. It is kept to flushed bytes anyway, which the writer
        never touches again, so no write ever races it."""
        with self._flush_lock, self._view_lock:
            end = min(end, self.flushed_position, self.file_size)
            end -= end % PAGE_SIZE
            start = self.released_position
            if self._closed or end <= start:
                return start
            self._mm.madvise(mmap.MADV_DONTNEED, start, end - start)
            self.released_position = end
            return end

    def _sync(self, start: int, end: int) -> None:
        """Make [start, end) of the map durable (``start`` on a page boundary)."""
        if _msync(self._address + start, end - start, _MS_SYNC) != 0:
            code = ctypes.get_errno()
            raise StoreIOError(code, f"flush of {self.path} failed: {os.strerror(code)}")

    def zero(self, start: int, end: int) -> None:
        """Overwrite [start, end) with zeros: bytes that recovery dropped must not read as
        data again after a later restart. Written with pwrite, not into the map, so a full
        disk answers ENOSPC (``StoreIOError``) instead of SIGBUS on a hole."""
        chunk = bytes(min(end - start, 1 << 20)) if end > start else b""
        pos = start
        with self._opened() as fd:
            try:
                while pos < end:
                    pos += os.pwrite(fd, chunk[:end - pos], pos)
                # synced now: the range lies past the flushed position, so no later flush covers
                # it, and after a power cut the dropped bytes would come back from the disk
                os.fdatasync(fd)
            except OSError as e:
                raise StoreIOError(e.errno, f"cannot zero [{start}, {end}) of {self.path}: {e.strerror}") from e

    def last_modified_ms(self) -> int:
        try:
            return int(os.stat(self.path).st_mtime * 1000)
        except FileNotFoundError:
            return 0

    def close(self) -> bool:
        """Unmap; False while views are still out (retried by ``destroy`` callers)."""
        with self._flush_lock, self._view_lock:
            if self._closed:
                return True
            try:
                self.buf.release()
                self._mm.close()
            except BufferError:
                # a reader still holds a slice; re-create our own view and try later
                self.buf = memoryview(self._mm)
                return False
            self._closed = True
            return True

    def destroy(self) -> bool:
        """Delete the file now; the mapping goes once the last view is released."""
        self._unlink()
        log.info("deleted %s", self.path)
        return self.close()

    def try_destroy(self, now_ms: int, force_after_ms: int) -> DestroyOutcome:
        """Delete the file unless a reader holds a view of it (RocketMQ ``destroy(intervalForcibly)``).

        A held file is kept (HELD) and the first refusal remembered; once ``force_after_ms``
        have passed since then it is unlinked anyway (FORCED) and its mapping closed when
        the last view goes (the caller keeps it in a pending-close list).
        """
        if self.close():
            self._unlink()
            return DestroyOutcome.DESTROYED
        if self.first_destroy_attempt_ms is None:
            self.first_destroy_attempt_ms = now_ms
        if now_ms - self.first_destroy_attempt_ms >= force_after_ms:
            self._unlink()
            return DestroyOutcome.FORCED
        return DestroyOutcome.HELD

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        log.debug("unlinked %s", self.path)

    def __repr__(self) -> str:
        return f"MappedFile({self.path!r}, wrote={self.wrote_position}, flushed={self.flushed_position})"
