"""The store's timer (mqcore.store.timer): put-time rewrite, wheel files, delivery, recall,
restart. Driven by ``TimerMessageStore.turn(now)`` with a manual clock (no thread)."""
from __future__ import annotations

import contextlib
import os

import pytest

from mqcore.clock import ManualClock
from mqcore.format import timer as T
from mqcore.message import Prop, string_to_properties
from mqcore.store.message_store import MessageStore
from mqcore.store.results import PutMessageStatus
from mqcore.store.timer import rewrite
from mqcore.store.timer.recall import build_recall_handle, decode_recall_handle, recall_marker
from mqcore.store.timer.service import TimerMessageStore
from tests.support.store import BORN, STORE, msg, records, small_config

T0 = 1_700_000_000_000  # a whole second


def _open(path, clock, **kw):
    cfg = small_config(path, commitlog_file_size_bytes=1 << 20, consume_queue_file_size_bytes=20 * 4000,
                       timerlog_file_size_bytes=52 * 200 + 16, **kw)
    store = MessageStore(cfg, clock=clock)
    store.load()
    store.start()
    timer = TimerMessageStore(store, clock=clock)
    timer.load()
    return store, timer


@contextlib.contextmanager
def _running(path, clock, **kw):
    store, timer = _open(path, clock, **kw)
    try:
        yield store, timer
    finally:
        timer.close()
        store.shutdown()


def _delivered(store, topic="T"):
    return records(store, topic, 0, 0, 1000)[1]


@pytest.fixture
def clock():
    return ManualClock(T0 + 200)


def test_a_timer_waits_in_the_timer_topic_and_arrives_in_its_second(tmp_path, clock):
    store, timer = _open(tmp_path, clock)
    try:
        r = store.put_message(msg("T", b"later", UNIQ_KEY="U1", TIMER_DELIVER_MS=str(T0 + 5_500)))
        assert r.status is PutMessageStatus.PUT_OK and r.timer_out_ms == T0 + 5_000
        assert store.get_max_offset_in_queue("T", 0) == 0
        assert store.get_max_offset_in_queue(T.TIMER_TOPIC, 0) == 1
        timer.turn(clock())
        assert timer.pending() == 1
        # slot T0+5s is read when its second begins, and the message held to its millisecond
        for now in (T0 + 1_000, T0 + 5_000, T0 + 5_499):
            clock.set(now)
            timer.turn(now)
            assert _delivered(store) == []
        assert timer.next_due_ms() == T0 + 5_500  # what the service thread sleeps until
        clock.set(T0 + 5_500)
        timer.turn(clock())
        (got,) = _delivered(store)
        props = string_to_properties(got.properties)
        assert got.body == b"later" and props["UNIQ_KEY"] == "U1"
        assert props[T.PROP_TIMER_DELIVER_MS] == str(T0 + 5_500)
        assert props[T.PROP_TIMER_OUT_MS] == str(T0 + 5_000)
        assert props[Prop.REAL_TOPIC] == "T" and props[Prop.REAL_QID] == "0"  # kept, as Apache 5.3.3 keeps them
        assert T.PROP_TIMER_ENQUEUE_MS in props and props[T.PROP_TIMER_DEQUEUE_MS] == str(T0 + 5_500)
        assert timer.pending() == 0
        assert os.path.getsize(tmp_path / T.TIMERWHEEL_FILE) == T.WHEEL_LENGTH
        assert os.path.getsize(tmp_path / "config" / T.TIMERCHECK_FILE) == T.CHECK_FILE_SIZE
    finally:
        timer.close()
        store.shutdown()


def test_each_property_names_the_due_time(tmp_path, clock):
    store, timer = _open(tmp_path, clock)
    try:
        now = clock()
        cases = {"TIMER_DELAY_SEC": ("3", now + 3000), "TIMER_DELAY_MS": ("2500", now + 2500),
                 "TIMER_DELIVER_MS": (str(T0 + 4000), T0 + 4000), "__STARTDELIVERTIME": (str(T0 + 7300), T0 + 7300)}
        for name, (value, due) in cases.items():
            r = store.put_message(msg("T", name.encode(), **{name: value}))
            p = 1000
            assert r.timer_out_ms == (due - p if due % p == 0 else due // p * p), name
    finally:
        timer.close()
        store.shutdown()


@pytest.mark.parametrize("props", [{"TIMER_DELAY_SEC": "abc"}, {"TIMER_DELIVER_MS": "1.5"},
                                   {"TIMER_DELAY_MS": " 100"}, {"TIMER_DELAY_SEC": str(3 * 86400 + 1)},
                                   {"TIMER_DELIVER_MS": "99999999999999999999"}])
def test_a_malformed_or_too_far_timer_is_refused_and_nothing_is_stored(tmp_path, clock, props):
    store, timer = _open(tmp_path, clock)
    try:
        r = store.put_message(msg("T", **props))
        assert r.status is PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL
        assert "timer message illegal" in r.remark
        assert store.get_max_phy_offset() == 0
    finally:
        timer.close()
        store.shutdown()


def test_a_due_time_in_the_past_is_stored_at_once_and_a_delay_level_wins(tmp_path, clock):
    store, timer = _open(tmp_path, clock)
    try:
        assert store.put_message(msg("T", TIMER_DELAY_SEC="-5")).timer_out_ms == 0
        assert store.get_max_offset_in_queue("T", 0) == 1
        r = store.put_message(msg("T", DELAY="1", TIMER_DELAY_SEC="30"))
        assert r.timer_out_ms == 0 and store.get_max_offset_in_queue("SCHEDULE_TOPIC_XXXX", 0) == 1
        rec = store.look_message_by_offset(r.phy_offset)
        assert "TIMER_DELAY_SEC" not in rec.properties
    finally:
        timer.close()
        store.shutdown()


def test_timers_off_refuses_them(tmp_path, clock):
    store, timer = _open(tmp_path, clock, timer_wheel_enable=False)
    try:
        r = store.put_message(msg("T", TIMER_DELAY_SEC="5"))
        assert r.status is PutMessageStatus.WHEEL_TIMER_NOT_ENABLE and store.get_max_phy_offset() == 0
    finally:
        timer.close()
        store.shutdown()


def test_recall_removes_one_timer_of_its_slot(tmp_path, clock):
    store, timer = _open(tmp_path, clock)
    try:
        due = str(T0 + 3_400)
        r1 = store.put_message(msg("T", b"keep", UNIQ_KEY="K1", TIMER_DELIVER_MS=due))
        store.put_message(msg("T", b"drop", UNIQ_KEY="K2", TIMER_DELIVER_MS=due))
        handle = decode_recall_handle(build_recall_handle("T", "b", r1.timer_out_ms + 1, "K2"))
        marker = store.put_message(recall_marker(handle, "PG", clock(), BORN, STORE))
        assert marker.status is PutMessageStatus.PUT_OK and marker.timer_out_ms == r1.timer_out_ms
        timer.turn(clock())
        clock.set(T0 + 4_000)
        timer.turn(clock())
        assert [m.body for m in _delivered(store)] == [b"keep"] and timer.recalled == 1
    finally:
        timer.close()
        store.shutdown()


def test_timers_of_one_second_each_arrive_at_their_millisecond_never_before(tmp_path, clock):
    with _running(tmp_path, clock) as (store, timer):
        for key, at in (("late", 900), ("early", 100), ("mid", 400)):
            store.put_message(msg("T", key.encode(), UNIQ_KEY=key, TIMER_DELIVER_MS=str(T0 + 3_000 + at)))
        store.put_message(msg("T", b"delay", UNIQ_KEY="delay", TIMER_DELAY_MS="2950"))  # put at T0+200
        timer.turn(clock())
        seen = []
        for at in range(0, 1_001, 50):
            clock.set(T0 + 3_000 + at)
            timer.turn(clock())
            got = [m.body.decode() for m in _delivered(store)]
            seen.append((at, got))
        arrived = {}
        for at, got in seen:
            for body in got:
                arrived.setdefault(body, at)
        assert arrived == {"early": 100, "mid": 400, "late": 900, "delay": 150}
        assert [m.body for m in _delivered(store)] == [b"early", b"delay", b"mid", b"late"]
        assert timer.pending() == 0 and timer.next_due_ms() is None


def test_the_current_second_read_ahead_is_capped_and_the_rest_still_arrives(tmp_path, clock, monkeypatch):
    from mqcore.store.timer import service
    monkeypatch.setattr(service, "HELD_BYTES_MAX", 25)  # two 10-byte bodies, then the cap
    with _running(tmp_path, clock) as (store, timer):
        for i in range(6):
            store.put_message(msg("T", b"%010d" % i, UNIQ_KEY=f"C{i}", TIMER_DELIVER_MS=str(T0 + 2_500)))
        timer.turn(clock())
        clock.set(T0 + 2_100)
        timer.turn(clock())
        assert len(timer._held) == 3 and _delivered(store) == []  # read up to the cap, nothing due yet
        clock.set(T0 + 2_500)
        timer.turn(clock())
        clock.set(T0 + 3_000)
        timer.turn(clock())
        assert [m.body for m in _delivered(store)] == [b"%010d" % i for i in range(6)]
        assert timer.pending() == 0


def test_a_recall_that_arrives_while_its_message_is_held_still_recalls_it(tmp_path, clock):
    with _running(tmp_path, clock) as (store, timer):
        r = store.put_message(msg("T", b"drop", UNIQ_KEY="R1", TIMER_DELIVER_MS=str(T0 + 2_800)))
        timer.turn(clock())
        clock.set(T0 + 2_100)
        timer.turn(clock())  # read and held until 2,800
        handle = decode_recall_handle(build_recall_handle("T", "b", T0 + 2_800, "R1"))
        assert store.put_message(recall_marker(handle, "PG", clock(), BORN, STORE)).status is PutMessageStatus.PUT_OK
        for at in (2_200, 2_800, 3_000):
            clock.set(T0 + at)
            timer.turn(clock())
        assert _delivered(store) == [] and timer.recalled == 1 and timer.pending() == 0


def test_a_clean_stop_in_the_middle_of_a_second_delivers_nothing_twice(tmp_path, clock):
    store, timer = _open(tmp_path, clock)
    for key, at in (("a", 100), ("b", 600)):
        store.put_message(msg("T", key.encode(), UNIQ_KEY=key, TIMER_DELIVER_MS=str(T0 + 3_000 + at)))
    timer.turn(clock())
    clock.set(T0 + 3_300)
    timer.turn(clock())
    assert [m.body for m in _delivered(store)] == [b"a"]
    timer.close()
    store.shutdown()
    assert (tmp_path / "config" / T.TIMEROPEN_FILE).exists()
    store, timer = _open(tmp_path, clock)
    try:
        assert not (tmp_path / "config" / T.TIMEROPEN_FILE).exists()  # used once
        assert timer.pending() == 1
        for at in (3_400, 3_600, 4_000):
            clock.set(T0 + at)
            timer.turn(clock())
        assert [m.body for m in _delivered(store)] == [b"a", b"b"] and timer.pending() == 0
    finally:
        timer.close()
        store.shutdown()


def test_recall_handles_decode_as_java_builds_them():
    h = build_recall_handle("TopicA", "broker-a", 1700000003001, "7F0000010001")
    assert decode_recall_handle(h) == decode_recall_handle(h.rstrip("="))
    assert decode_recall_handle(h).timestamp == "1700000003001"
    for bad in ("", "!!!", build_recall_handle("a", "b", 1, "c").replace("djE", "djI")):
        with pytest.raises(Exception, match="recall handle is invalid"):
            decode_recall_handle(bad)


def test_pending_timers_survive_a_reopen_and_are_delivered_once(tmp_path, clock):
    store, timer = _open(tmp_path, clock)
    for i in range(300):  # more units than one timerlog file holds
        store.put_message(msg("T", b"%d" % i, UNIQ_KEY=f"U{i}", TIMER_DELIVER_MS=str(T0 + 2_000 + i * 10)))
    timer.turn(clock())
    timer.turn(clock())
    assert timer.pending() == 300
    assert len(os.listdir(tmp_path / T.TIMERLOG_DIR)) == 2
    clock.set(T0 + 3_000)  # the first second's timers (T0+2.0 .. T0+2.99) are due
    timer.turn(clock())
    first = len(_delivered(store))
    assert 0 < first < 300
    timer.close()
    store.shutdown()
    store, timer = _open(tmp_path, clock)
    try:
        assert timer.pending() == 300 - first
        clock.set(T0 + 10_000)
        timer.turn(clock())
        got = [m.body for m in _delivered(store)]
        assert sorted(got, key=int) == [b"%d" % i for i in range(300)]
    finally:
        timer.close()
        store.shutdown()


def test_a_store_without_timers_gets_no_timer_files(tmp_path, clock):
    store, timer = _open(tmp_path, clock)
    store.put_message(msg("T", b"plain"))
    timer.turn(clock())
    timer.close()
    store.shutdown()
    assert not (tmp_path / T.TIMERWHEEL_FILE).exists() and not (tmp_path / T.TIMERLOG_DIR).exists()


def test_the_rewrite_keeps_a_delivered_or_rolled_timer_where_it_is():
    pol = rewrite.TimerPolicy()
    assert rewrite.rewrite({"TIMER_DELIVER_MS": str(T0 + 9000), "TIMER_OUT_MS": str(T0 + 8000)}, "T", 0, T0, pol) is None
    assert rewrite.rewrite({"TIMER_DELIVER_MS": str(T0 + 9000)}, T.TIMER_TOPIC, 0, T0, pol) is None
    props = {"TIMER_DELIVER_MS": str(T0 + 9000)}
    held = rewrite.rewrite(props, "T", 3, T0, pol)
    assert held == rewrite.Held(T0 + 8000) and props[Prop.REAL_QID] == "3" and props[Prop.REAL_TOPIC] == "T"


def test_timerlog_files_whose_messages_are_gone_are_deleted_but_never_the_last(tmp_path):
    from mqcore.store.timer.files import TimerLog

    tl = TimerLog(str(tmp_path / "timerlog"), 52 * 10 + 16)
    for i in range(35):  # 10 units a file: 4 files
        tl.append(T.UNIT.pack(T.UNIT_SIZE, -1, T.MAGIC_DEFAULT, T0, 1000, i * 100, 100, 0, 0))
    assert len(tl.q.files) == 4
    assert tl.delete_below(1000) == 1  # units 0..9 point below 1000; the second file's last is 1900
    assert tl.delete_below(10**9) == 2 and len(tl.q.files) == 1
    tl.close()


def test_timers_due_while_the_broker_was_down_for_minutes_come_at_once_in_order(tmp_path, clock):
    store, timer = _open(tmp_path, clock)
    for i, at in enumerate((T0 + 200_000, T0 + 400_500, T0 + 600_000)):
        store.put_message(msg("T", b"%d" % i, TIMER_DELIVER_MS=str(at)))
    timer.turn(clock())
    timer.close()
    store.shutdown()
    clock.set(T0 + 3_600_000)  # an hour later: the read time walks ~3,600 empty slots in pread chunks
    store, timer = _open(tmp_path, clock)
    try:
        assert timer.pending() == 3
        timer.turn(clock())
        assert [m.body for m in _delivered(store)] == [b"0", b"1", b"2"]
        assert timer.read_time_ms == T0 + 3_600_000
    finally:
        timer.close()
        store.shutdown()


def test_a_stop_with_timers_pending_says_how_many(tmp_path, clock, caplog):
    store, timer = _open(tmp_path, clock)
    store.put_message(msg("T", TIMER_DELAY_SEC="60"))
    timer.turn(clock())
    with caplog.at_level("WARNING", logger="mqcore.store.timer.service"):
        timer.close()
    store.shutdown()
    assert "1 timer message(s) still pending" in caplog.text
