"""Pull answers decoded straight from the connection's receive buffer, against a real broker
(mqbroker and Apache RocketMQ's): the messages equal those of the generic path (each answer
decoded into a command with a bytes body first), and a push consumer at its defaults hands out
messages whose bodies stay what was sent while the buffer is reused for the answers after."""
from __future__ import annotations

import os

import pytest

from mqcore.client import Message, Producer, PullConsumer, PullStatus, PushConsumer
from mqcore.client.message import MessageExt
from mqcore.remoting.framing import DEFAULT_RING_BYTES
from tests.support.waiting import wait_for

from .helpers import FAST, Sink, create_topic

pytestmark = pytest.mark.timeout(180)

#: below the producer's compression threshold (4 KiB), so that 32 of them (RocketMQ's largest
#: pull) make an answer larger than the receive ring: the large-frame buffer's path
BODY_BYTES = 4080


def body(i: int) -> bytes:
    if i % 50 == 49:
        return f"{i}:".encode() + b"z" * 20_000  # stored compressed, decompressed by the consumer
    return f"{i}:".encode() + os.urandom(BODY_BYTES)


def pull_all(pc: PullConsumer, topic: str) -> list[MessageExt]:
    out: list[MessageExt] = []
    for mq in sorted(pc.fetch_subscribe_message_queues(topic)):
        offset = 0
        while True:
            r = pc.pull(mq, "*", offset, 64)
            if r.status is not PullStatus.FOUND:
                break
            out.extend(r.messages)
            offset = r.next_begin_offset
    return out


def fields(msgs: list[MessageExt]) -> list[tuple]:
    return [(m.topic, m.body, m.flag, m.properties, m.queue_id, m.queue_offset, m.commitlog_offset, m.store_size,
             m.body_crc, m.sys_flag, m.born_timestamp, m.born_host, m.store_timestamp, m.store_host,
             m.reconsume_times, m.broker_name) for m in msgs]


def test_answers_from_the_buffer_equal_the_generic_path_and_bodies_stay(broker):
    ns, topic = broker.namesrv_addr, "FromBuffer"
    create_topic(broker.broker_addr, ns, topic, queues=2)
    bodies = [body(i) for i in range(200)]
    with Producer("fb-producer", namesrv_addr=ns) as p:
        for i, b in enumerate(bodies):
            p.send(Message(topic, b, tags=f"t{i % 3}"))
    with PullConsumer("fb-reader", namesrv_addr=ns) as pc:
        pull_api = pc._pull_api
        assert pull_api.from_buffer  # the default
        from_buffer = pull_all(pc, topic)
        pull_api.from_buffer = False
        generic = pull_all(pc, topic)
    assert len(from_buffer) == len(bodies)
    first = [m for m in from_buffer if m.queue_id == from_buffer[0].queue_id][:32]
    assert sum(m.store_size for m in first) > DEFAULT_RING_BYTES  # the large-frame buffer's path
    assert fields(from_buffer) == fields(generic)
    assert sorted(m.body for m in from_buffer) == sorted(bodies)

    sink = Sink()
    consumer = PushConsumer("fb-push", namesrv_addr=ns, consume_from_where="first", **FAST)
    consumer.subscribe(topic)
    consumer.register_listener(sink)
    consumer.start()
    try:
        assert wait_for(lambda: len(sink) >= len(bodies), timeout=60)
    finally:
        consumer.shutdown()
    # every message handed out still holds its own body after all the answers that came after it
    assert sorted(sink.bodies()) == sorted(bodies)
    assert all(type(m.body) is bytes for m in sink.msgs)
