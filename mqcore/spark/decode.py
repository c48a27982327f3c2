"""Commitlog records -> Arrow record batches, with no Spark in sight.

The Cython kernel (``decode_columns``) fills numpy buffers; this module wraps them with
``pyarrow.Array.from_buffers`` (zero copy) into batches of exactly ``ARROW_SCHEMA`` -- the
schema Spark derives from the reader's DDL, which it checks batch by batch. The same
functions serve the Spark executors, plain-Python analytics, the benchmark and the unit
tests.
"""
from __future__ import annotations

import logging
from typing import Any, Iterator

import numpy as np
import pyarrow as pa

from mqcore._compat import default_column_kernels
from mqcore.errors import ConfigError, RecordDecodeError
from mqcore.format import layout as L
from mqcore.format.compression import decompress_body
from mqcore.kernel_api import ColumnKernels
from mqcore.spark.damage import READ_PAST, stops_early_error
from mqcore.spark.files import RecordWindows, positions_in
from mqcore.spark.options import ReadOptions
from mqcore.spark.plan import Split, plan_read

log = logging.getLogger(__name__)

TS = pa.timestamp("us", tz="UTC")

#: (name, arrow type, Spark DDL type) in column order
COLUMNS = (
    ("topic", pa.string(), "STRING"),
    ("queue_id", pa.int32(), "INT"),
    ("queue_offset", pa.int64(), "BIGINT"),
    ("commitlog_offset", pa.int64(), "BIGINT"),
    ("store_size", pa.int32(), "INT"),
    ("body", pa.binary(), "BINARY"),
    ("body_crc", pa.int32(), "INT"),
    ("flag", pa.int32(), "INT"),
    ("sys_flag", pa.int32(), "INT"),
    ("born_timestamp", TS, "TIMESTAMP"),
    ("store_timestamp", TS, "TIMESTAMP"),
    ("born_host", pa.string(), "STRING"),
    ("store_host", pa.string(), "STRING"),
    ("reconsume_times", pa.int32(), "INT"),
    ("prepared_transaction_offset", pa.int64(), "BIGINT"),
    ("tags", pa.string(), "STRING"),
    ("keys", pa.list_(pa.string()), "ARRAY<STRING>"),
    ("msg_id", pa.string(), "STRING"),
    ("offset_msg_id", pa.string(), "STRING"),
    ("properties", pa.map_(pa.string(), pa.string()), "MAP<STRING, STRING>"),
    ("is_retry", pa.bool_(), "BOOLEAN"),
    ("is_dlq", pa.bool_(), "BOOLEAN"),
    ("is_delayed", pa.bool_(), "BOOLEAN"),
    ("original_topic", pa.string(), "STRING"),
    ("delay_level", pa.int32(), "INT"),
    ("is_compressed", pa.bool_(), "BOOLEAN"),
)
ARROW_SCHEMA = pa.schema([(name, typ) for name, typ, _ in COLUMNS])
SPARK_DDL = ", ".join(f"{name} {ddl}" for name, _, ddl in COLUMNS)



def _fixed(arr: np.ndarray, typ: pa.DataType) -> pa.Array:
    arr = np.ascontiguousarray(arr)
    return pa.Array.from_buffers(typ, len(arr), [None, pa.py_buffer(arr)])


def _strings(offsets: np.ndarray, data: np.ndarray, typ: pa.DataType = pa.string(),
             valid: np.ndarray | None = None) -> pa.Array:
    n = len(offsets) - 1
    bitmap = None
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(typ, n, [bitmap, pa.py_buffer(np.ascontiguousarray(offsets)),
                                          pa.py_buffer(np.ascontiguousarray(data))])


def _timestamps(ms: np.ndarray) -> pa.Array:
    return _fixed(ms.astype(np.int64) * 1000, TS)


def _inflate(offsets: np.ndarray, data: np.ndarray, rows: np.ndarray, sys_flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Bodies of ``rows`` replaced by their inflation (``format.compression``, by each row's
    compression type); a body that does not inflate stays as stored and is counted. Only
    compressed rows cost a Python call."""
    lengths = np.diff(offsets).astype(np.int64)
    pieces, prev, failed = [], 0, 0
    for r in rows.tolist():
        lo, hi = int(offsets[r]), int(offsets[r + 1])
        try:
            inflated = decompress_body(data[lo:hi].tobytes(), int(sys_flags[r]))
        except RecordDecodeError:
            failed += 1
            continue
        pieces += [data[prev:lo], np.frombuffer(inflated, np.uint8)]
        prev = hi
        lengths[r] = len(inflated)
    pieces.append(data[prev:])
    out = np.zeros(len(offsets), np.int64)
    np.cumsum(lengths, out=out[1:])
    if out[-1] > np.iinfo(np.int32).max:
        raise RecordDecodeError("inflated bodies exceed 2 GiB in one batch: lower option batchSize")
    return out.astype(np.int32), np.concatenate(pieces), failed


def arrow_schema(opts: ReadOptions) -> pa.Schema:
    """The batches' schema: every column, or those option ``columns`` names, in table order."""
    if opts.columns is None:
        return ARROW_SCHEMA
    unknown = sorted(set(opts.columns) - set(ARROW_SCHEMA.names))
    if unknown or not opts.columns:
        raise ConfigError(f"option columns: {', '.join(unknown) or 'nothing'} is not a column of format "
                          f"rocketmq; columns are: {', '.join(ARROW_SCHEMA.names)}")
    return pa.schema([f for f in ARROW_SCHEMA if f.name in opts.columns])


def spark_ddl(opts: ReadOptions) -> str:
    """``SPARK_DDL`` cut to ``arrow_schema(opts)``."""
    wanted = set(arrow_schema(opts).names)
    return ", ".join(f"{name} {ddl}" for name, _, ddl in COLUMNS if name in wanted)


_BIT_COLUMNS = {"is_retry": "BIT_RETRY", "is_dlq": "BIT_DLQ", "is_delayed": "BIT_DELAYED",
                "is_compressed": "BIT_COMPRESSED"}


def columns_to_batch(n: int, cols: dict[str, Any], opts: ReadOptions,
                     kernels: ColumnKernels | None = None) -> pa.RecordBatch:
    """One kernel output -> a RecordBatch of ``arrow_schema(opts)`` (no per-row Python objects).

    Only the wanted columns become Arrow arrays: what Spark ingests (and converts to rows)
    is what costs in a scan, far more than the kernel filling its buffers.
    """
    if kernels is None:
        kernels = default_column_kernels()
    k = kernels
    schema = arrow_schema(opts)
    fixed = dict(k.FIXED_COLUMNS)
    arrays = [_column(name, n, cols, opts, k, fixed) for name in schema.names]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _column(name: str, n: int, cols: dict[str, Any], opts: ReadOptions, k: ColumnKernels,
            fixed: dict[str, Any]) -> pa.Array:
    bits = cols["bits"]
    if name in fixed:
        if name.endswith("_timestamp"):
            return _timestamps(cols[name])
        return _fixed(cols[name], pa.from_numpy_dtype(np.dtype(fixed[name])))
    if name in _BIT_COLUMNS:
        return pa.array((bits & getattr(k, _BIT_COLUMNS[name])) != 0, pa.bool_())
    if name == "tags":
        tag_off, tag_data = cols["tags"]
        return _strings(tag_off, tag_data, valid=(bits & k.BIT_HAS_TAGS) != 0)
    if name == "body":
        if not opts.include_body:
            return pa.nulls(n, pa.binary())
        off, data = cols["body"]
        if opts.decompress:
            rows = np.nonzero((bits & k.BIT_COMPRESSED) != 0)[0]
            if len(rows):
                off, data, failed = _inflate(off, data, rows, cols["sys_flag"])
                if failed:
                    log.warning("%d compressed bodies did not inflate (corrupt, or LZ4/Zstandard without its "
                                "package); kept as stored", failed)
        return _strings(off, data, pa.binary())
    if name == "keys":
        list_off, off, data = cols["keys"]
        return pa.ListArray.from_arrays(_fixed(list_off, pa.int32()), _strings(off, data))
    if name == "properties":
        map_off, koff, kdata, voff, vdata = cols["properties"]
        return pa.MapArray.from_arrays(_fixed(map_off, pa.int32()), _strings(koff, kdata), _strings(voff, vdata))
    return _strings(*cols[name])  # topic, hosts, message ids, original_topic


def _flags(opts: ReadOptions, k: ColumnKernels) -> int:
    """Kernel flags of the options (without the row-selection ones, which are arguments).

    Columns the schema leaves out are not built at all: the kernel skips their work (and
    the properties scan when no wanted column reads the properties).
    """
    wanted = set(arrow_schema(opts).names)
    flags = k.WITH_BODY if opts.include_body and "body" in wanted else 0
    if opts.verify_crc:
        flags |= k.CHECK_CRC
    if opts.on_corrupt == "skip":
        flags |= k.SKIP_CORRUPT
    for name, skip in k.COLUMN_SKIP_FLAGS:
        if name not in wanted:
            flags |= skip
    return flags


def _corrupt_error(split: Split, pos: int) -> RecordDecodeError:
    return RecordDecodeError(
        f"corrupt commitlog record in {split.storage.display(split.path)} at file position {pos} (commitlog offset "
        f"{split.base_offset + pos}); {READ_PAST}")


class SplitStats:
    """What one split read: rows emitted and corrupt records skipped."""

    def __init__(self) -> None:
        self.rows = 0
        self.corrupt = 0
        self.corrupt_bytes = 0
        self.missing_bytes = 0  # zeros inside the data, read past with onCorrupt=skip


def iter_split(split: Split, opts: ReadOptions, kernels: ColumnKernels | None = None,
               stats: SplitStats | None = None) -> Iterator[pa.RecordBatch]:
    """Decode one split into batches of ``ARROW_SCHEMA``, honouring every option."""
    if kernels is None:
        kernels = default_column_kernels()
    stats = stats if stats is not None else SplitStats()
    with RecordWindows(split.storage, split.path, split.limit) as win:
        if split.by_queue:
            yield from _queue_batches(win, split, opts, kernels, stats)
        else:
            yield from _walk_batches(win, split, opts, kernels, stats)
    if stats.corrupt or stats.missing_bytes:
        log.warning("%s [%d, %d): skipped %d corrupt records (%d bytes) and %d bytes without records",
                    split.storage.display(split.path), split.start, split.stop, stats.corrupt, stats.corrupt_bytes,
                    stats.missing_bytes)


def _common(split: Split, opts: ReadOptions, w0: int,
            available: int) -> tuple[int, int, int, list[bytes] | None, int, int]:
    """Kernel arguments after the range; ``available`` bytes are left in the buffer, so
    the kernel's output buffers need be no larger (a small window means a small batch)."""
    topics = None if opts.topics is None else [t.encode("utf-8") for t in opts.topics]
    return (split.base_offset + w0, opts.max_rows_per_batch, max(1, min(opts.max_bytes_per_batch, available)),
            topics, opts.min_store_ts, opts.max_store_ts)


def _walk_batches(win: RecordWindows, split: Split, opts: ReadOptions, k: ColumnKernels,
                  stats: SplitStats) -> Iterator[pa.RecordBatch]:
    """Records starting in ``[split.start, split.stop)``, walked (resynced first unless aligned)."""
    flags = _flags(opts, k)
    skip = opts.on_corrupt == "skip"
    pos = split.start
    if not split.aligned:
        pos = win.find(split.start, split.stop, split.limit, split.base_offset, opts.verify_crc, k)
    while 0 <= pos < split.stop:
        buf, w0 = win.window(pos, split.limit)
        end = min(split.limit, win.w1)
        # the kernel may resync past a corrupt record itself only where its verdicts are final
        here = flags if end >= split.limit else flags & ~k.SKIP_CORRUPT
        got = k.decode_columns(
            buf, pos - w0, min(split.stop, end) - w0, end - w0, *_common(split, opts, w0, end - pos), here)
        reason = got.reason
        stats.corrupt += got.corrupt_records
        stats.corrupt_bytes += got.corrupt_bytes
        if got.rows:
            stats.rows += got.rows
            yield columns_to_batch(got.rows, got.columns, opts, k)
        pos = w0 + got.next
        if reason in (L.ScanStop.MAX_COUNT, L.ScanStop.END):
            continue  # END short of the split's stop: the window ended on a record boundary
        if not win.final_at(pos, split.limit):
            win.window(pos, split.limit, win.record_need(pos))  # re-ask with all of that record
            continue
        if reason == L.ScanStop.BLANK or (reason == L.ScanStop.NO_DATA and pos >= split.limit):
            break
        if reason == L.ScanStop.NO_DATA:  # zeros inside the snapshot's data: a torn or zeroed stretch
            if not skip:
                raise stops_early_error(split.storage.display(split.path), split.base_offset, pos, split.limit, split.store)
            q = win.find(pos + 1, split.stop, split.limit, split.base_offset, opts.verify_crc, k) \
                if pos + 1 < split.stop else -1
            stats.missing_bytes += (q if q >= 0 else split.stop) - pos
            pos = q
            continue
        if not skip:  # CORRUPT, or TRUNCATED at the end of the data
            raise _corrupt_error(split, pos)
        q = win.find(pos + 1, split.stop, split.limit, split.base_offset, opts.verify_crc, k) \
            if pos + 1 < split.stop else -1
        stats.corrupt += 1
        stats.corrupt_bytes += (q if q >= 0 else split.stop) - pos
        pos = q


#: a gap between wanted records above which a remote read is split in two
_GAP_BYTES = 1 << 20


def _queue_batches(win: RecordWindows, split: Split, opts: ReadOptions, k: ColumnKernels,
                   stats: SplitStats) -> Iterator[pa.RecordBatch]:
    """The records the split's consume queues list, fetched span by span on remote storage."""
    flags = _flags(opts, k)
    phys, sizes = positions_in(list(split.queues), split.base_offset + split.start,
                               split.base_offset + split.stop)
    at = phys - split.base_offset
    ends = at + sizes
    i = 0
    while i < len(at):
        if win.storage.is_local:  # the whole file is mapped: one span
            j = len(at)
            buf, w0 = win.window(0, split.limit)
            end = split.limit
            yield from _decode_at(buf, at - w0, end - w0, w0, split, opts, k, stats, flags)
            break
        # one span: records close together (gaps under _GAP_BYTES), up to a window's worth
        j = i + 1
        while (j < len(at) and at[j] - ends[j - 1] < _GAP_BYTES
               and ends[j] - at[i] <= max(win.window_bytes, sizes[i])):
            j += 1
        buf, w0 = win.window(int(at[i]), split.limit, int(min(ends[j - 1], split.limit) - at[i]))
        end = min(split.limit, win.w1)
        j = i + int(np.searchsorted(ends[i:j], end, side="right")) if end < split.limit else j
        j = max(j, i + 1)
        yield from _decode_at(buf, at[i:j] - w0, end - w0, w0, split, opts, k, stats, flags)
        i = j


def _decode_at(buf: memoryview, sub: np.ndarray, limit: int, w0: int, split: Split, opts: ReadOptions,
               k: ColumnKernels, stats: SplitStats, flags: int) -> Iterator[pa.RecordBatch]:
    first = 0
    while first < len(sub):
        got = k.decode_columns_at(
            buf, sub, first, limit, *_common(split, opts, w0, limit - int(sub[first])), flags)
        first = got.next
        stats.corrupt += got.corrupt_records
        if got.reason == L.ScanStop.CORRUPT:
            raise _corrupt_error(split, int(sub[first]) + w0)
        if got.rows:
            stats.rows += got.rows
            yield columns_to_batch(got.rows, got.columns, opts, k)


def read_store(path: str, kernels: ColumnKernels | None = None, **options: object) -> Iterator[pa.RecordBatch]:
    """Plain-Python read of a whole store (one process, no Spark): same options, same batches.

    ``options`` use the reader's option names (``topics="A,B"``, ``includeBody="false"``...).
    """
    if kernels is None:
        kernels = default_column_kernels()
    opts = ReadOptions.from_options({"path": path, **{k: str(v) for k, v in options.items()}})
    for split in plan_read(opts):
        yield from iter_split(split, opts, kernels)


def read_table(path: str, **options: object) -> pa.Table:
    """``read_store`` gathered into one ``pyarrow.Table``."""
    opts = ReadOptions.from_options({"path": path, **{k: str(v) for k, v in options.items()}})
    return pa.Table.from_batches(list(read_store(path, None, **options)), schema=arrow_schema(opts))
