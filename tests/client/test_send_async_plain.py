"""``send_async`` without auto-batching, once the topic is routed: the plain path
(``ProducerImpl.start_plain_async`` + ``Channel.invoke_flat``), one request per message with
the same results, retries, deadline and window as the general path."""
from __future__ import annotations

import time

import pytest

from mqcore.client import Message, Producer
from mqcore.errors import BrokerError, RemotingTimeoutError, SendTimeoutError
from mqcore.remoting.codes import ResponseCode
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def _producer(cluster, **kw) -> Producer:
    return Producer("pg-plain", namesrv_addr=cluster.namesrv_addr, **kw)


def _warm(p: Producer) -> None:
    """The topic checked and routed, the loop's connection open: later sends are plain."""
    p.send(Message("T", b"warm"))
    assert p.send_async(Message("T", b"warm")).result(10).ok


def _flat_in_flight(p: Producer) -> int:
    remoting = p._instance.api.remoting
    return sum(len(ch._flat) for ch in remoting._channels.values())


def test_plain_async_sends_store_each_message_with_its_own_result(fake_cluster):
    fake_cluster.create_topic("T")
    with _producer(fake_cluster, max_async_inflight=64) as p:
        _warm(p)
        msgs = [Message("T", f"m{i}".encode(), tags="A", keys=[f"k{i}"]) for i in range(300)]
        results = [f.result(10) for f in [p.send_async(m) for m in msgs]]
    assert all(r.ok for r in results)
    assert [r.msg_id for r in results] == [m.uniq_key for m in msgs] and len({r.msg_id for r in results}) == 300
    stored = {s.props["UNIQ_KEY"]: s for s in fake_cluster.messages("T")}
    for m, r in zip(msgs, results, strict=True):
        s = stored[m.uniq_key]
        assert s.body == m.body and s.props["TAGS"] == "A" and s.props["KEYS"] == m.keys[0]
        assert (r.message_queue.queue_id, r.queue_offset) == (s.queue_id, s.queue_offset)


def test_a_plain_async_send_is_in_flight_on_the_flat_table(fake_cluster):
    fake_cluster.create_topic("T")
    with _producer(fake_cluster) as p:
        _warm(p)
        fake_cluster.brokers[0].send_delay_s = 0.5
        future = p.send_async(Message("T", b"slow"))
        assert wait_for(lambda: _flat_in_flight(p) == 1, 5)  # not a coroutine: a waiter of invoke_flat
        assert future.result(10).ok
        assert _flat_in_flight(p) == 0


def test_a_refused_plain_async_send_is_retried_on_another_broker(fake_cluster2):
    fake_cluster2.create_topic("T")
    with _producer(fake_cluster2, retry_times_when_send_async_failed=2) as p:
        _warm(p)
        for b in fake_cluster2.brokers:
            b.fail_next_sends, b.fail_code = 1, ResponseCode.SYSTEM_ERROR  # retriable: A, B, then A again
        r = p.send_async(Message("T", b"x")).result(10)
    assert r.ok
    assert sum(len(b.sent) for b in fake_cluster2.brokers) == 2 + 3  # two warm-ups, then 1 + 2 retries: A refused, B refused, A stored


def test_a_plain_async_refusal_that_is_not_retried_reaches_the_future(fake_cluster):
    fake_cluster.create_topic("T")
    with _producer(fake_cluster) as p:
        _warm(p)
        fake_cluster.brokers[0].fail_next_sends, fake_cluster.brokers[0].fail_code = 1, ResponseCode.MESSAGE_ILLEGAL
        with pytest.raises(BrokerError) as e:
            p.send_async(Message("T", b"x")).result(10)
    assert e.value.code == ResponseCode.MESSAGE_ILLEGAL


def test_a_plain_async_send_keeps_its_deadline_and_frees_its_slot(fake_cluster):
    fake_cluster.create_topic("T")
    with _producer(fake_cluster, send_msg_timeout_ms=300, max_async_inflight=1) as p:
        _warm(p)
        fake_cluster.brokers[0].send_delay_s = 3.0
        t0 = time.monotonic()
        with pytest.raises((SendTimeoutError, RemotingTimeoutError)):
            p.send_async(Message("T", b"late")).result(10)
        assert time.monotonic() - t0 < 2.5
        fake_cluster.brokers[0].send_delay_s = 0.0
        assert p.send_async(Message("T", b"next")).result(10).ok  # the window's one slot came back


def test_a_cancelled_plain_async_send_gives_its_slot_back(fake_cluster):
    fake_cluster.create_topic("T")
    with _producer(fake_cluster, max_async_inflight=1) as p:
        _warm(p)
        fake_cluster.brokers[0].send_delay_s = 0.5
        first = p.send_async(Message("T", b"a"))
        first.cancel() or first.result(10)  # cancelled, or already answered on a fast machine
        fake_cluster.brokers[0].send_delay_s = 0.0
        assert p.send_async(Message("T", b"b")).result(10).ok


def test_plain_async_sends_in_flight_when_the_broker_goes_fail_or_move(fake_cluster2):
    fake_cluster2.create_topic("T")
    with _producer(fake_cluster2, send_msg_timeout_ms=5000) as p:
        _warm(p)
        fake_cluster2.brokers[0].send_delay_s = 1.0
        futures = [p.send_async(Message("T", f"x{i}".encode())) for i in range(8)]
        fake_cluster2.kill(0)
        for f in futures:  # each either moved to the live broker or failed: none hangs
            try:
                f.result(15)
            except Exception as e:  # noqa: BLE001 - the outcome is what the test looks at
                assert not isinstance(e, AssertionError)
