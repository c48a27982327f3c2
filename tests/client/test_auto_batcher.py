"""The auto-batching kernel (``AutoBatcher`` / ``PendingBatch`` of the wire kernels) and
``BatchFuture``: the compiled kernel, its pure-Python twin and the generic batch encoder
give the same bytes, the same ids and the same answers; the futures behave as
``concurrent.futures.Future`` does."""
from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading

import pytest

from mqcore import _wire_client, _wire_client_py
from mqcore.client.loop import BatchFuture, settle_batch
from mqcore.client.message import Message, SendResult, SendStatus
from mqcore.clock import ManualClock, system_clock_ms
from mqcore.format.batch import encode_batch_messages
from mqcore.remoting.bodies import MessageQueue
from mqcore.uniq_id import UniqIdGenerator, time_from_uniq_id

KERNELS = [pytest.param(_wire_client, id="compiled"), pytest.param(_wire_client_py, id="twin")]


class Batcher:
    """An ``AutoBatcher`` with its ``on_batch`` calls recorded."""

    def __init__(self, kernels, *, batch_max_bytes=1 << 20, total=1 << 24, window=None, ids=None,
                 checked=("T", "U")) -> None:
        self.actions: list[tuple[int, object]] = []
        self.ids = ids or UniqIdGenerator("10.1.2.3", pid=77, loader_hash=5, clock=ManualClock(1_700_000_000_000))
        self.b = kernels.AutoBatcher(
            lock=threading.Lock(), batch_max_bytes=batch_max_bytes, total_batch_max_bytes=total,
            max_inflight_batches=2, max_message_bytes=4 << 20, checked_topics=set(checked), ids=self.ids,
            system_clock=self.ids.clock is system_clock_ms, future_type=BatchFuture, condition=threading.Condition(),
            result_type=SendResult, on_batch=lambda action, batch: self.actions.append((action, batch)),
            window=window)


def messages() -> list[Message]:
    """Plain messages of every shape a batch carries: tags, keys, user properties (non-ASCII
    too), a flag, wait-store-ok false, bodies of several sizes."""
    out = [Message("T", b"x" * n, tags="A") for n in (1, 100, 1024)]
    out.append(Message("T", "zé ✓".encode(), tags="A", keys=["k1", "k2"], flag=7))
    m = Message("T", b"u", tags="A")
    m.put_user_property("région", "été")
    m.put_user_property("empty-ish", " ")
    out.append(m)
    return out


@pytest.mark.parametrize("kernels", KERNELS)
def test_batch_body_is_what_the_generic_encoder_writes(kernels):
    t = Batcher(kernels)
    msgs = messages()
    futures = [t.b.add(m) for m in msgs]
    assert all(type(f) is BatchFuture for f in futures)
    [(action, batch)] = t.actions  # one new batch, announced once
    assert action == kernels.BATCH_LEAVE_SOON and batch.count == len(msgs)
    expected = encode_batch_messages([(m.flag, m.body, m.properties) for m in msgs])
    assert bytes(batch.body) == expected
    assert batch.uniq_ids == [m.uniq_key for m in msgs]
    assert t.b.held_bytes == len(expected) == batch.size


def test_compiled_and_twin_agree_byte_for_byte_and_id_for_id():
    bodies, ids = [], []
    for kernels in (_wire_client, _wire_client_py):
        t = Batcher(kernels)  # same generator state: same ids
        msgs = messages()
        for m in msgs:
            t.b.add(m)
        [(_, batch)] = t.actions
        bodies.append(bytes(batch.body))
        ids.append(list(batch.uniq_ids))
    assert bodies[0] == bodies[1] and ids[0] == ids[1]


def test_stamped_ids_are_the_generators():
    clock = ManualClock(1_700_000_123_456)
    reference = UniqIdGenerator("10.1.2.3", pid=77, loader_hash=5, clock=clock)
    expected = [reference.next_id() for _ in range(3)]
    t = Batcher(_wire_client, ids=UniqIdGenerator("10.1.2.3", pid=77, loader_hash=5, clock=clock))
    got = []
    for _ in range(3):
        m = Message("T", b"x")
        t.b.add(m)
        got.append(m.uniq_key)
    assert got == expected
    # the system clock, read by the kernel itself: the time field says now
    live = UniqIdGenerator("10.1.2.3")
    t = Batcher(_wire_client, ids=live)
    m = Message("T", b"x")
    before = system_clock_ms()
    t.b.add(m)
    assert m.uniq_key[:20] == live.fixed_hex and len(m.uniq_key) == 32
    assert before - 5 <= time_from_uniq_id(m.uniq_key, system_clock_ms()) <= system_clock_ms() + 5
    assert live.next_id()[-4:] == "0001"  # one counter for the kernel and next_id


@pytest.mark.parametrize("kernels", KERNELS)
def test_declines_what_a_batch_cannot_carry(kernels):
    t = Batcher(kernels, batch_max_bytes=200)
    assert t.b.add(Message("T", b"x", delay_level=2)) is None
    tx = Message("T", b"x")
    tx.properties["TRAN_MSG"] = "true"
    assert t.b.add(tx) is None
    assert t.b.add(Message("%RETRY%g", b"x"), checked=True) is None
    assert t.b.add(Message("T", b"x" * 200)) is None  # its item alone fills a batch
    odd = Message("T", b"x")
    odd.properties["n"] = 1  # not a str: the general path formats it
    assert t.b.add(odd) is None
    assert t.b.add(Message("Unchecked", b"x")) == kernels.JOIN_CHECK
    assert t.b.add(Message("T", b"")) == kernels.JOIN_CHECK
    assert t.b.add(Message("Unchecked", b"x"), checked=True) is not None
    assert [a for a, _ in t.actions] == [kernels.BATCH_LEAVE_SOON]


@pytest.mark.parametrize("kernels", KERNELS)
def test_window_slots_and_the_memory_budget(kernels):
    window = kernels.WindowSlots(2)
    size = 22 + 1 + len("WAIT\x01true\x02UNIQ_KEY\x01") + 32
    t = Batcher(kernels, window=window, total=3 * size)
    assert type(t.b.add(Message("T", b"x"), None, None, 1)) is BatchFuture
    assert type(t.b.add(Message("T", b"x"), None, None, 1)) is BatchFuture
    assert t.b.add(Message("T", b"x"), None, None, 1) == kernels.JOIN_WAIT  # full: nothing taken
    assert window.free == 0
    assert type(t.b.add(Message("T", b"x"), None, None, 2)) is BatchFuture  # the caller's own slot
    [(_, batch)] = t.actions
    assert batch.window_slots == 3 and t.b.held_bytes == 3 * size
    window.release()
    assert t.b.add(Message("T", b"x"), None, None, 1) is None  # over the budget: the slot it took is back
    assert window.free == 1


@pytest.mark.parametrize("kernels", KERNELS)
def test_keys_split_batches_and_a_full_batch_leaves(kernels):
    size = 22 + 1 + len("TAGS\x01A\x02WAIT\x01true\x02UNIQ_KEY\x01") + 32
    t = Batcher(kernels, batch_max_bytes=3 * size + 1)
    q = MessageQueue("T", "b", 1)
    for tags, queue in (("A", None), ("B", None), ("A", q), ("A", None), ("A", None), ("A", None)):
        t.b.add(Message("T", b"x", tags=tags), queue)
    kinds = [(a, b.tags, b.queue, b.count) for a, b in t.actions]
    # A (None) gets 3 and leaves full when the 4th arrives; the 4th opens the next A batch
    assert kinds == [(kernels.BATCH_LEAVE_SOON, "A", None, 3), (kernels.BATCH_LEAVE_SOON, "B", None, 1),
                     (kernels.BATCH_LEAVE_SOON, "A", q, 1), (kernels.BATCH_LAUNCH, "A", None, 3),
                     (kernels.BATCH_LEAVE_SOON, "A", None, 1)]
    full = t.actions[3][1]
    assert not full.open and t.b.inflight_per_key[full.key] == 1 and t.b.pending[full.key] is t.actions[4][1]


def result_of(batch, base=40) -> SendResult:
    q = MessageQueue(batch.topic, "b", 3)
    return SendResult(SendStatus.SEND_OK, ",".join(batch.uniq_ids), q, base,
                      ",".join(f"O{i}" for i in range(batch.count)))


@pytest.mark.parametrize("kernels", KERNELS)
def test_futures_behave_as_concurrent_futures(kernels):
    t = Batcher(kernels)
    futures = [t.b.add(Message("T", str(i).encode())) for i in range(4)]
    [(_, batch)] = t.actions
    assert all(isinstance(f, concurrent.futures.Future) and not f.done() for f in futures)
    with pytest.raises(concurrent.futures.TimeoutError):
        futures[0].result(timeout=0.01)
    called = []
    futures[1].add_done_callback(lambda f: called.append(f.result().queue_offset))
    assert futures[2].cancel() and futures[2].cancelled()
    waiter_done = []
    live = [f for f in futures if not f.cancelled()]  # (wait() never counts a bare cancel() as done)
    waiter = threading.Thread(target=lambda: waiter_done.append(concurrent.futures.wait(live, timeout=5)))
    waiter.start()
    settle_batch(batch, result_of(batch))
    waiter.join(5)
    done, not_done = waiter_done[0]
    assert done == set(live) and not not_done
    results = [f.result(0) for f in (futures[0], futures[1], futures[3])]
    assert [(r.msg_id, r.queue_offset, r.offset_msg_id) for r in results] == [
        (batch.uniq_ids[i], 40 + i, f"O{i}") for i in (0, 1, 3)]
    assert called == [41]
    with pytest.raises(concurrent.futures.CancelledError):
        futures[2].result()  # cancelled by its caller before: left so
    late = []
    futures[0].add_done_callback(late.append)  # done: runs at once
    assert late == [futures[0]] and futures[0].exception() is None
    assert sorted(f.result().queue_offset for f in concurrent.futures.as_completed(
        [futures[0], futures[3]], timeout=1)) == [40, 43]

    async def wrapped():
        return await asyncio.wrap_future(futures[3])
    assert asyncio.run(wrapped()).queue_offset == 43


@pytest.mark.parametrize("kernels", KERNELS)
def test_a_failed_batch_fails_every_future_and_external(kernels):
    t = Batcher(kernels)
    own = t.b.add(Message("T", b"a"))
    external = concurrent.futures.Future()
    assert t.b.add(Message("T", b"b"), None, external) is external
    [(_, batch)] = t.actions
    seen = []
    own.add_done_callback(lambda f: seen.append(type(f.exception())))
    settle_batch(batch, error=RuntimeError("boom"))
    for f in (own, external):
        with pytest.raises(RuntimeError, match="boom"):
            f.result(1)
    assert seen == [RuntimeError]


def test_compiled_futures_cost_the_collector_nothing_until_they_could_close_a_cycle():
    t = Batcher(_wire_client)
    plain, watched, failed, by_hand = (t.b.add(Message("T", b"x")) for _ in range(4))
    by_hand.set_result(by_hand)  # a result that refers to its own future: a cycle the collector must see
    assert gc.is_tracked(by_hand)
    assert not gc.is_tracked(plain) and not gc.is_tracked(watched)
    watched.add_done_callback(lambda f: None)  # a callback may refer to the future
    assert gc.is_tracked(watched)
    failed.set_exception(RuntimeError("own"))  # an exception's traceback may refer to it
    assert gc.is_tracked(failed) and not gc.is_tracked(plain)
    [(_, batch)] = t.actions
    settle_batch(batch, result_of(batch))
    assert plain.result().queue_offset == 40 and not gc.is_tracked(plain)
    with pytest.raises(RuntimeError, match="own"):
        failed.result()


def test_explicit_batches_are_stamped_with_the_generators_ids():
    got = []
    for kernels in (_wire_client, _wire_client_py):
        clock = ManualClock(1_700_000_123_456)
        writer = kernels.UniqIdWriter(UniqIdGenerator("10.1.2.3", pid=77, loader_hash=5, clock=clock), False)
        msgs = [Message("T", b"x") for _ in range(3)]
        msgs[1].properties["UNIQ_KEY"] = "KEEP"  # a message that has one keeps it
        got.append((writer.stamp_all(msgs), [m.uniq_key for m in msgs], writer.next_id()))
    reference = UniqIdGenerator("10.1.2.3", pid=77, loader_hash=5, clock=ManualClock(1_700_000_123_456))
    first, third, after = (reference.next_id() for _ in range(3))
    assert got[0] == got[1] == ([first, "KEEP", third], [first, "KEEP", third], after)


def test_each_messages_result_is_the_same_object_whoever_makes_it():
    """``result_for`` writes ``SendResult``'s slots directly in the compiled kernel: the same
    values as the twin's constructor call, equal and of the same type; a result type the
    kernel cannot fill that way (one with a ``__post_init__``) is called instead."""
    import dataclasses

    made = []

    @dataclasses.dataclass(slots=True)
    class Checked(SendResult):  # type: ignore[misc]
        def __post_init__(self) -> None:
            made.append(self.msg_id)

    for result_type in (SendResult, Checked):
        results = []
        for kernels in (_wire_client, _wire_client_py):
            batch = kernels.PendingBatch(("T", None, None, True), "T", None, None, True, threading.Condition(),
                                         result_type)
            batch.uniq_ids.extend(["U0", "U1"])
            batch.result = SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "U0,U1", MessageQueue("T", "b", 2), 7, "O0",
                                      "tx", "region", False)
            results.append([batch.result_for(i) for i in range(2)])
        assert results[0] == results[1] and all(type(r) is result_type for r in results[0])
        assert [(r.msg_id, r.queue_offset, r.offset_msg_id) for r in results[0]] == [("U0", 7, "O0"), ("U1", 8, "O0")]
    assert made == ["U0", "U1", "U0", "U1"]  # both kernels ran its __post_init__


def _fill(t: Batcher, n: int, size: int) -> list:
    """``n`` messages of a ``size``-byte body added; the batches that were announced."""
    for _ in range(n):
        t.b.add(Message("T", b"y" * size))
    return [batch for _, batch in t.actions]


@pytest.mark.parametrize("kernels", KERNELS)
def test_a_batch_buffer_is_reserved_once_and_its_body_is_a_view(kernels):
    t = Batcher(kernels, batch_max_bytes=64 * 1024)
    [first] = _fill(t, 10, 100)
    # a first batch starts small and doubles: its body is a view of the items, never a copy
    assert first.capacity == 4096 and isinstance(first.body, memoryview) and len(first.body) == first.size
    old = first.body
    before = bytes(old)
    _fill(t, 40, 100)  # grows: a new buffer, the view of the old one still reads what it did
    doubled = 4096
    while doubled < first.size:
        doubled *= 2
    assert first.capacity == doubled > 4096
    assert bytes(old) == before and bytes(first.body[:len(before)]) == before
    del old
    with t.b.lock:
        t.b.detach(first)
    assert t.b.recent_batch_bytes == first.size
    # the next batch reserves what the last one reached (one allocation in the steady state)
    t.b.add(Message("T", b"z"))
    second = t.actions[-1][1]
    assert second is not first and second.capacity == first.size


@pytest.mark.parametrize("kernels", KERNELS)
def test_an_answered_batch_gives_its_buffer_to_the_next_unless_a_view_is_alive(kernels):
    t = Batcher(kernels, batch_max_bytes=64 * 1024)
    batches = _fill(t, 200, 500)  # the first leaves full, its successor opens
    a = batches[0]
    assert len(batches) == 3 and not a.open and t.actions[1][0] == kernels.BATCH_LAUNCH
    cap = a.capacity
    view = a.body
    a.drop_body()  # the transport still holds a view: not reused
    assert t.b.spares == [] and bytes(view)  # the bytes stay readable
    del view
    b = batches[2]
    with t.b.lock:
        t.b.detach(b)
    b.drop_body()  # no view alive: kept for the next batch
    assert len(t.b.spares) == 1 and a.size == 0 and b.size == 0
    spare = t.b.spares[0]
    t.b.add(Message("T", b"w" * 10))
    c = t.actions[-1][1]
    assert t.b.spares == [] and c.capacity == len(spare) and bytes(c.body) == bytes(spare[:c.size])
    assert cap >= c.size


def test_compiled_and_twin_reserve_the_same_buffers():
    caps = []
    for kernels in (_wire_client, _wire_client_py):
        t = Batcher(kernels, batch_max_bytes=32 * 1024)
        seen = []
        for size, n in ((10, 100), (300, 40), (3000, 9), (7000, 7), (1, 3), (20000, 3)):
            for batch in _fill(t, n, size):
                seen.append(batch.capacity)
            t.actions.clear()
        for batch in list(t.b.pending.values()):
            with t.b.lock:
                t.b.detach(batch)
            batch.drop_body()
        seen.append([len(s) for s in t.b.spares])
        caps.append(seen)
    assert caps[0] == caps[1]


@pytest.mark.parametrize("kernels", KERNELS)
def test_settled_result_is_made_once_and_only_for_a_result(kernels):
    """``settled_result`` (what a settled ``BatchFuture.result()`` returns): None while the
    batch is pending and when it failed or was cancelled; once it has a result, message
    ``i``'s own ``SendResult``, the same object on every call and for every future."""
    results = {}
    for outcome in ("ok", "error", "cancel"):
        t = Batcher(kernels)
        futures = [t.b.add(Message("T", b"m%d" % i)) for i in range(3)]
        [(_, batch)] = t.actions
        assert [batch.settled_result(i) for i in range(3)] == [None] * 3  # pending
        if outcome == "ok":
            settle_batch(batch, SendResult(SendStatus.SEND_OK, "x", MessageQueue("T", "b", 1), 40, "O0,O1,O2"))
        elif outcome == "error":
            settle_batch(batch, error=RuntimeError("no"))
        else:
            settle_batch(batch, cancelled=True)
        results[outcome] = [batch.settled_result(i) for i in range(3)]
        if outcome == "ok":
            assert [f.result() for f in futures] == results["ok"]
            assert all(f.result() is r is batch.settled_result(i) for i, (f, r) in enumerate(zip(futures, results["ok"])))
            assert [(r.msg_id, r.queue_offset, r.offset_msg_id) for r in results["ok"]] == \
                [(m, 40 + i, f"O{i}") for i, m in enumerate(batch.uniq_ids)]
    assert results["error"] == results["cancel"] == [None] * 3
