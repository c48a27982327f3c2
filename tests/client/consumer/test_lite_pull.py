"""LitePullConsumer and PullConsumer against the in-process fake cluster."""
from __future__ import annotations

import time

import pytest

from mqcore.client import LitePullConsumer, Message, Producer, PullConsumer, PullStatus
from mqcore.errors import IllegalArgumentError, IllegalStateError
from mqcore.remoting.bodies import MessageQueue

pytestmark = pytest.mark.timeout(60)

FAST = dict(rebalance_interval_ms=300, heartbeat_broker_interval_ms=300, poll_name_server_interval_ms=300,
            pull_time_delay_ms_when_exception=100)


def produce(cluster, topic, n, start=0, **kw):
    with Producer("pg", namesrv_addr=cluster.namesrv_addr) as p:
        return [p.send(Message(topic, f"m{i}", **kw)) for i in range(start, start + n)]


def poll_all(c, n, timeout=10.0):
    out = []
    deadline = time.time() + timeout
    while len(out) < n and time.time() < deadline:
        out.extend(c.poll(timeout_ms=200))
    return out


def test_subscribe_poll_and_auto_commit(fake_cluster):
    fake_cluster.create_topic("T")
    produce(fake_cluster, "T", 30)
    c = LitePullConsumer("lp", namesrv_addr=fake_cluster.namesrv_addr, consume_from_where="first",
                         auto_commit_interval_ms=100, **FAST)
    c.subscribe("T")
    with c:
        got = poll_all(c, 30)
        assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(30))
        time.sleep(0.15)
        assert c.poll(timeout_ms=50) == []  # triggers the auto-commit of what was returned
        assert len(c.assignment()) == 4
    stored = fake_cluster.brokers[0].offsets
    assert sum(stored.get(("lp", "T", q), 0) for q in range(4)) == 30
    produce(fake_cluster, "T", 4, start=30)
    with LitePullConsumer("lp", namesrv_addr=fake_cluster.namesrv_addr, **FAST) as again:
        again.subscribe("T")
        got = poll_all(again, 4)
    assert sorted(m.body for m in got) == [b"m30", b"m31", b"m32", b"m33"]


def test_assign_seek_and_commit(fake_cluster):
    fake_cluster.create_topic("T", 1)
    produce(fake_cluster, "T", 10)
    mq = MessageQueue("T", "broker-a", 0)
    c = LitePullConsumer("lp2", namesrv_addr=fake_cluster.namesrv_addr, consume_from_where="first",
                         auto_commit=False, **FAST)
    c.assign([mq])
    with c:
        assert c.fetch_message_queues("T") == [mq]
        assert [m.queue_offset for m in poll_all(c, 10)] == list(range(10))
        c.seek(mq, 4)
        assert [m.queue_offset for m in poll_all(c, 6)] == list(range(4, 10))
        c.seek_to_begin(mq)
        assert poll_all(c, 10)[0].queue_offset == 0
        with pytest.raises(IllegalArgumentError):
            c.seek(mq, 99)
        c.commit_sync({mq: 7})
        assert c.committed(mq) == 7
        with pytest.raises(IllegalStateError):
            c.subscribe("T")


def test_pull_consumer(fake_cluster):
    fake_cluster.create_topic("T", 2)
    produce(fake_cluster, "T", 6, tags="A")
    with PullConsumer("pc", namesrv_addr=fake_cluster.namesrv_addr) as pc:
        queues = pc.fetch_subscribe_message_queues("T")
        assert len(queues) == 2
        total = 0
        for mq in queues:
            assert pc.min_offset(mq) == 0
            result = pc.pull(mq, "A", offset=0, max_nums=32)
            assert result.status is PullStatus.FOUND and result.next_begin_offset == pc.max_offset(mq)
            assert all(m.properties["MAX_OFFSET"] == str(result.max_offset) for m in result.messages)
            total += len(result.messages)
            assert pc.pull(mq, "B", offset=0).status is PullStatus.NO_MATCHED_MSG
            assert pc.pull(mq, "*", offset=result.next_begin_offset).status is PullStatus.NO_NEW_MSG
            assert pc.pull(mq, "*", offset=100).status is PullStatus.OFFSET_ILLEGAL
            pc.update_consume_offset(mq, result.next_begin_offset)
        assert total == 6
        pc.commit()
        assert pc.fetch_consume_offset(queues[0]) == 3
        with pytest.raises(IllegalArgumentError):
            pc.pull(queues[0], "*", offset=-1)
