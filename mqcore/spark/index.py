"""Index files: their entries as columns, and key lookups across the whole store.

An index file's header does not record its slot count, so the entry area's position
(``40 + slots*4``) comes from options; without them ``format.files.index_geometry`` infers
it (the 5,000,000 / 20,000,000 default, else the geometry the file's own entries agree with).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from mqcore._compat import default_column_kernels, default_kernels
from mqcore.errors import ConfigError, IllegalArgumentError
from mqcore.format import layout as L
from mqcore.kernel_api import ColumnKernels, StoreKernels
from mqcore.format.files import ReadOnlyFile, index_geometry, numbered_files, read_index_header
from mqcore.spark.decode import ARROW_SCHEMA, columns_to_batch
from mqcore.spark.files import StoreDirs, list_commitlog, open_view
from mqcore.spark.options import I64_MAX, I64_MIN, ReadOptions

_MAX_QUERY = 64  # IndexService: maxMsgsNumBatch


@dataclasses.dataclass(frozen=True)
class IndexGeometry:
    slots: int
    entries: int

    @classmethod
    def for_file(cls, f: ReadOnlyFile, slots: int | None = None, entries: int | None = None) -> "IndexGeometry":
        """Given counts checked against the file's size, else ``format.files.index_geometry``'s
        answer (the default, or the geometry the file's own entries agree with)."""
        try:
            return cls(*index_geometry(f, slots, entries))
        except IllegalArgumentError as e:
            raise ConfigError(f"{e}: pass options indexSlots and indexEntries (the broker's maxHashSlotNum "
                              "and maxIndexNum)") from e


def list_index_files(dirs: StoreDirs) -> list[str]:
    return numbered_files(dirs.index, index=True)


read_header = read_index_header


def read_entries(path: str, slots: int | None = None, entries: int | None = None) -> dict[str, np.ndarray]:
    """Used entries (1 .. indexCount-1) of one index file as native arrays."""
    with ReadOnlyFile(path) as f:
        v = f.buf
        g = IndexGeometry.for_file(f, slots, entries)
        begin_ts, _, _, _, _, count = read_header(v)
        first = L.INDEX_HEADER_SIZE + g.slots * L.INDEX_SLOT_SIZE + L.INDEX_ENTRY_SIZE
        n = max(0, min(count, g.entries) - 1)
        raw = bytes(v[first:first + n * L.INDEX_ENTRY_SIZE])
    e = np.frombuffer(raw, L.INDEX_ENTRY_DTYPE)
    return {
        "entry": np.arange(1, n + 1, dtype=np.int32),
        "key_hash": e["key_hash"].astype(np.int32),
        "commitlog_offset": e["phy_offset"].astype(np.int64),
        "time_diff_s": e["time_diff"].astype(np.int32),
        "prev_entry": e["prev_index"].astype(np.int32),
        "store_timestamp_ms": begin_ts + e["time_diff"].astype(np.int64) * 1000,
        "slot": (e["key_hash"].astype(np.int64) % g.slots).astype(np.int32),
    }


def candidate_offsets(dirs: StoreDirs, topic: str, key: str, begin_ts: int = 0, end_ts: int = (1 << 63) - 1,
                      max_num: int = _MAX_QUERY, kernels: StoreKernels | None = None, slots: int | None = None,
                      entries: int | None = None) -> list[int]:
    """Commitlog offsets the index lists for ``topic#key``, newest file first
    (``IndexService.queryOffset``); hash collisions are included, as in the broker. The index
    walk is the store's kernel (``kernels``: store kernels, not column kernels)."""
    if kernels is None:
        kernels = default_kernels()
    k = kernels
    key_hash = k.index_hash(k.java_hash(f"{topic}#{key}"))
    found: list[int] = []
    for path in reversed(list_index_files(dirs)):
        with ReadOnlyFile(path) as f:
            v = f.buf
            g = IndexGeometry.for_file(f, slots, entries)
            fbegin, fend, _, _, _, _ = read_header(v)
            if fend < begin_ts or (fbegin > end_ts and fbegin > 0):
                continue
            # a damaged chain ends its walk early: what it found is still a candidate list
            found += k.index_query(v, g.slots, g.entries, key_hash, begin_ts, end_ts, max_num - len(found))[0]
            if len(found) >= max_num or fbegin < begin_ts:
                break
    return sorted(set(found))


def lookup_key(dirs: StoreDirs, topic: str, key: str, *, kernels: ColumnKernels | None = None,
               include_body: bool = True, max_num: int = _MAX_QUERY, slots: int | None = None,
               entries: int | None = None) -> pa.Table:
    """Messages of ``topic`` whose KEYS contain ``key`` or whose msg id is ``key``, via the index.

    Candidates are decoded from the commitlog and filtered exactly (the index only holds
    hashes; the broker leaves that filtering to the client).
    """
    if kernels is None:
        kernels = default_column_kernels()
    offsets = np.array(candidate_offsets(dirs, topic, key, max_num=max_num, slots=slots, entries=entries), np.int64)
    opts = ReadOptions(include_body=include_body, topics=(topic,))
    flags = kernels.SKIP_CORRUPT | (kernels.WITH_BODY if include_body else 0)
    batches = []
    for f in list_commitlog(dirs):
        mine = offsets[(offsets >= f.base_offset) & (offsets < f.base_offset + f.size)] - f.base_offset
        i = 0
        with open_view(f.path) as v:
            while i < len(mine):
                n, cols, i, _, _, _ = kernels.decode_columns_at(
                    v, mine, i, len(v), f.base_offset, opts.max_rows_per_batch, opts.max_bytes_per_batch,
                    [topic.encode()], I64_MIN, I64_MAX, flags)
                if n:
                    batches.append(columns_to_batch(n, cols, opts, kernels))
    table = pa.Table.from_batches(batches, schema=ARROW_SCHEMA)
    hit = [key in ks or mid == key for ks, mid in zip(table.column("keys").to_pylist(),
                                                     table.column("msg_id").to_pylist())]
    return table.filter(pa.array(hit, pa.bool_()))
