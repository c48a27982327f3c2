"""``mqstore dump``: commitlog records, consume-queue units or index entries, read-only.

Each function writes rows to ``out`` and returns a list of problems that stopped it
(a corrupt record, a short file); the caller prints them and sets the exit status.
"""
from __future__ import annotations

import struct
from typing import IO, Any

import numpy as np

from mqcore.errors import CorruptFileError, IllegalArgumentError, RecordDecodeError
from mqcore.format import layout as L
from mqcore.format.files import (
    FileScan,
    ReadOnlyFile,
    StoreFiles,
    index_entries,
    index_header,
    iter_cq,
)
from mqcore.format.record import DecodedRecord
from mqcore.kernel_api import StoreKernels
from mqcore.message import MessageExt
from mqcore.tools.output import Emitter, body_fields, iso_ms

_I32 = struct.Struct(">i")
_DECODE_BATCH = 1024

RECORD_COLUMNS = (("offset", "OFFSET", 12), ("size", "SIZE", 6), ("topic", "TOPIC", 20), ("queue_id", "QID", 4),
                  ("queue_offset", "QOFFSET", 8), ("store_time", "STORE_TIME", 24), ("tags", "TAGS", 12),
                  ("keys", "KEYS", 16), ("preview", "BODY", 0))
CQ_COLUMNS = (("queue_offset", "QOFFSET", 10), ("phy_offset", "PHY_OFFSET", 14), ("size", "SIZE", 10),
              ("tags_code", "TAGS_CODE", 0))
INDEX_COLUMNS = (("index", "ENTRY", 10), ("key_hash", "KEY_HASH", 11), ("slot", "SLOT", 9),
                 ("phy_offset", "PHY_OFFSET", 14), ("time_diff", "TIME_DIFF_S", 11), ("prev_index", "PREV", 10),
                 ("store_time", "TIME", 0))


def record_row(k: StoreKernels, f: ReadOnlyFile, pos: int, decoded: DecodedRecord) -> dict[str, Any]:
    """Every field of one record; ``offset`` is where it is, ``physical_offset`` what it says."""
    m = MessageExt.from_decoded(decoded)
    magic = _I32.unpack_from(f.buf, pos + L.REC_MAGIC)[0]
    row: dict[str, Any] = {"offset": f.base + pos, "size": m.store_size, "magic": "v1" if magic == L.MAGIC_V1 else "v2",
           "body_crc": m.body_crc, "topic": m.topic, "queue_id": m.queue_id, "queue_offset": m.queue_offset,
           "physical_offset": m.commitlog_offset, "flag": m.flag, "sys_flag": m.sys_flag,
           "born_timestamp": m.born_timestamp, "born_host": m.born_host, "store_timestamp": m.store_timestamp,
           "store_host": m.store_host, "reconsume_times": m.reconsume_times,
           "prepared_transaction_offset": m.prepared_transaction_offset, "msg_id": m.offset_msg_id,
           "properties": m.properties, "body_length": len(m.body),
           "transaction": _TRANSACTION_TYPES[m.sys_flag & L.SYSFLAG_TRANSACTION_MASK],
           # a transactional message's id is its UNIQ_KEY (what the producer's end and checks name)
           "transaction_id": m.properties.get("UNIQ_KEY") if m.properties.get("TRAN_MSG") == "true" else None}
    row.update(body_fields(m.body))
    return row


#: the sysflag's transaction bits; a half message is stored as "none" (in RMQ_SYS_TRANS_HALF_TOPIC)
_TRANSACTION_TYPES = {L.SYSFLAG_TRANSACTION_NOT: "none", L.SYSFLAG_TRANSACTION_PREPARED: "prepared",
                      L.SYSFLAG_TRANSACTION_COMMIT: "commit", L.SYSFLAG_TRANSACTION_ROLLBACK: "rollback"}


def _table_extras(row: dict[str, Any]) -> dict[str, Any]:
    props = row["properties"]
    preview = row["body"] if "body" in row else "base64:" + row["body_base64"]
    return {**row, "store_time": iso_ms(row["store_timestamp"]), "tags": props.get("TAGS"),
            "keys": props.get("KEYS"), "preview": preview[:60]}


def _seek(k: StoreKernels, f: ReadOnlyFile, target: int) -> int:
    """Position of the first record at or after commitlog offset ``target`` in ``f``."""
    scan = FileScan(k, f)
    for table, _ in scan:
        i = int(np.searchsorted(table["phy_offset"], target))
        if i < len(table):
            return int(table["phy_offset"][i]) - f.base
    return scan.stop


def dump_commitlog(k: StoreKernels, store: StoreFiles, out: IO[str], *, start: int = 0, limit: int | None = None,
                   fmt: str = "jsonl") -> list[str]:
    emit = Emitter(out, fmt, RECORD_COLUMNS)
    remaining = limit if limit is not None else 1 << 62
    for path in store.commitlog_paths():
        with ReadOnlyFile(path) as f:
            if f.end <= start:
                continue
            pos = _seek(k, f, start) if start > f.base else 0
            while remaining > 0:
                want = min(_DECODE_BATCH, remaining)
                try:
                    recs = k.decode_records(f.buf, pos, f.size, want, False)
                except RecordDecodeError as e:
                    return [(f"{f.path}: {e} (commitlog offset {f.base + _corrupt_at(k, f, pos)}); "
                             "run 'mqstore verify' for details")]
                for t in recs:
                    row = record_row(k, f, pos, t)
                    emit.row(_table_extras(row) if fmt == "table" else row)
                    pos += t.store_size
                remaining -= len(recs)
                if len(recs) < want:
                    break
            if remaining <= 0:
                return []
            if not _at_blank(f, pos):
                return []  # never-written space: the end of the log
    return []


def _corrupt_at(k: StoreKernels, f: ReadOnlyFile, pos: int) -> int:
    scan = FileScan(k, f, pos)
    for _ in scan:
        pass
    return scan.stop


def _at_blank(f: ReadOnlyFile, pos: int) -> bool:
    return pos + 8 <= f.size and _I32.unpack_from(f.buf, pos + L.REC_MAGIC)[0] == L.MAGIC_BLANK


def dump_cq(k: StoreKernels, store: StoreFiles, topic: str, queue_id: int, out: IO[str], *, start: int = 0,
            limit: int | None = None, fmt: str = "jsonl") -> list[str]:
    emit = Emitter(out, fmt, CQ_COLUMNS)
    remaining = limit if limit is not None else 1 << 62
    try:
        for first, phys, sizes, tags in iter_cq(k, store.cq_paths(topic, queue_id), start):
            for i in range(min(len(phys), remaining)):
                row: dict[str, Any] = {"queue_offset": first + i, "phy_offset": int(phys[i]), "size": int(sizes[i]),
                       "tags_code": int(tags[i])}
                if row["size"] == L.CQ_FILLER_SIZE:
                    row["filler"] = True
                emit.row(row)
            remaining -= len(phys)
            if remaining <= 0:
                break
    except CorruptFileError as e:
        return [str(e)]
    return []


def dump_index(k: StoreKernels, store: StoreFiles, name: str, out: IO[str], *, start: int = 1, limit: int | None = None,
               fmt: str = "jsonl") -> list[str]:
    path = store.resolve_index(name)
    with ReadOnlyFile(path) as f:
        try:
            begin_ts, end_ts, begin_phy, end_phy, slot_count, count = index_header(f)
            slots, entries = store.index_geometry(f)
        except (CorruptFileError, IllegalArgumentError) as e:
            return [str(e)]
        header = {"type": "header", "file": f.name, "begin_timestamp": begin_ts, "end_timestamp": end_ts,
                  "begin_phy_offset": begin_phy, "end_phy_offset": end_phy, "hash_slot_count": slot_count,
                  "index_count": count, "slots": slots, "entries": entries}
        if fmt == "jsonl":
            Emitter(out, "jsonl", ()).row(header)
        else:
            for key, value in header.items():
                if key != "type":
                    out.write(f"{key}: {value}\n")
            out.write("\n")
        problems = []
        if not 1 <= count <= entries:
            problems.append(f"{f.path}: header indexCount {count} is outside [1, {entries}]")
            count = max(1, min(count, entries))
        first = max(1, start)
        last = count if limit is None else min(count, first + max(limit, 0))
        emit = Emitter(out, fmt, INDEX_COLUMNS)
        for lo in range(first, last, 65536):
            hi = min(last, lo + 65536)
            chunk = index_entries(f, slots, lo, hi - lo)
            for n, (h, phy, diff, prev) in enumerate(chunk.tolist(), lo):
                ts = begin_ts + diff * 1000 if begin_ts > 0 else 0
                row: dict[str, Any] = {"type": "entry", "index": n, "key_hash": h, "slot": h % slots if h >= 0 else None,
                       "phy_offset": phy, "time_diff": diff, "prev_index": prev, "timestamp": ts}
                if fmt == "table":
                    row["store_time"] = iso_ms(ts)
                emit.row(row)
            del chunk
        return problems
