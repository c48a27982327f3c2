"""Streaming reads of a live store by consume queue (no Spark here; ``source`` adapts it).

A streaming read follows the consume queues, as a RocketMQ consumer does: its offset is one
queue offset per ``(topic, queueId)``, kept by Spark in the query's checkpoint as

    {"Orders": {"0": 120, "1": 118}, "Payments": {"0": 7}}

and a micro-batch reads, per queue, the units ``[start, end)`` and the commitlog records they
point to. What a batch may see is fixed on the driver (``latest_offsets``) from a snapshot of
the store: a unit counts only when its whole record lies below the snapshot's end (the end of
complete, CRC-checked records), so a batch never reads past the store's committed end.

Nothing is held open between batches, so a broker restart, a commitlog roll-over or a new
queue is seen at the next trigger. Messages deleted by retention before the stream read them
are *data loss*: with ``failOnDataLoss=true`` (the default) the query fails naming the queue
and the lost offsets; with ``false`` they are skipped with a warning naming the same.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mqcore._compat import default_column_kernels
from mqcore.errors import ConfigError, StoreError
from mqcore.kernel_api import ColumnKernels
from mqcore.spark.decode import ARROW_SCHEMA, _flags, columns_to_batch
from mqcore.spark.files import (
    CommitLogFile,
    QueueFiles,
    StoreDirs,
    list_commitlog,
    list_queues,
    open_view,
    record_at,
    take_snapshot,
)
from mqcore.spark.options import ReadOptions, _parse_one, parse_bool, parse_int, parse_time_ms
from mqcore.format import layout as L
from mqcore.tags import split_tags, subscribes_all, tag_codes

log = logging.getLogger(__name__)

_CQ = L.CQ_UNIT_DTYPE
EARLIEST, LATEST = -2, -1  # per-queue JSON values, as Kafka's startingOffsets spells them
#: topics the broker owns: not part of "all topics" (name them in ``topics`` to read them)
_SYSTEM_PREFIXES = ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_", "TBW102")

_DOC = {
    "path": "store root (what .load(path) passes)",
    "topics": "comma-separated topics (default: every non-system topic, including new ones)",
    "queueids": "comma-separated queue ids to read (default all)",
    "tags": "tag filter as a subscription expression: 'TagA || TagB' (default '*')",
    "startingoffsets": "earliest (default), latest, or JSON {\"Topic\": {\"0\": 42}} (-2 earliest, -1 latest)",
    "startingtimestamp": "start each queue at its first message stored at or after this time (epoch ms or ISO-8601)",
    "maxmessagespertrigger": "upper bound of messages per micro-batch, shared fairly by the queues (default none)",
    "failondataloss": "true (default): fail when messages were deleted before they were read; false: skip them with a warning",
    "includebody": "false leaves body null (default true)",
    "decompress": "inflate compressed bodies (zlib; LZ4 and Zstandard when their package is installed; default false)",
    "verifycrc": "check BODYCRC; a mismatch fails the batch (default false)",
    "maxrowsperbatch": "rows per Arrow batch (default 65536)",
    "batchsize": "record bytes per Arrow batch (default 8m)",
}


#: options with the batch reader's meaning and parser
_SHARED = ("path", "topics", "includebody", "decompress", "verifycrc", "maxrowsperbatch", "batchsize")


class DataLossError(StoreError):
    """Messages a stream had not read yet were deleted from the store (retention, cleanup)."""


@dataclasses.dataclass(frozen=True)
class StreamOptions:
    """Typed options of ``readStream.format("rocketmq")``."""

    path: str
    topics: tuple[str, ...] | None = None
    queue_ids: frozenset[int] | None = None
    tags: frozenset[str] | None = None              # None = every tag ('*')
    starting: str = "earliest"                      # earliest | latest | json | timestamp
    starting_json: Mapping[str, Mapping[str, int]] | None = None  # topic -> queue id text -> offset
    starting_ts: int | None = None
    max_messages_per_trigger: int = 0               # 0 = no limit
    fail_on_data_loss: bool = True
    read: ReadOptions = dataclasses.field(default_factory=ReadOptions)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "StreamOptions":
        kw: dict[str, Any] = {}  # fields of several types, parsed one by one
        read: dict[str, Any] = {}
        for raw, value in options.items():
            name = raw.lower()
            if name == "topic":
                name = "topics"
            if name not in _DOC:
                raise ConfigError(f"unknown option {raw!r} for readStream.format('rocketmq'); known options:\n"
                                  + "\n".join(f"  {k}: {v}" for k, v in _DOC.items()))
            value = str(value)
            if name in _SHARED:  # spelled and parsed as for the batch reader
                parsed = _parse_one(name, value)
                (kw if name in ("path", "topics") else read).update(parsed)
            elif name == "queueids":
                kw["queue_ids"] = frozenset(parse_int(raw, q) for q in value.split(",") if q.strip())
            elif name == "tags":
                kw["tags"] = parse_tags(value)
            elif name == "startingoffsets":
                kw.update(_parse_starting(raw, value))
            elif name == "startingtimestamp":
                kw["starting"], kw["starting_ts"] = "timestamp", parse_time_ms(raw, value)
            elif name == "maxmessagespertrigger":
                kw["max_messages_per_trigger"] = parse_int(raw, value)
                if kw["max_messages_per_trigger"] < 1:
                    raise ConfigError(f"option {raw}: {value!r} must be a positive number of messages")
            else:  # failondataloss
                kw["fail_on_data_loss"] = parse_bool(raw, value)
        if not kw.get("path"):
            raise ConfigError("no path given: use readStream.format('rocketmq').load('/path/to/store')")
        if "starting_ts" in kw and kw.get("starting_json") is not None:
            raise ConfigError("give startingOffsets or startingTimestamp, not both")
        return cls(read=ReadOptions(path=kw["path"], **read), **kw)

    def wants(self, topic: str, queue_id: int) -> bool:
        if self.topics is None:
            if topic.startswith(_SYSTEM_PREFIXES):
                return False
        elif topic not in self.topics:
            return False
        return self.queue_ids is None or queue_id in self.queue_ids


def parse_tags(expr: str) -> frozenset[str] | None:
    """A tag subscription expression (``*`` or ``A || B``) as a set; None means every tag.
    Parsed by the broker's and client's grammar (:mod:`mqcore.tags`); an expression that
    names no tag (``"||"``, ``" || "``) would match nothing, so it is refused."""
    if subscribes_all(expr):
        return None
    tags = split_tags(expr)
    if not tags:
        raise ConfigError(f"option tags: {expr!r} is not a tag expression such as 'TagA || TagB'")
    return frozenset(tags)


def _parse_starting(name: str, value: str) -> dict[str, Any]:
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return {"starting": v.lower()}
    try:
        table = json.loads(v)
        if not isinstance(table, dict) or not all(
                isinstance(qs, dict) and all(isinstance(o, int) and o >= LATEST - 1 for o in qs.values())
                and all(str(q).isdigit() for q in qs) for qs in table.values()):
            raise ValueError("shape")
    except ValueError as e:
        raise ConfigError(f"option {name}: {value!r} is not earliest, latest or JSON such as "
                          '{"Orders": {"0": 42, "1": -2}} (-2 = earliest, -1 = latest)') from e
    return {"starting": "json", "starting_json": table}


# --- offsets ------------------------------------------------------------------------------------
QueueKey = tuple[str, int]
Offsets = dict[QueueKey, int]


def to_json_offsets(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, qid), off in sorted(offsets.items()):
        out.setdefault(topic, {})[str(qid)] = int(off)
    return out


def from_json_offsets(d: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(topic, int(q)): int(o) for topic, qs in d.items() for q, o in qs.items()}


@dataclasses.dataclass(frozen=True)
class QueueView:
    """One consume queue as the snapshot sees it: ``[min_offset, max_offset)`` readable."""

    files: QueueFiles
    min_offset: int
    max_offset: int


class StoreView:
    """The store as one trigger sees it: commitlog files, the snapshot end and the queues."""

    def __init__(self, dirs: StoreDirs, opts: StreamOptions):
        self.dirs = dirs
        snap = take_snapshot(dirs)
        self.end_offset = snap.end_offset
        self.commitlog = list_commitlog(dirs)
        self.min_phy = self.commitlog[0].base_offset if self.commitlog else 0
        self.queues: dict[QueueKey, QueueView] = {}
        for q in list_queues(dirs, set(opts.topics) if opts.topics is not None else None):
            if opts.wants(q.topic, q.queue_id):
                self.queues[(q.topic, q.queue_id)] = QueueView(q, *_queue_range(q, self.min_phy, self.end_offset))

    def start_offsets(self, opts: StreamOptions) -> Offsets:
        """Where a new query starts in each queue (``startingOffsets`` / ``startingTimestamp``)."""
        out: Offsets = {}
        table = from_json_offsets(opts.starting_json) if opts.starting_json is not None else {}
        for key, q in self.queues.items():
            if opts.starting == "latest":
                out[key] = q.max_offset
            elif opts.starting == "timestamp":
                assert opts.starting_ts is not None  # from_options sets both
                out[key] = self._first_at_or_after_time(q, opts.starting_ts)
            elif opts.starting == "json":
                want = table.get(key, EARLIEST)
                out[key] = q.min_offset if want == EARLIEST else q.max_offset if want == LATEST else want
            else:
                out[key] = q.min_offset
        for key, want in table.items():  # named but not there yet: start at its beginning
            if key not in out and opts.wants(*key):
                out[key] = max(0, want)
        return out

    def _first_at_or_after_time(self, q: QueueView, ts: int) -> int:
        lo, hi = q.min_offset, q.max_offset
        while lo < hi:  # store times grow along a queue (they grow along the commitlog)
            mid = (lo + hi) // 2
            unit = read_units(q.files, mid, mid + 1)
            if len(unit) == 0 or self._store_ts(int(unit["phy_offset"][0])) < ts:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _store_ts(self, phy: int) -> int:
        f = _file_of(self.commitlog, phy)
        return -1 if f is None else record_at(f.path, phy - f.base_offset)[1]


def _units_in_file(path: str) -> int:
    return os.path.getsize(path) // L.CQ_UNIT_SIZE


def read_units(q: QueueFiles, start: int, end: int) -> np.ndarray:
    """Units ``[start, end)`` of a queue (fewer when files are missing or short), as a
    big-endian structured array with a ``queue_offset`` implied by position from ``start``."""
    parts = []
    expect = start
    for path, first in q.files:
        try:
            count = _units_in_file(path)
        except FileNotFoundError:
            continue  # deleted by cleanup since the listing
        a, b = max(start, first), min(end, first + count)
        if a >= b:
            continue
        if a != expect:
            break  # a hole: the caller sees fewer units than asked
        with open(path, "rb") as fh:
            fh.seek((a - first) * L.CQ_UNIT_SIZE)
            raw = fh.read((b - a) * L.CQ_UNIT_SIZE)
        units = np.frombuffer(raw, _CQ)
        valid = (units["size"] > 0) & (units["phy_offset"] >= 0)
        n = len(units) if valid.all() else int(np.argmin(valid))  # valid units form a prefix
        parts.append(units[:n])
        expect = a + n
        if n < len(units):
            break
    return np.concatenate(parts) if parts else np.empty(0, _CQ)


def _queue_range(q: QueueFiles, min_phy: int, end_offset: int) -> tuple[int, int]:
    """(first readable offset, offset after the last unit whose record ends below ``end_offset``)."""
    path, first = q.files[0]
    lo = first
    units = read_units(q, first, first + _units_in_file(path))
    if len(units):
        # units pointing below the oldest commitlog file are already gone (Java's correctMinOffset)
        lo = first + int(np.searchsorted(units["phy_offset"].astype(np.int64), min_phy))
    last_path, last_first = q.files[-1]
    with open_view(last_path) as v:
        count = len(v) // L.CQ_UNIT_SIZE
        lo_i, hi_i = 0, count
        while lo_i < hi_i:  # the last unit whose record lies wholly below the snapshot end
            mid = (lo_i + hi_i) // 2
            phy, size, _ = L.CQ_UNIT.unpack_from(v, mid * L.CQ_UNIT_SIZE)
            if size > 0 and phy >= 0 and (size == L.CQ_FILLER_SIZE or phy + size <= end_offset):
                lo_i = mid + 1
            else:
                hi_i = mid
    return lo, max(lo, last_first + lo_i)


def _file_of(files: list[CommitLogFile], phy: int) -> CommitLogFile | None:
    for f in reversed(files):
        if f.base_offset <= phy:
            return f if phy < f.base_offset + f.size else None
    return None


# --- planning (driver) ---------------------------------------------------------------------------
def allocate(backlog: Mapping[QueueKey, int], budget: int) -> dict[QueueKey, int]:
    """Split ``budget`` messages over queues fairly (water-filling): a queue never gets more
    than its backlog, and what a short queue leaves is shared by the others."""
    out = {k: 0 for k in backlog}
    active = [k for k, n in sorted(backlog.items(), key=lambda kv: (kv[1], kv[0])) if n > 0]
    left = budget
    while active and left > 0:
        share = left // len(active)
        if share == 0:  # fewer messages left than queues: one each to the shortest queues
            for k in active[:left]:
                out[k] += 1
            break
        still = []
        for k in active:
            give = min(share, backlog[k] - out[k])
            out[k] += give
            left -= give
            if out[k] < backlog[k]:
                still.append(k)
        active = still
    return out


def latest_offsets(view: StoreView, start: Offsets, max_messages: int | None) -> Offsets:
    """The end of the next micro-batch: every queue's readable end, cut to ``max_messages``."""
    end = dict(start)
    backlog: dict[QueueKey, int] = {}
    for key, q in view.queues.items():
        s = start.get(key, 0)
        backlog[key] = max(0, q.max_offset - max(s, q.min_offset))
        end[key] = max(s, q.max_offset)
    if max_messages is not None and sum(backlog.values()) > max_messages:
        grant = allocate(backlog, max_messages)
        for key, q in view.queues.items():
            s = start.get(key, 0)
            end[key] = max(s, q.min_offset) + grant[key] if backlog[key] else max(s, q.max_offset)
    return end


@dataclasses.dataclass(frozen=True)
class QueueRange:
    """One task: the units ``[start, end)`` of one queue (picklable)."""

    root: str
    commitlog: str
    topic: str
    queue_id: int
    start: int
    end: int


def plan_ranges(view: StoreView, start: Offsets, end: Offsets, opts: StreamOptions) -> list[QueueRange]:
    """The tasks of one micro-batch; checks for data loss first (on the driver)."""
    out = []
    for key, e in sorted(end.items()):
        s = start.get(key, 0)
        if e <= s:
            continue
        q = view.queues.get(key)
        if q is None:
            lost = (s, e)
        elif s < q.min_offset:
            lost = (s, min(e, q.min_offset))
        else:
            lost = None
        if lost is not None:
            report_loss(key, lost, opts)
            s = lost[1]
            if s >= e:
                continue
        out.append(QueueRange(view.dirs.root or "", view.dirs.commitlog, key[0], key[1], s, e))
    return out


def report_loss(key: QueueKey, lost: tuple[int, int], opts: StreamOptions) -> None:
    what = (f"messages of topic {key[0]} queue {key[1]} at queue offsets [{lost[0]}, {lost[1]}) were deleted "
            "from the store (retention or disk cleanup) before this stream read them")
    if opts.fail_on_data_loss:
        raise DataLossError(what + "; set option failOnDataLoss=false to skip them with a warning")
    log.warning("%s: skipped (failOnDataLoss=false)", what)


# --- reading (executor) --------------------------------------------------------------------------
def read_range(r: QueueRange, opts: StreamOptions, kernels: ColumnKernels | None = None) -> Iterator[pa.RecordBatch]:
    """Decode the records of one queue range into batches of ``ARROW_SCHEMA``."""
    if kernels is None:
        kernels = default_column_kernels()
    k = kernels
    dirs = StoreDirs(r.root or None, r.commitlog)
    queues = [q for q in list_queues(dirs, {r.topic}) if q.queue_id == r.queue_id]
    units = read_units(queues[0], r.start, r.end) if queues else np.empty(0, _CQ)
    if len(units) < r.end - r.start:
        report_loss((r.topic, r.queue_id), (r.start + len(units), r.end), opts)
    units = units[units["size"] != L.CQ_FILLER_SIZE]
    if opts.tags is not None and len(units):
        codes = np.array(tag_codes(opts.tags), np.int64)
        units = units[np.isin(units["tags_code"].astype(np.int64), codes)]  # exact match below
    phys = units["phy_offset"].astype(np.int64)
    files = list_commitlog(dirs)
    if len(phys) and (not files or phys[0] < files[0].base_offset):
        gone = int(np.count_nonzero(phys < (files[0].base_offset if files else 1 << 62)))
        report_loss((r.topic, r.queue_id), (r.start, r.start + gone), opts)
        phys = phys[gone:]
    flags = _flags(opts.read, k)
    bases = np.array([f.base_offset for f in files], np.int64)
    which = np.searchsorted(bases, phys, side="right") - 1
    for fi in np.unique(which):
        f = files[int(fi)]
        at = phys[which == fi] - f.base_offset
        with open_view(f.path) as v:
            i = 0
            while i < len(at):
                n, cols, i, reason, _, _ = k.decode_columns_at(
                    v, at, i, len(v), f.base_offset, opts.read.max_rows_per_batch, opts.read.max_bytes_per_batch,
                    None, -(1 << 63), (1 << 63) - 1, flags)
                if reason == L.ScanStop.CORRUPT:
                    raise StoreError(f"consume queue {r.topic}/{r.queue_id} points at {f.base_offset + int(at[i])}, "
                                     f"which holds no valid record in {f.path}")
                if n:
                    batch = columns_to_batch(n, cols, opts.read, k)
                    if opts.tags is not None:
                        batch = batch.filter(pc.is_in(batch.column("tags"), pa.array(sorted(opts.tags))))
                    if batch.num_rows:
                        yield batch


__all__ = ["ARROW_SCHEMA", "DataLossError", "QueueRange", "StoreView", "StreamOptions", "allocate",
           "from_json_offsets", "latest_offsets", "plan_ranges", "read_range", "to_json_offsets"]
