"""PushConsumer against the in-process fake cluster (client logic only; the real
broker is exercised in tests/client/integration)."""
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
from mqcore.errors import IllegalStateError
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(90)

FAST = dict(rebalance_interval_ms=300, persist_consumer_offset_interval_ms=200, heartbeat_broker_interval_ms=300,
            poll_name_server_interval_ms=300, pull_time_delay_ms_when_exception=100)




def produce(cluster, topic, n, **kw):
    with Producer("pg", namesrv_addr=cluster.namesrv_addr) as p:
        return [p.send(Message(topic, f"m{i}", **kw)) for i in range(n)]


class Sink:
    def __init__(self):
        self.msgs = []
        self.lock = threading.Lock()

    def __call__(self, msgs, ctx):
        with self.lock:
            self.msgs.extend(msgs)

    def bodies(self):
        with self.lock:
            return [m.body for m in self.msgs]


def consumer(cluster, group="cg", **kw):
    settings = dict(FAST, consume_from_where="first")
    settings.update(kw)
    return PushConsumer(group, namesrv_addr=cluster.namesrv_addr, **settings)


def test_consumes_everything_and_commits(fake_cluster):
    fake_cluster.create_topic("T")
    sent = produce(fake_cluster, "T", 40, tags="A")
    sink = Sink()
    c = consumer(fake_cluster)
    c.subscribe("T", "A || B")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink.msgs) == 40)
        assert {m.msg_id for m in sink.msgs} == {r.msg_id for r in sent}
        assert wait_for(lambda: sum(fake_cluster.brokers[0].offsets.get(("cg", "T", q), 0) for q in range(4)) == 40)
    assert len(c.assigned_queues()) == 0


def test_tag_filter(fake_cluster):
    fake_cluster.create_topic("T")
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        for i in range(12):
            p.send(Message("T", f"m{i}", tags=["A", "B", "C"][i % 3]))
    sink = Sink()
    c = consumer(fake_cluster)
    c.subscribe("T", "A || C")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink.msgs) == 8)
        time.sleep(0.3)
    assert {m.tags for m in sink.msgs} == {"A", "C"}


def test_two_consumers_split_and_resplit(fake_cluster):
    fake_cluster.create_topic("T", 8)
    c1, c2 = consumer(fake_cluster, instance_name="c1"), consumer(fake_cluster, instance_name="c2")
    for c in (c1, c2):
        c.subscribe("T")
        c.register_listener(Sink())
    with c1:
        assert wait_for(lambda: len(c1.assigned_queues("T")) == 8)
        c2.start()
        assert wait_for(lambda: len(c1.assigned_queues("T")) == 4 and len(c2.assigned_queues("T")) == 4)
        assert not set(c1.assigned_queues("T")) & set(c2.assigned_queues("T"))
        c2.shutdown()
        assert wait_for(lambda: len(c1.assigned_queues("T")) == 8)


def test_exception_counts_as_failure_and_none_as_success(fake_cluster):
    fake_cluster.create_topic("T")
    produce(fake_cluster, "T", 2)
    calls = collections.Counter()

    def flaky(msgs, ctx):
        for m in msgs:
            calls[m.body] += 1
            if m.body == b"m0" and calls[m.body] == 1:
                raise ValueError("first time fails")

    c = consumer(fake_cluster)
    c.subscribe("T")
    c.register_listener(flaky)
    with c:
        assert wait_for(lambda: calls[b"m0"] == 2 and calls[b"m1"] == 1)
        time.sleep(0.5)
    assert calls == {b"m0": 2, b"m1": 1}


def test_send_back_failure_retries_locally(fake_cluster):
    fake_cluster.create_topic("T")
    produce(fake_cluster, "T", 1)
    b = fake_cluster.brokers[0]
    b.fail_send_back = True
    b.fail_next_sends = 1000  # the %RETRY% fallback send fails too
    calls = []

    def fail_once(msgs, ctx):
        calls.append(msgs[0].reconsume_times)
        return ConsumeConcurrentlyStatus.RECONSUME_LATER if len(calls) == 1 else None

    c = consumer(fake_cluster, local_retry_delay_ms=200)
    c.subscribe("T")
    c.register_listener(fail_once)
    with c:
        assert wait_for(lambda: len(calls) == 2)
        assert wait_for(lambda: b.offsets.get(("cg", "T", 0), 0) + sum(
            b.offsets.get(("cg", "T", q), 0) for q in (1, 2, 3)) == 1)
    assert calls == [0, 1]


def test_orderly_keeps_queue_order_under_failures(fake_cluster):
    fake_cluster.create_topic("T")
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        for i in range(60):
            order = i % 4
            p.send(Message("T", f"{order}:{i}"), selector=select_by_hash, arg=order)
    got = collections.defaultdict(list)
    failures = collections.Counter()

    def listener(msgs, ctx):
        for m in msgs:
            if int(m.body.split(b":")[1]) % 7 == 0 and failures[m.body] < 2:
                failures[m.body] += 1
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT  # the whole batch comes again
        for m in msgs:
            got[m.queue_id].append(int(m.body.split(b":")[1]))
        return ConsumeOrderlyStatus.SUCCESS

    c = consumer(fake_cluster, suspend_current_queue_time_ms=50, consume_message_batch_max_size=3)
    c.subscribe("T")
    c.register_listener(listener, orderly=True)
    with c:
        assert wait_for(lambda: sum(len(v) for v in got.values()) == 60)
        assert fake_cluster.brokers[0].locks  # held on the broker while consuming
    for values in got.values():
        assert values == sorted(values)
    assert not fake_cluster.brokers[0].locks  # released at shutdown


def test_broadcasting_delivers_to_everyone_and_keeps_local_offsets(fake_cluster, tmp_path):
    fake_cluster.create_topic("T")
    produce(fake_cluster, "T", 10)
    sinks = [Sink(), Sink()]
    consumers = [consumer(fake_cluster, message_model="BROADCASTING", instance_name=f"b{i}",
                          offset_store_dir=str(tmp_path)) for i in range(2)]
    for c, s in zip(consumers, sinks, strict=True):
        c.subscribe("T")
        c.register_listener(s)
        c.start()
    try:
        assert wait_for(lambda: all(len(s.msgs) == 10 for s in sinks))
    finally:
        for c in consumers:
            c.shutdown()
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("offsets.json"))
    assert len(files) == 2 and all(f.endswith("/cg/offsets.json") for f in files)
    produce(fake_cluster, "T", 3)
    again = consumer(fake_cluster, message_model="BROADCASTING", instance_name="b0", offset_store_dir=str(tmp_path))
    sink = Sink()
    again.subscribe("T")
    again.register_listener(sink)
    with again:
        assert wait_for(lambda: len(sink.msgs) == 3)
        time.sleep(0.3)
    assert sorted(sink.bodies()) == [b"m0", b"m1", b"m2"]


def test_offsets_survive_restart(fake_cluster):
    fake_cluster.create_topic("T")
    produce(fake_cluster, "T", 20)
    sink = Sink()
    c = consumer(fake_cluster)
    c.subscribe("T")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink.msgs) == 20)
    produce(fake_cluster, "T", 5)
    sink2 = Sink()
    c2 = consumer(fake_cluster)
    c2.subscribe("T")
    c2.register_listener(sink2)
    with c2:
        assert wait_for(lambda: len(sink2.msgs) == 5)
        time.sleep(0.3)
    assert len(sink2.msgs) == 5


def test_consume_timeout_sends_stuck_messages_back(fake_cluster):
    fake_cluster.create_topic("T", 1)
    produce(fake_cluster, "T", 1)
    release = threading.Event()
    calls = []

    def stuck(msgs, ctx):
        calls.append(msgs[0].reconsume_times)
        if len(calls) == 1:
            release.wait(10)

    c = consumer(fake_cluster, consume_timeout_min=0.005, clean_expired_interval_ms=200)
    c.subscribe("T")
    c.register_listener(stuck)
    with c:
        assert wait_for(lambda: len(calls) == 2)  # redelivered through %RETRY% while the first still runs
        release.set()
    assert calls == [0, 1]
    assert ("back", 3, 0) in fake_cluster.brokers[0].sent


def test_configuration_errors(fake_cluster):
    c = consumer(fake_cluster)
    with pytest.raises(IllegalStateError, match="listener"):
        c.start()
    c.register_listener(Sink())
    with pytest.raises(IllegalStateError, match="subscribe"):
        c.start()


def test_flow_control_caps_cached_messages_per_queue(fake_cluster):
    fake_cluster.create_topic("T", 1)
    produce(fake_cluster, "T", 200)
    gate = threading.Event()
    consumed = []

    def slow(msgs, ctx):
        gate.wait(10)
        consumed.extend(msgs)

    c = consumer(fake_cluster, pull_threshold_for_queue=20, pull_batch_size=8, consume_thread_min=1,
                 consume_thread_max=1)
    c.subscribe("T")
    c.register_listener(slow)
    with c:
        assert wait_for(lambda: len(c.assigned_queues("T")) == 1)
        time.sleep(1.0)
        pq = next(iter(c._impl.rebalance.process_queue_table.values()))
        assert 0 < pq.msg_count <= 20 + 8  # stops pulling once over the threshold
        gate.set()
        assert wait_for(lambda: len(consumed) == 200)


def test_consume_from_timestamp_when_the_group_has_no_offset(fake_cluster):
    import datetime

    fake_cluster.create_topic("T", 1)
    produce(fake_cluster, "T", 3)
    time.sleep(1.1)
    since = datetime.datetime.now().strftime("%Y%m%d%H%M%S")
    time.sleep(1.1)
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        for i in range(3, 6):
            p.send(Message("T", f"m{i}"))
    sink = Sink()
    c = consumer(fake_cluster, consume_from_where="timestamp", consume_timestamp=since)
    c.subscribe("T")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink.msgs) == 3)
        time.sleep(0.3)
    assert sorted(sink.bodies()) == [b"m3", b"m4", b"m5"]


def test_consume_from_last_offset_skips_history_for_a_new_group(fake_cluster):
    fake_cluster.create_topic("T", 1)
    produce(fake_cluster, "T", 3)
    sink = Sink()
    c = consumer(fake_cluster, consume_from_where="last")
    c.subscribe("T")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(c.assigned_queues("T")) == 1)
        time.sleep(0.3)
        with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
            p.send(Message("T", b"new"))
        assert wait_for(lambda: len(sink.msgs) == 1)
    assert sink.bodies() == [b"new"]


def test_topic_budget_is_split_over_owned_queues(fake_cluster):
    fake_cluster.create_topic("T", 4)
    c = consumer(fake_cluster, pull_threshold_for_topic=100, pull_threshold_size_for_topic_mib=8)
    c.subscribe("T")
    c.register_listener(Sink())
    with c:
        assert wait_for(lambda: len(c.assigned_queues("T")) == 4)
        assert wait_for(lambda: c._impl._thresholds.get("T") == (25, 2 * 1024 * 1024))
