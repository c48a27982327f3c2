"""The read paths: pulls from a consume queue, lookups by offset, queries by key.

Reads take no store lock: they see units and records once the writer has moved a
file's ``wrote_position`` past them. Results are zero-copy views of the mapped
commitlog; records adjacent in the log are returned as one view, so a pull of 32
messages written together is one buffer for the socket.
"""
from __future__ import annotations

from collections.abc import Set

from mqcore.config import StoreConfig
from mqcore.format import layout as L
from mqcore.kernel_api import QueueUnits, StoreKernels
from mqcore.message import MessageExt
from mqcore.store.commitlog import CommitLog
from mqcore.store.consume_queue import ConsumeQueueTable
from mqcore.store.index import IndexService
from mqcore.store.results import GetMessageResult, GetMessageStatus, QueryMessageResult

#: units examined per pull when filtering (RocketMQ: max(16000 bytes, maxMsgNums * 20))
MAX_FILTER_UNITS = 16000 // L.CQ_UNIT_SIZE
#: a status by its name (the lookup kernel answers names: an enum lookup by value runs in Python)
STATUS_BY_NAME = {status.name: status for status in GetMessageStatus}


class MessageReader:
    """The read paths: queue reads with tag filtering, lookups by offset, key and time."""

    def __init__(self, config: StoreConfig, commitlog: CommitLog, queues: ConsumeQueueTable, index: IndexService | None,
                 kernels: StoreKernels) -> None:
        self.cfg = config
        self.commitlog = commitlog
        self.queues = queues
        self.index = index
        self.k = kernels

    def get_message(self, topic: str, queue_id: int, offset: int, max_count: int,
                    max_bytes: int | None = None, tag_codes: Set[int] | None = None) -> GetMessageResult:
        """Up to ``max_count`` messages from queue offset ``offset`` (``getMessage``).

        ``tag_codes``: Java hash codes of subscribed tags, or None for ``*``.
        """
        cfg = self.cfg
        max_bytes = max_bytes or cfg.max_transfer_bytes_on_message_in_memory
        cq = self.queues.get(topic, queue_id)
        if cq is None:  # a queue never written to: RocketMQ creates it empty on lookup
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
        # the usual case in one kernel call (bounds, units, tag filter, caps, views of runs)
        got = self.k.pull_lookup(cq, self.commitlog, offset, max_count, cfg.max_transfer_count_on_message_in_memory,
                                 max_bytes, tag_codes, MAX_FILTER_UNITS)
        if got is not None:
            name, next_begin, lo, hi, buffers, n, total = got
            return GetMessageResult(STATUS_BY_NAME[name], next_begin, lo, hi, buffers, n, total)
        # a run not readable as one view: the same steps, its records one by one
        max_count = max(1, min(max_count, cfg.max_transfer_count_on_message_in_memory))
        lo, hi = cq.min_offset(), cq.max_offset()
        if hi == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, hi, lo, hi)
        window = max_count if tag_codes is None else max(MAX_FILTER_UNITS, max_count)
        units = cq.units_at(offset, window)
        if units is None:
            return GetMessageResult(GetMessageStatus.OFFSET_FOUND_NULL, cq.next_file_offset(offset), lo, hi)
        buf, pos, count = units
        # pick, filter and join in one kernel step: runs of records adjacent in one file
        scanned, runs, removed = self.k.cq_runs(buf, pos, count, tag_codes, max_count, max_bytes,
                                                self.commitlog.min_offset, self.commitlog.file_size)
        buffers, n, total, missing = self._views(runs)
        removed = removed or missing
        if n:
            status = GetMessageStatus.FOUND
        elif removed:
            status = GetMessageStatus.MESSAGE_WAS_REMOVING
        else:
            status = GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, offset + scanned, lo, hi, buffers, n, total)

    def _views(self, runs: list[tuple[int, int, int]]) -> tuple[list[memoryview], int, int, bool]:
        """Views of the runs, and whether a record of them was not readable. A run is one
        view unless part of it is not (its file gone, or past the committed end): then its
        records are taken one by one, up to the first that is not readable."""
        commitlog = self.commitlog
        buffers = []
        n = total = 0
        missing = False
        for start, length, count in runs:
            view = commitlog.view(start, length)
            if view is not None:
                buffers.append(view)
                n += count
                total += length
                continue
            end = start + length
            at = start
            while at < end:
                rec = commitlog.record_at(at)
                if rec is None or at + len(rec) > end:
                    missing = True
                    break
                buffers.append(rec)
                n += 1
                total += len(rec)
                at += len(rec)
        return buffers, n, total, missing

    # --- lookups -------------------------------------------------------------------------------
    def record_at(self, phy_offset: int) -> memoryview | None:
        return self.commitlog.record_at(phy_offset)

    def look_message_by_offset(self, phy_offset: int) -> MessageExt | None:
        rec = self.commitlog.record_at(phy_offset)
        if rec is None:
            return None
        decoded = self.k.decode_records(rec, 0, len(rec), 1, False)
        return MessageExt.from_decoded(decoded[0]) if decoded else None

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryMessageResult:
        """Candidates for ``topic#key`` stored in [begin_ts, end_ts] (hash collisions included)."""
        result = QueryMessageResult()
        if self.index is None:
            return result
        key_hash = self.k.index_hash(self.k.java_hash(f"{topic}#{key}"))
        max_num = min(max_num, self.cfg.max_msgs_num_batch)
        phys, last_ts, last_phy = self.index.query(key_hash, max_num, begin_ts, end_ts)
        result.index_last_update_timestamp = last_ts
        result.index_last_update_phyoffset = last_phy
        for phy in sorted(set(phys)):
            rec = self.commitlog.record_at(phy)
            if rec is not None:
                result.buffers.append(rec)
                result.phy_offsets.append(phy)
        return result

    def messages_by_key(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0,
                        end_ts: int = 1 << 62) -> list[MessageExt]:
        """Exact matches: candidates filtered by UNIQ_KEY or KEYS, as a client does."""
        out = []
        for rec in self.query_message(topic, key, max_num, begin_ts, end_ts).buffers:
            m = MessageExt.from_decoded(self.k.decode_records(rec, 0, len(rec), 1, False)[0])
            if m.topic == topic and (key in m.keys or m.properties.get("UNIQ_KEY") == key):
                out.append(m)
        return out

    # --- queue facts --------------------------------------------------------------------------------
    def max_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.max_offset() if cq else 0

    def min_offset(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        return cq.min_offset() if cq else -1

    def consume_queue_units(self, topic: str, queue_id: int, offset: int, max_count: int) -> QueueUnits | None:
        """Up to ``max_count`` units from ``offset`` (within one file) as arrays
        ``(phys, sizes, tags_codes)``, or None when there are none (delay delivery reads
        deliver times this way)."""
        cq = self.queues.get(topic, queue_id)
        got = cq.units_at(offset, max_count) if cq else None
        if got is None:
            return None
        buf, pos, count = got
        return self.k.cq_read(buf, pos, count)

    def commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.queues.get(topic, queue_id)
        unit = cq.unit(offset) if cq else None
        return unit[0] if unit else 0

    def offset_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp, self.commitlog.store_timestamp)

    def earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self.queues.get(topic, queue_id)
        if cq is None:
            return -1
        unit = cq.unit(cq.min_offset())
        if unit is None:
            return -1
        return self.commitlog.store_timestamp(unit[0], unit[1])

    def message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        cq = self.queues.get(topic, queue_id)
        unit = cq.unit(offset) if cq else None
        return self.commitlog.store_timestamp(unit[0], unit[1]) if unit else -1
