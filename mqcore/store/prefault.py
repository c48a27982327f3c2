"""PrefaultService: keeps the pages just ahead of the commitlog's write position faulted in.

The first write to each page of a fresh (sparse) mapped file costs a page fault that is
several times the cost of copying the record itself; measured here, appends of 4 KiB
records ran at ~300 MB/s into fresh pages and at over 2 GB/s into faulted-in ones. This
thread walks ahead of the writer (RocketMQ's warmMappedFile, but a sliding window instead
of the whole 1 GiB file) with the ``prefault`` kernel, which releases the GIL and never
changes a byte, so it can run while the writer appends into the same pages.

With nothing to fault in, the thread sleeps for as long as the writer needs to use up half
of the faulted-in bytes still ahead of it at the rate it wrote since the last look, between
``IDLE_MIN_S`` and ``IDLE_MAX_S``; a new commitlog file wakes it at once (``file_ready``),
so the writer does not fault in a fresh file's first pages itself. A fixed short nap woke
the process 200 times a second whether or not anything was written; a broker on an idle
host then paid a halted vCPU's wake-up for each.

Threads: its own; reads the writer's position without a lock (a stale value only means
the window starts a little early, which is harmless).
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from mqcore.kernel_api import StoreKernels
from mqcore.service import ServiceThread
from mqcore.store.commitlog import CommitLog
from mqcore.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

CHUNK_BYTES = 4 << 20
#: shortest and longest sleep with nothing to do. At the longest, a writer starting from idle
#: outruns a 32 MiB window only above 320 MB/s, and then only until the next look.
IDLE_MIN_S = 0.005
IDLE_MAX_S = 0.1


class PrefaultService(ServiceThread):
    """Keeps a window ahead of the commitlog write position faulted in, from a background thread."""

    name = "mqcore-prefault"

    def __init__(self, commitlog: CommitLog, kernels: StoreKernels, window_bytes: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.commitlog = commitlog
        self.k = kernels
        self.window_bytes = window_bytes
        self.clock = clock
        self._file: MappedFile | None = None
        self._warmed = 0
        self._seen_at = -1.0  # when idle_wait_s last looked (negative: never)
        self._seen_offset = 0  # the commitlog's write offset then

    def run(self) -> None:
        while not self.stopped:
            if not self._step():
                self.wait_for_running(self.idle_wait_s())

    def file_ready(self, _mf: MappedFile) -> None:
        """The commitlog has a new file to append to (MappedFileQueue.on_file_ready)."""
        self.wakeup()

    def idle_wait_s(self) -> float:
        """How long to sleep with nothing to fault in: until the writer, at the rate it wrote
        since the last look, has used half of the faulted-in bytes ahead of it (bounded)."""
        now = self.clock()
        mf = self.commitlog.queue.last
        offset = 0 if mf is None else mf.file_from_offset + mf.wrote_position
        last_at, last_offset = self._seen_at, self._seen_offset
        self._seen_at, self._seen_offset = now, offset
        if last_at < 0 or now <= last_at:
            return IDLE_MIN_S
        rate = (offset - last_offset) / (now - last_at)
        if rate <= 0:
            return IDLE_MAX_S
        ahead = 0 if mf is None or mf is not self._file else max(0, self._warmed - mf.wrote_position)
        return min(IDLE_MAX_S, max(IDLE_MIN_S, ahead / 2 / rate))

    def _step(self) -> bool:
        """Fault in the next chunk of the window; False when there is nothing to do."""
        mf = self.commitlog.queue.last
        if mf is None or mf.is_full() or mf.closed or not mf.reserved:
            return False  # an unreserved (sparse, loaded) file: touching a hole may SIGBUS on a full disk
        if mf is not self._file:
            self._file, self._warmed = mf, 0
        wrote = mf.wrote_position
        target = min(mf.file_size, wrote + self.window_bytes)
        start = max(self._warmed, wrote)
        if start >= target:
            return False
        end = min(target, start + CHUNK_BYTES)
        self.k.prefault(mf.buf, start, end)
        self._warmed = end
        return True
