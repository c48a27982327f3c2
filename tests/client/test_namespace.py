"""``namespace``: names in and out of it (Java's NamespaceUtil), and a producer and a push
consumer under one on a real broker."""
from __future__ import annotations

import threading

import pytest

from mqcore.admin import MQAdmin
from mqcore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from mqcore.client.namespace import Namespace
from mqcore.errors import ConfigError
from mqcore.testing import TestBroker, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("name, wrapped", [
    ("orders", "ns1%orders"), ("%RETRY%g", "%RETRY%ns1%g"), ("%DLQ%g", "%DLQ%ns1%g"),
    ("ns1%orders", "ns1%orders"), ("%RETRY%ns1%g", "%RETRY%ns1%g"), ("other%t", "ns1%other%t"),
    ("TBW102", "TBW102"), ("SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX"),
    ("RMQ_SYS_TRACE_TOPIC", "RMQ_SYS_TRACE_TOPIC"), ("CID_RMQ_SYS_X", "CID_RMQ_SYS_X"), ("", ""),
])
def test_names_in_and_out_of_a_namespace(name, wrapped):
    ns = Namespace("ns1")
    assert ns.wrap(name) == wrapped
    assert ns.unwrap(wrapped) == (name if not name.startswith(("ns1%", "%RETRY%ns1%")) else ns.unwrap(name))
    assert ns.unwrap(ns.wrap(wrapped)) == ns.unwrap(wrapped)  # wrapping is idempotent


@pytest.mark.parametrize("bad", ["", "a%b", "x" * 65, "sp ace"])
def test_a_namespace_that_cannot_be_part_of_a_name_is_refused(bad):
    with pytest.raises(ConfigError, match="namespace"):
        Producer("pg", namesrv_addr="127.0.0.1:1", namespace=bad)


def test_a_producer_and_a_consumer_under_a_namespace():
    with TestBroker({"messageDelayLevel": "1s 1s 1s"}) as b:
        with MQAdmin(b.namesrv_addr) as admin:
            admin.create_topic(b.broker_addr, "ns1%NsT", read_queue_nums=2, write_queue_nums=2)
        with Producer("pg", namesrv_addr=b.namesrv_addr, namespace="ns1") as p:
            assert p.config.producer_group == "ns1%pg"
            msg = Message("NsT", b"sync")
            assert p.send(msg).message_queue.topic == "NsT" and msg.topic == "ns1%NsT"  # Java renames it too
            called = threading.Event()
            seen = []
            future = p.send_async(Message("NsT", b"async"), callback=lambda r, e: (seen.append((r, e)), called.set()))
            assert future.result(10).message_queue.topic == "NsT"
            assert called.wait(10) and seen[0][1] is None and seen[0][0].message_queue.topic == "NsT"
            assert p.send_async(Message("NsT", b"plain")).result(10).message_queue.topic == "NsT"
            assert p.send_batch([Message("NsT", b"b1"), Message("NsT", b"b2")]).message_queue.topic == "NsT"
        got, lock = [], threading.Lock()

        def listener(msgs, ctx):
            with lock:
                got.extend((m.topic, m.body, m.reconsume_times) for m in msgs)
                if any(m.body == b"sync" and m.reconsume_times == 0 for m in msgs):
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER  # back through %RETRY%ns1%cg
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = PushConsumer("cg", namesrv_addr=b.namesrv_addr, namespace="ns1", consume_from_where="first")
        c.subscribe("NsT")
        c.register_listener(listener)
        with c:
            assert wait_for(lambda: (b"sync", 1) in [(g[1], g[2]) for g in got] and len(got) >= 6, 30), got
            assert c.assigned_queues("NsT")
        assert {g[0] for g in got} == {"NsT"}
        with MQAdmin(b.namesrv_addr) as admin:
            topics = admin.topic_list()
        assert "%RETRY%ns1%cg" in topics and "NsT" not in topics


@pytest.mark.parametrize("cls", ["LitePullConsumer", "PullConsumer"])
def test_consumers_without_namespace_support_refuse_it(cls):
    import mqcore.client as client
    with pytest.raises(ConfigError, match="namespace is not supported"):
        getattr(client, cls)("cg", namesrv_addr="127.0.0.1:1", namespace="ns1")
