"""The columnar decode kernel: both implementations, against decode_records and each other."""
from __future__ import annotations

import ipaddress
import struct
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore.format import layout as L
from mqcore.message import string_to_properties
from tests.support.kernels import COLUMN_IMPLS, IMPLS

BORN = bytes.fromhex("c0a8000a0000d431")     # 192.168.0.10:54321
STORE = bytes.fromhex("c0a8000100002a9f")    # 192.168.0.1:10911
V6 = ipaddress.IPv6Address("2001:db8::7").packed + struct.pack(">i", 40001)
ALL = (-(1 << 63), (1 << 63) - 1)


@pytest.fixture(params=["cython", "python"])
def kernels(request):
    """The store kernels (which write the records) and the column kernels (which decode them)
    of one implementation, as one namespace: the tests below use both side by side."""
    if request.param not in COLUMN_IMPLS:
        pytest.fail("the compiled kernels did not load")
    store, columns = IMPLS[request.param], COLUMN_IMPLS[request.param]
    merged = {n: getattr(m, n) for m in (store, columns) for n in dir(m) if not n.startswith("__")}
    merged["IMPLEMENTATION"] = store.IMPLEMENTATION
    return types.SimpleNamespace(**merged)


def put(k, buf, pos, *, topic=b"TopicTest", props=b"TAGS\x01TagA", body=b"hello", sys_flag=0, born=BORN,
        store=STORE, store_ts=1_700_000_000_123, base=0, queue_id=1, queue_offset=0, reconsume=0):
    return k.encode_record(buf, pos, topic, queue_id, 7, queue_offset, base + pos, sys_flag, 1_700_000_000_000,
                           born, store_ts, store, reconsume, 99, body, props)


def strings(col, n=None):
    off, data = col
    return [bytes(data[off[i]:off[i + 1]]) for i in range(len(off) - 1)]


def decode_all(k, buf, start=0, stop=None, limit=None, base=0, flags=None, topics=None, ts=ALL,
               max_rows=1000, max_bytes=1 << 20):
    stop = len(buf) if stop is None else stop
    limit = len(buf) if limit is None else limit
    flags = k.WITH_BODY if flags is None else flags
    return k.decode_columns(buf, start, stop, limit, base, max_rows, max_bytes, topics, ts[0], ts[1], flags)


def sample_buffer(k, size=4096, base=0):
    buf = bytearray(size)
    pos = 0
    specs = [
        dict(props=b"KEYS\x01k1 k2  k3\x02TAGS\x01TagA\x02UNIQ_KEY\x01ABC"),
        dict(topic=b"%RETRY%g1", props=b"RETRY_TOPIC\x01TopicTest\x02a\x01b\x02a\x01c\x02bad\x02\x01x",
             sys_flag=1, reconsume=3),
        dict(topic=b"SCHEDULE_TOPIC_XXXX", props=b"DELAY\x013\x02REAL_TOPIC\x01T2", sys_flag=0x30, born=V6,
             store=V6),
        dict(topic=b"%DLQ%g1", props=b"", body=b""),
    ]
    for i, spec in enumerate(specs):
        pos += put(k, buf, pos, base=base, store_ts=1_700_000_000_000 + i * 10, queue_offset=i, **spec)
    return buf, pos


def test_fields_agree_with_decode_records(kernels):
    buf, end = sample_buffer(kernels, base=4096)
    n, cols, nxt, reason, corrupt, _ = decode_all(kernels, buf, base=4096)
    assert (n, nxt, reason, corrupt) == (4, end, L.ScanStop.NO_DATA, 0)
    recs = [r._asdict() for r in kernels.decode_records(buf, 0, end, 100)]
    assert list(cols["commitlog_offset"]) == [r["phy_offset"] for r in recs]
    for name, field in (("queue_id", "queue_id"), ("queue_offset", "queue_offset"), ("store_size", "store_size"),
                        ("body_crc", "body_crc"), ("flag", "flag"), ("sys_flag", "sys_flag"),
                        ("born_timestamp", "born_timestamp"), ("store_timestamp", "store_timestamp"),
                        ("reconsume_times", "reconsume_times"), ("prepared_transaction_offset", "prepared_offset")):
        assert list(cols[name]) == [r[field] for r in recs], name
    assert strings(cols["topic"]) == [r["topic"].encode() for r in recs]
    assert strings(cols["body"]) == [r["body"] for r in recs]
    assert strings(cols["born_host"]) == [r["born_host"].encode() for r in recs]
    assert strings(cols["store_host"]) == [r["store_host"].encode() for r in recs]
    mo, ko, kd, vo, vd = cols["properties"]
    keys, vals = strings((ko, kd)), strings((vo, vd))
    for i, r in enumerate(recs):
        got = dict(zip(keys[mo[i]:mo[i + 1]], vals[mo[i]:mo[i + 1]]))
        want = {k.encode(): v.encode() for k, v in string_to_properties(r["properties"]).items()}
        assert got == want and len(keys[mo[i]:mo[i + 1]]) == len(want)  # one entry per name, last wins


def test_derived_columns(kernels):
    buf, _ = sample_buffer(kernels, base=4096)
    n, cols, _, _, _, _ = decode_all(kernels, buf, base=4096)
    bits = cols["bits"]
    assert [bool(b & kernels.BIT_RETRY) for b in bits] == [False, True, False, False]
    assert [bool(b & kernels.BIT_DLQ) for b in bits] == [False, False, False, True]
    assert [bool(b & kernels.BIT_DELAYED) for b in bits] == [False, False, True, False]
    assert [bool(b & kernels.BIT_COMPRESSED) for b in bits] == [False, True, False, False]
    assert [bool(b & kernels.BIT_HAS_TAGS) for b in bits] == [True, False, False, False]
    assert strings(cols["tags"]) == [b"TagA", b"", b"", b""]
    assert strings(cols["original_topic"]) == [b"TopicTest", b"TopicTest", b"T2", b"%DLQ%g1"]
    assert list(cols["delay_level"]) == [0, 0, 3, 0]
    lo, ko, kd = cols["keys"]
    assert list(lo) == [0, 3, 3, 3, 3] and strings((ko, kd)) == [b"k1", b"k2", b"k3"]
    omid = strings(cols["offset_msg_id"])
    assert omid[0] == (STORE + struct.pack(">q", 4096)).hex().upper().encode()
    assert len(omid[2]) == 56  # IPv6 store host
    assert strings(cols["msg_id"]) == [b"ABC"] + omid[1:]  # UNIQ_KEY, else the offset msg id
    assert strings(cols["born_host"])[2] == b"[2001:db8::7]:40001"


def test_delay_level_is_a_clamped_decimal(kernels):
    buf = bytearray(4096)
    pos = 0
    levels = [b"999999999999", b"123456789012", b"-123456789012", b"+7", b"100000000", b"12x", b"-"]
    for v in levels:
        pos += put(kernels, buf, pos, props=b"DELAY\x01" + v)
    n, cols, _, _, _, _ = decode_all(kernels, buf)
    assert n == len(levels)
    assert list(cols["delay_level"]) == [100000000, 100000000, -100000000, 7, 100000000, 0, 0]


def test_body_projection_and_filters(kernels):
    buf, _ = sample_buffer(kernels)
    n, cols, _, _, _, _ = decode_all(kernels, buf, flags=0)
    assert n == 4 and strings(cols["body"]) == [b""] * 4
    n, cols, _, _, _, _ = decode_all(kernels, buf, topics=[b"%DLQ%g1", b"TopicTest"])
    assert strings(cols["topic"]) == [b"TopicTest", b"%DLQ%g1"]
    n, cols, _, _, _, _ = decode_all(kernels, buf, ts=(1_700_000_000_010, 1_700_000_000_020))
    assert list(cols["store_timestamp"]) == [1_700_000_000_010, 1_700_000_000_020]
    n, cols, nxt, reason, _, _ = decode_all(kernels, buf, topics=[])
    assert n == 0 and reason == L.ScanStop.NO_DATA


def _skip_flags(kernels, names):
    out = 0
    for name, flag in kernels.COLUMN_SKIP_FLAGS:
        out |= flag if name in names else 0
    return out


EMPTY_BY_KIND = {"keys": lambda c: not c[0].any(), "properties": lambda c: not c[0].any(),
                 "delay_level": lambda c: not c.any()}


@pytest.mark.parametrize("skipped", [
    ("properties",), ("keys", "properties"), ("born_host", "store_host", "offset_msg_id"),
    ("msg_id",), ("tags", "delay_level"),
    tuple(name for name, _ in COLUMN_IMPLS["python"].COLUMN_SKIP_FLAGS),  # fixed-width only
])
def test_projection_builds_only_wanted_columns(kernels, skipped):
    """A projected decode gives the full decode's values in every kept column and empty
    values in the skipped ones (so a narrow scan cannot silently change a kept column)."""
    buf, end = sample_buffer(kernels, base=4096)
    full = decode_all(kernels, buf, base=4096)
    part = decode_all(kernels, buf, base=4096, flags=kernels.WITH_BODY | _skip_flags(kernels, skipped))
    assert part[0] == full[0] == 4 and part[2:] == full[2:]
    a, b = full[1], part[1]
    assert a.keys() == b.keys()
    for name in a:
        if name in skipped:
            if name in EMPTY_BY_KIND:
                assert EMPTY_BY_KIND[name](b[name]), name
            else:
                assert strings(b[name]) == [b""] * 4, name
            continue
        if name == "bits" and "tags" in skipped:
            assert [int(x) for x in b["bits"]] == [int(x) & ~kernels.BIT_HAS_TAGS for x in a["bits"]]
            continue
        left = a[name] if isinstance(a[name], tuple) else (a[name],)
        right = b[name] if isinstance(b[name], tuple) else (b[name],)
        for x, y in zip(left, right):
            assert np.array_equal(np.asarray(x), np.asarray(y)), name


def test_batches_concatenate_to_the_whole(kernels):
    buf, end = sample_buffer(kernels)
    offsets, pos = [], 0
    while True:
        n, cols, pos, reason, _, _ = decode_all(kernels, buf, start=pos, max_rows=3, max_bytes=200)
        offsets += list(cols["commitlog_offset"])
        assert n <= 3
        if reason != L.ScanStop.MAX_COUNT:
            break
    n, cols, _, _, _, _ = decode_all(kernels, buf)
    assert offsets == list(cols["commitlog_offset"])
    # a first record larger than max_bytes is still emitted alone
    n, cols, pos, reason, _, _ = decode_all(kernels, buf, max_bytes=1)
    assert n == 1 and reason == L.ScanStop.MAX_COUNT and pos == cols["store_size"][0]


def test_blank_stops_and_split_ownership(kernels):
    buf = bytearray(2000)
    pos = 0
    for i in range(5):
        pos += put(kernels, buf, pos, queue_offset=i)
    kernels.write_blank(buf, pos, 2000 - pos)
    n, _, nxt, reason, _, _ = decode_all(kernels, buf)
    assert (n, nxt, reason) == (5, pos, L.ScanStop.BLANK)
    size = kernels.record_size(5, 9, 9, 0)
    # records owned by [start, stop): their first byte lies in it; the last may run past stop
    n, cols, nxt, reason, _, _ = decode_all(kernels, buf, start=size, stop=size * 2 + 1)
    assert list(cols["commitlog_offset"]) == [size, 2 * size] and reason == L.ScanStop.END
    assert kernels.find_record(buf, 1, 2000, 2000, 0, True) == size
    assert kernels.find_record(buf, size * 4 + 1, 2000, 2000, 0, True) == -1
    assert kernels.find_record(buf, 0, 2000, 2000, 4096, True) == -1  # PHYSICALOFFSET must name the spot


def test_corrupt_fail_and_skip(kernels):
    buf = bytearray(2000)
    sizes = []
    pos = 0
    for i in range(6):
        s = put(kernels, buf, pos, queue_offset=i)
        sizes.append(pos)
        pos += s
    bad = sizes[2]
    buf[bad + L.REC_FIXED_V4 + 1] ^= 0xFF  # the body of record 2: CRC mismatch
    n, cols, nxt, reason, corrupt, _ = decode_all(kernels, buf, flags=kernels.WITH_BODY | kernels.CHECK_CRC)
    assert (n, nxt, reason, corrupt) == (2, bad, L.ScanStop.CORRUPT, 0)
    n, cols, nxt, reason, corrupt, cbytes = decode_all(
        kernels, buf, flags=kernels.WITH_BODY | kernels.CHECK_CRC | kernels.SKIP_CORRUPT)
    assert n == 5 and corrupt == 1 and cbytes == sizes[3] - bad
    assert list(cols["queue_offset"]) == [0, 1, 3, 4, 5]
    buf[bad + 4:bad + 8] = b"\0\0\0\1"  # smash the magic: corrupt even without CRC checks
    n, _, _, reason, corrupt, _ = decode_all(kernels, buf, flags=kernels.SKIP_CORRUPT)
    assert n == 5 and corrupt == 1
    # a record running past the limit (a record boundary) is corrupt
    n, _, nxt, reason, _, _ = decode_all(kernels, buf, limit=sizes[1] + 10, stop=sizes[1] + 10)
    assert (n, nxt, reason) == (1, sizes[1], L.ScanStop.CORRUPT)


def test_decode_at_positions(kernels):
    buf = bytearray(2000)
    starts, pos = [], 0
    for i in range(6):
        starts.append(pos)
        pos += put(kernels, buf, pos, base=8192, queue_offset=i, topic=b"A" if i % 2 else b"B")
    at = np.array([starts[1], starts[3], starts[4]], np.int64)
    n, cols, i, reason, corrupt, _ = kernels.decode_columns_at(buf, at, 0, len(buf), 8192, 10, 1 << 20,
                                                               [b"A"], *ALL, kernels.WITH_BODY)
    assert (n, i, reason) == (2, 3, L.ScanStop.END) and list(cols["queue_offset"]) == [1, 3]
    stale = np.array([starts[1], starts[1] + 4, starts[5]], np.int64)  # not a record start
    n, _, i, reason, _, _ = kernels.decode_columns_at(buf, stale, 0, len(buf), 8192, 10, 1 << 20, None, *ALL, 0)
    assert (n, i, reason) == (1, 1, L.ScanStop.CORRUPT)
    n, _, i, _, corrupt, _ = kernels.decode_columns_at(buf, stale, 0, len(buf), 8192, 10, 1 << 20, None, *ALL,
                                                       kernels.SKIP_CORRUPT)
    assert (n, i, corrupt) == (2, 3, 1)


def test_walk_records(kernels):
    buf, end = sample_buffer(kernels)
    assert kernels.walk_records(buf, 0, len(buf), True) == (end, 4, L.ScanStop.NO_DATA, 1_700_000_000_000,
                                                            1_700_000_000_030)
    assert kernels.walk_records(buf, 0, 0, True) == (0, 0, L.ScanStop.END, -1, -1)


@pytest.mark.parametrize("addr", ["::1", "::", "2001:db8::7", "1:0:0:1:0:0:0:1", "1:0:1:0:1:0:1:0", "fe80::1:0:0:1",
                                  "1:2:3:4:5:6:7:8", "0:0:1::", "2001:db8:0:0:1::1"])
def test_format_host_matches_ipaddress(kernels, addr):
    raw = ipaddress.IPv6Address(addr).packed + struct.pack(">i", -5)
    assert kernels.format_host(raw) == b"[%s]:-5" % str(ipaddress.IPv6Address(addr)).encode()
    assert kernels.format_host(bytes([1, 2, 3, 4]) + struct.pack(">i", 65535)) == b"1.2.3.4:65535"


def test_bad_arguments(kernels):
    buf = bytearray(100)
    with pytest.raises(ValueError):
        kernels.decode_columns(buf, 0, 200, 200, 0, 10, 100, None, *ALL, 0)
    with pytest.raises(ValueError):
        kernels.decode_columns(buf, 0, 100, 100, 0, 0, 100, None, *ALL, 0)


# --- the two implementations agree on arbitrary records -------------------------------------------
_name = st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"DELAY", b"RETRY_TOPIC", b"REAL_TOPIC", b"a", b"\xc3\xa9"])
_value = st.binary(min_size=0, max_size=12).map(lambda b: b.replace(b"\x01", b"").replace(b"\x02", b""))
_props = st.lists(st.tuples(_name, _value), max_size=6).map(lambda kv: b"\x02".join(k + b"\x01" + v for k, v in kv))
_record = st.fixed_dictionaries({
    "topic": st.sampled_from([b"T", b"%RETRY%g", b"%DLQ%g", b"SCHEDULE_TOPIC_XXXX", b"\xe6\xa0\x87"]),
    "props": _props | st.binary(max_size=20),
    "body": st.binary(max_size=40),
    "sys_flag": st.sampled_from([0, 1, 0x10, 0x20, 0x31, 0x301]),
    "store_ts": st.integers(0, 10),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_record, min_size=1, max_size=8), st.integers(0, 3), st.booleans(),
       st.sets(st.sampled_from([name for name, _ in COLUMN_IMPLS["python"].COLUMN_SKIP_FLAGS])))
def test_implementations_agree(records, with_topics, with_body, skipped):
    from mqcore import _columns, _columns_py, _store
    buf = bytearray(8192)
    pos = 0
    for r in records:
        b = V6 if r["sys_flag"] & 0x10 else BORN
        s = V6 if r["sys_flag"] & 0x20 else STORE
        pos += put(_store, buf, pos, base=1 << 33, born=b, store=s, **r)
    topics = [None, [b"T"], [b"T", b"%DLQ%g"], []][with_topics]
    flags = (_columns.WITH_BODY if with_body else 0) | _columns.CHECK_CRC
    for name, flag in _columns.COLUMN_SKIP_FLAGS:
        flags |= flag if name in skipped else 0
    got = [k.decode_columns(buf, 0, len(buf), len(buf), 1 << 33, 3, 400, topics, 2, 8, flags)
           for k in (_columns, _columns_py)]
    assert got[0][0] == got[1][0] and got[0][2:] == got[1][2:]
    a, b = got[0][1], got[1][1]
    assert a.keys() == b.keys()
    for name in a:
        left = a[name] if isinstance(a[name], tuple) else (a[name],)
        right = b[name] if isinstance(b[name], tuple) else (b[name],)
        for x, y in zip(left, right):
            assert np.array_equal(np.asarray(x), np.asarray(y)), name
