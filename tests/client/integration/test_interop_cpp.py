"""Interoperability with the Apache RocketMQ C++ client (PyPI rocketmq==0.4.4), both ways,
through a real mqbroker."""
from __future__ import annotations


import pytest

from mqcore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from tests.support.cpp_client import run_cpp
from tests.support.waiting import wait_for

from .helpers import FAST, Sink, create_topic

pytestmark = pytest.mark.timeout(240)


def test_cpp_producer_to_python_consumer(broker, tmp_path):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "FromCpp")
    specs = [{"topic": "FromCpp", "tags": ["TagA", "TagB"][i % 2], "keys": f"order-{i}", "body": f"cpp {i}",
              "props": {"source": "cpp"}} for i in range(10)]
    events = run_cpp({"mode": "produce", "namesrv": ns, "messages": specs}, tmp_path)
    sent = {e["sent"]: e for e in events if "sent" in e}
    assert len(sent) == 10
    sink = Sink()
    c = PushConsumer("cg-from-cpp", namesrv_addr=ns, consume_from_where="first", **FAST)
    c.subscribe("FromCpp", "TagA || TagB")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink) == 10)
    by_body = {m.body.decode(): m for m in sink.msgs}
    for i in range(10):
        m = by_body[f"cpp {i}"]
        assert m.tags == ["TagA", "TagB"][i % 2] and m.keys == [f"order-{i}"]
        assert m.properties["source"] == "cpp"
        assert m.msg_id == sent[i]["msg_id"]


def test_python_producer_to_cpp_consumer(broker, tmp_path):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "FromPy")
    with Producer("pg-py", namesrv_addr=ns) as p:
        results = []
        for i in range(10):
            m = Message("FromPy", f"py {i}", tags=["TagA", "TagB"][i % 2], keys=[f"order-{i}"])
            results.append(p.send(m))
        batch = p.send_batch([Message("FromPy", f"batch {i}", tags="TagA") for i in range(3)])
    events = run_cpp({"mode": "push", "namesrv": ns, "group": "cg-cpp", "topic": "FromPy",
                      "expression": "TagA || TagB", "expect": 13, "timeout": 60, "linger": 1}, tmp_path)
    got = {g["body"]: g for g in (e["got"] for e in events if "got" in e)}
    assert set(got) == {f"py {i}" for i in range(10)} | {f"batch {i}" for i in range(3)}
    for i, r in enumerate(results):
        g = got[f"py {i}"]
        assert g["tags"] == ["TagA", "TagB"][i % 2] and g["keys"] == f"order-{i}"
        assert g["props"]["UNIQ_KEY"] == r.msg_id
    assert [got[f"batch {i}"]["props"]["UNIQ_KEY"] for i in range(3)] == batch.msg_ids


def test_python_consumer_retries_a_cpp_message(broker, tmp_path):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "CppRetry", queues=1)
    run_cpp({"mode": "produce", "namesrv": ns, "messages": [{"topic": "CppRetry", "body": "again"}]}, tmp_path)
    seen = []

    def fail_once(msgs, ctx):
        seen.extend((m.body, m.reconsume_times, m.topic) for m in msgs)
        return ConsumeConcurrentlyStatus.RECONSUME_LATER if len(seen) == 1 else None

    c = PushConsumer("cg-cpp-retry", namesrv_addr=ns, consume_from_where="first", **FAST)
    c.subscribe("CppRetry")
    c.register_listener(fail_once)
    with c:
        assert wait_for(lambda: len(seen) == 2, timeout=40)
        # both the message and its retry copy consumed and committed: nothing can come a third time
        assert wait_for(lambda: sum(c.committed_offsets("CppRetry").values()) == 1
                        and sum(c.committed_offsets("%RETRY%cg-cpp-retry").values()) == 1)
    assert seen == [(b"again", 0, "CppRetry"), (b"again", 1, "CppRetry")]


def test_compressed_bodies_cross_both_ways(broker, tmp_path):
    ns = broker.namesrv_addr
    create_topic(broker.broker_addr, ns, "Zipped", queues=1)
    big = "compress me " * 1000  # >= 4 KiB: both clients compress it with zlib
    with Producer("pg-zip", namesrv_addr=ns) as p:
        p.send(Message("Zipped", big, tags="py"))
    run_cpp({"mode": "produce", "namesrv": ns, "messages": [{"topic": "Zipped", "tags": "cpp", "body": big}]},
            tmp_path)
    events = run_cpp({"mode": "push", "namesrv": ns, "group": "cg-zip-cpp", "topic": "Zipped", "expect": 2,
                      "timeout": 60}, tmp_path)
    assert sorted((e["got"]["tags"], e["got"]["body"]) for e in events if "got" in e) == [("cpp", big), ("py", big)]
    sink = Sink()
    c = PushConsumer("cg-zip-py", namesrv_addr=ns, consume_from_where="first", **FAST)
    c.subscribe("Zipped")
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(sink) == 2)
    assert sorted((m.tags, m.body) for m in sink.msgs) == [("cpp", big.encode()), ("py", big.encode())]
