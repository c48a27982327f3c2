"""UNIQ_KEY layout (store-format §2.2)."""
from __future__ import annotations

import struct

from mqcore.clock import ManualClock
from mqcore.uniq_id import UniqIdGenerator, month_start_ms, time_from_uniq_id


def test_layout():
    clock = ManualClock(month_start_ms(1_700_000_000_000) + 12_345)
    gen = UniqIdGenerator("192.168.0.10", pid=0x12345, loader_hash=0xCAFEBABE, clock=clock)
    uid = gen.next_id()
    raw = bytes.fromhex(uid)
    assert len(uid) == 32 and uid == uid.upper()
    assert raw[:4] == bytes([192, 168, 0, 10])
    assert raw[4:6] == (0x2345).to_bytes(2, "big")
    assert raw[6:10] == (0xCAFEBABE).to_bytes(4, "big")
    assert struct.unpack(">i", raw[10:14])[0] == 12_345
    assert struct.unpack(">H", raw[14:16])[0] == 0
    assert struct.unpack(">H", bytes.fromhex(gen.next_id())[14:16])[0] == 1


def test_ids_are_unique_and_counter_wraps():
    gen = UniqIdGenerator("127.0.0.1", pid=1, loader_hash=2, clock=ManualClock())
    ids = [gen.next_id() for _ in range(70_000)]
    assert len(set(ids[:65536])) == 65536
    assert ids[65536][-4:] == "0000"


def test_month_rollover_rebases_time():
    start = month_start_ms(1_700_000_000_000)
    next_month = month_start_ms(1_700_000_000_000, months_back=-1)
    clock = ManualClock(next_month - 5)
    gen = UniqIdGenerator("127.0.0.1", pid=1, loader_hash=2, clock=clock)
    before = struct.unpack(">I", bytes.fromhex(gen.next_id())[10:14])[0]
    assert before == next_month - 5 - start  # written as Java's (int) cast: may wrap past 2^31
    clock.set(next_month + 7)
    after = struct.unpack(">i", bytes.fromhex(gen.next_id())[10:14])[0]
    assert after == 7


def test_time_from_uniq_id():
    now = 1_700_000_000_000
    gen = UniqIdGenerator("127.0.0.1", pid=1, loader_hash=2, clock=ManualClock(now - 5000))
    assert time_from_uniq_id(gen.next_id(), now) == now - 5000


def test_ipv6_client():
    uid = UniqIdGenerator("::1", pid=1, loader_hash=2, clock=ManualClock()).next_id()
    assert len(uid) == 56


def test_time_field_is_the_int32_two_complement_of_the_offset():
    """The id's time field is formatted straight from an int: it must be the bytes Java's
    ``putInt`` writes, including an offset past 2^31 ms (wraps negative) and a clock that
    stepped back before the month's start (negative offset)."""
    start = month_start_ms(1_700_000_000_000)
    for offset in (0, 1, 12_345, 2**31 - 1, 2**31, 2**31 + 5, -1, -86_400_000):
        clock = ManualClock(start)
        gen = UniqIdGenerator("10.0.0.1", pid=7, loader_hash=9, clock=clock)
        clock.set(start + offset)
        gen._start_ms, gen._next_start_ms = start, start + 2**40  # pin the month: only the field is under test
        raw = bytes.fromhex(gen.next_id())
        expected = ((offset & 0xFFFFFFFF) ^ 0x80000000) - 0x80000000
        assert struct.unpack(">i", raw[10:14])[0] == expected, offset
