"""SiblingFuture and WindowSlots (the wire kernels', compiled and twin): the cheap future and semaphore behind ``Producer.send_async``.

Both replace standard-library classes on the pipelined send path, so these tests pin the
contract users rely on: a ``concurrent.futures.Future`` that works with ``result``,
``exception``, cancellation, ``wait``/``as_completed`` and ``asyncio.wrap_future``, and a
semaphore with ``acquire(blocking, timeout)``/``release``.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from mqcore import _wire_client, _wire_client_py
from mqcore.client.loop import SiblingFuture, settle_siblings
from tests.support.waiting import wait_for


def _pair() -> tuple[threading.Condition, SiblingFuture, SiblingFuture]:
    shared = threading.Condition()
    return shared, SiblingFuture(shared), SiblingFuture(shared)


def _until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def test_a_siblings_completion_does_not_end_anothers_wait_early() -> None:
    # the base class waits once: a notify_all for the sibling would end f1's wait and
    # report a timeout long before its 0.6 s have passed
    shared, f1, f2 = _pair()
    outcome: list[object] = []

    def wait_f1() -> None:
        t0 = time.monotonic()
        try:
            f1.result(timeout=0.6)
        except concurrent.futures.TimeoutError:
            outcome.append(time.monotonic() - t0)

    waiter = threading.Thread(target=wait_f1)
    waiter.start()
    _until(lambda: len(shared._waiters) == 1)  # parked on the shared condition
    f2.set_result("sibling")
    waiter.join(5)
    assert len(outcome) == 1 and outcome[0] >= 0.55, outcome


def test_result_arrives_across_threads_and_sibling_wakeups() -> None:
    shared, f1, f2 = _pair()
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(f1.result(timeout=5)))
    waiter.start()
    _until(lambda: len(shared._waiters) == 1)
    f2.set_result(2)
    f1.set_result(1)
    waiter.join(5)
    assert got == [1]


def test_exception_cancel_and_callbacks_follow_the_future_contract() -> None:
    order: list[str] = []
    shared = threading.Condition()
    f = SiblingFuture(shared, lambda fut: order.append("hook"))
    f.add_done_callback(lambda fut: order.append("user"))
    error = ValueError("boom")
    f.set_exception(error)
    assert order == ["hook", "user"]
    assert f.exception(0) is error
    with pytest.raises(ValueError, match="boom"):
        f.result(0)
    g = SiblingFuture(shared)
    assert g.cancel() and g.cancelled()
    with pytest.raises(concurrent.futures.CancelledError):
        g.result(0)
    with pytest.raises(concurrent.futures.CancelledError):
        g.exception(0)
    h = SiblingFuture(shared)
    with pytest.raises(concurrent.futures.TimeoutError):
        h.exception(0.01)


def test_works_with_wait_as_completed_and_wrap_future() -> None:
    shared = threading.Condition()
    futures = [SiblingFuture(shared) for _ in range(3)]
    threading.Timer(0.05, lambda: [f.set_result(i) for i, f in enumerate(futures)]).start()
    done, pending = concurrent.futures.wait(futures, timeout=5)
    assert len(done) == 3 and not pending
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, timeout=5)) == [0, 1, 2]

    async def main() -> object:
        f = SiblingFuture(shared)
        threading.Timer(0.02, f.set_result, args=("ok",)).start()
        return await asyncio.wrap_future(f)

    assert asyncio.run(main()) == "ok"


WINDOWS = [pytest.param(_wire_client.WindowSlots, id="compiled"), pytest.param(_wire_client_py.WindowSlots, id="twin")]


@pytest.mark.parametrize("Slots", WINDOWS)
def test_slots_count_block_time_out_and_wake(Slots) -> None:
    slots = Slots(2)
    assert slots.acquire(False) and slots.acquire(False)
    assert not slots.acquire(False)
    t0 = time.monotonic()
    assert not slots.acquire(timeout=0.2)
    assert time.monotonic() - t0 >= 0.18
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(slots.acquire(timeout=5)))
    waiter.start()
    _until(lambda: slots._waiting == 1)
    slots.release()
    waiter.join(5)
    assert got == [True] and slots.free == 0
    slots.release()
    slots.release()
    assert slots.free == 2
    with pytest.raises(ValueError):
        Slots(-1)


@pytest.mark.parametrize("Slots", WINDOWS)
def test_slots_under_contention_never_hand_out_more_than_they_hold(Slots) -> None:
    slots = Slots(3)
    held = 0
    peak = 0
    lock = threading.Lock()

    def worker() -> None:
        nonlocal held, peak
        for _ in range(300):
            assert slots.acquire(timeout=5)
            with lock:
                held += 1
                peak = max(peak, held)
            with lock:
                held -= 1
            slots.release()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert peak <= 3 and slots.free == 3


@pytest.mark.parametrize("Slots", WINDOWS)
def test_a_release_racing_a_waiter_always_wakes_it(Slots) -> None:
    """The compiled window gives a slot back without a lock and notifies only when it sees a
    waiter: a waiter that has just found the window empty must never miss that release (it
    would sleep until its timeout)."""
    slots = Slots(0)
    for i in range(200):
        got: list[bool] = []
        waiter = threading.Thread(target=lambda: got.append(slots.acquire(timeout=30)), daemon=True)
        waiter.start()
        if i % 2:
            _until(lambda: slots._waiting == 1)  # half the time: released while it sleeps
        slots.release()
        waiter.join(5)
        assert got == [True], f"round {i}: the waiter missed the release (still asleep after 5 s)"
    assert slots.free == 0 and slots._waiting == 0


def test_settled_outcome_reads_a_done_future_and_refuses_a_pending_one() -> None:
    shared = threading.Condition()
    ok, failed, cancelled, pending = (SiblingFuture(shared) for _ in range(4))
    ok.set_result("r")
    error = RuntimeError("no")
    failed.set_exception(error)
    cancelled.cancel()
    assert ok.settled_outcome() == ("r", None)
    assert failed.settled_outcome() == (None, error)
    result, cancel_error = cancelled.settled_outcome()
    assert result is None and isinstance(cancel_error, concurrent.futures.CancelledError)
    with pytest.raises(concurrent.futures.InvalidStateError):
        pending.settled_outcome()


def test_settle_siblings_completes_a_batch_wakes_waiters_and_runs_callbacks_in_order() -> None:
    shared = threading.Condition()
    calls: list[int] = []
    futures = [SiblingFuture(shared, lambda f, i=i: calls.append(i)) for i in range(5)]
    futures[2].cancel()  # its caller gave up: left cancelled, no result, its callback already ran
    waiter_done = threading.Event()
    got: list[object] = []

    def waiter() -> None:  # blocked in result() on a sibling before the batch settles
        got.append(futures[4].result(5))
        waiter_done.set()

    t = threading.Thread(target=waiter)
    t.start()
    pending_wait = concurrent.futures.wait(futures[:2], timeout=0)
    assert not pending_wait.done
    settle_siblings(futures, [f"r{i}" for i in range(5)])
    assert waiter_done.wait(5) and got == ["r4"]
    t.join(5)
    assert [f.result(0) for i, f in enumerate(futures) if i != 2] == ["r0", "r1", "r3", "r4"]
    assert futures[2].cancelled()
    assert calls == [2, 0, 1, 3, 4]  # the cancelled one's callback at cancel time, the rest in order
    done, _ = concurrent.futures.wait([f for f in futures if not f.cancelled()], timeout=0)
    assert len(done) == 4
    with pytest.raises(ValueError):
        settle_siblings([SiblingFuture(shared), SiblingFuture(threading.Condition())], [1, 2])


def test_a_sibling_future_makes_its_lists_only_when_used() -> None:
    """A future nobody waits on and without a callback is one object for the garbage
    collector, not three: with thousands of ``send_async`` futures alive, every extra
    tracked object makes each collection longer."""
    import gc

    shared = threading.Condition()
    gc.collect()
    before = len(gc.get_objects())
    futures = [SiblingFuture(shared) for _ in range(2000)]
    assert len(gc.get_objects()) - before < 2100  # the futures and the list holding them
    settle_siblings(futures, list(range(2000)))
    assert len(gc.get_objects()) - before < 2100
    assert futures[7].result(0) == 7


def test_wait_in_another_thread_is_woken_by_settle_siblings() -> None:
    """``concurrent.futures.wait`` installs its waiter in a list made on first use; the
    batch settle must still find and notify it."""
    shared = threading.Condition()
    futures = [SiblingFuture(shared) for _ in range(3)]
    outcome: list[object] = []
    t = threading.Thread(target=lambda: outcome.append(
        concurrent.futures.wait(futures[1:], timeout=10, return_when=concurrent.futures.FIRST_COMPLETED)))
    t.start()
    assert wait_for(lambda: futures[2]._waiter_list, timeout=5)  # the waiter is installed
    settle_siblings(futures, ["a", "b", "c"])
    t.join(10)
    done, _pending = outcome[0]
    assert done and done <= set(futures[1:])
