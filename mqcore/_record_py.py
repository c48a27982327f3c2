"""Pure-Python twin of ``_record.pxi``: the record checker and DELAY parser that the store
kernels (``_store_py``) and the column kernels (``_columns_py``) share.

A leaf among the kernels: it imports only ``format``, so neither kernel module imports the
other.
"""
from __future__ import annotations

import re
import struct
import zlib
from typing import Any

from mqcore.format import layout as L

_I32 = struct.Struct(">i")
_I16 = L.PROPS_LENGTH


def _host_extra(sys_flag: int) -> tuple[int, int]:
    b = L.HOST_V6_EXTRA if sys_flag & L.SYSFLAG_BORNHOST_V6 else 0
    s = L.HOST_V6_EXTRA if sys_flag & L.SYSFLAG_STOREHOST_V6 else 0
    return b, s


_LEVEL_RE = re.compile(rb"[+-]?[0-9]+")


def _parse_level(raw: bytes) -> int:
    """DELAY value as an int; 0 (not delayed) unless it is a plain decimal number."""
    if not _LEVEL_RE.fullmatch(raw):
        return 0
    return max(-100000000, min(int(raw), 100000000))


def _check_record(mv: Any, pos: int, end: int,
                  check_crc: bool) -> tuple[int | None, int, tuple[int, ...] | None]:
    """Validate the record at pos; returns (status, size, fields) per checkMessageAndReturnSize."""
    if end - pos < 8:
        return (L.ScanStop.NO_DATA if not any(mv[pos:end]) else L.ScanStop.TRUNCATED), 0, None
    size, magic = L.REC_SIZE_MAGIC.unpack_from(mv, pos)
    if magic == L.MAGIC_BLANK:
        return L.ScanStop.BLANK, size, None
    if magic not in (L.MAGIC_V1, L.MAGIC_V2):
        return (L.ScanStop.NO_DATA if size == 0 and magic == 0 else L.ScanStop.CORRUPT), 0, None
    if size < L.REC_FIXED_V4 + 3:
        return L.ScanStop.CORRUPT, 0, None
    if pos + size > end:
        return L.ScanStop.TRUNCATED, size, None
    sys_flag = _I32.unpack_from(mv, pos + L.REC_SYSFLAG)[0]
    b, s = _host_extra(sys_flag)
    body_at = pos + L.REC_BODYLENGTH_V4 + b + s
    body_len = _I32.unpack_from(mv, body_at)[0]
    if body_len < 0 or body_at + 4 + body_len + 3 > pos + size:
        return L.ScanStop.CORRUPT, 0, None
    topic_at = body_at + 4 + body_len
    if magic == L.MAGIC_V1:
        topic_len = mv[topic_at]
        if topic_len > 127:  # Java reads a signed byte
            return L.ScanStop.CORRUPT, 0, None
        topic_w = 1
    else:
        topic_len = _I16.unpack_from(mv, topic_at)[0]
        topic_w = 2
        if topic_len < 0:
            return L.ScanStop.CORRUPT, 0, None
    props_at = topic_at + topic_w + topic_len
    if props_at + 2 > pos + size:
        return L.ScanStop.CORRUPT, 0, None
    props_len = _I16.unpack_from(mv, props_at)[0]
    if props_len < 0 or props_at + 2 + props_len != pos + size:
        return L.ScanStop.CORRUPT, 0, None
    if check_crc and body_len > 0:
        crc = _I32.unpack_from(mv, pos + L.REC_BODYCRC)[0]
        if zlib.crc32(mv[body_at + 4:body_at + 4 + body_len]) & 0x7FFFFFFF != crc:
            return L.ScanStop.CORRUPT, 0, None
    return None, size, (sys_flag, b, body_at, body_len, topic_at + topic_w, topic_len, props_at + 2, props_len)
