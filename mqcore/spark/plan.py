"""Planning a commitlog read: which byte ranges of which files, walked or looked up.

Runs once per query in the planner (no Spark objects here, so it is unit-testable).
Work is pruned three ways before any record is decoded:

* **offsets**: ``startOffset``/``endOffset`` (or pushed ``commitlog_offset`` filters) cut
  whole files by their 20-digit names and start/stop inside the boundary files;
* **store time**: store times grow along the commitlog, so file ``i`` holds times in
  ``[first_ts[i], first_ts[i+1]]`` (plus ``timeSlackMs`` for clock steps) and files
  outside the wanted range are skipped;
* **topics**: a topic's consume queues list the offset and size of every one of its
  records. A file none of whose bytes belong to the wanted topics is skipped; one where
  they are a small share (< ``CQ_SHARE``) is read by looking those records up instead of
  walking the file. The tail past what the queues cover is always walked.

A split owns the records whose first byte lies in ``[start, stop)`` (Hadoop semantics)
and may read up to ``limit`` to finish the last one.
"""
from __future__ import annotations

import dataclasses
import logging

from mqcore.spark.damage import enforce, survey
from mqcore.spark.files import QueueFiles, Snapshot, StoreDirs, list_queues, locate_store, positions_in, take_snapshot
from mqcore.spark.storage import LOCAL, Storage
from mqcore.spark.options import I64_MAX, I64_MIN, ReadOptions

log = logging.getLogger(__name__)

#: below this share of a file's bytes, reading a topic's records one by one beats walking
CQ_SHARE = 0.25


@dataclasses.dataclass(frozen=True)
class Split:
    """One task's work; picklable, carries everything an executor needs (no listing)."""

    path: str
    base_offset: int
    start: int
    stop: int
    limit: int
    aligned: bool                          # start is a known record boundary: no resync
    queues: tuple[QueueFiles, ...] = ()    # non-empty: read the records these queues list
    storage: Storage = LOCAL               # where ``path`` is (local disk or a remote file system)
    store: StoreDirs | None = None         # the store it belongs to (a damage error counts its queues' units)

    @property
    def by_queue(self) -> bool:
        return bool(self.queues)


def _time_overlaps(snap: Snapshot, i: int, opts: ReadOptions) -> bool:
    if opts.min_store_ts == I64_MIN and opts.max_store_ts == I64_MAX:
        return True
    lo = snap.first_ts[i]
    hi = snap.first_ts[i + 1] if i + 1 < len(snap.first_ts) else -1
    slack = opts.time_slack_ms
    if lo >= 0 and lo - slack > opts.max_store_ts:
        return False
    if hi >= 0 and hi + slack < opts.min_store_ts:
        return False
    return True


def _walk_splits(path: str, base: int, lo: int, hi: int, limit: int, aligned: bool,
                 split_size: int, storage: Storage) -> list[Split]:
    """Byte ranges of one file; a range not starting at a known record boundary resyncs
    on the first record whose PHYSICALOFFSET names its own position, and the range before
    it reads on to finish its last record, so a record straddling two ranges is read once."""
    if lo >= hi:
        return []
    if split_size <= 0 or hi - lo <= split_size:
        return [Split(path, base, lo, hi, limit, aligned, storage=storage)]
    out = []
    for s in range(lo, hi, split_size):
        out.append(Split(path, base, s, min(hi, s + split_size), limit, aligned and s == lo, storage=storage))
    return out


def _topic_queues(dirs: StoreDirs, snap: Snapshot, opts: ReadOptions) -> tuple[QueueFiles, ...] | None:
    """The wanted topics' consume queues, or None when they cannot stand in for a walk."""
    if opts.topics is None or opts.use_consume_queue == "false" or snap.dispatched < 0:
        return None
    queues = list_queues(dirs, set(opts.topics))
    have = {q.topic for q in queues}
    if opts.use_consume_queue == "auto" and not have.issuperset(opts.topics):
        return None  # a topic without queues (e.g. only transaction half records): walk
    return tuple(queues)


def plan_splits(dirs: StoreDirs, snap: Snapshot, opts: ReadOptions) -> list[Split]:
    """The splits of one read, in commitlog order."""
    if opts.is_empty:
        return []
    queues = _topic_queues(dirs, snap, opts)
    splits: list[Split] = []
    for i, f in enumerate(snap.files):
        limit = snap.data_end(i)
        lo = max(0, opts.min_offset - f.base_offset)
        hi = min(limit, opts.max_offset - f.base_offset) if opts.max_offset < I64_MAX else limit
        if lo >= hi or not _time_overlaps(snap, i, opts):
            continue
        aligned = lo == 0
        if queues is None:
            splits += _walk_splits(f.path, f.base_offset, lo, hi, limit, aligned, opts.split_size, dirs.storage)
            continue
        covered = min(hi, snap.dispatched - f.base_offset)  # the queues list every record below
        if covered > lo:
            phys, sizes = positions_in(list(queues), f.base_offset + lo, f.base_offset + covered)
            wanted = int(sizes.sum())
            if len(phys) and (opts.use_consume_queue == "true" or wanted < CQ_SHARE * (covered - lo)):
                splits.append(Split(f.path, f.base_offset, lo, covered, limit, True, queues, dirs.storage))
            elif len(phys):
                splits += _walk_splits(f.path, f.base_offset, lo, covered, limit, aligned, opts.split_size,
                                       dirs.storage)
            lo, aligned = covered, True  # a queue unit's end is a record boundary
        splits += _walk_splits(f.path, f.base_offset, lo, hi, limit, aligned, opts.split_size, dirs.storage)
    log.info("planned %d splits over %d commitlog files (snapshot end %d)", len(splits),
             len(snap.files), snap.end_offset)
    return [dataclasses.replace(s, store=dirs) for s in splits]


def plan_read(opts: ReadOptions) -> list[Split]:
    """Locate the store, take its snapshot, check it for damage (``mqcore.spark.damage``:
    fails unless ``onCorrupt=skip``) and plan the splits."""
    dirs = locate_store(opts.path, opts.fs_options, opts.commit_log_path)
    snap = take_snapshot(dirs, opts.snapshot_offset)
    enforce(survey(dirs, snap, walk=False, pinned=opts.snapshot_offset is not None), opts.on_corrupt)
    return plan_splits(dirs, snap, opts)
