"""Consumer groups against a real mqbroker: rebalancing, broadcasting, retries and
the DLQ, orderly consumption, offsets across restarts."""
from __future__ import annotations

import collections
import threading
import time

import pytest

from mqcore.client import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    Message,
    Producer,
    PushConsumer,
    select_by_hash,
)
from mqcore.errors import MQError
from tests.support.waiting import wait_for

from .helpers import FAST, Sink, create_topic, produce, pull_everything

pytestmark = pytest.mark.timeout(240)


def dead_letters(ns: str, dlq_topic: str) -> list:
    """What the DLQ topic holds; nothing while the broker has not created it yet."""
    try:
        return pull_everything(ns, dlq_topic)
    except MQError:
        return []


def consumer(ns: str, group: str, **kw) -> PushConsumer:
    settings = dict(FAST, consume_from_where="first")
    settings.update(kw)
    return PushConsumer(group, namesrv_addr=ns, **settings)


def test_two_consumers_split_the_queues_and_resplit_when_one_leaves(broker):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Split", queues=8)
    sinks = [Sink(), Sink()]
    c1, c2 = (consumer(ns, "cg-split", instance_name=f"c{i}") for i in range(2))
    for c, s in zip((c1, c2), sinks, strict=True):
        c.subscribe("Split")
        c.register_listener(s)
    with c1:
        assert wait_for(lambda: len(c1.assigned_queues("Split")) == 8)
        c2.start()
        try:
            assert wait_for(lambda: len(c1.assigned_queues("Split")) == 4 and len(c2.assigned_queues("Split")) == 4)
            assert not set(c1.assigned_queues("Split")) & set(c2.assigned_queues("Split"))
            produce(ns, "Split", 80)
            assert wait_for(lambda: len(sinks[0]) + len(sinks[1]) == 80)
            assert len(sinks[0]) > 0 and len(sinks[1]) > 0
            assert {m.queue_id for m in sinks[0].msgs}.isdisjoint({m.queue_id for m in sinks[1].msgs})
        finally:
            c2.shutdown()
        assert wait_for(lambda: len(c1.assigned_queues("Split")) == 8, timeout=15)
        produce(ns, "Split", 16, start=80)
        assert wait_for(lambda: len(sinks[0]) + len(sinks[1]) == 96)
    bodies = sorted(sinks[0].bodies() + sinks[1].bodies())
    assert bodies == sorted(f"m{i}".encode() for i in range(96))  # each exactly once


def test_broadcasting_delivers_everything_to_both(broker, tmp_path):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Bcast")
    sinks = [Sink(), Sink()]
    cs = [consumer(ns, "cg-bcast", message_model="BROADCASTING", instance_name=f"b{i}",
                   offset_store_dir=str(tmp_path / "offsets")) for i in range(2)]
    for c, s in zip(cs, sinks, strict=True):
        c.subscribe("Bcast")
        c.register_listener(s)
        c.start()
    try:
        produce(ns, "Bcast", 25)
        assert wait_for(lambda: len(sinks[0]) == 25 and len(sinks[1]) == 25)
    finally:
        for c in cs:
            c.shutdown()
    for s in sinks:
        assert sorted(s.bodies()) == sorted(f"m{i}".encode() for i in range(25))
    assert len(list((tmp_path / "offsets").rglob("offsets.json"))) == 2


def test_failing_message_comes_back_with_growing_delays_then_sits_in_the_dlq(broker):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Fails", queues=1)
    attempts: list[tuple[float, int, str]] = []

    def always_fail(msgs, ctx):
        for m in msgs:
            attempts.append((time.monotonic(), m.reconsume_times, m.topic))
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    c = consumer(ns, "cg-fails", max_reconsume_times=3)
    c.subscribe("Fails")
    c.register_listener(always_fail)
    with c:
        assert wait_for(lambda: len(c.assigned_queues("Fails")) == 1)
        (sent,) = produce(ns, "Fails", 1)
        assert wait_for(lambda: len(attempts) == 4, timeout=60)
        # the fourth failure sends it to the DLQ; once it is there, no fifth attempt can come
        assert wait_for(lambda: len(dead_letters(ns, "%DLQ%cg-fails")) == 1, timeout=30)
    assert [a[1] for a in attempts] == [0, 1, 2, 3] and all(a[2] == "Fails" for a in attempts)
    gaps = [b[0] - a[0] for a, b in zip(attempts, attempts[1:], strict=False)]
    # broker delay levels 3, 4, 5 are 1 s, 2 s, 3 s in this broker's messageDelayLevel
    assert gaps[0] >= 0.8 and gaps[1] >= 1.8 and gaps[2] >= 2.8, gaps
    assert gaps[0] < gaps[2], gaps
    dlq = pull_everything(ns, "%DLQ%cg-fails")
    assert len(dlq) == 1 and dlq[0].body == b"m0" and dlq[0].msg_id == sent.msg_id


def test_orderly_keeps_per_queue_order_under_failures(broker):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Orders", queues=4)
    with Producer("pg", namesrv_addr=ns) as p:
        for i in range(120):
            order_id = i % 6
            p.send(Message("Orders", f"{order_id}:{i}"), selector=select_by_hash, arg=order_id)
    got: dict[int, list[int]] = collections.defaultdict(list)
    failures: collections.Counter = collections.Counter()
    lock = threading.Lock()

    def listener(msgs, ctx):
        seqs = [int(m.body.split(b":")[1]) for m in msgs]
        with lock:
            for s in seqs:
                if s % 9 == 0 and failures[s] < 2:
                    failures[s] += 1
                    if failures[s] == 1:
                        raise RuntimeError("first failure is an exception")
                    return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            for m, s in zip(msgs, seqs, strict=True):
                got[int(m.body.split(b":")[0])].append(s)
        return ConsumeOrderlyStatus.SUCCESS

    c = consumer(ns, "cg-orderly", suspend_current_queue_time_ms=100, consume_message_batch_max_size=2)
    c.subscribe("Orders")
    c.register_listener(listener, orderly=True)
    with c:
        assert wait_for(lambda: sum(len(v) for v in got.values()) == 120, timeout=60)
    for order_id, seqs in got.items():
        assert seqs == sorted(seqs) == [i for i in range(120) if i % 6 == order_id]
    assert all(n == 2 for n in failures.values())


def test_offsets_survive_consumer_restarts(broker):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Restart")
    produce(ns, "Restart", 40)
    first = Sink()
    c = consumer(ns, "cg-restart")
    c.subscribe("Restart")
    c.register_listener(first)
    with c:
        assert wait_for(lambda: len(first) == 40)
    produce(ns, "Restart", 10, start=40)
    second = Sink()
    c2 = consumer(ns, "cg-restart")
    c2.subscribe("Restart")
    c2.register_listener(second)
    with c2:
        assert wait_for(lambda: len(second) == 10)
        # consumed to the end of every queue: nothing older can be redelivered now
        assert wait_for(lambda: sum(c2.committed_offsets("Restart").values()) == 50)
    assert sorted(second.bodies()) == sorted(f"m{i}".encode() for i in range(40, 50))



def test_consumer_and_producer_ride_out_a_broker_restart(broker):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Bounce")
    sink = Sink()
    # default 30 s heartbeat: a restarted broker that forgot the subscription must be told at once
    c = consumer(ns, "cg-bounce", heartbeat_broker_interval_ms=30_000, rebalance_interval_ms=20_000)
    c.subscribe("Bounce")
    c.register_listener(sink)
    with c, Producer("pg-bounce", namesrv_addr=ns) as p:
        for i in range(10):
            p.send(Message("Bounce", f"a{i}"))
        assert wait_for(lambda: len(sink) == 10)
        broker.restart()
        t0 = time.monotonic()
        for i in range(10):
            p.send(Message("Bounce", f"b{i}"))
        assert wait_for(lambda: len(sink) == 20, timeout=30)
        assert time.monotonic() - t0 < 10
    expected = [f"a{i}".encode() for i in range(10)] + [f"b{i}".encode() for i in range(10)]
    assert sorted(sink.bodies()) == sorted(expected)
