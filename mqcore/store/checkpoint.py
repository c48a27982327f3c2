"""StoreCheckpoint: the 4096-byte ``checkpoint`` file (store-format.md §5.1).

Three timestamps: the last message flushed to the commitlog, to a consume queue,
and the end of the last full index file. Recovery after a crash starts from the
commitlog file whose first message is older than the smaller of them.
"""
from __future__ import annotations

import mmap
import os

from mqcore.errors import DiskFullError
from mqcore.format import layout as L


class StoreCheckpoint:
    """Threads: updated by the flush thread, read at start-up."""

    def __init__(self, path: str):
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != L.CHECKPOINT_FILE_SIZE:
                os.ftruncate(fd, L.CHECKPOINT_FILE_SIZE)
            try:
                # a store into a hole of the map would SIGBUS on a full disk: allocate first
                os.posix_fallocate(fd, 0, L.CHECKPOINT_FILE_SIZE)
            except OSError as e:
                raise DiskFullError(e.errno, f"cannot allocate {path}: {e.strerror}") from e
            self._mm = mmap.mmap(fd, L.CHECKPOINT_FILE_SIZE)
        finally:
            os.close(fd)
        self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = \
            L.CHECKPOINT_FIELDS.unpack_from(self._mm, L.CKPT_PHYSIC_MSG_TIMESTAMP)

    def min_timestamp(self) -> int:
        """``getMinTimestamp``: the older of commitlog and consume-queue progress, less 3 s."""
        return int(max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000))

    def write(self) -> None:
        """The times into the file's page (what another process reading the file sees), not synced."""
        L.CHECKPOINT_FIELDS.pack_into(self._mm, L.CKPT_PHYSIC_MSG_TIMESTAMP, self.physic_msg_timestamp,
                                      self.logics_msg_timestamp, self.index_msg_timestamp)

    def flush(self) -> None:
        """``write`` and sync the file."""
        self.write()
        self._mm.flush()

    def close(self) -> None:
        self.flush()
        self._mm.close()
