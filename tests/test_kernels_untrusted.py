"""Kernels trust no file, and the Cython kernels and their twin agree on every kernel.

Counts, offsets and sizes read from a file are checked against the buffer before any
loop uses them: a damaged header is a ``CorruptFileError`` (bad arguments a
``ValueError``), never a write outside the buffer or a division by zero. Each property
test runs both implementations on the same (often damaged) input and requires the same
outcome, bytes included; a crash of the Cython kernel would take the test process down.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import _columns, _columns_py, _store, _store_py
from mqcore.errors import CorruptFileError
from mqcore.format import layout as L
from mqcore.format.index_chains import chains_sound

BOTH = (_store, _store_py)
COLUMNS = (_columns, _columns_py)
STORE_HOST = bytes.fromhex("c0a8000100002a9f")
BORN_HOST = bytes.fromhex("c0a8000a0000d431")
DELAYS = (1000, 5000)
I32 = st.integers(-2**31, 2**31 - 1)


def _outcome(fn):
    """(kind, value): the result, or the exception class and nothing else (messages may differ)."""
    try:
        return "ok", fn()
    except (ValueError, CorruptFileError) as e:
        return "error", type(e)


def _same(results):
    kinds = {r[0] for r in results}
    assert len(kinds) == 1, results
    return results


# --- index files ---------------------------------------------------------------------------------------
def _index(slots, entries, count, slot_count, fill=b""):
    buf = bytearray(L.index_file_size(slots, entries))
    buf[L.INDEX_HEADER_SIZE:L.INDEX_HEADER_SIZE + len(fill)] = fill[:len(buf) - L.INDEX_HEADER_SIZE]
    L.INDEX_HEADER.pack_into(buf, 0, 0, 0, 0, 0, slot_count, count)
    return buf


@pytest.mark.parametrize("k", BOTH, ids=["cython", "python"])
@pytest.mark.parametrize("count", [-10, -100_000_000, 0, 41, 2**31 - 1])
def test_index_put_refuses_a_damaged_count(k, count):
    """A count of -10 used to make the Cython kernel write before its buffer; -1e8 segfaulted."""
    buf = _index(7, 40, count, 0)
    before = bytes(buf)
    with pytest.raises(CorruptFileError, match="indexCount"):
        k.index_put(buf, 7, 40, np.array([5], np.int32), np.array([100], np.int64), np.array([1], np.int64), 0)
    assert bytes(buf) == before  # nothing written
    with pytest.raises(CorruptFileError):
        k.index_query(buf, 7, 40, 5, 0, 1 << 62, 10)


@pytest.mark.parametrize("k", BOTH, ids=["cython", "python"])
def test_index_kernels_refuse_impossible_geometry(k):
    buf = _index(7, 40, 1, 0)
    one = (np.array([5], np.int32), np.array([100], np.int64), np.array([1], np.int64))
    for slots, entries in ((0, 40), (-3, 40), (7, 1), (7, 0), (1000, 40)):
        with pytest.raises(ValueError):  # slots = 0 divided by zero under cdivision
            k.index_put(buf, slots, entries, *one, 0)
        with pytest.raises(ValueError):
            k.index_query(buf, slots, entries, 5, 0, 1 << 62, 10)
    with pytest.raises(ValueError):
        k.index_put(buf, 7, 40, np.array([-5], np.int32), one[1], one[2], 0)  # a hash must be >= 0
    with pytest.raises(ValueError):
        k.index_put(buf, 7, 40, *one, 2)  # start past the keys
    with pytest.raises(ValueError):
        k.index_put(buf, 7, 40, one[0], np.array([1, 2], np.int64), one[2], 0)


@settings(max_examples=80, deadline=None)
@given(I32, I32, st.binary(min_size=0, max_size=7 * 4 + 12 * 20),
       st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 1 << 40)), max_size=14))
def test_index_put_and_query_agree_from_damaged_files(count, slot_count, area, keys):
    """Arbitrary header counts and arbitrary slot/entry bytes (dangling chains, loops)."""
    slots, entries = 7, 12
    bufs = [_index(slots, entries, count, slot_count, area) for _ in BOTH]
    h = np.array([x for x, _ in keys], np.int32)
    p = np.array([y for _, y in keys], np.int64)
    t = np.arange(len(keys), dtype=np.int64) * 1000 + 1_700_000_000_000
    puts = _same([_outcome(lambda k=k, b=b: k.index_put(b, slots, entries, h, p, t, 0)) for k, b in zip(BOTH, bufs)])
    assert puts[0] == puts[1]
    assert bufs[0] == bufs[1]
    for key in {x for x, _ in keys} | {0, 3}:
        q = [_outcome(lambda k=k, b=b: k.index_query(b, slots, entries, key, 0, 1 << 62, 64)) for k, b in zip(BOTH, bufs)]
        assert q[0] == q[1]


def looping_index(slots: int = 7, entries: int = 12):
    """A sound file of 5 keys in slot 3, then entries 2 and 4 pointing at each other (the
    hashes on the way match no key asked for), and slot 3 heading entry 4."""
    buf = _index(slots, entries, 1, 0)
    hashes = np.array([3, 10, 17, 24, 31], np.int32)
    BOTH[0].index_put(buf, slots, entries, hashes, np.arange(5, dtype=np.int64) * 100,
                      np.arange(5, dtype=np.int64) * 1000 + 1_700_000_000_000, 0)
    for entry, prev in ((2, 4), (4, 2)):
        at = L.INDEX_HEADER_SIZE + slots * L.INDEX_SLOT_SIZE + entry * L.INDEX_ENTRY_SIZE
        struct.pack_into(">i", buf, at + L.IDXE_PREV_INDEX, prev)
    struct.pack_into(">i", buf, L.INDEX_HEADER_SIZE + 3 * L.INDEX_SLOT_SIZE, 4)
    return buf


@pytest.mark.parametrize("k", BOTH, ids=["cython", "python"])
def test_a_looping_chain_ends_the_walk_and_says_damaged(k):
    """Two entries pointing at each other used to make the walk loop forever (a broker's
    QUERY_MESSAGE froze); now the first link that does not point backwards ends it."""
    buf = looping_index()
    assert k.index_query(buf, 7, 12, 38, 0, 1 << 62, 64) == ([], True)  # walks 4 -> 2 -> 4
    assert k.index_query(buf, 7, 12, 24, 0, 1 << 62, 64) == ([300], True)  # found on the way
    assert k.index_query(buf, 7, 12, 5, 0, 1 << 62, 64) == ([], False)  # another slot: sound
    struct.pack_into(">i", buf, L.INDEX_HEADER_SIZE + 5 * L.INDEX_SLOT_SIZE, 40)  # a head past the count
    assert k.index_query(buf, 7, 12, 5, 0, 1 << 62, 64) == ([], True)
    assert chains_sound(looping_index(), 7, 6) == "entry 2: prev index does not point backwards"
    sound = _index(7, 12, 1, 0)
    k.index_put(sound, 7, 12, np.array([3, 10, 17], np.int32), np.arange(3, dtype=np.int64),
                np.arange(3, dtype=np.int64), 0)
    assert chains_sound(sound, 7, 4) is None
    assert k.index_query(sound, 7, 12, 10, 0, 1 << 62, 64) == ([1], False)


# --- consume queues -------------------------------------------------------------------------------------
units = st.lists(st.tuples(st.integers(-2, 1 << 40), st.integers(-2, 5000), st.integers(-2**63, 2**63 - 1)),
                 max_size=20)


@settings(max_examples=60, deadline=None)
@given(units, st.integers(-3, 25), st.integers(-3, 25), st.integers(-1, 30), st.integers(0, 30000),
       st.none() | st.lists(I32, max_size=4))
def test_cq_kernels_agree(us, start_unit, count, max_count, max_bytes, codes):
    phys = np.array([u[0] for u in us], np.int64)
    sizes = np.array([u[1] for u in us], np.int32)
    tags = np.array([u[2] for u in us], np.int64)
    bufs = [bytearray(len(us) * L.CQ_UNIT_SIZE) for _ in BOTH]
    writes = [_outcome(lambda k=k, b=b: k.cq_write(b, 0, phys, sizes, tags)) for k, b in zip(BOTH, bufs)]
    assert writes[0] == writes[1] and bufs[0] == bufs[1]
    if us:
        assert L.CQ_UNIT.unpack_from(bufs[0], 0) == us[0]  # the layout's struct reads what the kernel wrote
    buf = bytes(bufs[0])
    start = start_unit * L.CQ_UNIT_SIZE
    valid = [_outcome(lambda k=k: k.cq_count_valid(buf, start, len(buf))) for k in BOTH]
    assert valid[0] == valid[1]
    reads = [_outcome(lambda k=k: [a.tolist() for a in k.cq_read(buf, start, count)]) for k in BOTH]
    assert reads[0] == reads[1]
    sel = [_outcome(lambda k=k: (lambda r: (r[0], r[1].tolist()))(k.cq_select(buf, start, count, codes,
                                                                              max_count, max_bytes)))
           for k in BOTH]
    assert sel[0] == sel[1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-1, 50), min_size=1, max_size=16), st.integers(-5, 60), st.integers(-2, 20),
       st.integers(-2, 20))
def test_cq_search_time_agrees(times, target, lo, hi):
    n = len(times)
    buf = bytearray(n * L.CQ_UNIT_SIZE)
    for i in range(n):
        L.CQ_UNIT.pack_into(buf, i * L.CQ_UNIT_SIZE, i, 10, 0)

    def store_time_of(phy, _size):
        return times[phy] if 0 <= phy < n else -1
    got = [_outcome(lambda k=k: k.cq_search_time(buf, lo, hi, target, store_time_of)) for k in BOTH]
    assert got[0] == got[1]


# --- records -----------------------------------------------------------------------------------------------
def _records(bodies, base):
    buf = bytearray(4096)
    pos = 0
    for i, body in enumerate(bodies):
        pos += _store.encode_record(buf, pos, b"T", 0, 0, i, base + pos, 0, 1, BORN_HOST, 1000 + i, STORE_HOST,
                                    0, 0, body, b"TAGS\x01a")
    return buf, pos


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(max_size=60), min_size=1, max_size=6), st.lists(st.tuples(st.integers(0, 700),
                                                                                   st.integers(0, 255)),
                                                                         max_size=6),
       st.integers(0, 700), st.booleans())
def test_walk_find_and_decode_at_agree_on_damaged_logs(bodies, damage, start, check_crc):
    base = 1 << 20
    buf, end = _records(bodies, base)
    for at, value in damage:  # flip bytes anywhere, record heads included
        buf[at % end] = value
    data = bytes(buf[:end + 64])
    limit = len(data)
    start = min(start, limit)
    walks = [_outcome(lambda k=k: k.walk_records(data, start, limit, check_crc)) for k in COLUMNS]
    assert walks[0] == walks[1]
    finds = [_outcome(lambda k=k: k.find_record(data, start, limit, limit, base, check_crc)) for k in COLUMNS]
    assert finds[0] == finds[1]
    positions = np.array(sorted({0, start, *(at % end for at, _ in damage)}), np.int64)
    flags = _columns.WITH_BODY | _columns.SKIP_CORRUPT | (_columns.CHECK_CRC if check_crc else 0)
    got = [k.decode_columns_at(data, positions, 0, limit, base, 4, 1 << 16, None, -(1 << 62), 1 << 62, flags)
           for k in COLUMNS]
    (n0, c0, *rest0), (n1, c1, *rest1) = got
    assert n0 == n1 and rest0 == rest1
    assert c0.keys() == c1.keys()
    for name in c0:
        left = c0[name] if isinstance(c0[name], tuple) else (c0[name],)
        right = c1[name] if isinstance(c1[name], tuple) else (c1[name],)
        for x, y in zip(left, right):
            assert np.array_equal(np.asarray(x), np.asarray(y)), name


@settings(max_examples=60, deadline=None)
@given(st.integers(-4, 80), st.integers(-4, 80), st.integers(8, 72))
def test_write_blank_agrees(pos, size, length):
    bufs = [bytearray(length) for _ in BOTH]
    got = [_outcome(lambda k=k, b=b: k.write_blank(b, pos, size)) for k, b in zip(BOTH, bufs)]
    assert got[0][0] == got[1][0]
    assert bufs[0] == bufs[1]
    if got[0][0] == "ok":
        assert struct.unpack_from(">ii", bufs[0], pos) == (size, L.MAGIC_BLANK)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(I32, st.binary(max_size=40), st.binary(max_size=30)), max_size=5),
       st.binary(max_size=20), st.integers(-2, 40), st.booleans(), st.integers(0, 6))
def test_encode_batch_agrees(items, extra, pos, v6, cut):
    wire = _store.encode_batch_items(items)
    if cut and wire:
        wire = wire[:-cut]  # a truncated batch must be refused by both, with nothing written
    sys_flag = (L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6) if v6 else 0
    host = bytes(16) + b"\x00\x00\x00\x07" if v6 else STORE_HOST
    bufs = [bytearray(2048) for _ in BOTH]
    got = [_outcome(lambda k=k, b=b: k.encode_batch(b, pos, wire, b"Topic", 3, 10, 4096 + pos, sys_flag, 1, host,
                                                    2, host, extra)) for k, b in zip(BOTH, bufs)]
    assert got[0][0] == got[1][0], got
    assert got[0] == got[1] or got[0][0] == "error"
    assert bufs[0] == bufs[1]


_PROP_TEXT = st.text(max_size=12)  # any code point, lone surrogates included
_PROP_VALUE = st.one_of(_PROP_TEXT, st.none(), st.integers(-5, 5))


@given(st.lists(st.tuples(I32, st.binary(max_size=40),
                          st.dictionaries(st.one_of(_PROP_TEXT, st.integers(0, 3)), _PROP_VALUE, max_size=4)),
                max_size=5))
def test_encode_batch_messages_agrees(items):
    """The client's batch encoder formats properties dicts in C; the twin formats them in
    Python. Same bytes, or the same refusal (a lone surrogate cannot be UTF-8)."""
    got = []
    for k in BOTH:
        try:
            got.append(("ok", k.encode_batch_messages(items)))
        except UnicodeEncodeError:
            got.append(("error", UnicodeEncodeError))
    assert got[0] == got[1]
    if got[0][0] == "ok":  # and it is the old encoder's output for pre-formatted properties
        from mqcore.format.properties import format_properties
        assert got[0][1] == _store_py.encode_batch_items(
            [(f, b, format_properties(p).encode("utf-8")) for f, b, p in items])


@given(I32, st.binary(max_size=40),
       st.dictionaries(st.one_of(_PROP_TEXT, st.integers(0, 3)), _PROP_VALUE, max_size=4))
def test_encode_batch_message_is_one_item_of_encode_batch_messages(flag, body, props):
    """The one-message encoder (an auto-batching producer's, per send) writes exactly the
    item ``encode_batch_messages`` writes for that message, in both kernels, or refuses
    what it refuses."""
    got = []
    for k in BOTH:
        for encode in (lambda: k.encode_batch_message(flag, body, props),
                       lambda: k.encode_batch_messages([(flag, body, props)])):
            try:
                got.append(("ok", encode()))
            except UnicodeEncodeError:
                got.append(("error", UnicodeEncodeError))
    assert got.count(got[0]) == 4, got


def test_encode_batch_message_refuses_properties_over_int16():
    for k in BOTH:
        with pytest.raises(ValueError, match="32767"):
            k.encode_batch_message(0, b"x", {"K": "v" * 40000})


def test_encode_batch_messages_refuses_properties_over_int16():
    items = [(0, b"x", {"K": "v" * 40000})]
    for k in BOTH:
        with pytest.raises(ValueError, match="32767"):
            k.encode_batch_messages(items)


def test_encode_batch_messages_takes_any_contiguous_buffer():
    """Bytes bodies are read in place, any other buffer (bytearray, memoryview, a view's
    slice, empty) through a view: the same bytes as for the bytes bodies, in both kernels."""
    bodies = [b"abc", b"", b"0123456789" * 30]
    as_buffers = [bytearray(bodies[0]), memoryview(b""), memoryview(b"--" + bodies[2] + b"--")[2:-2]]
    want = _store_py.encode_batch_messages([(i, b, {"K": str(i)}) for i, b in enumerate(bodies)])
    for k in BOTH:
        assert k.encode_batch_messages([(i, b, {"K": str(i)}) for i, b in enumerate(as_buffers)]) == want
        mixed = [(0, bodies[0], {"K": "0"}), (1, as_buffers[1], {"K": "1"}), (2, bodies[2], {"K": "2"})]
        assert k.encode_batch_messages(mixed) == want


def test_encode_batch_messages_allocates_nothing_per_bytes_item():
    """A batch of bytes bodies and str properties is encoded without a collector-tracked
    object per message: a view and a tuple per item set off the collections that cost a
    fifth of a 1000-message send_batch's client CPU (issue 34)."""
    import gc
    items = [(0, b"x" * 100, {"UNIQ_KEY": f"{i:032X}", "WAIT": "true"}) for i in range(1000)]
    collections = []

    def on_gc(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    threshold = gc.get_threshold()
    gc.collect()
    gc.set_threshold(100, 10, 10)
    gc.callbacks.append(on_gc)
    try:
        out = _store.encode_batch_messages(items)
    finally:
        gc.callbacks.remove(on_gc)
        gc.set_threshold(*threshold)
    assert out == _store_py.encode_batch_messages(items)
    assert collections == []


def test_encode_batch_messages_never_overruns_when_a_dict_changes():
    """A properties value whose ``__format__`` grows another message's dict between the
    measuring and the writing pass: refused, never written past the buffer."""
    victim: dict = {"A": "1"}

    class Grower:
        def __format__(self, spec):
            victim["B"] = "x" * 1000
            return "g"

    items = [(0, b"x", victim), (0, b"y", {"G": Grower()})]
    with pytest.raises(RuntimeError, match="changed"):
        _store.encode_batch_messages(items)
