"""Kernel tests: golden bytes from shared/spec/test-vectors.md, on both implementations,
plus property tests that the Cython kernels and the twin agree and read each other."""
from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore.errors import RecordDecodeError
from mqcore.format import layout as L
from mqcore.format.record import DecodedRecord

BORN_HOST = bytes.fromhex("c0a8000a0000d431")     # 192.168.0.10:54321
STORE_HOST = bytes.fromhex("c0a8000100002a9f")    # 192.168.0.1:10911
BORN_TS = 1700000000000
STORE_TS = 1700000000123
DELAYS = np.array([1000, 5000, 10000, 30000, 60000, 120000, 180000, 240000, 300000, 360000, 420000,
                   480000, 540000, 600000, 1200000, 1800000, 3600000, 7200000], np.int64)

RECORD_A = bytes.fromhex(
    "0000007adaa320a73610a686000000010000000000000000000000000000000000000000000000000000018bcfe56800"
    "c0a8000a0000d4310000018bcfe5687bc0a8000100002a9f0000000000000000000000000000000568656c6c6f0954"
    "6f7069635465737400114b455953016b3102544147530154616741")
RECORD_B = bytes.fromhex(
    "000000bbdaa320a73610a68600000001000000000000000000000001000000000000007a000000000000018bcfe56800"
    "c0a8000a0000d4310000018bcfe5687bc0a8000100002a9f0000000000000000000000000000000568656c6c6f0954"
    "6f7069635465737400524b455953016b3102554e49515f4b455901433041383030304133303339314236443335383634"
    "374237363030303030303002434c55535445520144656661756c74436c757374657202544147530154616741")
RECORD_C = bytes.fromhex(
    "0000007bdaa320ab3610a686000000010000000000000000000000000000000000000000000000000000018bcfe56800"
    "c0a8000a0000d4310000018bcfe5687bc0a8000100002a9f0000000000000000000000000000000568656c6c6f0009"
    "546f7069635465737400114b455953016b3102544147530154616741")
PROPS_B = (b"KEYS\x01k1\x02UNIQ_KEY\x01C0A8000A30391B6D358647B760000000\x02CLUSTER\x01DefaultCluster"
           b"\x02TAGS\x01TagA")


def encode(k, dst, pos, *, topic=b"TopicTest", queue_id=1, queue_offset=0, phy=0, sys_flag=0,
           body=b"hello", props=b"KEYS\x01k1\x02TAGS\x01TagA", store_ts=STORE_TS, born=BORN_HOST,
           store=STORE_HOST, reconsume=0, flag=0):
    return k.encode_record(dst, pos, topic, queue_id, flag, queue_offset, phy, sys_flag, BORN_TS, born,
                           store_ts, store, reconsume, 0, body, props)


# --- hashing -----------------------------------------------------------------------------------
HASHES = [("TagA", 2598919), ("TagB", 2598920), ("*", 42), ("", 0), ("order-123", -392797389),
          ("k1", 3366), ("标签", 857175), ("Tagü", 2599106), ("😀", 1772899), ("Tag😀", 82337373),
          ("polygenelubricants", -2147483648), ("TopicTest#k1", 2746024),
          ("TopicTest#order-123", -1213254799), ("TopicTest#标签", 3599833),
          ("TopicTest#C0A8000A30391B6D358647B760000000", 1581583115)]


@pytest.mark.parametrize("s,h", HASHES)
def test_java_hash_vectors(kernels, s, h):
    assert kernels.java_hash(s) == h
    assert kernels.java_hash_utf8(s.encode()) == h


def test_tags_code_and_index_hash(kernels):
    assert kernels.tags_code("order-123") == -392797389  # sign-extended: 0xffffffffe8966333
    assert struct.pack(">q", kernels.tags_code("order-123")).hex() == "ffffffffe8966333"
    assert kernels.tags_code(None) == 0 and kernels.tags_code("") == 0
    assert kernels.index_hash(-2147483648) == 0
    assert kernels.index_hash(-1213254799) == 1213254799


@given(st.text())
def test_java_hash_agrees(s):
    from mqcore import _store, _store_py
    assert _store.java_hash(s) == _store_py.java_hash(s)
    b = s.encode("utf-8", "surrogatepass")
    assert _store.java_hash_utf8(b) == _store_py.java_hash_utf8(b)


@given(st.binary(max_size=40))
def test_java_hash_of_invalid_utf8_agrees(b):
    from mqcore import _store, _store_py
    assert _store.java_hash_utf8(b) == _store_py.java_hash_utf8(b)


# --- records -------------------------------------------------------------------------------------
def test_record_a_golden(kernels):
    buf = bytearray(256)
    assert encode(kernels, buf, 0) == 122
    assert bytes(buf[:122]) == RECORD_A


def test_record_b_golden(kernels):
    buf = bytearray(512)
    encode(kernels, buf, 0)
    size = encode(kernels, buf, 122, queue_offset=1, phy=122, props=PROPS_B)
    assert size == 187
    assert bytes(buf[122:309]) == RECORD_B


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=0, max_size=4096), st.integers(0, 63))
def test_body_crc_is_zlibs_at_every_length_and_alignment(kernels, data, skip):
    # the compiled kernel folds 64-byte blocks with PCLMULQDQ and hands the tail to zlib: lengths
    # around 16/64-byte multiples and unaligned starts are where a folding bug would show
    buf = memoryview(bytes(skip) + data)[skip:]
    assert kernels.body_crc(buf) == zlib.crc32(data) & 0x7FFFFFFF


@pytest.mark.parametrize("n", [64, 65, 127, 128, 1 << 20, (1 << 20) + 17, 4 << 20])
def test_body_crc_of_large_bodies(kernels, n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    assert kernels.body_crc(data) == zlib.crc32(data) & 0x7FFFFFFF
    dst = bytearray(n + 512)
    encode(kernels, dst, 0, body=data)  # and a record's BODYCRC field holds the same value
    assert struct.unpack_from(">i", dst, L.REC_BODYCRC)[0] == zlib.crc32(data) & 0x7FFFFFFF


def test_record_size(kernels):
    assert kernels.record_size(5, 9, 17, 0) == 122
    assert kernels.record_size(5, 9, 17, L.SYSFLAG_BORNHOST_V6) == 134
    assert kernels.record_size(5, 9, 17, L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6) == 146


def test_encode_rejects_what_does_not_fit(kernels):
    with pytest.raises(ValueError):
        encode(kernels, bytearray(100), 0)
    with pytest.raises(ValueError):
        encode(kernels, bytearray(1000), 0, born=b"\x00" * 20)  # v6 host without the sysflag bit
    with pytest.raises(ValueError):
        encode(kernels, bytearray(70000), 0, props=b"a\x01" + b"b" * 32766)


def test_blank_golden(kernels):
    buf = bytearray(100)
    kernels.write_blank(buf, 0, 100)
    assert bytes(buf[:8]).hex() == "00000064cbd43194"
    assert not any(buf[8:])


def test_decode_golden(kernels):
    recs = kernels.decode_records(RECORD_A + RECORD_B + b"\x00" * 16, 0, 122 + 187 + 16, 10, True)
    assert len(recs) == 2
    assert all(type(r) is DecodedRecord for r in recs)  # both implementations return the named type
    a, b = recs
    assert a.store_size == 122 and a.queue_id == 1 and a.topic == "TopicTest"
    assert a.body == b"hello" and a.body_crc == 907060870
    assert a.born_host == "192.168.0.10:54321" and a.store_host == "192.168.0.1:10911"
    assert a.born_timestamp == BORN_TS and a.store_timestamp == STORE_TS
    assert b.phy_offset == 122 and b.queue_offset == 1 and b.properties == PROPS_B
    assert kernels.DECODED_FIELDS == DecodedRecord._fields


def test_decode_v2_magic(kernels):
    (rec,) = kernels.decode_records(RECORD_C, 0, len(RECORD_C), 10, True)
    assert rec.topic == "TopicTest"


def test_decode_ipv6(kernels):
    born6 = bytes(15) + b"\x01" + struct.pack(">i", 1234)
    buf = bytearray(300)
    flag = L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6
    size = encode(kernels, buf, 0, sys_flag=flag, born=born6, store=born6)
    assert size == 146
    assert struct.unpack_from(">q", buf, 68)[0] == STORE_TS  # STORETIMESTAMP moved by 12
    rec = kernels.decode_records(buf, 0, size, 1)[0]
    assert rec.born_host == "[::1]:1234" and rec.store_timestamp == STORE_TS


def test_decode_corrupt_raises(kernels):
    bad = bytearray(RECORD_A)
    bad[90] ^= 0xFF  # inside the body: CRC mismatch
    with pytest.raises(RecordDecodeError):
        kernels.decode_records(bad, 0, len(bad), 1, True)
    assert kernels.decode_records(bad, 0, len(bad), 1, False)  # CRC not checked: decodes


# --- scanning --------------------------------------------------------------------------------------
def test_scan_dispatch_fields(kernels):
    data = RECORD_A + RECORD_B + bytes(50)
    table, topics, stop, reason = kernels.scan_records(data, 0, len(data), 0, True, DELAYS, 100)
    assert topics == [b"TopicTest"]
    assert list(table["phy_offset"]) == [0, 122] and list(table["size"]) == [122, 187]
    assert list(table["tags_code"]) == [2598919, 2598919]
    assert stop == 309 and reason == L.ScanStop.NO_DATA
    row = table[1]
    assert data[row["uniq_pos"]:row["uniq_pos"] + row["uniq_len"]] == b"C0A8000A30391B6D358647B760000000"
    assert data[row["keys_pos"]:row["keys_pos"] + row["keys_len"]] == b"k1"
    assert table[0]["uniq_len"] == 0


def test_scan_stop_reasons(kernels):
    buf = bytearray(400)
    encode(kernels, buf, 0)
    kernels.write_blank(buf, 122, 400 - 122)
    _, _, stop, reason = kernels.scan_records(buf, 0, 400, 0, True, DELAYS, 100)
    assert (stop, reason) == (122, L.ScanStop.BLANK)
    _, _, stop, reason = kernels.scan_records(buf, 0, 400, 0, True, DELAYS, 0)
    assert (stop, reason) == (0, L.ScanStop.MAX_COUNT)
    torn = bytearray(RECORD_A)
    torn[100:] = bytes(22)  # torn tail: size says 122 but the end is zeros -> CRC still ok? topic gone
    _, _, stop, reason = kernels.scan_records(torn, 0, 122, 0, True, DELAYS, 100)
    assert (stop, reason) == (0, L.ScanStop.CORRUPT)
    _, _, stop, reason = kernels.scan_records(RECORD_A, 0, 100, 0, True, DELAYS, 100)
    assert (stop, reason) == (0, L.ScanStop.TRUNCATED)


def test_scan_delay_tags_code(kernels):
    buf = bytearray(400)
    size = encode(kernels, buf, 0, topic=b"SCHEDULE_TOPIC_XXXX", queue_id=2,
                  props=b"DELAY\x013\x02REAL_TOPIC\x01T\x02TAGS\x01TagA")
    table, _, _, _ = kernels.scan_records(buf, 0, size, 4096, False, DELAYS, 10)
    assert table[0]["tags_code"] == STORE_TS + 10000 == 1700000010123
    assert table[0]["phy_offset"] == 4096
    # level above the maximum is clamped to the last level
    size = encode(kernels, buf, 0, topic=b"SCHEDULE_TOPIC_XXXX", props=b"DELAY\x0199")
    table, _, _, _ = kernels.scan_records(buf, 0, size, 0, False, DELAYS, 10)
    assert table[0]["tags_code"] == STORE_TS + 7200000
    # a DELAY property on an ordinary topic does not change tagsCode
    size = encode(kernels, buf, 0, props=b"DELAY\x013\x02TAGS\x01TagA")
    table, _, _, _ = kernels.scan_records(buf, 0, size, 0, False, DELAYS, 10)
    assert table[0]["tags_code"] == 2598919


# --- batches ---------------------------------------------------------------------------------------
def test_batch_round_trip(kernels):
    items = kernels.encode_batch_items([(0, b"a" * 10, b"UNIQ_KEY\x01u1"), (7, b"", b""),
                                        (1, b"xyz", b"TAGS\x01T")])
    count, total, max_body, max_props = kernels.measure_batch(items, 5, len(b"CLUSTER\x01c"), 0)
    assert count == 3 and max_body == 10
    dst = bytearray(total + 10)
    written = kernels.encode_batch(dst, 5, items, b"Topic", 2, 40, 1000, 0, BORN_TS, BORN_HOST,
                                   STORE_TS, STORE_HOST, b"CLUSTER\x01c")
    assert written == total
    recs = kernels.decode_records(dst, 5, 5 + total, 10, True)
    assert [r.queue_offset for r in recs] == [40, 41, 42]
    assert [r.phy_offset for r in recs] == [1000, 1000 + recs[0].store_size,
                                            1000 + recs[0].store_size + recs[1].store_size]
    assert [r.properties for r in recs] == [b"UNIQ_KEY\x01u1\x02CLUSTER\x01c", b"CLUSTER\x01c",
                                            b"TAGS\x01T\x02CLUSTER\x01c"]
    assert recs[1].flag == 7 and recs[1].body_crc == 0


@pytest.mark.parametrize("cut", [1, 19, 25, 30])
def test_batch_malformed(kernels, cut):
    items = kernels.encode_batch_items([(0, b"a" * 10, b"k\x01v")])
    with pytest.raises(RecordDecodeError):
        kernels.measure_batch(items[:-cut] if cut < len(items) else b"x", 5, 0, 0)


def test_batch_written_whole_or_not_at_all(kernels):
    items = kernels.encode_batch_items([(0, b"a" * 10, b""), (0, b"b" * 10, b"")])
    dst = bytearray(150)
    with pytest.raises(ValueError):
        kernels.encode_batch(dst, 0, items, b"T", 0, 0, 0, 0, 0, BORN_HOST, 0, STORE_HOST, b"")
    assert not any(dst)


# --- consume queue -----------------------------------------------------------------------------------
def test_cq_golden(kernels):
    buf = bytearray(60)
    kernels.cq_write(buf, 0, [0, 122], [122, 187], [2598919, 2598919])
    assert bytes(buf[:20]).hex() == "00000000000000000000007a000000000027a807"
    assert bytes(buf[20:40]).hex() == "000000000000007a000000bb000000000027a807"
    kernels.cq_write(buf, 40, [4096], [200], [1700000010123])
    assert bytes(buf[40:60]).hex() == "0000000000001000000000c80000018bcfe58f8b"
    assert kernels.cq_count_valid(buf, 0, 60) == 3
    assert kernels.cq_count_valid(bytearray(40), 0, 40) == 0
    phys, sizes, tags = kernels.cq_read(buf, 20, 2)
    assert list(phys) == [122, 4096] and list(sizes) == [187, 200]
    filler = bytearray(20)
    kernels.cq_write(filler, 0, [0], [L.CQ_FILLER_SIZE], [0])
    assert bytes(filler).hex() == "00000000000000007fffffff0000000000000000"


def test_cq_select(kernels):
    buf = bytearray(20 * 10)
    tags = [kernels.tags_code(t) for t in ["TagA", "TagB", "order-123", "TagA", "", "TagB"] * 1]
    kernels.cq_write(buf, 0, [i * 100 for i in range(6)], [100] * 6, tags)
    scanned, picked = kernels.cq_select(buf, 0, 6, None, 32, 1 << 20)
    assert scanned == 6 and list(picked) == [0, 1, 2, 3, 4, 5]
    scanned, picked = kernels.cq_select(buf, 0, 6, {kernels.java_hash("order-123"), 2598920}, 32, 1 << 20)
    assert list(picked) == [1, 2, 5] and scanned == 6
    scanned, picked = kernels.cq_select(buf, 0, 6, None, 2, 1 << 20)
    assert (scanned, list(picked)) == (2, [0, 1])
    scanned, picked = kernels.cq_select(buf, 0, 6, None, 32, 250)
    assert (scanned, list(picked)) == (2, [0, 1])
    scanned, picked = kernels.cq_select(buf, 0, 6, None, 32, 10)  # first pick always taken
    assert list(picked) == [0]


def test_cq_search_time(kernels):
    buf = bytearray(20 * 5)
    times = {0: 1000, 100: 2000, 200: 3000, 300: 3000, 400: 5000}
    kernels.cq_write(buf, 0, list(times), [10] * 5, [0] * 5)
    f = lambda phy, size: times[phy]
    assert kernels.cq_search_time(buf, 0, 5, 2000, f) == 1
    assert kernels.cq_search_time(buf, 0, 5, 2400, f) == 1
    assert kernels.cq_search_time(buf, 0, 5, 2600, f) == 2
    assert kernels.cq_search_time(buf, 0, 5, 2500, f) == 1    # tie -> the earlier
    assert kernels.cq_search_time(buf, 0, 5, 10, f) == 0
    assert kernels.cq_search_time(buf, 0, 5, 99999, f) == 4


# --- index ---------------------------------------------------------------------------------------------
SLOTS = 5_000_000


def test_index_golden(kernels):
    idx = bytearray(L.index_file_size(SLOTS, 4))
    struct.pack_into(">i", idx, L.IDXH_INDEX_COUNT, 1)  # a fresh file starts at indexCount 1
    table, topics, _, _ = kernels.scan_records(RECORD_B, 0, len(RECORD_B), 122, False, DELAYS, 10)
    hashes, phys, tss = kernels.index_keys(RECORD_B, table, topics)
    assert list(hashes) == [0x5E450B0B, 2746024] and list(phys) == [122, 122]
    assert kernels.index_put(idx, SLOTS, 4, hashes, phys, tss, 0) == 2
    e1 = 40 + SLOTS * 4 + 20
    assert bytes(idx[e1:e1 + 20]).hex() == "5e450b0b000000000000007a0000000000000000"
    assert bytes(idx[6332500:6332504]).hex() == "00000001"
    assert bytes(idx[e1 + 20:e1 + 40]).hex() == "0029e6a8000000000000007a0000000000000000"
    assert bytes(idx[10984136:10984140]).hex() == "00000002"
    assert bytes(idx[:40]).hex() == ("0000018bcfe5687b0000018bcfe5687b000000000000007a000000000000007a"
                                     "0000000200000003")
    # a second k1 5.9 s later chains to entry 2
    assert kernels.index_put(idx, SLOTS, 4, [2746024], [309], [STORE_TS + 5900], 0) == 1
    assert bytes(idx[e1 + 40:e1 + 60]).hex() == "0029e6a80000000000000135" + "00000005" + "00000002"
    assert kernels.index_query(idx, SLOTS, 4, 2746024, 0, 1 << 62, 64) == ([309, 122], False)
    assert kernels.index_query(idx, SLOTS, 4, 2746024, STORE_TS + 1000, 1 << 62, 64) == ([309], False)
    # full: indexCount reached max_entries
    assert kernels.index_put(idx, SLOTS, 4, [1, 2], [1, 2], [STORE_TS, STORE_TS], 0) == 0


def test_index_chain_with_collisions(kernels):
    slots, entries = 7, 100
    idx = bytearray(L.index_file_size(slots, entries))
    struct.pack_into(">i", idx, L.IDXH_INDEX_COUNT, 1)
    hashes = np.array([3, 10, 17, 3, 24, 10], np.int32)  # all land in slot 3
    phys = np.arange(6, dtype=np.int64) * 100
    tss = STORE_TS + np.arange(6, dtype=np.int64) * 1000
    assert kernels.index_put(idx, slots, entries, hashes, phys, tss, 0) == 6
    assert kernels.index_query(idx, slots, entries, 3, 0, 1 << 62, 64) == ([300, 0], False)
    assert kernels.index_query(idx, slots, entries, 10, 0, 1 << 62, 64) == ([500, 100], False)
    assert kernels.index_query(idx, slots, entries, 24, 0, 1 << 62, 1) == ([400], False)
    assert kernels.index_query(idx, slots, entries, 5, 0, 1 << 62, 64) == ([], False)
    assert struct.unpack_from(">i", idx, L.IDXH_HASH_SLOT_COUNT)[0] == 1


# --- property tests: Cython and twin agree and read each other ---------------------------------------------
names = st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "a", "CLUSTER"])
values = st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
                 min_size=0, max_size=12)
messages = st.fixed_dictionaries({
    "topic": st.text(alphabet="abcXYZ019%|_-", min_size=1, max_size=30),
    "body": st.binary(max_size=300),
    "props": st.lists(st.tuples(names, values), max_size=5),
    "queue_id": st.integers(0, 100),
    "flag": st.integers(-2**31, 2**31 - 1),
    "v6": st.booleans(),
})


def _props(pairs):
    return "\x02".join(f"{k}\x01{v}" for k, v in pairs).encode()


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(messages, min_size=1, max_size=6), st.booleans())
def test_encode_scan_decode_agree(msgs, cython_writes):
    from mqcore import _store, _store_py
    writer, reader = (_store, _store_py) if cython_writes else (_store_py, _store)
    written = {}
    for k in (writer, reader):
        # both kernels encode the same messages into their own buffers: the bytes must be identical
        kbuf = bytearray(8192)
        kpos = 0
        for i, m in enumerate(msgs):
            host = bytes(16) + b"\x00\x00\x00\x05" if m["v6"] else STORE_HOST
            sf = (L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6) if m["v6"] else 0
            kpos += k.encode_record(kbuf, kpos, m["topic"].encode(), m["queue_id"], m["flag"], i, kpos, sf,
                                    BORN_TS, host, STORE_TS + i, host, 0, 0, m["body"], _props(m["props"]))
        written[k] = (kbuf, kpos)
    buf, pos = written[writer]
    assert written[reader][1] == pos and bytes(written[reader][0]) == bytes(buf)
    t1, tp1, s1, r1 = reader.scan_records(buf, 0, len(buf), 0, True, DELAYS, 100)
    t2, tp2, s2, r2 = writer.scan_records(buf, 0, len(buf), 0, True, DELAYS, 100)
    assert (tp1, s1, r1) == (tp2, s2, r2) and s1 == pos
    assert t1.tobytes() == t2.tobytes()
    assert reader.decode_records(buf, 0, pos, 100, True) == writer.decode_records(buf, 0, pos, 100, True)
    h1 = reader.index_keys(buf, t1, tp1)
    h2 = writer.index_keys(buf, t2, tp2)
    for a, b in zip(h1, h2):
        assert a.tolist() == b.tolist()
    for m, row in zip(msgs, t1):
        # a pair with an empty value is ignored by the properties decoder; the last one wins
        tags = dict((k, v) for k, v in m["props"] if v).get("TAGS")
        assert row["tags_code"] == _store_py.tags_code(tags)


@settings(max_examples=100)
@given(st.binary(min_size=0, max_size=600), st.integers(0, 599))
def test_scan_never_crashes_on_garbage(data, start):
    from mqcore import _store, _store_py
    start = min(start, len(data))
    r1 = _store.scan_records(data, start, len(data), 0, True, DELAYS, 100)
    r2 = _store_py.scan_records(data, start, len(data), 0, True, DELAYS, 100)
    assert r1[0].tobytes() == r2[0].tobytes() and r1[1:] == r2[1:]


@settings(max_examples=100)
@given(st.lists(st.tuples(st.integers(-2**31, 2**31 - 1), st.binary(max_size=50), st.binary(max_size=50)),
                max_size=8))
def test_batch_items_agree(items):
    from mqcore import _store, _store_py
    a = _store.encode_batch_items(items)
    assert a == _store_py.encode_batch_items(items)
    assert _store.measure_batch(a, 3, 4, 0) == _store_py.measure_batch(a, 3, 4, 0)


@settings(max_examples=100)
@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 1 << 40), st.integers(0, 100_000)),
                max_size=60), st.integers(1, 13))
def test_index_put_query_agree(entries, slots):
    from mqcore import _store, _store_py
    max_entries = 40
    bufs = []
    for k in (_store, _store_py):
        idx = bytearray(L.index_file_size(slots, max_entries))
        struct.pack_into(">i", idx, L.IDXH_INDEX_COUNT, 1)
        h = np.array([e[0] for e in entries], np.int32)
        p = np.array([e[1] for e in entries], np.int64)
        t = STORE_TS + np.array(sorted(e[2] for e in entries), np.int64)
        assert k.index_put(idx, slots, max_entries, h, p, t, 0) == min(len(entries), max_entries - 1)
        bufs.append(idx)
    assert bufs[0] == bufs[1]
    for h, _, _ in entries[:10]:
        assert (_store.index_query(bufs[0], slots, max_entries, h, 0, 1 << 62, 64)
                == _store_py.index_query(bufs[1], slots, max_entries, h, 0, 1 << 62, 64))


def test_crc_matches_zlib(kernels):
    buf = bytearray(200)
    body = b"Hello RocketMQ 0"
    encode(kernels, buf, 0, body=body)
    assert struct.unpack_from(">i", buf, 8)[0] == 613185359 == zlib.crc32(body) & 0x7FFFFFFF


def test_prefault_never_changes_bytes(kernels):
    buf = bytearray(5 * 4096 + 100)
    buf[4096] = 0xAB
    buf[3 * 4096 + 7] = 1
    before = bytes(buf)
    assert kernels.prefault(buf, 10, len(buf)) == 6  # pages 0..5, from the page holding byte 10
    assert bytes(buf) == before
    assert kernels.prefault(buf, 50, 50) == 0 and kernels.prefault(buf, 0, len(buf) + 1) == 0


def test_prefault_while_another_thread_writes():
    """The CAS touch runs without the GIL next to a writer and must never lose its bytes."""
    import mmap
    import threading

    from mqcore import _store
    mm = mmap.mmap(-1, 8 << 20)
    stop = threading.Event()

    def toucher():
        while not stop.is_set():
            _store.prefault(mm, 0, len(mm))

    t = threading.Thread(target=toucher)
    t.start()
    try:
        data = bytes(range(1, 256)) * 64
        for pos in range(0, len(mm) - len(data), len(data)):
            mm[pos:pos + len(data)] = data
    finally:
        stop.set()
        t.join()
    n = (len(mm) - len(data)) // len(data)
    assert all(mm[p:p + len(data)] == data for p in range(0, n * len(data), len(data)))


def test_decode_reuses_repeated_strings_only_when_the_bytes_match():
    """The Cython decoder reuses the previous record's topic and host strings when their
    bytes repeat: records whose topic (same length), born host or store host differ only
    in one byte must still each decode to their own values, in both kernels."""
    from mqcore import _store, _store_py
    v4 = lambda last, port: bytes([10, 0, 0, last]) + port.to_bytes(4, "big")  # noqa: E731
    v6 = lambda last, port: bytes(15) + bytes([last]) + port.to_bytes(4, "big")  # noqa: E731
    cases = [  # (topic, born host, store host, sysflag)
        (b"TopicA", v4(1, 5000), v4(9, 10911), 0),
        (b"TopicA", v4(1, 5000), v4(9, 10911), 0),
        (b"TopicB", v4(1, 5001), v4(9, 10911), 0),
        (b"TopicB", v4(2, 5001), v4(9, 10912), 0),
        (b"TopicA", v6(1, 5000), v4(9, 10911), L.SYSFLAG_BORNHOST_V6),
        (b"TopicA", v4(1, 5000), v6(9, 10911), L.SYSFLAG_STOREHOST_V6),
        (b"TopicAB", v4(1, 5000), v4(9, 10911), 0),
        (b"TopicA", v4(1, 5000), v4(9, 10911), 0),
    ]
    buf = bytearray(8192)
    pos = 0
    for i, (topic, born, store, sf) in enumerate(cases):
        pos += _store.encode_record(buf, pos, topic, 0, 0, i, pos, sf, BORN_TS, born, STORE_TS, store, 0, 0,
                                    b"body", b"")
    fast = _store.decode_records(buf, 0, pos, 100, True)
    assert fast == _store_py.decode_records(buf, 0, pos, 100, True)
    expected_born = ["10.0.0.1:5000", "10.0.0.1:5000", "10.0.0.1:5001", "10.0.0.2:5001", "[::1]:5000",
                     "10.0.0.1:5000", "10.0.0.1:5000", "10.0.0.1:5000"]
    expected_store = ["10.0.0.9:10911"] * 3 + ["10.0.0.9:10912", "10.0.0.9:10911", "[::9]:10911"] + \
        ["10.0.0.9:10911"] * 2
    assert [r.topic for r in fast] == [c[0].decode() for c in cases]
    assert [r.born_host for r in fast] == expected_born
    assert [r.store_host for r in fast] == expected_store


@pytest.mark.parametrize("topic,uniq,keys", [
    ("TopicTest", "C0A8000A30391B6D358647B760000000", "k1 order-123"),
    ("TopicTest", None, "  k1   标签 "), ("T", "", ""), ("T", "u", None), ("Tag😀", "😀", "a😀b c"),
    ("RMQ_SYS_TRACE_TOPIC", None, " ".join(f"7F00000100{i:022X}" for i in range(120)))])
def test_key_hashes_are_the_scans_hashes(kernels, topic, uniq, keys):
    words = ([uniq] if uniq else []) + [w for w in (keys or "").split(" ") if w]
    assert kernels.key_hashes(topic, uniq, keys) == [kernels.index_hash(kernels.java_hash(f"{topic}#{w}"))
                                                     for w in words]


@given(st.text(max_size=8), st.one_of(st.none(), st.text(max_size=8)),
       st.one_of(st.none(), st.lists(st.text(alphabet=st.characters(blacklist_characters=" "), max_size=5),
                                     max_size=6).map(" ".join)))
def test_key_hashes_agree(topic, uniq, keys):
    from mqcore import _store, _store_py
    assert _store.key_hashes(topic, uniq, keys) == _store_py.key_hashes(topic, uniq, keys)
