"""Producer against the in-process fake cluster (unit-test double; the real broker
is exercised in tests/client/integration)."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from mqcore.client import Message, Producer, SendStatus, select_by_hash
from mqcore.errors import (
    BrokerError,
    IllegalArgumentError,
    IllegalStateError,
    NoRouteError,
    SendTimeoutError,
)
from mqcore.message import decode_offset_msg_id
from mqcore.remoting.bodies import MessageQueue
from mqcore.remoting.codes import RequestCode, ResponseCode
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def producer(cluster, **kw) -> Producer:
    return Producer("pg", namesrv_addr=cluster.namesrv_addr, **kw)


def test_send_sync_result(fake_cluster):
    fake_cluster.create_topic("T")
    with producer(fake_cluster) as p:
        msg = Message("T", b"hello", tags="A", keys=["k1"])
        r = p.send(msg)
        assert r.status is SendStatus.SEND_OK and r.ok
        assert r.msg_id == msg.uniq_key and len(r.msg_id) == 32
        assert decode_offset_msg_id(r.offset_msg_id)[2] == 0
        assert r.message_queue.topic == "T" and r.queue_offset == 0
        stored = fake_cluster.messages("T")[0]
        assert stored.props["UNIQ_KEY"] == r.msg_id and stored.tags == "A" and stored.props["KEYS"] == "k1"
        assert fake_cluster.brokers[0].sent == [RequestCode.SEND_MESSAGE_V2]


def test_round_robin_over_queues(fake_cluster2):
    fake_cluster2.create_topic("T")
    with producer(fake_cluster2) as p:
        queues = {p.send(Message("T", b"x")).message_queue for _ in range(16)}
    assert len(queues) == 8


def test_unknown_topic_goes_through_tbw102(fake_cluster):
    with producer(fake_cluster) as p:
        r = p.send(Message("Fresh", b"x"))
    assert r.ok and fake_cluster.brokers[0].topics["Fresh"] == 4


def test_no_route_at_all_is_a_clear_error(fake_cluster):
    fake_cluster.call(fake_cluster.brokers[0].topics.pop, "TBW102")
    with producer(fake_cluster) as p:
        with pytest.raises(NoRouteError, match="Fresh"):
            p.send(Message("Fresh", b"x"))


def test_retriable_code_retries_on_another_broker(fake_cluster2):
    fake_cluster2.create_topic("T")
    a, b = fake_cluster2.brokers
    a.fail_next_sends = 1000
    with producer(fake_cluster2) as p:
        results = [p.send(Message("T", b"x")) for _ in range(10)]
    assert {r.message_queue.broker_name for r in results} == {"broker-b"}


def test_non_retriable_code_raises_at_once(fake_cluster):
    fake_cluster.create_topic("T")
    b = fake_cluster.brokers[0]
    b.fail_next_sends, b.fail_code = 1, ResponseCode.SYSTEM_BUSY
    with producer(fake_cluster) as p:
        with pytest.raises(BrokerError) as info:
            p.send(Message("T", b"x"))
    assert info.value.code == 2 and not info.value.retriable
    assert len(b.sent) == 1


def test_gives_up_after_three_attempts(fake_cluster):
    fake_cluster.create_topic("T")
    b = fake_cluster.brokers[0]
    b.fail_next_sends = 3
    with producer(fake_cluster) as p:
        with pytest.raises(BrokerError) as info:
            p.send(Message("T", b"x"))
        assert info.value.retriable and "3 attempt(s)" in "".join(info.value.__notes__)
        assert p.send(Message("T", b"x")).ok
    assert len(b.sent) == 4


def test_timeout_budget_covers_all_attempts(fake_cluster):
    fake_cluster.create_topic("T")
    # every attempt's answer is 3 s away. The claim is held by counting attempts (one 300 ms
    # attempt uses up the whole budget, so no retry goes out) and by a bound well under the
    # delay; the bound is a machine-speed allowance for a loaded 2-core CI box, not the proof
    fake_cluster.brokers[0].send_delay_s = 3.0
    with producer(fake_cluster, send_msg_timeout_ms=300) as p:
        t0 = time.monotonic()
        with pytest.raises(SendTimeoutError):
            p.send(Message("T", b"x"))
        assert time.monotonic() - t0 < 2.5
    assert sum(len(b.sent) for b in fake_cluster.brokers) <= 1  # a per-attempt budget would retry


def test_validation_happens_before_the_network(fake_cluster):
    with producer(fake_cluster, max_message_size_bytes=10) as p:
        for bad in (Message("bad topic", b"x"), Message("T", b""), Message("T", b"x" * 11),
                    Message("T", b"x", delay_level=19)):
            with pytest.raises(IllegalArgumentError):
                p.send(bad)
        with pytest.raises(IllegalArgumentError):
            p.send_async(Message("T", b""))
        with pytest.raises(IllegalArgumentError):
            p.send_batch([Message("T", b"x"), Message("U", b"y")])
    assert fake_cluster.brokers[0].sent == []


def test_state_errors(fake_cluster):
    p = producer(fake_cluster)
    with pytest.raises(IllegalStateError, match="start"):
        p.send(Message("T", b"x"))
    p.start()
    p.shutdown()
    with pytest.raises(IllegalStateError):
        p.send(Message("T", b"x"))


def test_async_send_future_callback_and_asyncio(fake_cluster):
    fake_cluster.create_topic("T")
    with producer(fake_cluster) as p:
        got: list = []
        done = threading.Event()

        def cb(result, error):
            got.append((result, error, threading.current_thread().name))
            done.set()

        future = p.send_async(Message("T", b"a"), callback=cb)
        assert future.result(5).ok
        assert done.wait(5)
        assert got[0][1] is None and got[0][0].ok and got[0][2].startswith("mqcore-send-callback")

        async def main():
            return await asyncio.gather(*(p.asend(Message("T", str(i))) for i in range(20)))
        results = asyncio.run(main())
        assert len({r.msg_id for r in results}) == 20


def test_async_errors_reach_the_callback(fake_cluster):
    fake_cluster.create_topic("T")
    fake_cluster.brokers[0].fail_next_sends, fake_cluster.brokers[0].fail_code = 1, ResponseCode.MESSAGE_ILLEGAL
    with producer(fake_cluster) as p:
        errors: list = []
        done = threading.Event()
        p.send_async(Message("T", b"a"), callback=lambda r, e: (errors.append(e), done.set()))
        assert done.wait(5)
        assert isinstance(errors[0], BrokerError) and errors[0].code == ResponseCode.MESSAGE_ILLEGAL


def test_blocking_call_on_the_loop_thread_is_refused(fake_cluster):
    fake_cluster.create_topic("T")
    with producer(fake_cluster) as p:
        seen: list = []
        done = threading.Event()

        def on_done(_f):
            try:
                p.send(Message("T", b"inner"))
            except IllegalStateError as e:
                seen.append(e)
            done.set()
        p.send_async(Message("T", b"outer")).add_done_callback(on_done)
        assert done.wait(5) and seen


def test_oneway(fake_cluster):
    fake_cluster.create_topic("T")
    with producer(fake_cluster) as p:
        p.send_oneway(Message("T", b"fire"))
        deadline = time.time() + 5
        while not fake_cluster.messages("T") and time.time() < deadline:
            time.sleep(0.02)
    assert fake_cluster.messages("T")[0].body == b"fire"


def test_selector_and_explicit_queue(fake_cluster2):
    fake_cluster2.create_topic("T")
    with producer(fake_cluster2) as p:
        queues = {p.send(Message("T", b"x"), selector=select_by_hash, arg="order-42").message_queue
                  for _ in range(10)}
        assert len(queues) == 1
        target = MessageQueue("T", "broker-b", 3)
        assert p.send(Message("T", b"y"), queue=target).message_queue == target
        assert target in p.fetch_publish_message_queues("T")
        with pytest.raises(IllegalArgumentError):
            p.send(Message("T", b"y"), queue=MessageQueue("U", "broker-b", 0))


def test_batch_send(fake_cluster):
    fake_cluster.create_topic("T")
    with producer(fake_cluster) as p:
        msgs = [Message("T", f"m{i}", tags="A") for i in range(5)]
        r = p.send_batch(msgs)
    assert r.msg_ids == [m.uniq_key for m in msgs] and len(r.offset_msg_ids) == 5
    stored = fake_cluster.messages("T")
    assert [s.body for s in stored] == [f"m{i}".encode() for i in range(5)]
    assert [s.props["UNIQ_KEY"] for s in stored] == r.msg_ids
    assert fake_cluster.brokers[0].sent == [RequestCode.SEND_BATCH_MESSAGE]


def test_auto_batched_sends_hold_the_async_window_until_their_batch_is_answered(fake_cluster):
    """Auto-batched ``send_async`` calls give their ``max_async_inflight`` slots back with
    their batch's answer: 300 sends through a window of 8 complete (a slot that never came
    back would block the caller until the timeout), every slot is free at the end, and
    the window really bounds what is in flight."""
    fake_cluster.create_topic("T")
    with producer(fake_cluster, auto_batch=True, max_async_inflight=8, send_msg_timeout_ms=5000) as p:
        window = p._async_slots
        lowest = [8]
        futures = []
        for i in range(300):
            futures.append(p.send_async(Message("T", f"m{i}")))
            lowest[0] = min(lowest[0], window.free)
            unanswered = sum(not f.done() for f in futures[-16:])
            assert unanswered <= 8
        assert all(f.result(10).ok for f in futures)
        assert wait_for(lambda: window.free == 8, timeout=5)  # freed just after the batch settles
    assert lowest[0] < 8
    assert sorted(m.body for m in fake_cluster.messages("T")) == sorted(f"m{i}".encode() for i in range(300))


def test_an_auto_batch_is_never_larger_than_the_producer_lets_a_message_be(fake_cluster):
    """A batch is one message to the broker: with ``max_message_size_bytes`` under
    ``batch_max_bytes`` batches leave at the message limit (they used to be refused with an
    IllegalArgumentError once they outgrew it), each one's body a view of the batch's buffer,
    and every message arrives."""
    fake_cluster.create_topic("T")
    with producer(fake_cluster, auto_batch=True, max_message_size_bytes=8 * 1024, send_msg_timeout_ms=5000) as p:
        assert p._accumulator is not None and p._accumulator.batch_max_bytes == 8 * 1024
        futures = [p.send_async(Message("T", b"%04d" % i + b"b" * 996)) for i in range(100)]
        assert all(f.result(10).ok for f in futures)
        assert p._accumulator.batches_sent >= 13  # 100 items of ~1,070 bytes, at most 7 per batch
    assert sorted(m.body[:4] for m in fake_cluster.messages("T")) == [b"%04d" % i for i in range(100)]


def test_auto_batched_asend_joins_batches_and_waits_for_the_window_on_the_callers_loop(fake_cluster):
    """``asend`` with auto-batching goes through the same kernel as ``send_async``: every
    caller gets its own stored message's result, through a window of 4 (a full window is
    awaited off the caller's loop), in batches, and every slot comes back."""
    fake_cluster.create_topic("T")
    with producer(fake_cluster, auto_batch=True, max_async_inflight=4, send_msg_timeout_ms=5000) as p:
        async def main():
            return await asyncio.gather(*(p.asend(Message("T", f"a{i}")) for i in range(60)))
        results = asyncio.run(main())
        assert wait_for(lambda: p._async_slots.free == 4, timeout=5)
    stored = {s.props["UNIQ_KEY"]: s for s in fake_cluster.messages("T")}
    assert len({r.msg_id for r in results}) == 60
    for i, r in enumerate(results):
        s = stored[r.msg_id]
        assert s.body == f"a{i}".encode() and (s.queue_id, s.queue_offset) == (r.message_queue.queue_id, r.queue_offset)
    assert RequestCode.SEND_BATCH_MESSAGE in fake_cluster.brokers[0].sent


def test_large_bodies_are_compressed_as_java_does(fake_cluster):
    fake_cluster.create_topic("T")
    with producer(fake_cluster) as p:
        p.send(Message("T", b"z" * 4095))
        p.send(Message("T", b"z" * 4096))
    small, large = fake_cluster.messages("T")
    assert small.sys_flag == 0 and len(small.body) == 4095
    assert large.sys_flag == 0x301 and len(large.body) < 4096


def test_auto_batching_keeps_each_callers_result(fake_cluster):
    fake_cluster.create_topic("T")
    with producer(fake_cluster, auto_batch=True, batch_max_delay_ms=20) as p:
        futures = [p.send_async(Message("T", f"m{i}", tags="A" if i % 2 else "B")) for i in range(200)]
        results = [f.result(10) for f in futures]
        sync_results: list = []
        threads = [threading.Thread(target=lambda i=i: sync_results.append(p.send(Message("T", f"s{i}", tags="A"))))
                   for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len({r.msg_id for r in results}) == 200 and len({r.offset_msg_id for r in results}) == 200
    stored = {s.props["UNIQ_KEY"]: s for s in fake_cluster.messages("T")}
    for i, r in enumerate(results):
        s = stored[r.msg_id]
        assert s.body == f"m{i}".encode() and s.tags == ("A" if i % 2 else "B")
        assert (s.queue_id, s.queue_offset) == (r.message_queue.queue_id, r.queue_offset)
    sent = fake_cluster.brokers[0].sent
    assert sent.count(RequestCode.SEND_BATCH_MESSAGE) < 50 and len(sync_results) == 10
