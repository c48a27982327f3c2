"""Pure-Python twin of the Cython kernels in ``_store.pyx``.

Same functions, same arguments, same results and errors. It is the readable
reference: when the two disagree, the tests say so, and this file is where the
intent is easiest to check against the byte layouts in ``mqcore/format/layout.py``.

Kernels do byte work over buffers handed to them. They never open files, take
locks, log or read the clock.
"""
from __future__ import annotations

import struct
import zlib
from typing import Any, Callable, Sequence

import numpy as np

from mqcore._record_py import _check_record, _host_extra, _parse_level
from mqcore.errors import CorruptFileError, RecordDecodeError
from mqcore.format import batch
from mqcore.format import layout as L
from mqcore.format.javahash import continue_hash, string_hash, to_int32
from mqcore.format.properties import join_property_strings, property_spans
from mqcore.format.record import DECODED_FIELDS as DECODED_FIELDS  # a kernel constant (StoreKernels)
from mqcore.format.record import DecodedRecord
from mqcore.format.scans import BatchMeasure, IndexKeys, QueueSelection, QueueUnits, RecordScan

IMPLEMENTATION = "python"

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_I16 = L.PROPS_LENGTH

DISPATCH_DTYPE = np.dtype(list(L.DISPATCH_FIELDS))

_INT_MIN = -(1 << 31)

#: builds a DecodedRecord from the tuple of its fields without NamedTuple.__new__'s argument parsing
_new_tuple = tuple.__new__


# --- Java String.hashCode ----------------------------------------------------
_to_int32 = to_int32
_hash_units = continue_hash


def java_hash(s: str) -> int:
    """``String.hashCode()``: 31*h + c over UTF-16 code units, wrapping int32."""
    return string_hash(s)


def java_hash_utf8(b) -> int:
    """``java_hash`` of UTF-8 bytes (invalid sequences count as U+FFFD, as Java decodes)."""
    return java_hash(bytes(b).decode("utf-8", "replace"))


def tags_code(tags: str | None) -> int:
    """ConsumeQueue tagsCode of a TAGS value: sign-extended hash, 0 when absent."""
    return java_hash(tags) if tags else 0


def index_hash(h: int) -> int:
    """``Math.abs(hash)`` with Integer.MIN_VALUE mapped to 0 (IndexFile.indexKeyHashMethod)."""
    return 0 if h == _INT_MIN else abs(h)


def key_hashes(topic: str, uniq: str | None, keys: str | None) -> list[int]:
    """Index hashes of ``topic#uniq`` then ``topic#w`` per non-empty space-separated word
    of ``keys``, as the record scan gives them."""
    words = ([uniq] if uniq else []) + ([w for w in keys.split(" ") if w] if keys else [])
    return [index_hash(java_hash(f"{topic}#{w}")) for w in words]


# --- record sizes ------------------------------------------------------------
def record_size(body_len: int, topic_len: int, props_len: int, sys_flag: int) -> int:
    """TOTALSIZE of a v1 record (``CommitLog.calMsgLength``)."""
    b, s = _host_extra(sys_flag)
    return L.REC_FIXED_V4 + b + s + body_len + 1 + topic_len + 2 + props_len


def _check_host(host, sys_flag: int, bit: int, what: str) -> None:
    want = L.HOST_V6_BYTES if sys_flag & bit else L.HOST_V4_BYTES
    if len(host) != want:
        raise ValueError(f"{what} is {len(host)} bytes but sys_flag asks for {want}")


def body_crc(data) -> int:
    """BODYCRC of ``data``: RocketMQ keeps the low 31 bits of the IEEE CRC-32."""
    return zlib.crc32(data) & 0x7FFFFFFF


def encode_record(dst, pos: int, topic: bytes, queue_id: int, flag: int, queue_offset: int,
                  phy_offset: int, sys_flag: int, born_timestamp: int, born_host: bytes,
                  store_timestamp: int, store_host: bytes, reconsume_times: int,
                  prepared_offset: int, body, properties: bytes) -> int:
    """Write one v1 record at ``dst[pos:]``; returns its size. Raises if it does not fit."""
    _check_host(born_host, sys_flag, L.SYSFLAG_BORNHOST_V6, "born_host")
    _check_host(store_host, sys_flag, L.SYSFLAG_STOREHOST_V6, "store_host")
    if len(topic) > L.MAX_TOPIC_LENGTH:
        raise ValueError("topic longer than 127 bytes")
    if len(properties) > L.MAX_PROPERTIES_BYTES:
        raise ValueError("properties longer than 32767 bytes")
    size = record_size(len(body), len(topic), len(properties), sys_flag)
    if pos < 0 or pos + size > len(dst):
        raise ValueError("record does not fit in the buffer")
    crc = zlib.crc32(body) & 0x7FFFFFFF if len(body) else 0
    out = bytearray()
    out += L.REC_HEAD.pack(size, L.MAGIC_V1, crc, queue_id, flag, queue_offset, phy_offset, sys_flag,
                           born_timestamp)
    out += born_host
    out += L.REC_STORETIMESTAMP.pack(store_timestamp)
    out += store_host
    out += L.REC_TAIL.pack(reconsume_times, prepared_offset, len(body))
    out += body
    out += bytes((len(topic),)) + topic
    out += _I16.pack(len(properties)) + properties
    dst[pos:pos + size] = out
    return size


def write_blank(dst, pos: int, size: int) -> None:
    """End-of-file marker: TOTALSIZE = bytes left in the file, BLANK magic."""
    if size < L.BLANK_HEADER_BYTES or pos < 0 or pos + L.BLANK_HEADER_BYTES > len(dst):
        raise ValueError("no room for an end-of-file marker")
    dst[pos:pos + L.BLANK_HEADER_BYTES] = L.REC_SIZE_MAGIC.pack(size, L.MAGIC_BLANK)


# --- wire batches (SEND_BATCH_MESSAGE) --------------------------------------
encode_batch_items = batch.encode_batch_items
encode_batch_messages = batch.encode_batch_messages
encode_batch_message = batch.encode_batch_message
_iter_batch_items = batch.iter_batch_items


def _joined_props_len(props_len: int, extra_len: int) -> int:
    if extra_len == 0:
        return props_len
    if props_len == 0:
        return extra_len
    return props_len + 1 + extra_len  # U+0002 between item and batch properties


def measure_batch(items, topic_len: int, extra_props_len: int, sys_flag: int) -> BatchMeasure:
    """Validate a wire batch; returns (count, total record bytes, max body, max properties)."""
    count = total = max_body = max_props = 0
    for _flag, body, props in _iter_batch_items(items):
        plen = _joined_props_len(len(props), extra_props_len)
        total += record_size(len(body), topic_len, plen, sys_flag)
        max_body = max(max_body, len(body))
        max_props = max(max_props, plen)
        count += 1
    return BatchMeasure(count, total, max_body, max_props)


def encode_batch(dst, pos: int, items, topic: bytes, queue_id: int, first_queue_offset: int,
                 phy_offset: int, sys_flag: int, born_timestamp: int, born_host: bytes,
                 store_timestamp: int, store_host: bytes, extra_props: bytes) -> int:
    """Turn a wire batch into consecutive records at ``dst[pos:]``; returns bytes written.

    Queue offsets are consecutive from ``first_queue_offset``; ``phy_offset`` is the
    commitlog offset of ``dst[pos]``; ``extra_props`` are appended to every item.
    """
    _check_host(born_host, sys_flag, L.SYSFLAG_BORNHOST_V6, "born_host")
    _check_host(store_host, sys_flag, L.SYSFLAG_STOREHOST_V6, "store_host")
    # validate everything and check the room first: a batch is written whole or not at all
    need = 0
    for _flag, body, props in _iter_batch_items(items):
        plen = _joined_props_len(len(props), len(extra_props))
        if plen > L.MAX_PROPERTIES_BYTES:
            raise ValueError("properties longer than 32767 bytes")
        need += record_size(len(body), len(topic), plen, sys_flag)
    if pos < 0 or pos + need > len(dst):
        raise ValueError("batch does not fit in the buffer")
    written = 0
    for i, (flag, body, props) in enumerate(_iter_batch_items(items)):
        p = join_property_strings(props, extra_props)
        written += encode_record(dst, pos + written, topic, queue_id, flag, first_queue_offset + i,
                                 phy_offset + written, sys_flag, born_timestamp, born_host,
                                 store_timestamp, store_host, 0, 0, bytes(body), p)
    return written


# --- record scanning (dispatch, recovery) -----------------------------------
def _host_len(sys_flag: int, bit: int) -> int:
    return L.HOST_V6_BYTES if sys_flag & bit else L.HOST_V4_BYTES


_INDEXED_PROPS = (b"TAGS", b"UNIQ_KEY", b"KEYS", b"DELAY")


def _find_props(props: bytes, base: int):
    """Positions (absolute) of TAGS, UNIQ_KEY, KEYS, DELAY values; last occurrence wins."""
    found = {}
    for name_at, name_len, value_at, value_len in property_spans(props):
        name = props[name_at:name_at + name_len]
        if name in _INDEXED_PROPS:
            found[name] = (base + value_at, value_len)
    return found


def _schedule_tags_code(raw_level: bytes, store_ts: int, delay_ms) -> int | None:
    level = _parse_level(raw_level)
    if level <= 0:
        return None
    level = min(level, len(delay_ms))
    if level <= 0:
        return store_ts + 1000
    return store_ts + int(delay_ms[level - 1])


SCHEDULE_TOPIC = b"SCHEDULE_TOPIC_XXXX"


def scan_records(buf, start: int, end: int, base_offset: int, check_crc: bool,
                 delay_ms, max_count: int):
    """Walk records in ``buf[start:end]``.

    Returns ``(table, topics, stop_pos, stop_reason)``: ``table`` is a DISPATCH_DTYPE
    array with one row per valid record, ``topics`` the distinct topic bytes that
    ``table['topic_idx']`` points into, ``stop_pos`` where scanning stopped and
    ``stop_reason`` a ``ScanStop`` value.
    """
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    rows = []
    topics: list[bytes] = []
    topic_ids: dict[bytes, int] = {}
    pos = start
    reason = L.ScanStop.END
    while pos < end:
        if len(rows) >= max_count:
            reason = L.ScanStop.MAX_COUNT
            break
        status, size, f = _check_record(mv, pos, end, check_crc)
        if status is not None:
            reason = status
            break
        sys_flag, b, body_at, body_len, topic_at, topic_len, props_at, props_len = f
        topic = bytes(mv[topic_at:topic_at + topic_len])
        tid = topic_ids.get(topic)
        if tid is None:
            tid = topic_ids[topic] = len(topics)
            topics.append(topic)
        props = bytes(mv[props_at:props_at + props_len])
        found = _find_props(props, props_at)
        store_ts = _I64.unpack_from(mv, pos + L.REC_STORETIMESTAMP_V4 + b)[0]
        tags_code = None
        if topic == SCHEDULE_TOPIC and b"DELAY" in found:
            dp, dl = found[b"DELAY"]
            tags_code = _schedule_tags_code(bytes(mv[dp:dp + dl]), store_ts, delay_ms)
        if tags_code is None:
            tags_code = 0
            if b"TAGS" in found:
                tp, tl = found[b"TAGS"]
                tags_code = java_hash_utf8(mv[tp:tp + tl])
        up, ul = found.get(b"UNIQ_KEY", (-1, 0))
        kp, kl = found.get(b"KEYS", (-1, 0))
        rows.append((base_offset + pos, store_ts,
                     _I64.unpack_from(mv, pos + L.REC_QUEUEOFFSET)[0], tags_code, size,
                     _I32.unpack_from(mv, pos + L.REC_QUEUEID)[0], sys_flag, tid, up, ul, kp, kl))
        pos += size
    table = np.array(rows, dtype=DISPATCH_DTYPE) if rows else np.empty(0, DISPATCH_DTYPE)
    return RecordScan(table, topics, pos, reason)


def _host_str(raw: bytes) -> str:
    port = _I32.unpack(raw[-4:])[0]
    ip = raw[:-4]
    if len(ip) == 4:
        return "%d.%d.%d.%d:%d" % (ip[0], ip[1], ip[2], ip[3], port)
    import ipaddress
    return "[%s]:%d" % (ipaddress.IPv6Address(bytes(ip)), port)


def decode_records(buf, start: int, end: int, max_count: int, check_crc: bool = False) -> list[DecodedRecord]:
    """Fully decode records in ``buf[start:end]`` into ``DecodedRecord`` values.

    Stops quietly at a blank marker or at never-written space; raises
    ``RecordDecodeError`` on a corrupt record. Strings are ``str`` (topic) and hosts
    ``"ip:port"``; body and properties are ``bytes``.
    """
    mv = memoryview(buf)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    out = []
    pos = start
    while pos < end and len(out) < max_count:
        status, size, f = _check_record(mv, pos, end, check_crc)
        if status in (L.ScanStop.BLANK, L.ScanStop.NO_DATA):
            break
        if status is not None:
            raise RecordDecodeError(f"corrupt record at byte {pos}: {L.ScanStop.NAMES[status]}")
        sys_flag, b, body_at, body_len, topic_at, topic_len, props_at, props_len = f
        s = L.HOST_V6_EXTRA if sys_flag & L.SYSFLAG_STOREHOST_V6 else 0
        born_host = bytes(mv[pos + L.REC_BORNHOST:pos + L.REC_BORNHOST + 8 + b])
        sh_at = pos + L.REC_STOREHOST_V4 + b
        out.append(_new_tuple(DecodedRecord, (
            size,
            _I32.unpack_from(mv, pos + L.REC_BODYCRC)[0],
            _I32.unpack_from(mv, pos + L.REC_QUEUEID)[0],
            _I32.unpack_from(mv, pos + L.REC_FLAG)[0],
            _I64.unpack_from(mv, pos + L.REC_QUEUEOFFSET)[0],
            _I64.unpack_from(mv, pos + L.REC_PHYOFFSET)[0],
            sys_flag,
            _I64.unpack_from(mv, pos + L.REC_BORNTIMESTAMP)[0],
            _host_str(born_host),
            _I64.unpack_from(mv, pos + L.REC_STORETIMESTAMP_V4 + b)[0],
            _host_str(bytes(mv[sh_at:sh_at + 8 + s])),
            _I32.unpack_from(mv, pos + L.REC_RECONSUMETIMES_V4 + b + s)[0],
            _I64.unpack_from(mv, pos + L.REC_PREPAREDOFFSET_V4 + b + s)[0],
            bytes(mv[body_at + 4:body_at + 4 + body_len]),
            bytes(mv[topic_at:topic_at + topic_len]).decode("utf-8", "replace"),
            bytes(mv[props_at:props_at + props_len]),
        )))
        pos += size
    return out


# --- consume queue -----------------------------------------------------------
def cq_write(dst, pos: int, phys, sizes, tags) -> int:
    """Write len(phys) 20-byte units at ``dst[pos:]``; returns bytes written."""
    n = len(phys)
    if not (len(sizes) == len(tags) == n):
        raise ValueError("phys, sizes and tags differ in length")
    if pos < 0 or pos + n * L.CQ_UNIT_SIZE > len(dst):
        raise ValueError("consume-queue units do not fit in the buffer")
    out = bytearray(n * L.CQ_UNIT_SIZE)
    for i in range(n):
        L.CQ_UNIT.pack_into(out, i * L.CQ_UNIT_SIZE, int(phys[i]), int(sizes[i]), int(tags[i]))
    dst[pos:pos + len(out)] = out
    return len(out)


#: the slots ``decode_message_objects`` fills, in this order
MESSAGE_SLOTS = ("topic", "body", "flag", "_properties", "_props_raw", "transaction_id", "broker_name",
                 "queue_id", "queue_offset", "commitlog_offset", "store_size", "body_crc", "sys_flag",
                 "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
                 "prepared_transaction_offset")


def decode_message_objects(buf, start: int, end: int, max_count: int, cls: type, broker_name: str | None,
                           props_suffix: bytes) -> tuple[list[Any], bool]:
    """Records of a pull answer straight into ``cls`` objects (the client's ``MessageExt``):
    ``object.__new__(cls)`` with every slot of ``MESSAGE_SLOTS`` written once from the record
    (``_properties`` None, ``transaction_id`` None, ``broker_name`` as given, ``store_size`` the
    record size, ``_props_raw`` the stored properties with ``props_suffix`` appended after a
    separator when both are non-empty, or whichever is). Bodies are as stored; the second
    value says whether any record is compressed (the caller decompresses those).

    Why: building a named record per message and then copying its fields into a
    ``MessageExt`` was two thirds of a consumer's decode time; the compiled kernel writes
    the object's slots directly."""
    out = []
    compressed = False
    for r in decode_records(buf, start, end, max_count):
        props = r.properties
        if props_suffix:
            props = props + L.PROPERTY_SEPARATOR + props_suffix if props else props_suffix
        compressed = compressed or bool(r.sys_flag & L.SYSFLAG_COMPRESSED)
        m = object.__new__(cls)
        for name, value in zip(MESSAGE_SLOTS, (
                r.topic, r.body, r.flag, None, props, None, broker_name, r.queue_id, r.queue_offset,
                r.phy_offset, r.store_size, r.body_crc, r.sys_flag, r.born_timestamp, r.born_host,
                r.store_timestamp, r.store_host, r.reconsume_times, r.prepared_offset)):
            setattr(m, name, value)
        out.append(m)
    return out, compressed


def cq_count_valid(buf, start: int, end: int) -> int:
    """Number of consecutive valid units (offset >= 0 and size > 0) from ``start``."""
    if start < 0:
        raise ValueError("consume-queue read outside the buffer")
    end = min(end, len(buf))
    n = 0
    pos = start
    while pos + L.CQ_UNIT_SIZE <= end:
        phy, size, _tags = L.CQ_UNIT.unpack_from(buf, pos)
        if phy < 0 or size <= 0:
            break
        n += 1
        pos += L.CQ_UNIT_SIZE
    return n


def cq_read(buf, start: int, count: int) -> QueueUnits:
    """Units at ``buf[start:]`` as three arrays (phys int64, sizes int32, tags int64)."""
    if start < 0 or count < 0 or start + count * L.CQ_UNIT_SIZE > len(buf):
        raise ValueError("consume-queue read outside the buffer")
    phys = np.empty(count, np.int64)
    sizes = np.empty(count, np.int32)
    tags = np.empty(count, np.int64)
    for i in range(count):
        phys[i], sizes[i], tags[i] = L.CQ_UNIT.unpack_from(buf, start + i * L.CQ_UNIT_SIZE)
    return QueueUnits(phys, sizes, tags)


def cq_select(buf, start: int, count: int, codes, max_count: int, max_bytes: int) -> QueueSelection:
    """Pick units for a pull: tag filter by ``(int)tagsCode in codes`` (None = all).

    Scans at most ``count`` units from ``start``; stops once ``max_count`` units were
    picked or the next pick would exceed ``max_bytes`` (the first pick is always
    taken). Returns ``(scanned, indices)``: units scanned and the picked unit
    indices relative to ``start``.
    """
    if start < 0 or count < 0 or start + count * L.CQ_UNIT_SIZE > len(buf):
        raise ValueError("consume-queue read outside the buffer")
    if max_count < 1:
        raise ValueError("max_count must be at least 1")
    code_set = None if codes is None else {int(c) for c in codes}
    picked: list[int] = []
    total = 0
    scanned = 0
    for i in range(count):
        phy, size, tags = L.CQ_UNIT.unpack_from(buf, start + i * L.CQ_UNIT_SIZE)
        if picked and (len(picked) >= max_count or total + size > max_bytes):
            break
        scanned = i + 1
        if code_set is not None and _to_int32(tags) not in code_set:
            continue
        picked.append(i)
        total += size
    return QueueSelection(scanned, np.array(picked, dtype=np.int64))


def cq_runs(buf, start: int, count: int, codes, max_count: int, max_bytes: int, min_phy: int,
            file_size: int) -> tuple[int, list[tuple[int, int, int]], bool]:
    """Pick units for a pull as ``cq_select`` does and join the records they point at into
    runs: the lookup of a pull in one step.

    Returns ``(scanned, runs, removed)``: units scanned; ``(phy offset, length, records)`` of
    each run of picked records adjacent in the commitlog (a run never crosses a multiple of
    ``file_size``: one run is one view of one mapped file); and whether a picked unit
    pointed below ``min_phy`` (its record was cleaned up: left out of the runs).
    """
    if start < 0 or count < 0 or start + count * L.CQ_UNIT_SIZE > len(buf):
        raise ValueError("consume-queue read outside the buffer")
    if max_count < 1 or file_size < 1:
        raise ValueError("max_count and file_size must be at least 1")
    code_set = None if codes is None else {int(c) for c in codes}
    runs: list[tuple[int, int, int]] = []
    n = total = scanned = 0
    removed = False
    run_start = run_end = run_n = 0
    for i in range(count):
        phy, size, tags = L.CQ_UNIT.unpack_from(buf, start + i * L.CQ_UNIT_SIZE)
        if n and (n >= max_count or total + size > max_bytes):
            break
        scanned = i + 1
        if code_set is not None and _to_int32(tags) not in code_set:
            continue
        n += 1
        total += size
        if phy < min_phy:
            removed = True
            continue
        if run_n and phy == run_end and phy // file_size == run_start // file_size:
            run_end = phy + size
            run_n += 1
            continue
        if run_n:
            runs.append((run_start, run_end - run_start, run_n))
        run_start, run_end, run_n = phy, phy + size, 1
    if run_n:
        runs.append((run_start, run_end - run_start, run_n))
    return scanned, runs, removed


def pull_lookup(cq: Any, commitlog: Any, offset: int, max_msg_nums: int, cap_count: int, cap_bytes: int,
                codes: Any, filter_units: int) -> tuple[str, int, int, int, list[memoryview], int, int] | None:
    """A pull's lookup in one call: ``MessageReader.get_message``'s usual case over a consume
    queue ``cq`` and the ``commitlog`` (duck-typed store objects: this twin calls their
    methods, the compiled kernel reads the same fields of their mapped files).

    Up to ``max(1, min(max_msg_nums, cap_count))`` records from queue offset ``offset``, at
    most ``cap_bytes`` of them (the first always), filtered by the tag ``codes`` (None: all;
    then up to ``filter_units`` units are examined). Returns ``(status name, next begin
    offset, min offset, max offset, views, message count, their bytes)``, the views being
    whole runs of records below the commitlog's committed end; or None when a run is not
    readable as one view (a file gone, or part of it past the committed end): the caller
    then reads record by record.
    """
    max_count = max(1, min(max_msg_nums, cap_count))
    lo, hi = cq.min_offset(), cq.max_offset()
    if hi == 0:
        return "NO_MESSAGE_IN_QUEUE", 0, lo, hi, [], 0, 0
    if offset < lo:
        return "OFFSET_TOO_SMALL", lo, lo, hi, [], 0, 0
    if offset == hi:
        return "OFFSET_OVERFLOW_ONE", offset, lo, hi, [], 0, 0
    if offset > hi:  # past the end: back to the end (never to 0), as RocketMQ 4.9.7 and 5.x answer
        return "OFFSET_OVERFLOW_BADLY", hi, lo, hi, [], 0, 0
    window = max_count if codes is None else max(filter_units, max_count)
    got = cq.units_at(offset, window)
    if got is None:
        return "OFFSET_FOUND_NULL", cq.next_file_offset(offset), lo, hi, [], 0, 0
    buf, pos, count = got
    scanned, runs, removed = cq_runs(buf, pos, count, codes, max_count, cap_bytes, commitlog.min_offset,
                                     commitlog.file_size)
    buffers = []
    n = total = 0
    for start, length, records in runs:
        view = commitlog.view(start, length)
        if view is None:
            return None
        buffers.append(view)
        n += records
        total += length
    status = "FOUND" if n else ("MESSAGE_WAS_REMOVING" if removed else "NO_MATCHED_MESSAGE")
    return status, offset + scanned, lo, hi, buffers, n, total


# --- the store's hot state ---------------------------------------------------------------------
# Twins of the C bases in _store.pyx (declared in _store.pxd): the same field names as slots.
# mqcore/store/hot_state.py derives the store's classes from whichever kernels the store has;
# with these the fields are plain slots and nothing reads them as struct fields.

class MappedFileCore:
    """``MappedFile``'s positions, buffer and flags."""

    __slots__ = ("file_from_offset", "file_size", "wrote_position", "flushed_position", "reserved_end", "buf",
                 "_view_lock", "reserved", "_closed")


class MappedFileQueueCore:
    """``MappedFileQueue.files``."""

    __slots__ = ("files",)


class ConsumeQueueCore:
    """``ConsumeQueue``'s file queue and its two offsets."""

    __slots__ = ("queue", "max_physic_offset", "min_logic_offset")


class MessageWriterCore:
    """``MessageWriter``'s configuration, flush wait, refusals and last store time."""

    __slots__ = ("cfg", "wait_flushed", "refuse_reason", "disk_full_reason", "last_store_timestamp")


class DispatcherCore:
    """``Dispatcher``'s recovery bound and last store time."""

    __slots__ = ("no_new_queues_below", "last_store_timestamp")


class IndexServiceCore:
    """``IndexService.files``."""

    __slots__ = ("files",)


class IndexFileCore:
    """``IndexFile.mf``."""

    __slots__ = ("mf",)


class PullReader:
    """``pull_lookup`` for one store's ``commitlog``: ``lookup(cq, offset, ...)`` answers as
    ``pull_lookup(cq, commitlog, offset, ...)``. The compiled kernel keeps between pulls what
    does not change - each mapped file's base offset, size and view lock, the file lists as
    last seen (checked to be the live ones per pull) - and reads per pull only what moves."""

    def __init__(self, commitlog: Any) -> None:
        self.commitlog = commitlog

    def lookup(self, cq: Any, offset: int, max_msg_nums: int, cap_count: int, cap_bytes: int, codes: Any,
               filter_units: int) -> tuple[str, int, int, int, list[memoryview], int, int] | None:
        return pull_lookup(cq, self.commitlog, offset, max_msg_nums, cap_count, cap_bytes, codes, filter_units)


def cq_search_time(buf, lo: int, hi: int, timestamp: int, store_time_of: Callable[[int, int], int]) -> int:
    """Unit index in [lo, hi) whose store time is closest to ``timestamp``.

    Binary search as ``ConsumeQueue.getOffsetInQueueByTime``: an exact match wins,
    else the nearer neighbour, ties to the earlier. ``store_time_of(phy, size)``
    returns -1 when the message is gone; the search then moves later.
    """
    if lo < 0 or hi * L.CQ_UNIT_SIZE > len(buf):
        raise ValueError("consume-queue search outside the buffer")
    left, right = lo, hi - 1
    left_ts = right_ts = -1
    left_i = right_i = -1
    while left <= right:
        mid = (left + right) // 2
        phy, size, _ = L.CQ_UNIT.unpack_from(buf, mid * L.CQ_UNIT_SIZE)
        ts = store_time_of(phy, size)
        if ts < 0:
            left = mid + 1
            continue
        if ts == timestamp:
            return mid
        if ts > timestamp:
            right_i, right_ts = mid, ts
            right = mid - 1
        else:
            left_i, left_ts = mid, ts
            left = mid + 1
    if left_i < 0 and right_i < 0:
        return lo
    if left_i < 0:
        return right_i
    if right_i < 0:
        return left_i
    return left_i if timestamp - left_ts <= right_ts - timestamp else right_i


# --- index file --------------------------------------------------------------
def _hash_key(topic_hash_state: int, key: bytes) -> int:
    # continue from hash("topic#") over the key's UTF-16 units
    units = bytes(key).decode("utf-8", "replace").encode("utf-16-be", "surrogatepass")
    return index_hash(_to_int32(_hash_units(topic_hash_state, units)))


def index_keys(buf, table, topics: Sequence[bytes]) -> IndexKeys:
    """Index keys of dispatched records: ``topic#UNIQ_KEY`` then ``topic#k`` for each KEYS word.

    Returns three arrays (key hashes int32, phy offsets int64, store timestamps int64)
    in dispatch order.
    """
    mv = memoryview(buf)
    prefix = [_hash_units(0, t.decode("utf-8", "replace").encode("utf-16-be", "surrogatepass") + b"\x00#")
              for t in topics]
    hashes, phys, tss = [], [], []
    for row in table:
        state = prefix[row["topic_idx"]]
        keys = []
        if row["uniq_len"] > 0:
            keys.append(bytes(mv[row["uniq_pos"]:row["uniq_pos"] + row["uniq_len"]]))
        if row["keys_len"] > 0:
            keys.extend(k for k in bytes(mv[row["keys_pos"]:row["keys_pos"] + row["keys_len"]]).split(b" ") if k)
        for k in keys:
            hashes.append(_hash_key(state, k))
            phys.append(int(row["phy_offset"]))
            tss.append(int(row["store_timestamp"]))
    return IndexKeys(np.array(hashes, np.int32), np.array(phys, np.int64), np.array(tss, np.int64))


def index_put_one(buf, slots: int, max_entries: int, key_hash: int, phy: int, timestamp: int) -> int:
    """``index_put`` of one key without arrays: 1 when put, 0 when the file is full."""
    return index_put(buf, slots, max_entries, [key_hash], [phy], [timestamp], 0)


def _slot_pos(key_hash: int, slots: int) -> int:
    return L.INDEX_HEADER_SIZE + (key_hash % slots) * L.INDEX_SLOT_SIZE


def _entry_pos(n: int, slots: int) -> int:
    return L.INDEX_HEADER_SIZE + slots * L.INDEX_SLOT_SIZE + n * L.INDEX_ENTRY_SIZE


def _check_index_geometry(buf_len: int, slots: int, max_entries: int) -> None:
    if slots < 1 or max_entries < 2:
        raise ValueError(f"an index file needs slots >= 1 and max_entries >= 2 (got {slots}, {max_entries})")
    if L.index_file_size(slots, max_entries) > buf_len:
        raise ValueError("index buffer smaller than slots and entries need")


def _check_index_header(count: int, slot_count: int, max_entries: int) -> None:
    """indexCount is the next entry number (entry 0 is never used), so 1..max_entries."""
    if count < 1 or count > max_entries:
        raise CorruptFileError(f"index header: indexCount {count} is outside 1..{max_entries}")
    if slot_count < 0 or slot_count > count:
        raise CorruptFileError(f"index header: hashSlotCount {slot_count} is outside 0..{count}")


def index_put(buf, slots: int, max_entries: int, hashes, phys, timestamps, start: int) -> int:
    """Append keys ``start..`` into the index file in ``buf``; returns the next key not put.

    Stops early when the file is full (indexCount reached ``max_entries``); the caller
    then opens a new file and calls again from the returned position.
    """
    _check_index_geometry(len(buf), slots, max_entries)
    n = len(hashes)
    if len(phys) != n or len(timestamps) != n:
        raise ValueError("hashes, phys and timestamps differ in length")
    if start < 0 or start > n:
        raise ValueError("start outside the keys")
    if any(int(h) < 0 for h in hashes[start:]):
        raise ValueError("index key hashes must be >= 0 (index_hash)")
    begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count = L.INDEX_HEADER.unpack_from(buf, 0)
    # the header comes from a file: a damaged count would send the loop outside the buffer
    _check_index_header(index_count, slot_count, max_entries)
    i = start
    while i < n:
        if index_count >= max_entries:
            break
        h = int(hashes[i])
        phy = int(phys[i])
        ts = int(timestamps[i])
        sp = _slot_pos(h, slots)
        prev = _I32.unpack_from(buf, sp)[0]
        if prev <= 0 or prev > index_count:
            prev = 0
        diff = 0 if begin_ts <= 0 else (ts - begin_ts) // 1000
        diff = max(0, min(diff, 0x7FFFFFFF))
        L.INDEX_ENTRY.pack_into(buf, _entry_pos(index_count, slots), h, phy, diff, prev)
        _I32.pack_into(buf, sp, index_count)
        if index_count <= 1:
            begin_phy, begin_ts = phy, ts
        if prev == 0:
            slot_count += 1
        index_count += 1
        end_phy, end_ts = phy, ts
        i += 1
    L.INDEX_HEADER.pack_into(buf, 0, begin_ts, end_ts, begin_phy, end_phy, slot_count, index_count)
    return i


def index_query(buf, slots: int, max_entries: int, key_hash: int, begin_ts: int, end_ts: int,
                max_num: int) -> tuple[list[int], bool]:
    """Walk the chain of ``key_hash``; (phy offsets of entries stored in [begin_ts, end_ts],
    damaged). A chain link that does not point strictly backwards (the file was damaged: it
    could close a loop) ends the walk with ``damaged`` true instead of walking forever."""
    _check_index_geometry(len(buf), slots, max_entries)
    if key_hash < 0:
        raise ValueError("index key hashes must be >= 0 (index_hash)")
    file_begin_ts = _I64.unpack_from(buf, L.IDXH_BEGIN_TIMESTAMP)[0]
    index_count = _I32.unpack_from(buf, L.IDXH_INDEX_COUNT)[0]
    _check_index_header(index_count, _I32.unpack_from(buf, L.IDXH_HASH_SLOT_COUNT)[0], max_entries)
    out: list[int] = []
    cur = _I32.unpack_from(buf, _slot_pos(key_hash, slots))[0]
    if cur == 0:
        return out, False
    if cur < 0 or cur >= index_count:
        return out, True
    steps = 0
    while len(out) < max_num:
        h, phy, diff, prev = L.INDEX_ENTRY.unpack_from(buf, _entry_pos(cur, slots))
        t = file_begin_ts + diff * 1000
        if h == key_hash and begin_ts <= t <= end_ts:
            out.append(phy)
        if prev <= 0:
            break
        steps += 1
        # strictly backwards bounds the walk by itself; the step count is the belt to it
        if prev >= cur or steps >= index_count:
            return out, True
        if t < begin_ts:
            break
        cur = prev
    return out, False


# --- page cache ----------------------------------------------------------------------------------
def prefault(buf, start: int, end: int, page_size: int = 4096) -> int:
    """Twin of the kernel's page warm-up: reports the pages it would touch and changes nothing
    (pure Python cannot fault a page in for writing without risking a concurrent writer)."""
    if start < 0 or end > len(buf) or start >= end:
        return 0
    return len(range(start - start % page_size, end, page_size))


