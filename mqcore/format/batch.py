"""Items of a SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessage`` / ``decodeMessages``).

Each item: TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLENGTH (int32 each), body, PROPLENGTH
(int16), properties. The client writes MAGIC and BODYCRC as 0; the broker ignores them.
The Cython kernel checks items with the same rules (``_check_item`` in ``_store.pyx``).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from mqcore.errors import RecordDecodeError
from mqcore.format import layout as L
from mqcore.format.properties import format_properties


def encode_batch_items(items: Iterable[tuple[int, bytes, bytes]]) -> bytes:
    """(flag, body, encoded properties) items -> a SEND_BATCH body."""
    out = bytearray()
    for flag, body, props in items:
        total = L.BATCH_ITEM_FIXED + len(body) + L.PROPS_LENGTH.size + len(props)
        out += L.BATCH_ITEM_HEAD.pack(total, 0, 0, flag, len(body))
        out += body
        out += L.PROPS_LENGTH.pack(len(props)) + props
    return bytes(out)


def encode_batch_messages(items: Iterable[tuple[int, bytes, Mapping[str, str]]]) -> bytes:
    """(flag, body, properties mapping) items -> a SEND_BATCH body, the properties formatted
    as ``messageProperties2String`` (None values left out)."""
    encoded = []
    for i, (flag, body, props) in enumerate(items):
        raw = format_properties(props).encode("utf-8")
        if len(raw) > 32767:
            raise ValueError(f"batch item {i}: properties encode to {len(raw)} bytes, over 32767")
        encoded.append((flag, body, raw))
    return encode_batch_items(encoded)


def encode_batch_message(flag: int, body: bytes, props: Mapping[str, str]) -> bytes:
    """One message's SEND_BATCH item: what ``encode_batch_messages`` writes for it."""
    raw = format_properties(props).encode("utf-8")
    if len(raw) > 32767:
        raise ValueError(f"batch item: properties encode to {len(raw)} bytes, over 32767")
    return encode_batch_items([(flag, body, raw)])


def iter_batch_items(items: bytes | bytearray | memoryview) -> Iterator[tuple[int, memoryview, memoryview]]:
    """(flag, body, properties) views of each item; ``RecordDecodeError`` on any size that does not add up."""
    mv = memoryview(items)
    n = len(mv)
    pos = 0
    plen_size = L.PROPS_LENGTH.size
    while pos < n:
        if n - pos < L.BATCH_ITEM_FIXED:
            raise RecordDecodeError(f"batch item at byte {pos} is truncated")
        total, _magic, _crc, flag, body_len = L.BATCH_ITEM_HEAD.unpack_from(mv, pos)
        if body_len < 0 or total < L.BATCH_ITEM_FIXED + plen_size or pos + total > n:
            raise RecordDecodeError(f"batch item at byte {pos} has an impossible size")
        props_at = pos + L.BATCH_ITEM_FIXED + body_len
        if props_at + plen_size > pos + total:
            raise RecordDecodeError(f"batch item at byte {pos}: body runs past the item")
        props_len = L.PROPS_LENGTH.unpack_from(mv, props_at)[0]
        if props_len < 0 or props_at + plen_size + props_len != pos + total:
            raise RecordDecodeError(f"batch item at byte {pos}: sizes do not add up")
        yield flag, mv[pos + L.BATCH_ITEM_FIXED:props_at], mv[props_at + plen_size:props_at + plen_size + props_len]
        pos += total
