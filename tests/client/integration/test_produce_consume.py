"""Producer and consumers against a real mqbroker process."""
from __future__ import annotations

import asyncio
import os
import time

import pytest

from mqcore.client import (
    LitePullConsumer,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
)
from mqcore.errors import BrokerError
from tests.support.waiting import wait_for

from .helpers import FAST, Sink, create_topic, produce, pull_everything

pytestmark = pytest.mark.timeout(180)


def test_send_kinds_and_pull_back(broker):
    ns = broker.namesrv_addr
    with Producer("pg", namesrv_addr=ns) as p:
        r1 = p.send(Message("Kinds", b"sync", tags="A", keys=["k-1", "k-2"]))
        f = p.send_async(Message("Kinds", b"async", tags="B"))
        batch = p.send_batch([Message("Kinds", b"b1", tags="A"), Message("Kinds", b"b2", tags="A")])
        p.send_oneway(Message("Kinds", b"oneway"))
        big = p.send(Message("Kinds", b"z" * 10_000))
        r2 = f.result(10)

        async def via_asyncio():
            return await p.asend(Message("Kinds", b"asend"))
        r3 = asyncio.run(via_asyncio())
    for r in (r1, r2, batch, big, r3):
        assert r.status is SendStatus.SEND_OK
    assert len(batch.msg_ids) == 2 and len(batch.offset_msg_ids) == 2
    assert wait_for(lambda: len(pull_everything(ns, "Kinds")) == 7)
    got = {m.body: m for m in pull_everything(ns, "Kinds")}
    assert set(got) == {b"sync", b"async", b"b1", b"b2", b"oneway", b"z" * 10_000, b"asend"}
    m = got[b"sync"]
    assert m.msg_id == r1.msg_id and m.offset_msg_id == r1.offset_msg_id and m.keys == ["k-1", "k-2"]
    assert m.tags == "A" and m.properties["CLUSTER"] == "DefaultCluster"
    assert got[b"z" * 10_000].sys_flag & 0x301 == 0x301  # stored compressed, read back decompressed
    assert [got[b"b1"].msg_id, got[b"b2"].msg_id] == batch.msg_ids
    with PullConsumer("viewer", namesrv_addr=ns) as pc:
        assert pc.view_message(r1.offset_msg_id).body == b"sync"
        # by key, through the broker's index: each of a message's keys finds it, others do not
        assert wait_for(lambda: [m.msg_id for m in pc.query_message("Kinds", "k-2")] == [r1.msg_id], timeout=10)
        assert [m.body for m in pc.query_message("Kinds", "k-1")] == [b"sync"]
        assert pc.query_message("Kinds", "no-such-key") == []


def test_broker_refusal_maps_to_error(broker):
    with Producer("pg", namesrv_addr=broker.namesrv_addr, max_message_size_bytes=8 * 1024 * 1024) as p:
        with pytest.raises(BrokerError) as info:
            p.send(Message("Big", os.urandom(5 * 1024 * 1024)))  # incompressible, over the broker's 4 MiB
        assert info.value.code == 13 and not info.value.retriable
        # compressed, still over the broker's limit: the error gives the size the user sent as well
        with pytest.raises(BrokerError) as info:
            p.send(Message("Big", os.urandom(5 * 1024 * 1024) + bytes(3 * 1024 * 1024)))
        assert info.value.code == 13 and "the message body is 8388608 bytes, " in str(info.value)
        assert "after compression" in str(info.value)


def test_push_consume_with_tag_filter(broker):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Tagged")
    with Producer("pg", namesrv_addr=ns) as p:
        for i in range(30):
            p.send(Message("Tagged", f"m{i}", tags=["A", "B", "C"][i % 3]))
    sink = Sink()
    # a queue whose last message is filtered out is read to its end when the broker answers the
    # next, parked pull: a short park keeps that wait short
    c = PushConsumer("cg-tags", namesrv_addr=ns, consume_from_where="first", broker_suspend_max_time_ms=1000, **FAST)
    c.subscribe("Tagged", "A || C")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink) == 20)
        # all 30 read (the B messages filtered on the broker): nothing else can arrive
        assert wait_for(lambda: sum(c.committed_offsets("Tagged").values()) == 30)
    assert len(sink) == 20 and {m.tags for m in sink.msgs} == {"A", "C"}


def test_consumer_started_first_gets_messages_by_long_polling(broker):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Live")
    sink = Sink()
    c = PushConsumer("cg-live", namesrv_addr=ns, **FAST)
    c.subscribe("Live")
    c.register_listener(sink)
    # the producer is started before the clock starts: its start-up on a loaded
    # machine is not what the bound is about
    with c, Producer("it-producer", namesrv_addr=ns) as p:
        assert wait_for(lambda: len(c.assigned_queues("Live")) == 4)
        # room for the pulls to park, so the sends below exercise the wake-up; the assertions do
        # not depend on it (a pull not parked yet finds the messages itself)
        time.sleep(1)
        t0 = time.monotonic()
        for i in range(5):
            p.send(Message("Live", f"m{i}"))
        assert wait_for(lambda: len(sink) == 5, timeout=10)
        assert time.monotonic() - t0 < 5  # delivered on arrival, not after the 15 s hold


def test_lite_pull_subscribe_and_assign(broker):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Lite")
    produce(ns, "Lite", 20)
    with LitePullConsumer("lite", namesrv_addr=ns, consume_from_where="first", **FAST) as c:
        c.subscribe("Lite")
        got = []
        deadline = time.time() + 30
        while len(got) < 20 and time.time() < deadline:
            got.extend(c.poll(timeout_ms=500))
        assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(20))
    with LitePullConsumer("lite-assign", namesrv_addr=ns, consume_from_where="first", auto_commit=False,
                          **FAST) as c:
        queues = c.fetch_message_queues("Lite")
        c.assign(queues[:1])
        first = []
        deadline = time.time() + 30
        while time.time() < deadline and len(first) < 5:
            first.extend(c.poll(timeout_ms=500))
        c.seek(queues[0], 0)
        again = c.poll(timeout_ms=5000)
        assert again and again[0].queue_offset == 0
        c.commit_sync({queues[0]: 3})
        assert c.committed(queues[0]) == 3


def test_pull_consumer_offsets(broker):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Pull", queues=1)
    produce(ns, "Pull", 5)
    with PullConsumer("pull-g", namesrv_addr=ns) as pc:
        (mq,) = pc.fetch_subscribe_message_queues("Pull")
        assert (pc.min_offset(mq), pc.max_offset(mq)) == (0, 5)
        r = pc.pull(mq, "*", 0, 3)
        assert r.status is PullStatus.FOUND and [m.body for m in r.messages] == [b"m0", b"m1", b"m2"]
        assert pc.pull(mq, "*", 5).status is PullStatus.NO_NEW_MSG
        pc.update_consume_offset(mq, 3)
        pc.commit()
        assert pc.fetch_consume_offset(mq) == 3
        assert pc.search_offset(mq, int(time.time() * 1000) + 60_000) in (4, 5)
