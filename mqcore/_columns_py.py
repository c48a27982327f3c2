"""Pure-Python twin of the column kernels in ``_columns.pyx`` (the extension ``mqcore._columns``).

The Spark reader (and any other analytics) wants whole columns, not one Python
tuple per message: ``decode_columns`` walks commitlog records in a buffer range and
fills numpy arrays that ``pyarrow.Array.from_buffers`` turns into Arrow arrays
without touching a Python object per row. The Cython kernel does the same in C;
this file is the readable reference the tests compare it with (it is ~100x slower).

Output of ``decode_columns`` / ``decode_columns_at``: ``(n, cols, next, reason,
corrupt_count, corrupt_bytes)`` where ``cols`` maps

* every name of ``FIXED_COLUMNS`` to a numpy array of ``n`` values,
* ``"bits"`` to a uint8 array of ``BIT_*`` flags,
* every name of ``STRING_COLUMNS`` to ``(offsets int32[n+1], data uint8[])``,
* ``"keys"`` to ``(list_offsets int32[n+1], offsets int32[k+1], data)`` (KEYS split on spaces),
* ``"properties"`` to ``(map_offsets int32[n+1], key_offsets, key_data, value_offsets,
  value_data)`` (one entry per distinct name, the last occurrence wins, as in Java).

Kernels never open files, log or read the clock, and keep no view past the call.
"""
from __future__ import annotations

import struct
from typing import Sequence

import numpy as np

from mqcore._record_py import _check_record, _parse_level
from mqcore.format import layout as L
from mqcore.format.properties import split_properties
from mqcore.format.scans import ColumnBatch, RecordWalk

IMPLEMENTATION = "python"

__all__ = ["IMPLEMENTATION", "WITH_BODY", "CHECK_CRC", "SKIP_CORRUPT", "BIT_RETRY", "BIT_DLQ", "BIT_DELAYED",
           "BIT_COMPRESSED", "BIT_HAS_TAGS", "COLUMN_SKIP_FLAGS", "FIXED_COLUMNS", "STRING_COLUMNS", "format_host",
           "find_record", "decode_columns", "decode_columns_at", "walk_records"]

# flags of decode_columns
WITH_BODY = 1        # copy body bytes (else every body is empty: a projection)
CHECK_CRC = 2        # verify BODYCRC; a mismatch is a corrupt record
SKIP_CORRUPT = 4     # resync past a corrupt record and count it instead of stopping

#: projection flags of decode_columns: a column whose flag is set is not built (every
#: row holds an empty string, list or map, or 0; a skipped ``tags`` leaves BIT_HAS_TAGS
#: clear). The properties are not even scanned when every column reading them is skipped,
#: so a scan of fixed-width columns costs little more than reading them.
COLUMN_SKIP_FLAGS = (
    ("topic", 8),
    ("born_host", 16),
    ("store_host", 32),
    ("tags", 64),
    ("msg_id", 128),
    ("offset_msg_id", 256),
    ("original_topic", 512),
    ("keys", 1024),
    ("properties", 2048),
    ("delay_level", 4096),
)
_NO = dict(COLUMN_SKIP_FLAGS)

# bits of cols["bits"]
BIT_RETRY = 1        # topic starts with %RETRY%
BIT_DLQ = 2          # topic starts with %DLQ%
BIT_DELAYED = 4      # waiting in SCHEDULE_TOPIC_XXXX
BIT_COMPRESSED = 8   # SYSFLAG bit 0
BIT_HAS_TAGS = 16    # TAGS property present (else the tags column is null)

FIXED_COLUMNS = (
    ("commitlog_offset", np.int64),
    ("queue_id", np.int32),
    ("queue_offset", np.int64),
    ("store_size", np.int32),
    ("body_crc", np.int32),
    ("flag", np.int32),
    ("sys_flag", np.int32),
    ("born_timestamp", np.int64),
    ("store_timestamp", np.int64),
    ("reconsume_times", np.int32),
    ("prepared_transaction_offset", np.int64),
    ("delay_level", np.int32),
)
STRING_COLUMNS = ("topic", "body", "born_host", "store_host", "tags", "msg_id", "offset_msg_id",
                  "original_topic")

RETRY_PREFIX = b"%RETRY%"
DLQ_PREFIX = b"%DLQ%"
SCHEDULE_TOPIC = b"SCHEDULE_TOPIC_XXXX"
_MAGICS = (struct.pack(">i", L.MAGIC_V1), struct.pack(">i", L.MAGIC_V2))
_WANTED = (b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"RETRY_TOPIC", b"REAL_TOPIC")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _check(mv, pos: int, limit: int, check_crc: bool):
    """The record checker shared with the store kernels (``checkMessageAndReturnSize``)."""
    return _check_record(mv, pos, limit, check_crc)


def format_host(raw: bytes) -> bytes:
    """``ip:port`` (IPv4) or ``[ipv6]:port`` with RFC 5952 ``::`` compression, as ASCII."""
    port = _I32.unpack(raw[-4:])[0]
    ip = raw[:-4]
    if len(ip) == 4:
        return b"%d.%d.%d.%d:%d" % (ip[0], ip[1], ip[2], ip[3], port)
    groups = struct.unpack(">8H", ip)
    best_at, best_len, run_at, run_len = -1, 0, -1, 0
    for i, g in enumerate(groups):
        if g == 0:
            if run_len == 0:
                run_at = i
            run_len += 1
            if run_len > best_len:
                best_at, best_len = run_at, run_len
        else:
            run_len = 0
    hexes = [b"%x" % g for g in groups]
    if best_len > 1:
        text = b":".join(hexes[:best_at]) + b"::" + b":".join(hexes[best_at + best_len:])
    else:
        text = b":".join(hexes)
    return b"[%s]:%d" % (text, port)


_props = split_properties


def _level(raw: bytes | None) -> int:
    return 0 if raw is None else _parse_level(raw)


class _Out:
    """Growing Python lists standing in for the kernel's preallocated buffers."""

    def __init__(self) -> None:
        self.fixed: dict[str, list[int]] = {name: [] for name, _ in FIXED_COLUMNS}
        self.bits: list[int] = []
        self.strings: dict[str, list[bytes]] = {name: [] for name in STRING_COLUMNS}
        self.keys: list[list[bytes]] = []
        self.props: list[list[tuple[bytes, bytes]]] = []

    def columns(self) -> dict:
        cols: dict = {name: np.array(self.fixed[name], dtype) for name, dtype in FIXED_COLUMNS}
        cols["bits"] = np.array(self.bits, np.uint8)
        for name in STRING_COLUMNS:
            cols[name] = _pack(self.strings[name])
        counts = [len(k) for k in self.keys]
        cols["keys"] = (_offsets(counts),) + _pack([k for ks in self.keys for k in ks])
        counts = [len(p) for p in self.props]
        entries = [e for ps in self.props for e in ps]
        cols["properties"] = ((_offsets(counts),) + _pack([e[0] for e in entries])
                              + _pack([e[1] for e in entries]))
        return cols


def _offsets(lengths: Sequence[int]) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(lengths, out=out[1:])
    return out


def _pack(values: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    return _offsets([len(v) for v in values]), np.frombuffer(b"".join(values), np.uint8).copy()


def _emit(out: _Out, mv, pos: int, base_offset: int, f, flags: int) -> None:
    """Append the checked record at ``pos`` (fields ``f`` from the checker) to ``out``."""
    sys_flag, b, body_at, body_len, topic_at, topic_len, props_at, props_len = f
    s = L.HOST_V6_EXTRA if sys_flag & L.SYSFLAG_STOREHOST_V6 else 0
    topic = bytes(mv[topic_at:topic_at + topic_len])
    props = _props(bytes(mv[props_at:props_at + props_len]))
    found = {k: v for k, v in props if k in _WANTED}
    born = bytes(mv[pos + L.REC_BORNHOST:pos + L.REC_BORNHOST + L.HOST_V4_BYTES + b])
    sh_at = pos + L.REC_STOREHOST_V4 + b
    store = bytes(mv[sh_at:sh_at + L.HOST_V4_BYTES + s])
    phy = base_offset + pos
    fixed = out.fixed
    fixed["commitlog_offset"].append(phy)
    fixed["queue_id"].append(_I32.unpack_from(mv, pos + L.REC_QUEUEID)[0])
    fixed["queue_offset"].append(_I64.unpack_from(mv, pos + L.REC_QUEUEOFFSET)[0])
    fixed["store_size"].append(_I32.unpack_from(mv, pos + L.REC_TOTALSIZE)[0])
    fixed["body_crc"].append(_I32.unpack_from(mv, pos + L.REC_BODYCRC)[0])
    fixed["flag"].append(_I32.unpack_from(mv, pos + L.REC_FLAG)[0])
    fixed["sys_flag"].append(sys_flag)
    fixed["born_timestamp"].append(_I64.unpack_from(mv, pos + L.REC_BORNTIMESTAMP)[0])
    fixed["store_timestamp"].append(_I64.unpack_from(mv, pos + L.REC_STORETIMESTAMP_V4 + b)[0])
    fixed["reconsume_times"].append(_I32.unpack_from(mv, pos + L.REC_RECONSUMETIMES_V4 + b + s)[0])
    fixed["prepared_transaction_offset"].append(
        _I64.unpack_from(mv, pos + L.REC_PREPAREDOFFSET_V4 + b + s)[0])
    fixed["delay_level"].append(0 if flags & _NO["delay_level"] else _level(found.get(b"DELAY")))
    bits = 0
    if topic.startswith(RETRY_PREFIX):
        bits |= BIT_RETRY
    if topic.startswith(DLQ_PREFIX):
        bits |= BIT_DLQ
    if topic == SCHEDULE_TOPIC:
        bits |= BIT_DELAYED
    if sys_flag & L.SYSFLAG_COMPRESSED:
        bits |= BIT_COMPRESSED
    if b"TAGS" in found and not flags & _NO["tags"]:
        bits |= BIT_HAS_TAGS
    out.bits.append(bits)
    omid = (store + _I64.pack(phy)).hex().upper().encode()
    built = {
        "topic": topic,
        "body": bytes(mv[body_at + 4:body_at + 4 + body_len]) if flags & WITH_BODY else b"",
        "born_host": format_host(born),
        "store_host": format_host(store),
        "tags": found.get(b"TAGS", b""),
        "msg_id": found.get(b"UNIQ_KEY", omid),
        "offset_msg_id": omid,
        "original_topic": found.get(b"RETRY_TOPIC", found.get(b"REAL_TOPIC", topic)),
    }
    for name, value in built.items():
        out.strings[name].append(b"" if flags & _NO.get(name, 0) else value)
    out.keys.append([] if flags & _NO["keys"] else [k for k in found.get(b"KEYS", b"").split(b" ") if k])
    out.props.append([] if flags & _NO["properties"] else props)


def _accepts(mv, f, pos: int, topics, min_ts: int, max_ts: int) -> bool:
    """The pushed-down filters: topic in ``topics`` (None = any) and store time in range."""
    _sys_flag, b, _ba, _bl, topic_at, topic_len, _pa, _pl = f
    if topics is not None and bytes(mv[topic_at:topic_at + topic_len]) not in topics:
        return False
    ts = _I64.unpack_from(mv, pos + L.REC_STORETIMESTAMP_V4 + b)[0]
    return min_ts <= ts <= max_ts


def _view(buf):
    mv = memoryview(buf)
    return mv if mv.ndim == 1 and mv.itemsize == 1 else mv.cast("B")


def find_record(buf, start: int, stop: int, limit: int, base_offset: int, check_crc: bool) -> int:
    """First ``q`` in ``[start, stop)`` holding a valid record whose PHYSICALOFFSET is
    ``base_offset + q`` (the resync rule of a byte-range split); -1 if there is none."""
    mv = _view(buf)
    if start < 0 or start > stop or stop > limit or limit > len(mv):
        raise ValueError("search range outside the buffer")
    window = bytes(mv[start:min(stop + L.REC_MAGIC + 4, limit)])  # magics of candidates < stop
    at = 0
    while start + at < stop:
        cands = [c for c in (window.find(m, at + L.REC_MAGIC) for m in _MAGICS) if c >= 0]
        if not cands:
            return -1
        q = start + min(cands) - L.REC_MAGIC
        if q >= stop:
            return -1
        if (q + L.REC_PHYOFFSET + 8 <= limit
                and _I64.unpack_from(mv, q + L.REC_PHYOFFSET)[0] == base_offset + q
                and _check(mv, q, limit, check_crc)[0] is None):
            return q
        at = q - start + 1
    return -1


def decode_columns(buf, start: int, stop: int, limit: int, base_offset: int, max_rows: int,
                   max_bytes: int, topics: Sequence[bytes] | None, min_store_ts: int,
                   max_store_ts: int, flags: int):
    """Decode the records that start in ``buf[start:stop)`` (each may end up to ``limit``).

    Rows are emitted for records whose topic is in ``topics`` (None = all) and whose
    store time is in ``[min_store_ts, max_store_ts]``; others are walked over. A batch
    ends after ``max_rows`` rows or once the emitted records total ``max_bytes``
    (reason ``MAX_COUNT``; call again from ``next``). It also ends at a blank
    end-of-file marker, at never-written space, at ``stop`` (``END``) and, unless
    ``SKIP_CORRUPT`` is set, at a corrupt record (``CORRUPT``, ``next`` = its position).
    A record that runs past ``limit`` is corrupt: ``limit`` is a record boundary.
    """
    mv = _view(buf)
    if start < 0 or start > stop or stop > limit or limit > len(mv):
        raise ValueError("decode range outside the buffer")
    if max_rows < 1 or max_bytes < 1:
        raise ValueError("max_rows and max_bytes must be positive")
    wanted = None if topics is None else set(bytes(t) for t in topics)
    out = _Out()
    n = used = corrupt = corrupt_bytes = 0
    pos = start
    reason = L.ScanStop.END
    while pos < stop:
        status, size, f = _check(mv, pos, limit, bool(flags & CHECK_CRC))
        if status in (L.ScanStop.BLANK, L.ScanStop.NO_DATA):
            reason = status
            break
        if status is not None:  # CORRUPT, or TRUNCATED: runs past a record boundary
            if not flags & SKIP_CORRUPT:
                reason = L.ScanStop.CORRUPT
                break
            q = find_record(mv, pos + 1, stop, limit, base_offset, bool(flags & CHECK_CRC))
            corrupt += 1
            corrupt_bytes += (q if q >= 0 else stop) - pos
            if q < 0:
                pos = stop
                break
            pos = q
            continue
        if _accepts(mv, f, pos, wanted, min_store_ts, max_store_ts):
            if n > 0 and (n >= max_rows or used + size > max_bytes):
                reason = L.ScanStop.MAX_COUNT
                break
            _emit(out, mv, pos, base_offset, f, flags)
            n += 1
            used += size
        pos += size
    return ColumnBatch(n, out.columns(), pos, reason, corrupt, corrupt_bytes)


def decode_columns_at(buf, positions, first: int, limit: int, base_offset: int, max_rows: int,
                      max_bytes: int, topics: Sequence[bytes] | None, min_store_ts: int,
                      max_store_ts: int, flags: int):
    """Like ``decode_columns`` but for the records at ``positions[first:]`` (sorted, from
    a consume queue); ``next`` is an index into ``positions``. A position that does not
    hold a valid record with that PHYSICALOFFSET is corrupt (a stale queue entry)."""
    mv = _view(buf)
    if first < 0 or limit < 0 or limit > len(mv):
        raise ValueError("decode range outside the buffer")
    if max_rows < 1 or max_bytes < 1:
        raise ValueError("max_rows and max_bytes must be positive")
    wanted = None if topics is None else set(bytes(t) for t in topics)
    out = _Out()
    n = used = corrupt = corrupt_bytes = 0
    i = first
    reason = L.ScanStop.END
    while i < len(positions):
        pos = int(positions[i])
        status, size, f = (L.ScanStop.CORRUPT, 0, None)
        if 0 <= pos and pos + L.REC_PHYOFFSET + 8 <= limit \
                and _I64.unpack_from(mv, pos + L.REC_PHYOFFSET)[0] == base_offset + pos:
            status, size, f = _check(mv, pos, limit, bool(flags & CHECK_CRC))
        if status is not None:
            if not flags & SKIP_CORRUPT:
                reason = L.ScanStop.CORRUPT
                break
            corrupt += 1
            i += 1
            continue
        if _accepts(mv, f, pos, wanted, min_store_ts, max_store_ts):
            if n > 0 and (n >= max_rows or used + size > max_bytes):
                reason = L.ScanStop.MAX_COUNT
                break
            _emit(out, mv, pos, base_offset, f, flags)
            n += 1
            used += size
        i += 1
    return ColumnBatch(n, out.columns(), i, reason, corrupt, corrupt_bytes)


def walk_records(buf, start: int, limit: int, check_crc: bool) -> RecordWalk:
    """Walk valid records from ``start``; ``(end, count, reason, first_ts, last_ts)``.

    ``end`` is the position after the last valid record: the end of a live file's
    data when ``reason`` is NO_DATA. Store times are -1 when no record was found.
    """
    mv = _view(buf)
    if start < 0 or start > limit or limit > len(mv):
        raise ValueError("walk range outside the buffer")
    pos, count, first_ts, last_ts = start, 0, -1, -1
    reason = L.ScanStop.END
    while pos < limit:
        status, size, f = _check(mv, pos, limit, check_crc)
        if status is not None:
            reason = status
            break
        ts = _I64.unpack_from(mv, pos + L.REC_STORETIMESTAMP_V4 + f[1])[0]
        if count == 0:
            first_ts = ts
        last_ts = ts
        count += 1
        pos += size
    return RecordWalk(pos, count, reason, first_ts, last_ts)
