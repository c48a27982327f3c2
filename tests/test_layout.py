"""The byte layout is defined once per language: mqcore/format/layout.py and mqcore/_store.pxd agree.

The kernels' C code cannot import Python constants, so ``_store.pxd`` repeats them as
enums; this test is what makes that repetition safe. It also checks that the struct and
numpy shapes in ``layout`` are built from the named offsets, and that the Python and C
walks of the property grammar agree.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mqcore
from mqcore.format import layout as L
from mqcore.format.batch import encode_batch_items, iter_batch_items
from mqcore.format.properties import (
    format_properties,
    parse_properties,
    split_properties,
)

PXD = os.path.join(os.path.dirname(mqcore.__file__), "_store.pxd")

#: .pxd enum names that are spelled differently in layout.py
_RENAMED = {
    "STOP_END": L.ScanStop.END, "STOP_BLANK": L.ScanStop.BLANK, "STOP_NO_DATA": L.ScanStop.NO_DATA,
    "STOP_CORRUPT": L.ScanStop.CORRUPT, "STOP_MAX_COUNT": L.ScanStop.MAX_COUNT,
    "STOP_TRUNCATED": L.ScanStop.TRUNCATED,
    "NAME_VALUE_SEPARATOR_BYTE": L.NAME_VALUE_SEPARATOR[0], "PROPERTY_SEPARATOR_BYTE": L.PROPERTY_SEPARATOR[0],
}


def _pxd_enums() -> dict[str, int]:
    """NAME = value lines inside the ``cdef enum:`` blocks of the .pxd."""
    out: dict[str, int] = {}
    in_enum = False
    for line in open(PXD, encoding="utf-8"):
        if line.startswith("cdef enum"):
            in_enum = True
            continue
        if in_enum:
            m = re.match(r"^\s+([A-Z0-9_]+)\s*=\s*(-?(?:0x[0-9A-Fa-f]+|[0-9]+))\s*$", line)
            if m:
                out[m.group(1)] = int(m.group(2), 0)
            elif line.strip() and not line.startswith((" ", "\t")):
                in_enum = False
    return out


def test_every_pxd_constant_matches_layout():
    enums = _pxd_enums()
    assert len(enums) > 50, "the .pxd parser found too few constants; the file format changed?"
    unknown, wrong = [], []
    for name, value in enums.items():
        expected = _RENAMED[name] if name in _RENAMED else getattr(L, name, None)
        if expected is None:
            unknown.append(name)
        elif expected != value:
            wrong.append((name, value, expected))
    assert not wrong, f".pxd value != layout value: {wrong}"
    assert not unknown, f".pxd constants with no layout.py counterpart: {unknown}"


def test_pxd_dispatch_row_matches_dispatch_fields():
    text = open(PXD, encoding="utf-8").read()
    body = text.split("cdef packed struct DispatchRow:")[1].split("\n\n")[0]
    fields = re.findall(r"^\s+(int32_t|int64_t)\s+(\w+)", body, flags=re.M)
    want = [("int64_t" if t == "<i8" else "int32_t", n) for n, t in L.DISPATCH_FIELDS]
    assert fields == want


def test_structs_follow_the_named_offsets():
    assert L.INDEX_HEADER.size == L.INDEX_HEADER_SIZE
    assert L.INDEX_ENTRY.size == L.INDEX_ENTRY_SIZE
    assert L.CQ_UNIT.size == L.CQ_UNIT_SIZE
    assert L.BATCH_ITEM_HEAD.size == L.BATCH_ITEM_FIXED
    assert L.CHECKPOINT_FIELDS.size == L.CKPT_INDEX_MSG_TIMESTAMP + 8
    # the record's pieces the twin writes with: head up to the born host, store timestamp
    # between the hosts, tail from RECONSUMETIMES to the body
    assert L.REC_HEAD.size == L.REC_BORNHOST
    assert L.REC_STORETIMESTAMP.size == L.REC_STOREHOST_V4 - L.REC_STORETIMESTAMP_V4
    assert L.REC_TAIL.size == L.REC_FIXED_V4 - L.REC_RECONSUMETIMES_V4
    assert L.REC_SIZE_MAGIC.size == L.REC_MAGIC + 4 == L.BLANK_HEADER_BYTES
    head = L.REC_HEAD.pack(1, 2, 3, 4, 5, 6, 7, 8, 9)
    assert [int.from_bytes(head[o:o + w], "big") for o, w in
            ((L.REC_QUEUEID, 4), (L.REC_QUEUEOFFSET, 8), (L.REC_SYSFLAG, 4), (L.REC_BORNTIMESTAMP, 8))] == [4, 6, 8, 9]
    tail = L.REC_TAIL.pack(1, 2, 3)
    assert int.from_bytes(tail[L.REC_BODYLENGTH_V4 - L.REC_RECONSUMETIMES_V4:], "big") == 3
    # a unit packed by the struct reads back field by field at the named offsets
    raw = L.CQ_UNIT.pack(123456789012, 345, -7)
    unit = np.frombuffer(raw, L.CQ_UNIT_DTYPE)[0]
    assert (int(unit["phy_offset"]), int(unit["size"]), int(unit["tags_code"])) == (123456789012, 345, -7)
    native = np.frombuffer(raw, L.CQ_UNIT_DTYPE).astype(L.CQ_UNIT_NATIVE_DTYPE)
    assert native.dtype.fields["phy_offset"][0].isnative and int(native[0]["size"]) == 345
    entry = L.INDEX_ENTRY.pack(-5, 99, 7, 3)
    e = np.frombuffer(entry, L.INDEX_ENTRY_DTYPE)[0]
    assert (int(e["key_hash"]), int(e["phy_offset"]), int(e["time_diff"]), int(e["prev_index"])) == (-5, 99, 7, 3)
    header = L.INDEX_HEADER.pack(1, 2, 3, 4, 5, 6)
    assert int.from_bytes(header[L.IDXH_INDEX_COUNT:L.IDXH_INDEX_COUNT + 4], "big") == 6
    assert int.from_bytes(header[L.IDXH_HASH_SLOT_COUNT:L.IDXH_HASH_SLOT_COUNT + 4], "big") == 5


def test_properties_round_trip_and_tolerance():
    props = {"TAGS": "a", "KEYS": "k1 k2", "UNIQ_KEY": "ABC"}
    text = format_properties(props)
    assert parse_properties(text) == props
    assert parse_properties(text.encode()) == props
    # Java's string2messageProperties skips segments without a name or a value
    raw = b"\x01v\x02n\x01\x02good\x01yes\x02\x02good\x01again"
    assert split_properties(raw) == [(b"good", b"again")]
    assert parse_properties(raw) == {"good": "again"}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"X", b""]),
                          st.binary(max_size=5)), max_size=6),
       st.binary(max_size=8))
def test_c_and_python_property_walks_agree(both_kernels, pairs, noise):
    """The scanner's TAGS/KEYS/UNIQ_KEY spans (C walk) equal the last valid pair (Python walk)."""
    props = b"\x02".join(n + b"\x01" + v.replace(b"\x02", b"") for n, v in pairs) + noise.replace(b"\x02", b"")
    if len(props) > L.MAX_PROPERTIES_BYTES:
        return
    want = dict(split_properties(props))
    for k in both_kernels:
        buf = bytearray(len(props) + 256)
        size = k.encode_record(buf, 0, b"T", 0, 0, 0, 0, 0, 0, b"\x7f\x00\x00\x01\x00\x00\x00\x01", 0,
                               b"\x7f\x00\x00\x01\x00\x00\x00\x02", 0, 0, b"body", props)
        table, _topics, _stop, _reason = k.scan_records(buf, 0, size, 0, True, (1000,), 10)
        assert len(table) == 1
        row = table[0]
        uniq = bytes(buf[row["uniq_pos"]:row["uniq_pos"] + row["uniq_len"]]) if row["uniq_pos"] >= 0 else None
        keys = bytes(buf[row["keys_pos"]:row["keys_pos"] + row["keys_len"]]) if row["keys_pos"] >= 0 else None
        assert uniq == want.get(b"UNIQ_KEY"), k.__name__
        assert keys == want.get(b"KEYS"), k.__name__


def test_batch_items_round_trip_and_reject_bad_sizes():
    body = encode_batch_items([(0, b"one", b"A\x01b"), (7, b"", b"")])
    items = [(f, bytes(b), bytes(p)) for f, b, p in iter_batch_items(body)]
    assert items == [(0, b"one", b"A\x01b"), (7, b"", b"")]
    from mqcore.errors import RecordDecodeError
    for bad in (body[:-1], body + b"\x00", b"\x00\x00\x00\x05" + body[4:]):
        with pytest.raises(RecordDecodeError):
            list(iter_batch_items(bad))


def test_both_kernels_write_every_record_field_at_its_named_offset(both_kernels):
    """Every field distinct and non-zero, so a field written at another offset (or in another
    order, as a positional struct format could) changes the bytes."""
    born, store = b"\x0a\x00\x00\x07\x00\x00\x9c\x40", b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    args = (b"Topic", 3, 0x55, 123456, 987654321, L.SYSFLAG_COMPRESSED, 1_700_000_000_001, born,
            1_700_000_000_002, store, 7, 424242, b"body!", b"K\x01V")
    out = []
    for k in both_kernels:
        buf = bytearray(256)
        size = k.encode_record(buf, 0, *args)
        out.append(bytes(buf[:size]))
    assert out[0] == out[1]
    rec = out[0]

    def at(off, width):
        return int.from_bytes(rec[off:off + width], "big", signed=True)
    assert at(L.REC_TOTALSIZE, 4) == len(rec) and at(L.REC_MAGIC, 4) == L.MAGIC_V1
    assert (at(L.REC_QUEUEID, 4), at(L.REC_FLAG, 4), at(L.REC_QUEUEOFFSET, 8), at(L.REC_PHYOFFSET, 8)) == \
        (3, 0x55, 123456, 987654321)
    assert (at(L.REC_SYSFLAG, 4), at(L.REC_BORNTIMESTAMP, 8), at(L.REC_STORETIMESTAMP_V4, 8)) == \
        (L.SYSFLAG_COMPRESSED, 1_700_000_000_001, 1_700_000_000_002)
    assert rec[L.REC_BORNHOST:L.REC_BORNHOST + 8] == born and rec[L.REC_STOREHOST_V4:L.REC_STOREHOST_V4 + 8] == store
    assert (at(L.REC_RECONSUMETIMES_V4, 4), at(L.REC_PREPAREDOFFSET_V4, 8), at(L.REC_BODYLENGTH_V4, 4)) == \
        (7, 424242, 5)
