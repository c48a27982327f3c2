"""mqcore.client request-reply against mqbroker and against Apache RocketMQ 4.9.7: a requester's
``request``/``arequest`` gets the reply a push consumer sends with ``send_reply`` (code 325,
pushed back as 326); no reply means RequestTimeoutError after the timeout; a reply to a
requester that is gone is refused with SYSTEM_ERROR by both brokers."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from mqcore.client import Message, Producer, PushConsumer, RequestTimeoutError, create_reply_message
from mqcore.errors import BrokerError
from mqcore.message import Prop
from mqcore.remoting import ResponseCode
from tests.client.integration.helpers import FAST, create_topic, pull_everything
from tests.support.waiting import wait_for


class Replier:
    """A push consumer answering every request with ``re:<body>`` through its own producer."""

    def __init__(self, namesrv: str, topic: str, group: str):
        self.producer = Producer(f"{group}-replies", namesrv_addr=namesrv, heartbeat_broker_interval_ms=1000,
                                 poll_name_server_interval_ms=1000)
        self.consumer = PushConsumer(group, namesrv_addr=namesrv, consume_from_where="first",
                                     broker_suspend_max_time_ms=1000, **FAST)
        self.consumer.subscribe(topic)
        self.consumer.register_listener(self._on_request)
        self.errors: list = []
        self.topic = topic

    def _on_request(self, msgs, ctx):
        for m in msgs:
            try:
                self.producer.send_reply(m, b"re:" + m.body)
            except Exception as e:  # noqa: BLE001 - recorded, the test asserts there were none
                self.errors.append(e)

    def __enter__(self):
        self.producer.start()
        self.consumer.start()
        assert wait_for(lambda: len(self.consumer.assigned_queues(self.topic)) == 4, timeout=30)
        return self

    def __exit__(self, *exc):
        self.consumer.shutdown()
        self.producer.shutdown()


def test_request_gets_the_reply(broker):
    topic = f"Rpc_{broker.kind}"
    create_topic(broker.broker_addr, broker.namesrv_addr, topic)
    with Replier(broker.namesrv_addr, topic, f"rpc-{broker.kind}") as replier, \
            Producer("rpc-requester", namesrv_addr=broker.namesrv_addr) as requester:
        request = Message(topic, b"ping", tags="q")
        reply = requester.request(request, timeout_ms=20_000)
        assert reply.body == b"re:ping"
        assert reply.topic == "DefaultCluster_REPLY_TOPIC"
        assert reply.properties[Prop.CORRELATION_ID] == request.properties[Prop.CORRELATION_ID]
        assert reply.properties[Prop.REPLY_TO_CLIENT] == requester.client_id
        assert reply.properties[Prop.MSG_TYPE] == "reply"
        assert reply.properties[Prop.TTL] == "20000"
        assert int(reply.properties[Prop.ARRIVE_TIME]) >= int(reply.properties[Prop.PUSH_REPLY_TIME]) - 1000

        async def several():
            return await asyncio.gather(*(requester.arequest(Message(topic, f"a{i}"), 20_000) for i in range(5)))

        replies = asyncio.run(several())
        assert [r.body for r in replies] == [f"re:a{i}".encode() for i in range(5)]
        # pinned to a queue, and with a callback on the callback thread
        mq = requester.fetch_publish_message_queues(topic)[2]
        assert requester.request(Message(topic, b"pinned"), 20_000, queue=mq).body == b"re:pinned"
        called = threading.Event()
        seen = []
        future = requester.request_async(Message(topic, b"cb"), lambda r, e: (seen.append((r, e)), called.set()),
                                         timeout_ms=20_000)
        assert future.result(30).body == b"re:cb"
        assert called.wait(10) and seen[0][0].body == b"re:cb" and seen[0][1] is None
        assert len(requester.instance.replies) == 0  # nothing left waiting
        assert not replier.errors
    # the broker also stored each reply (storeReplyMessageEnable), properties as sent
    stored = pull_everything(broker.namesrv_addr, "DefaultCluster_REPLY_TOPIC", group=f"rr-{broker.kind}")
    assert {m.body for m in stored} >= {b"re:ping", *(f"re:a{i}".encode() for i in range(5))}


def test_request_without_a_replier_times_out(broker):
    topic = f"RpcNobody_{broker.kind}"
    create_topic(broker.broker_addr, broker.namesrv_addr, topic)
    with Producer("rpc-lonely", namesrv_addr=broker.namesrv_addr) as requester:
        requester.send(Message(topic, b"warm-up"))  # route and heartbeat out of the measured time
        t0 = time.monotonic()
        with pytest.raises(RequestTimeoutError, match="OK, but wait reply message timeout, 1500 ms"):
            requester.request(Message(topic, b"anyone?"), timeout_ms=1500)
        assert 1.3 < time.monotonic() - t0 < 5
        errors = []
        future = requester.request_async(Message(topic, b"anyone?"), lambda r, e: errors.append((r, e)),
                                         timeout_ms=500)
        with pytest.raises(RequestTimeoutError):
            future.result(10)
        assert wait_for(lambda: errors) and errors[0][0] is None and isinstance(errors[0][1], RequestTimeoutError)
        assert len(requester.instance.replies) == 0


def test_reply_to_a_requester_that_is_gone_is_refused(broker):
    topic = f"RpcGone_{broker.kind}"
    create_topic(broker.broker_addr, broker.namesrv_addr, topic)
    with Producer("rpc-fake-requester", namesrv_addr=broker.namesrv_addr) as p:
        p.send(Message(topic, b"orphan", properties={Prop.CORRELATION_ID: "c-gone", Prop.TTL: "3000",
                                                     Prop.REPLY_TO_CLIENT: "127.0.0.1@gone#0"}))
        (request,) = [m for m in pull_everything(broker.namesrv_addr, topic, group=f"rg-{broker.kind}")]
        reply = create_reply_message(request, b"too late")
        assert reply.topic == "DefaultCluster_REPLY_TOPIC"
        with pytest.raises(BrokerError) as e:
            p.send(reply)
        assert e.value.code == ResponseCode.SYSTEM_ERROR
        assert "channel of <127.0.0.1@gone#0> not found" in (e.value.remark or "")
