"""``mqstore stats``: messages, bytes, queue offsets and store times per topic and queue.

Counted from the commitlog itself (read-only, no CRC check: ``verify`` does that), so
the figures do not depend on consume queues being complete; each queue's consume-queue
max offset is shown next to them, which is what consumers see.
"""
from __future__ import annotations

import dataclasses
import json
from typing import IO, Any

import numpy as np

from mqcore.errors import CorruptFileError
from mqcore.format import layout as L
from mqcore.format.files import FileScan, ReadOnlyFile, StoreFiles
from mqcore.kernel_api import StoreKernels
from mqcore.tools.output import Emitter, iso_ms

_I64_MAX = np.iinfo(np.int64).max
_I64_MIN = np.iinfo(np.int64).min


@dataclasses.dataclass
class QueueStats:
    messages: int = 0
    bytes: int = 0
    min_queue_offset: int = -1
    max_queue_offset: int = -1
    first_store_timestamp: int = 0
    last_store_timestamp: int = 0
    cq_max_offset: int | None = None

    def add(self, other: QueueStats) -> None:
        """Merge ``other``'s counts and ranges (ranges of an empty side do not count)."""
        if other.messages and not self.messages:
            self.min_queue_offset, self.max_queue_offset = other.min_queue_offset, other.max_queue_offset
            self.first_store_timestamp = other.first_store_timestamp
            self.last_store_timestamp = other.last_store_timestamp
        elif other.messages:
            self.min_queue_offset = min(self.min_queue_offset, other.min_queue_offset)
            self.max_queue_offset = max(self.max_queue_offset, other.max_queue_offset)
            self.first_store_timestamp = min(self.first_store_timestamp, other.first_store_timestamp)
            self.last_store_timestamp = max(self.last_store_timestamp, other.last_store_timestamp)
        self.messages += other.messages
        self.bytes += other.bytes


@dataclasses.dataclass
class StoreStats:
    queues: dict[tuple[str, int], QueueStats] = dataclasses.field(default_factory=dict)
    files: int = 0
    min_offset: int = 0
    max_offset: int = 0
    problems: list[str] = dataclasses.field(default_factory=list)


def collect(k: StoreKernels, store: StoreFiles) -> StoreStats:
    st = StoreStats()
    paths = store.commitlog_paths()
    st.files = len(paths)
    for i, path in enumerate(paths):
        with ReadOnlyFile(path) as f:
            if i == 0:
                st.min_offset = st.max_offset = f.base
            scan = FileScan(k, f)
            for table, topics in scan:
                _aggregate(st, table, topics)
            st.max_offset = f.base + scan.stop
            if scan.reason == L.ScanStop.BLANK:
                st.max_offset = f.end
                continue
            if scan.reason in (L.ScanStop.CORRUPT, L.ScanStop.TRUNCATED):
                st.problems.append(f"{f.path}: stopped at a corrupt record at offset {f.base + scan.stop}; "
                                   "figures cover the log before it (run 'mqstore verify')")
            break
    for topic, qid, _ in store.consume_queues():
        try:
            st.queues.setdefault((topic, qid), QueueStats()).cq_max_offset = _cq_max(k, store, topic, qid)
        except CorruptFileError as e:
            st.problems.append(str(e))
    return st


def _aggregate(st: StoreStats, table: np.ndarray, topics: list[bytes]) -> None:
    key = (table["topic_idx"].astype(np.int64) << 32) | (table["queue_id"].astype(np.int64) & 0xFFFFFFFF)
    uniq, inv = np.unique(key, return_inverse=True)
    counts = np.bincount(inv, minlength=len(uniq))
    sizes = np.bincount(inv, weights=table["size"], minlength=len(uniq))
    qoff, ts = table["queue_offset"], table["store_timestamp"]
    lo_q, hi_q = np.full(len(uniq), _I64_MAX), np.full(len(uniq), _I64_MIN)
    lo_t, hi_t = np.full(len(uniq), _I64_MAX), np.full(len(uniq), _I64_MIN)
    np.minimum.at(lo_q, inv, qoff)
    np.maximum.at(hi_q, inv, qoff)
    np.minimum.at(lo_t, inv, ts)
    np.maximum.at(hi_t, inv, ts)
    for j, kv in enumerate(uniq.tolist()):
        name = (topics[kv >> 32].decode("utf-8", "replace"), int(np.int32(kv & 0xFFFFFFFF)))
        part = QueueStats(int(counts[j]), int(sizes[j]), int(lo_q[j]), int(hi_q[j]), int(lo_t[j]), int(hi_t[j]))
        q = st.queues.get(name)
        if q is None or q.messages == 0:
            part.cq_max_offset = q.cq_max_offset if q is not None else None
            st.queues[name] = part
        else:
            q.add(part)


def _cq_max(k: StoreKernels, store: StoreFiles, topic: str, qid: int) -> int:
    paths = store.cq_paths(topic, qid)
    if not paths:
        return 0
    with ReadOnlyFile(paths[-1]) as f:
        if f.size % L.CQ_UNIT_SIZE:
            raise CorruptFileError(f"{f.path} is {f.size} bytes, not a multiple of {L.CQ_UNIT_SIZE}")
        return f.base // L.CQ_UNIT_SIZE + k.cq_count_valid(f.buf, 0, f.size)


def _topic_totals(st: StoreStats) -> dict[str, QueueStats]:
    out: dict[str, QueueStats] = {}
    for (topic, _), q in sorted(st.queues.items()):
        out.setdefault(topic, QueueStats()).add(q)
    return out


def _queue_json(q: QueueStats) -> dict[str, Any]:
    return dataclasses.asdict(q)


def to_json(st: StoreStats) -> dict[str, Any]:
    totals = QueueStats()
    topics: dict[str, Any] = {}
    for topic, t in _topic_totals(st).items():
        totals.add(t)
        entry = {k: v for k, v in _queue_json(t).items() if k != "cq_max_offset"}
        entry["queues"] = {str(qid): _queue_json(q) for (name, qid), q in sorted(st.queues.items()) if name == topic}
        topics[topic] = entry
    return {"commitlog": {"files": st.files, "min_offset": st.min_offset, "max_offset": st.max_offset},
            "topics": topics,
            "totals": {"topics": len(topics), "queues": len(st.queues), "messages": totals.messages,
                       "bytes": totals.bytes, "first_store_timestamp": totals.first_store_timestamp,
                       "last_store_timestamp": totals.last_store_timestamp},
            "problems": st.problems}


COLUMNS = (("topic", "TOPIC", 28), ("queue", "QID", 5), ("messages", "MESSAGES", 10), ("bytes", "BYTES", 13),
           ("min_queue_offset", "MIN_QOFF", 10), ("max_queue_offset", "MAX_QOFF", 10), ("cq_max_offset", "CQ_MAX", 10),
           ("first", "FIRST_STORE_TIME", 25), ("last", "LAST_STORE_TIME", 0))


def _row(topic: str, queue: str, q: QueueStats) -> dict[str, Any]:
    row = _queue_json(q)
    row.update(topic=topic, queue=queue, first=iso_ms(q.first_store_timestamp), last=iso_ms(q.last_store_timestamp))
    if not q.messages:
        row.update(min_queue_offset=None, max_queue_offset=None)
    return row


def write(st: StoreStats, out: IO[str], as_json: bool) -> None:
    if as_json:
        out.write(json.dumps(to_json(st), indent=2, ensure_ascii=False) + "\n")
        return
    emit = Emitter(out, "table", COLUMNS)
    totals = QueueStats()
    by_topic = _topic_totals(st)
    for topic, t in by_topic.items():
        queues = sorted((qid, q) for (name, qid), q in st.queues.items() if name == topic)
        for qid, q in queues:
            emit.row(_row(topic, str(qid), q))
        if len(queues) > 1:
            emit.row({**_row(topic, "*", t), "cq_max_offset": None})
        totals.add(t)
    emit.row({**_row("TOTAL", "*", totals), "cq_max_offset": None})
    out.write(f"{len(by_topic)} topic(s), {len(st.queues)} queue(s); commitlog {st.files} file(s), "
              f"[{st.min_offset}, {st.max_offset})\n")
