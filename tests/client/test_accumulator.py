"""Auto-batching accumulator (seed 002) on a private event loop."""
from __future__ import annotations

import asyncio

import pytest

from mqcore.client.accumulator import ProduceAccumulator, item_size
from mqcore.client.message import Message, SendResult, SendStatus
from mqcore.format.batch import iter_batch_items
from mqcore.format.properties import parse_properties
from mqcore.remoting.bodies import MessageQueue


def sent_messages(batch) -> list[Message]:
    """The messages a batch carries, read back from its SEND_BATCH body."""
    out = []
    for _flag, body, props in iter_batch_items(bytes(batch.body)):
        m = Message(batch.topic, bytes(body))
        m.properties.clear()
        m.properties.update(parse_properties(bytes(props).decode()))
        out.append(m)
    assert [m.uniq_key for m in out] == batch.uniq_ids
    return out


class Recorder:
    def __init__(self, fail: BaseException | None = None) -> None:
        self.batches: list[tuple[list[Message], MessageQueue | None]] = []
        self.sent: list = []
        self.fail = fail

    async def __call__(self, batch) -> SendResult:
        msgs, queue = sent_messages(batch), batch.queue
        self.batches.append((msgs, queue))
        self.sent.append(batch)
        if self.fail is not None:
            raise self.fail
        q = queue or MessageQueue(msgs[0].topic, "b", 0)
        ids = ",".join(f"OFF{m.body.decode()}" for m in msgs)
        return SendResult(SendStatus.SEND_OK, ",".join(m.uniq_key or "" for m in msgs), q, 100, ids)


def msg(i: int, tags: str | None = "A", topic: str = "T") -> Message:
    m = Message(topic, str(i), tags=tags)
    m.properties["UNIQ_KEY"] = f"U{i}"
    return m


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_batches_by_delay_and_splits_results():
    async def main():
        rec = Recorder()
        acc = ProduceAccumulator(rec, batch_max_bytes=10_000, batch_max_delay_ms=20, total_batch_max_bytes=100_000)
        futures = [acc.add(msg(i)) for i in range(5)]
        results = await asyncio.gather(*futures)
        assert len(rec.batches) == 1 and len(rec.batches[0][0]) == 5
        for i, r in enumerate(results):
            assert r.msg_id == f"U{i}" and r.offset_msg_id == f"OFF{i}" and r.queue_offset == 100 + i
        assert acc.held_bytes == 0 and acc.batches_sent == 1 and acc.messages_batched == 5
        assert [len(b.body) for b in rec.sent] == [0]  # answered: the futures keep ids, not the bytes
    run(main())


def test_batches_by_size():
    async def main():
        rec = Recorder()
        size = item_size(msg(0))
        acc = ProduceAccumulator(rec, batch_max_bytes=size * 3, batch_max_delay_ms=10_000,
                                 total_batch_max_bytes=100_000)
        futures = [acc.add(msg(i)) for i in range(6)]
        await asyncio.wait_for(asyncio.gather(*futures), 2)
        assert [len(b[0]) for b in rec.batches] == [3, 3]
    run(main())


def test_only_same_tag_and_topic_and_queue_share_a_batch():
    async def main():
        rec = Recorder()
        acc = ProduceAccumulator(rec, batch_max_bytes=10_000, batch_max_delay_ms=10, total_batch_max_bytes=100_000)
        q1 = MessageQueue("T", "b", 1)
        futures = [acc.add(msg(1, "A")), acc.add(msg(2, "B")), acc.add(msg(3, None)), acc.add(msg(4, "A")),
                   acc.add(msg(5, "A", topic="U")), acc.add(msg(6, "A"), q1), acc.add(msg(7, "A"), q1)]
        await asyncio.gather(*futures)
        groups = sorted(([m.body.decode() for m in b], q) for b, q in rec.batches)
        assert groups == sorted([(["1", "4"], None), (["2"], None), (["3"], None), (["5"], None),
                                 (["6", "7"], q1)])
    run(main())


def test_oversized_delayed_and_retry_messages_go_unbatched():
    async def main():
        rec = Recorder()
        size = item_size(msg(0))
        acc = ProduceAccumulator(rec, batch_max_bytes=size * 10, batch_max_delay_ms=10,
                                 total_batch_max_bytes=size * 100)
        assert acc.add(Message("T", b"x" * (size * 10))) is None
        assert acc.add(Message("T", b"x", delay_level=2)) is None
        assert acc.add(Message("%RETRY%g", b"x")) is None
        assert acc.held_bytes == 0 and not rec.batches
    run(main())


def test_total_budget_refuses_while_batches_are_pending():
    async def main():
        rec = Recorder()
        size = item_size(msg(0))
        acc = ProduceAccumulator(rec, batch_max_bytes=size * 3, batch_max_delay_ms=10_000,
                                 total_batch_max_bytes=size * 3)
        f1 = acc.add(msg(1, "A"))
        f2 = acc.add(msg(2, "B"))
        f3 = acc.add(msg(3, "C"))
        assert acc.add(msg(4, "D")) is None  # three pending batches hold the whole budget
        await acc.flush_all()
        assert all(f.done() for f in (f1, f2, f3))
    run(main())


def test_errors_reach_every_waiter():
    async def main():
        acc = ProduceAccumulator(Recorder(fail=RuntimeError("boom")), batch_max_bytes=10_000, batch_max_delay_ms=5,
                                 total_batch_max_bytes=100_000)
        futures = [acc.add(msg(i)) for i in range(3)]
        for f in futures:
            with pytest.raises(RuntimeError, match="boom"):
                await f
        assert acc.held_bytes == 0
    run(main())


class GatedRecorder(Recorder):
    """A broker that answers a batch only when the test opens its gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gates: list[asyncio.Event] = []

    async def __call__(self, batch) -> SendResult:
        msgs, queue = sent_messages(batch), batch.queue
        gate = asyncio.Event()
        self.gates.append(gate)
        self.batches.append((list(msgs), queue))
        await gate.wait()
        q = queue or MessageQueue(msgs[0].topic, "b", 0)
        return SendResult(SendStatus.SEND_OK, ",".join(m.uniq_key or "" for m in msgs), q, 100,
                          ",".join(f"OFF{m.body.decode()}" for m in msgs))


def test_a_batch_leaves_when_the_pipeline_has_room_not_after_the_delay_bound():
    """Before: every batch waited batch_max_delay_ms (10 ms by default) from its first
    message. Now the first two leave on the loop's next turn, the third fills while they
    are in flight and leaves the moment one is acknowledged."""
    async def main():
        rec = GatedRecorder()
        acc = ProduceAccumulator(rec, batch_max_bytes=10_000, batch_max_delay_ms=60_000,
                                 total_batch_max_bytes=100_000)
        first = [acc.add(msg(i)) for i in range(3)]  # one burst: one batch
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert [len(b[0]) for b in rec.batches] == [3]
        second = [acc.add(msg(i)) for i in range(3, 5)]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert [len(b[0]) for b in rec.batches] == [3, 2]
        third = [acc.add(msg(i)) for i in range(5, 9)]  # two in flight: this one waits for an ack
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(rec.batches) == 2
        rec.gates[0].set()  # the first batch is acknowledged
        await asyncio.wait_for(asyncio.gather(*first), 2)
        for _ in range(5):
            await asyncio.sleep(0)
        assert [len(b[0]) for b in rec.batches] == [3, 2, 4]  # left at once, not after 60 s
        for gate in rec.gates:
            gate.set()
        results = await asyncio.wait_for(asyncio.gather(*second, *third), 2)
        assert [r.msg_id for r in results] == [f"U{i}" for i in range(3, 9)]
    run(main())


def test_adds_from_many_threads_while_the_loop_sends() -> None:
    """Caller threads append to the pending batches themselves (one lock); the loop sends.
    Every message travels exactly once, in a batch of its own key, and every caller gets
    its own result."""
    import concurrent.futures
    import threading

    from mqcore.client.loop import SiblingFuture

    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    rec = Recorder()
    size = item_size(msg(0))
    acc = ProduceAccumulator(rec, batch_max_bytes=size * 7, batch_max_delay_ms=5,
                             total_batch_max_bytes=size * 10_000, loop=loop)
    condition = threading.Condition()
    per_thread = 300
    results: dict[int, concurrent.futures.Future] = {}
    lock = threading.Lock()

    def caller(t: int) -> None:
        for i in range(per_thread):
            n = t * per_thread + i
            future = SiblingFuture(condition)
            assert acc.add(msg(n, tags="AB"[t % 2]), future=future) is future
            with lock:
                results[n] = future

    threads = [threading.Thread(target=caller, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    try:
        for n, future in results.items():
            r = future.result(10)
            assert r.msg_id == f"U{n}" and r.offset_msg_id == f"OFF{n}"
        sent = [m.body.decode() for batch, _ in rec.batches for m in batch]
        assert sorted(sent, key=int) == [str(n) for n in range(4 * per_thread)]  # each exactly once
        assert all(len({m.tags for m in batch}) == 1 and len(batch) <= 7 for batch, _ in rec.batches)
        assert len(rec.batches) >= 4 * per_thread // 7
        assert acc.held_bytes == 0
        asyncio.run_coroutine_threadsafe(acc.flush_all(close=True), loop).result(5)
        assert acc.add(msg(99_999), future=SiblingFuture(condition)) is None  # closed: unbatched
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(5)


def test_split_batch_results_gives_each_message_its_own_ids_and_offset():
    from mqcore.client.accumulator import split_batch_results
    q = MessageQueue("T", "b", 3)
    full = SendResult(SendStatus.SEND_OK, "U0,U1,U2", q, 40, "O0,O1,O2", "tx", "DefaultRegion", False)
    short = SendResult(SendStatus.FLUSH_DISK_TIMEOUT, "U0,U1,U2", q, 7, "O0", None, None, True)
    uniq = ["U0", "U1", "U2"]
    assert split_batch_results(full, uniq) == [
        SendResult(SendStatus.SEND_OK, f"U{i}", q, 40 + i, f"O{i}", "tx", "DefaultRegion", False) for i in range(3)]
    assert split_batch_results(short, uniq) == [  # fewer broker ids: the rest get the batch's
        SendResult(SendStatus.FLUSH_DISK_TIMEOUT, f"U{i}", q, 7 + i, "O0", None, None, True) for i in range(3)]
    assert [r.offset_msg_id for r in split_batch_results(short, ["a", "b"])] == ["O0", "O0"]


@pytest.mark.parametrize("outcome", ["ok", "error", "cancel"])
def test_window_slots_come_back_with_their_batch(outcome):
    """Messages added with ``holds_slot`` give their async-window slots back when their batch
    is answered, failed, or its futures were cancelled: none is leaked, none freed early."""
    from mqcore._compat import default_wire_client_kernels

    async def main():
        rec = GatedRecorder() if outcome != "error" else Recorder(fail=RuntimeError("boom"))
        window = default_wire_client_kernels().WindowSlots(5)
        acc = ProduceAccumulator(rec, batch_max_bytes=10_000, batch_max_delay_ms=60_000,
                                 total_batch_max_bytes=100_000, window=window)
        futures = []
        for i in range(3):
            assert window.acquire(False)
            futures.append(acc.add(msg(i), holds_slot=True))
        extra = acc.add(msg(3))  # joins without a slot of its own: frees nothing
        for _ in range(3):
            await asyncio.sleep(0)
        if outcome == "error":
            await asyncio.gather(*futures, extra, return_exceptions=True)
        else:
            assert window.free == 2  # still in flight: the slots stay taken
            if outcome == "cancel":
                for f in futures:
                    f.cancel()
                await asyncio.sleep(0)
                assert window.free == 2  # cancelled, but the batch is still on the wire
            rec.gates[0].set()
            await asyncio.gather(*futures, extra, return_exceptions=True)
        for _ in range(3):
            await asyncio.sleep(0)
        assert window.free == 5
    run(main())


def test_holds_slot_without_a_window_is_refused():
    async def main():
        acc = ProduceAccumulator(Recorder(), batch_max_bytes=10_000, batch_max_delay_ms=5,
                                 total_batch_max_bytes=100_000)
        with pytest.raises(ValueError, match="window"):
            acc.add(msg(0), holds_slot=True)
    run(main())
