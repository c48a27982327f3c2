"""The store directory's ``lock`` file: one process per store (store-format.md §5.3).

An exclusive POSIX record lock on byte 0 (``fcntl.lockf``, which conflicts with a
Java broker's ``FileChannel.tryLock``), then the bytes ``lock`` written and synced.
"""
from __future__ import annotations

import fcntl
import os
import threading

from mqcore.errors import StoreLockedError


class StoreLock:
    # POSIX record locks belong to the process: a second lockf from the same process
    # succeeds, and closing any fd on the file drops the lock. So the process also keeps
    # its own table of held store directories (by device and inode).
    """The ``<store>/lock`` file lock: one process (and one open store in it) per store directory."""

    _held: set[tuple[int, int]] = set()
    _held_lock = threading.Lock()

    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._key: tuple[int, int] | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        st = os.fstat(fd)
        key = (st.st_dev, st.st_ino)
        with StoreLock._held_lock:
            if key in StoreLock._held:
                os.close(fd)
                raise StoreLockedError(
                    f"the store at {os.path.dirname(self.path)} is already open in this process; "
                    "open it once and share the MessageStore")
            StoreLock._held.add(key)
        self._key = key
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError as e:
            os.close(fd)
            self._forget()
            raise StoreLockedError(
                f"the store at {os.path.dirname(self.path)} is locked by another process "
                f"(a running broker?): {e.strerror}. Stop it, or point this one at another "
                "storePathRootDir.") from e
        os.pwrite(fd, b"lock", 0)
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0)
            os.close(self._fd)
            self._fd = None
        self._forget()

    def _forget(self) -> None:
        if self._key is not None:
            with StoreLock._held_lock:
                StoreLock._held.discard(self._key)
            self._key = None
