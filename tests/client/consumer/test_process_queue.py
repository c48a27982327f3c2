"""ProcessQueue: offset-ordered buffer, commit offsets, orderly take/commit/rollback."""
from __future__ import annotations

import random
import threading

from mqcore.client.consumer.process_queue import ProcessQueue
from mqcore.client.message import MessageExt
from mqcore.clock import ManualClock


def m(offset: int, body: bytes = b"xx", max_offset: int | None = None) -> MessageExt:
    raw = f"MAX_OFFSET\x01{max_offset}".encode() if max_offset is not None else b""
    msg = MessageExt("T", body, raw, "b")
    msg.queue_offset = offset
    return msg


def test_put_and_remove_give_lowest_unconsumed_offset():
    pq = ProcessQueue(ManualClock())
    msgs = [m(i) for i in range(10, 15)]
    assert pq.put_messages(msgs) is True
    assert (pq.msg_count, pq.msg_size, pq.queue_offset_max) == (5, 10, 14)
    assert pq.remove_messages([msgs[2], msgs[4]]) == 10  # 10 is still being consumed
    assert pq.remove_messages([msgs[0]]) == 11
    assert pq.remove_messages([msgs[1], msgs[3]]) == 15  # all done: one past the highest
    assert pq.msg_count == 0 and pq.msg_size == 0
    assert pq.remove_messages([msgs[0]]) == -1


def test_duplicates_are_counted_once_and_span():
    pq = ProcessQueue(ManualClock())
    pq.put_messages([m(1), m(2)])
    pq.put_messages([m(2), m(3)])
    assert pq.msg_count == 3 and pq.max_span() == 2
    pq.remove_messages([m(1)])
    assert pq.max_span() == 1


def test_acc_count_from_max_offset():
    pq = ProcessQueue(ManualClock())
    pq.put_messages([m(5, max_offset=106)])
    assert pq.msg_acc_cnt == 101


def test_random_completion_order_never_skips_unconsumed():
    pq = ProcessQueue(ManualClock())
    msgs = [m(i) for i in range(200)]
    pq.put_messages(msgs)
    order = list(msgs)
    random.Random(7).shuffle(order)
    done: set[int] = set()
    for msg in order:
        offset = pq.remove_messages([msg])
        done.add(msg.queue_offset)
        expected = min((i for i in range(200) if i not in done), default=200)
        assert offset == expected


def test_orderly_take_commit_and_again():
    pq = ProcessQueue(ManualClock())
    pq.put_messages([m(i) for i in range(5)])
    batch = pq.take_messages(2)
    assert [x.queue_offset for x in batch] == [0, 1]
    pq.make_messages_to_consume_again(batch)
    again = pq.take_messages(3)
    assert [x.queue_offset for x in again] == [0, 1, 2]
    assert pq.commit() == 3
    assert pq.msg_count == 2
    assert [x.queue_offset for x in pq.take_messages(10)] == [3, 4]
    pq.rollback()
    assert [x.queue_offset for x in pq.take_messages(10)] == [3, 4]
    assert pq.commit() == 5
    assert pq.take_messages(1) == [] and pq.consuming is False
    assert pq.commit() == -1


def test_dispatch_flag_for_orderly():
    pq = ProcessQueue(ManualClock())
    assert pq.put_messages([m(0)]) is True
    assert pq.put_messages([m(1)]) is False  # already consuming
    pq.take_messages(10)
    pq.take_messages(10)  # empty: consuming cleared
    assert pq.put_messages([m(2)]) is True


def test_expiry_with_injected_clock():
    clock = ManualClock()
    pq = ProcessQueue(clock, lock_max_live_time_ms=30_000, pull_max_idle_time_ms=120_000)
    pq.mark_locked(True)
    clock.advance(30_000)
    assert not pq.is_lock_expired()
    clock.advance(1)
    assert pq.is_lock_expired()
    assert not pq.is_pull_expired()
    clock.advance(120_000)
    assert pq.is_pull_expired()
    pq.touch_pull()
    assert not pq.is_pull_expired()


def test_remove_if_first():
    pq = ProcessQueue(ManualClock())
    a, b = m(1), m(2)
    pq.put_messages([a, b])
    assert not pq.remove_if_first(b)
    assert pq.remove_if_first(a) and pq.first_message() is b


def test_thread_safety():
    pq = ProcessQueue(ManualClock())
    msgs = [m(i) for i in range(4000)]
    pq.put_messages(msgs)
    chunks = [msgs[i::8] for i in range(8)]
    threads = [threading.Thread(target=lambda c=c: [pq.remove_messages([x]) for x in c]) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pq.msg_count == 0 and pq.remove_messages([]) == -1


def test_lowest_offset_and_orderly_take_stay_right_whatever_order_offsets_arrive_in():
    """Offsets usually arrive ascending (kept as a sorted list), but a rollback or a
    re-delivered offset puts lower ones back (the queue then keeps a heap): against a plain
    model, the commit offset is always the lowest held (or one past the highest seen) and
    ``take_messages`` always hands out the lowest offsets in order."""
    rng = random.Random(7)
    for _ in range(60):
        pq = ProcessQueue(ManualClock())
        held: dict[int, MessageExt] = {}
        taken: dict[int, MessageExt] = {}
        top, next_offset = -1, 0
        for _ in range(40):
            op = rng.random()
            if op < 0.4:  # a pull: a run of fresh ascending offsets, sometimes with old ones again
                run = [m(o) for o in range(next_offset, next_offset + rng.randint(1, 30))]
                next_offset += len(run) + rng.randint(0, 3)
                if held and rng.random() < 0.2:
                    run.insert(0, m(rng.choice(list(held))))
                pq.put_messages(run)
                for msg in run:
                    held[msg.queue_offset] = msg
                    top = max(top, msg.queue_offset)
            elif op < 0.65 and held:  # concurrent consumers finish some, in any order
                done = rng.sample(list(held.values()), rng.randint(1, len(held)))
                for msg in done:
                    held.pop(msg.queue_offset, None)
                expected = min(held) if held else top + 1
                assert pq.remove_messages(done) == expected
            elif op < 0.85:  # an orderly consumer takes the lowest ones
                n = rng.randint(1, 10)
                got = pq.take_messages(n)
                lowest = sorted(held)[:n]
                assert [x.queue_offset for x in got] == lowest
                for o in lowest:
                    taken[o] = held.pop(o)
            elif taken:  # ... and rolls them back: lower offsets again
                pq.rollback()
                held.update(taken)
                taken.clear()
            assert len(pq) == len(held)


def test_a_flow_controlled_pull_is_told_once_when_there_is_room_again():
    pq = ProcessQueue(ManualClock())
    msgs = [m(i) for i in range(10)]  # 2 bytes each
    pq.put_messages(msgs)
    calls = []
    assert pq.notify_when_room(10, 100, lambda: calls.append("count")) is False  # room already
    assert pq.notify_when_room(5, 100, lambda: calls.append("count")) is True
    pq.remove_messages(msgs[:4])
    assert calls == []  # 6 held: still over
    pq.remove_messages(msgs[4:6])
    assert calls == ["count"]
    pq.remove_messages(msgs[6:7])
    assert calls == ["count"]  # once
    assert pq.notify_when_room(1, 4, lambda: calls.append("size")) is True  # 3 held, 6 bytes
    pq.remove_messages(msgs[7:8])
    assert calls == ["count"]  # 2 held, but 4 bytes only now: the count limit is not met yet
    pq.remove_messages(msgs[8:9])
    assert calls == ["count", "size"]
    assert pq.notify_when_room(0, 0, lambda: calls.append("cancelled")) is True
    pq.cancel_room_notification()
    pq.remove_messages(msgs[9:])
    assert calls == ["count", "size"]


def test_an_orderly_commit_makes_room_too():
    pq = ProcessQueue(ManualClock())
    pq.put_messages([m(i) for i in range(4)])
    calls = []
    assert pq.notify_when_room(1, 100, lambda: calls.append(True))
    pq.take_messages(3)
    assert calls == []  # taken, not committed: still held
    pq.commit()
    assert calls == [True]
