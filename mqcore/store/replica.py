"""A slave's commitlog: bytes a master sent, appended as they are, then dispatched.

A slave does not encode records: it copies the master's commitlog byte for byte (RocketMQ's
HA ``appendToCommitLog``) and builds its consume queues and index from what it copied, with
the same dispatch the put path and recovery use (``Dispatcher.dispatch_locked`` over a
kernel scan). A transfer may end inside a record; ``dispatched`` stays at the start of that
record until the rest arrives (Apache's reput offset).

Threads: appends under the writer's put lock (a slave refuses puts, but the lock keeps the
rule that one thread at a time moves the commitlog's end).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mqcore.format import layout as L
from mqcore.store.commitlog import scan_file

if TYPE_CHECKING:
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)

_SCAN_BATCH = 4096


class ReplicaMismatch(ValueError):
    """Bytes that cannot go where the master says (offset, geometry): the connection must
    be dropped and nothing of them written."""


class ReplicaAppender:
    """Appends master-sent commitlog bytes to ``store`` (a loaded ``MessageStore``)."""

    def __init__(self, store: "MessageStore") -> None:
        self.store = store
        self.commitlog = store.commitlog
        #: commitlog offset up to which records were dispatched (recovery dispatched all of it)
        self.dispatched = self.commitlog.max_offset
        # parsed once: the config's property parses its text on every call
        self._delays = store.config.delay_levels_ms

    @property
    def max_offset(self) -> int:
        return self.commitlog.max_offset

    def append(self, offset: int, data: bytes | memoryview, dispatch: bool = True) -> int:
        """Write ``data`` at commitlog ``offset`` and (``dispatch``) dispatch the records it
        completes; returns the new max offset. Raises ``ReplicaMismatch`` (nothing written)
        when ``offset`` is not this store's end or the bytes would cross a commitlog file.
        ``dispatch=False`` leaves the dispatch to a later ``dispatch()``: a reader holding
        several transfers dispatches them once (the cost of a dispatch is mostly per call)."""
        if not data:
            return self.max_offset
        cl, store = self.commitlog, self.store
        size = cl.file_size
        with store.writer.lock:
            have = cl.max_offset
            if cl.queue.last is None:
                if offset % size:
                    raise ReplicaMismatch(f"the master starts this empty slave at offset {offset}, not at the start "
                                          f"of a {size}-byte commitlog file: is mappedFileSizeCommitLog the same "
                                          "on both?")
            elif offset != have:
                raise ReplicaMismatch(f"the master sent offset {offset}, this slave's commitlog ends at {have}")
            if offset // size != (offset + len(data) - 1) // size:
                raise ReplicaMismatch(f"{len(data)} bytes at offset {offset} cross a {size}-byte commitlog file: "
                                      "the master's mappedFileSizeCommitLog differs from this slave's")
            mf = cl.queue.get_last_for_append(offset)
            if mf.file_from_offset + mf.wrote_position != offset:  # a fresh file at the master's start
                raise ReplicaMismatch(f"the next commitlog file starts at {mf.wrote_offset}, the master sent "
                                      f"offset {offset}")
            if cl.queue.files[0] is mf and self.dispatched < mf.file_from_offset:
                self.dispatched = mf.file_from_offset  # an empty slave starts where the master said
            pos = mf.wrote_position
            mf.ensure_reserved(pos + len(data))
            mf.buf[pos:pos + len(data)] = data
            mf.wrote_position = pos + len(data)
            if dispatch:
                self._dispatch_locked()
            return cl.max_offset

    def dispatch(self) -> None:
        """Dispatch what ``append(..., dispatch=False)`` wrote."""
        with self.store.writer.lock:
            self._dispatch_locked()

    def _dispatch_locked(self) -> None:
        """Dispatch complete records from ``dispatched`` to the end of the log."""
        self._scan_locked()
        # the checkpoint's commitlog time comes from the writer (MessageStore._flush_commitlog)
        self.store.writer.last_store_timestamp = self.store.dispatcher.last_store_timestamp

    def _scan_locked(self) -> None:
        store = self.store
        for mf, pos in self.commitlog.iter_files_from(self.dispatched):
            stop, reason = scan_file(store.k, mf, pos, mf.wrote_position, False, self._delays,
                                     _SCAN_BATCH, store.dispatcher.dispatch_locked)
            if reason == L.ScanStop.BLANK:
                self.dispatched = mf.end_offset  # the master rolled over: the rest of this file is unused
                continue
            self.dispatched = mf.file_from_offset + stop
            if reason == L.ScanStop.CORRUPT:
                log.error("replicated commitlog: no valid record at offset %d; its consume-queue units wait for a "
                          "restart's recovery", self.dispatched)
            # END, NO_DATA, TRUNCATED: the rest of a record has not arrived yet
            return
