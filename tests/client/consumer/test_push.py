"""PushConsumer scenarios against a real ``mqbroker`` process (one per module, a topic and a
group per test), and against the in-process fake only where a scenario needs a fault the
fake injects (a broker that refuses CONSUMER_SEND_MSG_BACK and every send).

Negative checks ("nothing else arrives") wait until the consumer has committed the end of
every queue it reads, after which nothing can be redelivered, instead of sleeping."""
from __future__ import annotations

import collections
import datetime
import itertools
import threading

import pytest

from mqcore.client import (
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyStatus,
    Message,
    Producer,
    PushConsumer,
    select_by_hash,
)
from mqcore.admin.api import MQAdmin
from mqcore.errors import IllegalStateError
from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request
from mqcore.remoting.bodies import LockBatchRequestBody, LockBatchResponseBody, MessageQueue
from tests.client.integration.conftest import SHORT_DELAYS
from tests.client.integration.helpers import create_topic
from tests.support.processes import BrokerProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(90)

FAST = dict(rebalance_interval_ms=300, persist_consumer_offset_interval_ms=200, heartbeat_broker_interval_ms=300,
            poll_name_server_interval_ms=300, pull_time_delay_ms_when_exception=100)

_names = itertools.count()


@pytest.fixture(scope="module")
def mqbroker(tmp_path_factory):
    """One real broker (with its embedded name server) for the module; retries wait 1 s."""
    with BrokerProcess(tmp_path_factory.mktemp("push") / "store", conf={"messageDelayLevel": SHORT_DELAYS}) as b:
        yield b


class Cluster:
    """A test's view of the module's broker: its own topic and consumer group."""

    def __init__(self, broker: BrokerProcess):
        n = next(_names)
        self.broker = broker
        self.namesrv_addr = broker.namesrv_addr
        self.topic = f"Push{n}"
        self.group = f"cg{n}"

    def create_topic(self, queues: int = 4) -> str:
        create_topic(self.broker.broker_addr, self.namesrv_addr, self.topic, queues)
        return self.topic

    def committed(self, topic: str | None = None) -> int:
        """The group's committed offsets on ``topic`` as the broker holds them, summed."""
        topic = topic or self.topic
        with MQAdmin(self.namesrv_addr) as admin:
            return sum(r.consumer_offset for r in admin.consume_stats(self.group, topic).rows if r.topic == topic)

    def lock(self, queues: list[MessageQueue]) -> list[MessageQueue]:
        """LOCK_BATCH_MQ for another client of the group: the queues it got (then unlocks them)."""
        body = LockBatchRequestBody(self.group, "someone-else", queues)
        with SyncRemotingClient() as rc:
            resp = rc.invoke(self.broker.broker_addr, create_request(RequestCode.LOCK_BATCH_MQ, body=body.encode()),
                             5000)
            assert resp.code == ResponseCode.SUCCESS, resp
            got = LockBatchResponseBody.decode(resp.body).lock_ok_mq_set
            if got:
                rc.invoke(self.broker.broker_addr, create_request(RequestCode.UNLOCK_BATCH_MQ, body=LockBatchRequestBody(
                    self.group, "someone-else", got).encode()), 5000)
        return got


@pytest.fixture
def cluster(mqbroker):
    return Cluster(mqbroker)


def produce(cluster, topic, n, **kw):
    with Producer("pg", namesrv_addr=cluster.namesrv_addr) as p:
        return [p.send(Message(topic, f"m{i}", **kw)) for i in range(n)]


def consumed_to_the_end(c, topic: str, total: int) -> bool:
    """The consumer's offsets (what it commits) cover all ``total`` messages of ``topic``."""
    return sum(c.committed_offsets(topic).values()) == total


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


def consumer(cluster, group=None, **kw):
    settings = dict(FAST, consume_from_where="first")
    settings.update(kw)
    return PushConsumer(group or getattr(cluster, "group", "cg"), namesrv_addr=cluster.namesrv_addr, **settings)


def test_consumes_everything_and_commits(cluster):
    t = cluster.create_topic()
    sent = produce(cluster, t, 40, tags="A")
    sink = Sink()
    c = consumer(cluster)
    c.subscribe(t, "A || B")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink.msgs) == 40)
        assert {m.msg_id for m in sink.msgs} == {r.msg_id for r in sent}
    assert len(c.assigned_queues()) == 0
    # the broker holds the group's progress (a shutdown persists it; the periodic persist starts 10 s in)
    assert wait_for(lambda: cluster.committed() == 40)


def test_tag_filter(cluster):
    t = cluster.create_topic()
    with Producer("pg", namesrv_addr=cluster.namesrv_addr) as p:
        for i in range(12):
            p.send(Message(t, f"m{i}", tags=["A", "B", "C"][i % 3]))
    sink = Sink()
    # a queue whose last message is filtered out is done only when the broker answers the next
    # (parked) pull, so the park is kept short
    c = consumer(cluster, broker_suspend_max_time_ms=1000)
    c.subscribe(t, "A || C")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink.msgs) == 8)
        # the filtered-out B messages count as read too: once all 12 are, nothing else can come
        assert wait_for(lambda: consumed_to_the_end(c, t, 12))
    assert {m.tags for m in sink.msgs} == {"A", "C"} and len(sink.msgs) == 8


def test_two_consumers_split_and_resplit(cluster):
    t = cluster.create_topic(8)
    c1, c2 = consumer(cluster, instance_name="c1"), consumer(cluster, instance_name="c2")
    for c in (c1, c2):
        c.subscribe(t)
        c.register_listener(Sink())
    with c1:
        assert wait_for(lambda: len(c1.assigned_queues(t)) == 8)
        c2.start()
        assert wait_for(lambda: len(c1.assigned_queues(t)) == 4 and len(c2.assigned_queues(t)) == 4)
        assert not set(c1.assigned_queues(t)) & set(c2.assigned_queues(t))
        c2.shutdown()
        assert wait_for(lambda: len(c1.assigned_queues(t)) == 8)


def test_exception_counts_as_failure_and_none_as_success(cluster):
    t = cluster.create_topic()
    produce(cluster, t, 2)
    calls = collections.Counter()

    def flaky(msgs, ctx):
        for m in msgs:
            calls[m.body] += 1
            if m.body == b"m0" and calls[m.body] == 1:
                raise ValueError("first time fails")

    c = consumer(cluster)
    c.subscribe(t)
    c.register_listener(flaky)
    with c:
        assert wait_for(lambda: calls[b"m0"] == 2 and calls[b"m1"] == 1)
        # m0 came back through the broker's %RETRY% topic; once that is consumed too, nothing is left
        retry = f"%RETRY%{cluster.group}"
        assert wait_for(lambda: consumed_to_the_end(c, t, 2) and consumed_to_the_end(c, retry, 1))
    assert calls == {b"m0": 2, b"m1": 1}


def test_new_queues_ask_for_their_start_offsets_at_once(fake_cluster):
    """A concurrently consuming group's rebalance asks for every new queue's start offset
    together, so the first pull waits one offset round trip, not one per queue."""
    fake_cluster.create_topic("T", 8)
    produce(fake_cluster, "T", 16)
    b = fake_cluster.brokers[0]
    b.query_offset_delay_s = 0.3
    sink = Sink()
    c = consumer(fake_cluster)
    c.subscribe("T")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink.msgs) == 16)
    assert b.query_offset_most_inflight >= 8  # the topic's 8 queues at once (and the retry topic's)


def test_send_back_failure_retries_locally(fake_cluster):
    # the fake: a broker that refuses CONSUMER_SEND_MSG_BACK and every send is a fault to inject
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


def test_orderly_keeps_queue_order_under_failures(cluster):
    t = cluster.create_topic()
    with Producer("pg", namesrv_addr=cluster.namesrv_addr) as p:
        for i in range(60):
            order = i % 4
            p.send(Message(t, f"{order}:{i}"), selector=select_by_hash, arg=order)
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

    c = consumer(cluster, suspend_current_queue_time_ms=50, consume_message_batch_max_size=3)
    c.subscribe(t)
    c.register_listener(listener, orderly=True)
    with c:
        assert wait_for(lambda: sum(len(v) for v in got.values()) == 60)
        queues = c.assigned_queues(t)
        assert len(queues) == 4 and cluster.lock(queues) == []  # held on the broker while consuming
    for values in got.values():
        assert values == sorted(values)
    assert wait_for(lambda: sorted(cluster.lock(queues)) == sorted(queues))  # released at shutdown


def test_broadcasting_delivers_to_everyone_and_keeps_local_offsets(cluster, tmp_path):
    t = cluster.create_topic()
    produce(cluster, t, 10)
    sinks = [Sink(), Sink()]
    consumers = [consumer(cluster, message_model="BROADCASTING", instance_name=f"b{i}",
                          offset_store_dir=str(tmp_path)) for i in range(2)]
    for c, s in zip(consumers, sinks, strict=True):
        c.subscribe(t)
        c.register_listener(s)
        c.start()
    try:
        assert wait_for(lambda: all(len(s.msgs) == 10 for s in sinks))
        assert wait_for(lambda: all(consumed_to_the_end(c, t, 10) for c in consumers))
    finally:
        for c in consumers:
            c.shutdown()
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("offsets.json"))
    assert len(files) == 2 and all(f.endswith(f"/{cluster.group}/offsets.json") for f in files)
    produce(cluster, t, 3)
    again = consumer(cluster, message_model="BROADCASTING", instance_name="b0", offset_store_dir=str(tmp_path))
    sink = Sink()
    again.subscribe(t)
    again.register_listener(sink)
    with again:
        assert wait_for(lambda: len(sink.msgs) == 3)
        assert wait_for(lambda: consumed_to_the_end(again, t, 13))
    assert sorted(sink.bodies()) == [b"m0", b"m1", b"m2"]


def test_offsets_survive_restart(cluster):
    t = cluster.create_topic()
    produce(cluster, t, 20)
    sink = Sink()
    c = consumer(cluster)
    c.subscribe(t)
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink.msgs) == 20)
    assert wait_for(lambda: cluster.committed() == 20)  # persisted to the broker
    produce(cluster, t, 5)
    sink2 = Sink()
    c2 = consumer(cluster)
    c2.subscribe(t)
    c2.register_listener(sink2)
    with c2:
        assert wait_for(lambda: len(sink2.msgs) == 5)
        assert wait_for(lambda: consumed_to_the_end(c2, t, 25))
    assert len(sink2.msgs) == 5


def test_consume_timeout_sends_stuck_messages_back(cluster):
    t = cluster.create_topic(1)
    produce(cluster, t, 1)
    release = threading.Event()
    calls = []

    def stuck(msgs, ctx):
        calls.append((msgs[0].reconsume_times, msgs[0].topic))
        if len(calls) == 1:
            release.wait(10)

    c = consumer(cluster, consume_timeout_min=0.005, clean_expired_interval_ms=200)
    c.subscribe(t)
    c.register_listener(stuck)
    with c:
        assert wait_for(lambda: len(calls) == 2)  # redelivered through %RETRY% while the first still runs
        release.set()
    assert calls == [(0, t), (1, t)]  # the retry copy shows the original topic again
    with MQAdmin(cluster.namesrv_addr) as admin:  # the broker stored the copy in the group's retry topic
        retry = f"%RETRY%{cluster.group}"
        assert sum(r.max_offset for r in admin.topic_stats(retry)) == 1


def test_configuration_errors(cluster):
    c = consumer(cluster)
    with pytest.raises(IllegalStateError, match="listener"):
        c.start()
    c.register_listener(Sink())
    with pytest.raises(IllegalStateError, match="subscribe"):
        c.start()


def test_flow_control_caps_cached_messages_per_queue(cluster):
    t = cluster.create_topic(1)
    produce(cluster, t, 200)
    gate = threading.Event()
    consumed = []

    def slow(msgs, ctx):
        gate.wait(10)
        consumed.extend(msgs)

    c = consumer(cluster, pull_threshold_for_queue=20, pull_batch_size=8, consume_thread_min=1,
                 consume_thread_max=1)
    c.subscribe(t)
    c.register_listener(slow)
    with c:
        assert wait_for(lambda: len(c.assigned_queues(t)) == 1)
        # the puller has held back (more than once) because the queue held too much
        assert wait_for(lambda: c._impl.flow_control_times >= 3)
        pq = next(iter(c._impl.rebalance.process_queue_table.values()))
        assert 20 < pq.msg_count <= 20 + 8  # it stops pulling once over the threshold
        gate.set()
        assert wait_for(lambda: len(consumed) == 200)


def test_a_flow_controlled_pull_resumes_as_soon_as_the_queue_has_room(cluster, monkeypatch):
    """The pull held back by flow control waits for consumption to make room, not for a fixed
    delay: with the delay made 60 s, 200 messages through a 20-message limit still arrive."""
    from mqcore.client.consumer import push_impl
    monkeypatch.setattr(push_impl, "PULL_DELAY_WHEN_FLOW_CONTROL_MS", 60_000)
    t = cluster.create_topic(1)
    produce(cluster, t, 200)
    consumed = []
    c = consumer(cluster, pull_threshold_for_queue=20, pull_batch_size=16)

    def listener(msgs, ctx):
        if not consumed:  # hold the first message until the puller is held back
            assert wait_for(lambda: c._impl.flow_control_times >= 1, timeout=10, step=0.005)
        consumed.extend(msgs)

    c.subscribe(t)
    c.register_listener(listener)
    with c:
        assert wait_for(lambda: len(consumed) == 200, timeout=30)
        assert c._impl.flow_control_times >= 1


def test_consume_from_timestamp_when_the_group_has_no_offset(fake_cluster):
    # the fake: it answers QUERY_NOT_FOUND for a group with no offset. A real broker does that only
    # once the queue's first message is gone from the store (until then it answers 0, and the
    # consumer starts at the beginning whatever consume_from_where says), which takes expired
    # commitlog files to arrange
    fake_cluster.create_topic("T", 1)
    t = "T"
    produce(fake_cluster, t, 3)

    def now_s() -> str:  # CONSUME_FROM_TIMESTAMP has a resolution of one second
        return datetime.datetime.now().strftime("%Y%m%d%H%M%S")

    first = now_s()
    assert wait_for(lambda: now_s() != first, timeout=5, step=0.02)
    since = now_s()
    assert wait_for(lambda: now_s() != since, timeout=5, step=0.02)
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        for i in range(3, 6):
            p.send(Message(t, f"m{i}"))
    sink = Sink()
    c = consumer(fake_cluster, consume_from_where="timestamp", consume_timestamp=since)
    c.subscribe(t)
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink.msgs) == 3)
        assert wait_for(lambda: consumed_to_the_end(c, t, 6))
    assert sorted(sink.bodies()) == [b"m3", b"m4", b"m5"]


def test_consume_from_last_offset_skips_history_for_a_new_group(fake_cluster):
    # the fake, for the reason given in the test above
    fake_cluster.create_topic("T", 1)
    t = "T"
    produce(fake_cluster, t, 3)
    sink = Sink()
    c = consumer(fake_cluster, consume_from_where="last")
    c.subscribe(t)
    c.register_listener(sink)
    with c:
        # a queue is listed as assigned only once its start offset is known
        assert wait_for(lambda: len(c.assigned_queues(t)) == 1)
        with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
            p.send(Message(t, b"new"))
        assert wait_for(lambda: len(sink.msgs) == 1)
        assert wait_for(lambda: consumed_to_the_end(c, t, 4))
    assert sink.bodies() == [b"new"]


def test_topic_budget_is_split_over_owned_queues(cluster):
    t = cluster.create_topic(4)
    c = consumer(cluster, pull_threshold_for_topic=100, pull_threshold_size_for_topic_mib=8)
    c.subscribe(t)
    c.register_listener(Sink())
    with c:
        assert wait_for(lambda: len(c.assigned_queues(t)) == 4)
        assert wait_for(lambda: c._impl._thresholds.get(t) == (25, 2 * 1024 * 1024))


def test_slow_listeners_run_on_several_threads_one_message_each(cluster):
    """One consume thread drains listener batches while the listener is fast; a slow one
    (here 20 ms per call) makes the drainers multiply, up to the pool size."""
    t = cluster.create_topic(queues=1)
    produce(cluster, t, 30)
    lock, running, peak, sizes = threading.Lock(), [0], [0], []
    gate = threading.Event()

    def listener(msgs, ctx):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            sizes.append(len(msgs))
        gate.wait(0.02)
        with lock:
            running[0] -= 1
    c = consumer(cluster, consume_thread_min=8, consume_thread_max=8)
    c.subscribe(t)
    c.register_listener(listener)
    with c:
        assert wait_for(lambda: consumed_to_the_end(c, t, 30))
    assert sizes == [1] * 30  # RocketMQ's listener batch of one message is kept
    assert peak[0] >= 4, peak


def test_the_offset_never_passes_a_message_whose_listener_has_not_returned(cluster):
    """At least once: while the listener holds m3, the messages after it are consumed but the
    queue's commit offset stays at m3's; it moves on once that listener returns."""
    t = cluster.create_topic(queues=1)
    produce(cluster, t, 10)
    release, done = threading.Event(), set()

    def listener(msgs, ctx):
        for m in msgs:
            if m.body == b"m3":
                release.wait(30)
            done.add(m.body)
    c = consumer(cluster)
    c.subscribe(t)
    c.register_listener(listener)
    with c:
        assert wait_for(lambda: len(done) == 9)  # all but m3
        assert sum(c.committed_offsets(t).values()) == 3
        release.set()
        assert wait_for(lambda: consumed_to_the_end(c, t, 10))
