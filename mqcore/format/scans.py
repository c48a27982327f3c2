"""Named results of the store and column kernels (what they return, field by field).

Each kernel that returns several values returns one of these ``NamedTuple`` types, so a caller
reads ``scan.stop`` instead of remembering that the stop is the third value. A ``NamedTuple``
is a tuple: unpacking still works (no field is called ``count`` or ``index``, which would hide the
tuple methods), and the compiled kernels build them without argument
parsing (``_named`` in ``_record.pxi``), so the names cost about nothing (``bench/README.md``,
"Named kernel results"). Leaf module: the kernels may import it.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class RecordScan(NamedTuple):
    """``scan_records``: a dispatch table of the records found, and why the scan stopped."""

    table: np.ndarray        # one DISPATCH_FIELDS row per record
    topics: list[bytes]      # the distinct topics; rows name them by ``topic_idx``
    stop: int                # the buffer position where the scan stopped
    reason: int              # a ``layout.ScanStop`` value


class BatchMeasure(NamedTuple):
    """``measure_batch``: the size of the records a SEND_BATCH body will become."""

    messages: int            # messages in the batch
    total_bytes: int         # bytes of all their commitlog records
    max_body: int            # the longest body
    max_props: int           # the longest property string after joining the extra properties


class QueueUnits(NamedTuple):
    """``cq_read``: consume-queue units as three native arrays."""

    phys: np.ndarray         # int64 commitlog offsets
    sizes: np.ndarray        # int32 record sizes
    tags: np.ndarray         # int64 tag codes


class QueueSelection(NamedTuple):
    """``cq_select``: how many units were looked at, and the indexes of those that matched."""

    scanned: int
    picked: np.ndarray       # int64 unit indexes (from the start of the scan)


class IndexKeys(NamedTuple):
    """``index_keys``: the index entries a dispatch table asks for."""

    hashes: np.ndarray       # int32 key hashes
    phys: np.ndarray         # int64 commitlog offsets
    timestamps: np.ndarray   # int64 store timestamps


class RecordWalk(NamedTuple):
    """``walk_records``: where a walk over valid records ended, and what it saw."""

    stop: int                # the position after the last valid record
    records: int             # records walked
    reason: int              # a ``layout.ScanStop`` value
    first_ts: int            # store timestamp of the first record (-1 when none)
    last_ts: int             # store timestamp of the last record (-1 when none)


class ColumnBatch(NamedTuple):
    """``decode_columns`` / ``decode_columns_at``: one batch of records as columns."""

    rows: int                # rows in ``columns``
    columns: dict[str, Any]  # column name -> numpy arrays (see mqcore/_columns_py.py)
    next: int                # where the next batch starts (a position, or an index into positions)
    reason: int              # a ``layout.ScanStop`` value
    corrupt_records: int     # records skipped as corrupt (SKIP_CORRUPT)
    corrupt_bytes: int       # bytes skipped with them
