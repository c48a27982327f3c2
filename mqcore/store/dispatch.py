"""Dispatch: turn commitlog records into consume-queue units and index entries.

One code path serves the put path (right after an append, under the put lock),
recovery (re-dispatching a range after a crash) and the start-up catch-up: all of
them scan records with the kernel and hand the dispatch table to ``dispatch_locked``.
"""
from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Callable

import numpy as np

from mqcore.errors import StoreIOError
from mqcore.format import layout as L
from mqcore.kernel_api import Buffer, StoreKernels
from mqcore.store.consume_queue import ConsumeQueueTable
from mqcore.store.index import IndexService

log = logging.getLogger(__name__)

# positions of DISPATCH_FIELDS in a row tuple (``table[i].item()``)
#: a record with more index keys than this has them put by one array call (build_locked);
#: fewer, one call each, which is cheaper than making three arrays
_ONE_BY_ONE_KEYS = 4
_FIELD = {name: i for i, (name, _) in enumerate(L.DISPATCH_FIELDS)}
_PHY, _QUEUE_OFFSET, _TAGS_CODE, _SIZE = (_FIELD[n] for n in ("phy_offset", "queue_offset", "tags_code", "size"))
_QUEUE_ID, _SYS_FLAG, _TOPIC_IDX = (_FIELD[n] for n in ("queue_id", "sys_flag", "topic_idx"))
_UNIQ_LEN, _KEYS_LEN = _FIELD["uniq_len"], _FIELD["keys_len"]

#: called after units were added: (topic, queue_id, new max offset)
ArrivalListener = Callable[[str, int, int], None]
#: a dispatch-table row as a tuple (``table[i].item()``), fields at the ``_FIELD`` positions
Row = tuple[Any, ...]
#: ``(topic, queue id, new max offset)`` of a queue a dispatch added units to
Touched = tuple[str, int, int]


class Dispatcher:
    """Turns appended records into consume-queue units and index entries, then notifies listeners."""

    def __init__(self, queues: ConsumeQueueTable, index: IndexService | None, kernels: StoreKernels) -> None:
        self.queues = queues
        self.index = index
        self.k = kernels
        self.listeners: list[ArrivalListener] = []
        #: store time of the newest record dispatched (checkpoint logicsMsgTimestamp)
        self.last_store_timestamp = 0
        #: consume-queue / index writes that failed (disk full, I/O error): counted, logged
        #: once per kind until one succeeds again, repaired by the start-up consume-queue check
        self.failures = 0
        self._failing: set[str] = set()
        #: recovery only: records before this offset create no consume queue that does not
        #: exist (a deleted topic), except those in ``new_queues_allowed``; -1 = off
        self.no_new_queues_below = -1
        self.new_queues_allowed: set[tuple[str, int]] = set()

    def dispatch_locked(self, table: np.ndarray, topics: list[bytes], buf: Buffer, *,
                        index_from_phy: int = -1) -> None:
        """Dispatch scanned records; index only those at or after ``index_from_phy``."""
        if not len(table):
            return
        touched: list[Touched] = []
        if len(table) == 1:  # the single-message put: scalars, no array bookkeeping
            tx = None
            row = table[0].item()
            self._dispatch_one(row, topics, touched)
        else:
            tx = table["sys_flag"] & L.SYSFLAG_TRANSACTION_MASK
            for topic_idx, queue_id, part in self._groups(table, tx):
                topic = topics[topic_idx].decode("utf-8", "replace")
                if self._deleted(topic, queue_id, int(part["phy_offset"][0])):
                    continue
                cq = self.queues.find_or_create(topic, queue_id)
                try:
                    added = cq.put_units_locked(part["queue_offset"], part["phy_offset"], part["size"],
                                                part["tags_code"])
                except StoreIOError as e:
                    self._failed("consumequeue", f"consume queue {topic}-{queue_id}", e)
                    continue
                if added:
                    touched.append((topic, queue_id, cq.max_offset()))
        if self.index is not None:
            self._index_guarded(self._index_locked, table, topics, buf, tx, index_from_phy,
                                row if tx is None else None)
        self.last_store_timestamp = int(table["store_timestamp"][-1])
        for topic, qid, max_offset in touched:
            self._arrived(topic, qid, max_offset)

    def dispatch_queue_locked(self, table: np.ndarray, topics: list[bytes], buf: Buffer, topic: str,
                              queue_id: int) -> None:
        """``dispatch_locked`` of freshly written records that all belong to the queue
        ``topic``/``queue_id``, none of them prepared or rolled back (a wire batch): the
        same units and index entries without grouping the rows."""
        if not len(table):
            return
        if self.no_new_queues_below > 0:  # recovery bookkeeping: the general path decides
            self.dispatch_locked(table, topics, buf)
            return
        cq = self.queues.find_or_create(topic, queue_id)
        try:
            added = cq.put_units_locked(table["queue_offset"], table["phy_offset"], table["size"],
                                        table["tags_code"], consecutive=True)
        except StoreIOError as e:
            self._failed("consumequeue", f"consume queue {topic}-{queue_id}", e)
            added = 0
        if self.index is not None:
            self._index_guarded(self._index_all_locked, table, topics, buf)
        self.last_store_timestamp = int(table["store_timestamp"][-1])
        if added:
            self._arrived(topic, queue_id, cq.max_offset())

    def dispatch_unit_locked(self, topic: str, queue_id: int, queue_offset: int, phy: int, size: int,
                             tags_code: int, store_ts: int, key_hashes: list[int]) -> None:
        """``dispatch_locked`` of one counted record whose fields the writer already knows
        (the single-message put): the same unit and index entries, without scanning it."""
        if self.no_new_queues_below > 0 and self._deleted(topic, queue_id, phy):
            return
        cq = self.queues.find_or_create(topic, queue_id)
        try:
            added = cq.put_one_locked(queue_offset, phy, size, tags_code)
        except StoreIOError as e:
            self._failed("consumequeue", f"consume queue {topic}-{queue_id}", e)
            added = 0
        if self.index is not None:
            self._index_guarded(self._index_keys_locked, key_hashes, phy, store_ts)
        self.last_store_timestamp = store_ts
        if added:
            self._arrived(topic, queue_id, cq.max_offset())

    def index_keys_locked(self, key_hashes: list[int], phy: int, store_ts: int) -> None:
        """A fresh record's index keys through the index service (creating files as needed)."""
        if self.index is not None and key_hashes:
            self._index_guarded(self._index_keys_locked, key_hashes, phy, store_ts)

    def unit_written_locked(self, topic: str, queue_id: int, max_offset: int, store_ts: int) -> None:
        """A unit (and its index keys) written by the send pipeline's kernel for a fresh
        record: the bookkeeping ``dispatch_unit_locked`` does after writing them."""
        self.last_store_timestamp = store_ts
        self._arrived(topic, queue_id, max_offset)

    def _index_guarded(self, build: Callable[..., None], *args: Any) -> None:
        """Run an index update; a write failure is logged once (the commitlog keeps the
        records and the next start rebuilds the index), never raised to the put."""
        try:
            build(*args)
            self._failing.discard("index")
        except StoreIOError as e:
            self._failed("index", "the index", e)

    # the _index_* methods run only with an index (their callers check ``self.index``)
    def _index_all_locked(self, table: np.ndarray, topics: list[bytes], buf: Buffer) -> None:
        assert self.index is not None
        hashes, phys, tss = self.k.index_keys(buf, table, topics)
        if len(hashes):
            self.index.build_locked(hashes, phys, tss)

    def _index_keys_locked(self, key_hashes: list[int], phy: int, store_ts: int) -> None:
        assert self.index is not None
        if len(key_hashes) <= _ONE_BY_ONE_KEYS:
            for key_hash in key_hashes:
                self.index.build_one_locked(key_hash, phy, store_ts)
        else:  # a trace message's hundred keys: one kernel call, not a hundred
            n = len(key_hashes)
            self.index.build_locked(np.array(key_hashes, np.int32), np.full(n, phy, np.int64),
                                    np.full(n, store_ts, np.int64))

    def arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        """Tell the arrival listeners (long polling) of units written outside a dispatch
        (a pending queue's, ``ConsumeQueueTable.make_ready``)."""
        self._arrived(topic, queue_id, max_offset)

    def _arrived(self, topic: str, queue_id: int, max_offset: int) -> None:
        for listener in self.listeners:
            listener(topic, queue_id, max_offset)

    def _index_locked(self, table: np.ndarray, topics: list[bytes], buf: Buffer, tx: np.ndarray | None,
                      index_from_phy: int, row: Row | None) -> None:
        """Index keys of records that are not rolled back and not indexed yet."""
        assert self.index is not None
        sel: slice | np.ndarray
        if row is not None:  # one record: decide on scalars
            if (row[_SYS_FLAG] & L.SYSFLAG_TRANSACTION_MASK) == L.SYSFLAG_TRANSACTION_ROLLBACK \
                    or row[_PHY] < index_from_phy or not (row[_UNIQ_LEN] or row[_KEYS_LEN]):
                return
            sel = slice(None)
        else:
            assert tx is not None  # (the caller passes a row or the rows' transaction bits)
            mask: np.ndarray = tx != L.SYSFLAG_TRANSACTION_ROLLBACK
            if index_from_phy > 0:
                mask &= table["phy_offset"] >= index_from_phy
            if not mask.any():
                return
            sel = mask
        hashes, phys, tss = self.k.index_keys(buf, table[sel], topics)
        if len(hashes):
            self.index.build_locked(hashes, phys, tss)

    def _dispatch_one(self, row: Row, topics: list[bytes], touched: list[Touched]) -> None:
        if (row[_SYS_FLAG] & L.SYSFLAG_TRANSACTION_MASK) not in (L.SYSFLAG_TRANSACTION_NOT,
                                                                L.SYSFLAG_TRANSACTION_COMMIT):
            return
        topic = topics[row[_TOPIC_IDX]].decode("utf-8", "replace")
        queue_id = row[_QUEUE_ID]
        if self.no_new_queues_below > 0 and self._deleted(topic, queue_id, row[_PHY]):
            return
        cq = self.queues.find_or_create(topic, queue_id)
        try:
            added = cq.put_one_locked(row[_QUEUE_OFFSET], row[_PHY], row[_SIZE], row[_TAGS_CODE])
        except StoreIOError as e:
            self._failed("consumequeue", f"consume queue {topic}-{queue_id}", e)
            return
        if added:
            touched.append((topic, queue_id, cq.max_offset()))

    def _deleted(self, topic: str, queue_id: int, phy: int) -> bool:
        """During recovery: a record of a queue that no longer exists, from before the point
        every queue had been dispatched to - its queue was deleted, do not recreate it."""
        return (phy < self.no_new_queues_below and self.queues.lookup(topic, queue_id) is None
                and (topic, queue_id) not in self.new_queues_allowed)

    def _failed(self, kind: str, what: str, e: StoreIOError) -> None:
        """A dispatch write failed: the record is safe in the commitlog and the start-up
        consume-queue check re-dispatches it, so log (once per kind) and go on."""
        self.failures += 1
        if kind not in self._failing:
            self._failing.add(kind)
            log.error("cannot write %s: %s; the commitlog keeps the messages and the next start "
                      "rebuilds what is missing", what, e)

    @staticmethod
    def _groups(table: np.ndarray, tx: np.ndarray) -> Iterator[tuple[int, int, np.ndarray]]:
        """(topic idx, queue id, rows) per consume queue, for records that get units."""
        to_cq = (tx == L.SYSFLAG_TRANSACTION_NOT) | (tx == L.SYSFLAG_TRANSACTION_COMMIT)
        tids = table["topic_idx"]
        qids = table["queue_id"]
        if to_cq.all() and (tids == tids[0]).all() and (qids == qids[0]).all():
            yield int(tids[0]), int(qids[0]), table
            return
        keys = (tids.astype(np.int64) << 32) | (qids.astype(np.int64) & 0xFFFFFFFF)
        for key in np.unique(keys[to_cq]):
            yield int(key >> 32), int(np.int32(key & 0xFFFFFFFF)), table[(keys == key) & to_cq]
