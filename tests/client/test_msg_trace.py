"""A producer with ``enable_msg_trace=True`` writes Pub trace records, in batches from its
dispatcher thread, that mqcore's ``mqadmin queryMsgTraceById`` finds by message id."""
from __future__ import annotations

import contextlib
import io
import time

from mqcore.admin.cli import main as mqadmin_main
from mqcore.client import Message, Producer
from mqcore.testing import TestBroker, wait_for


def _trace(namesrv: str, msg_id: str, topic: str | None = None) -> str:
    out, err = io.StringIO(), io.StringIO()
    argv = ["queryMsgTraceById", "-n", namesrv, "-i", msg_id] + (["-t", topic] if topic else [])
    with contextlib.redirect_stderr(err):
        mqadmin_main(argv, out)
    return out.getvalue()


def test_sync_and_async_sends_are_traced_to_the_default_and_a_named_topic():
    with TestBroker({"autoCreateTopicEnable": "true"}) as broker:
        with Producer("traced-pg", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True) as p:
            sync = p.send(Message("TracedT", b"hello", tags="TagA", keys="order-1"))
            asynced = p.send_async(Message("TracedT", b"there")).result(30)
        for r in (sync, asynced):
            assert wait_for(lambda: "Pub" in _trace(broker.namesrv_addr, r.msg_id), timeout=30), \
                _trace(broker.namesrv_addr, r.msg_id)
        text = _trace(broker.namesrv_addr, sync.msg_id)
        pubs = [line.split() for line in text.splitlines() if line.startswith("Pub ")]
        assert len(pubs) == 1 and pubs[0][1] == "traced-pg" and pubs[0][-1] == "success", text
        with Producer("traced-pg2", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True,
                      trace_topic="MyTraces") as p:
            named = p.send(Message("TracedT", b"x"))
        assert wait_for(lambda: "Pub" in _trace(broker.namesrv_addr, named.msg_id, "MyTraces"), timeout=30)


def test_a_traced_push_consumer_writes_sub_records_mqadmin_shows():
    from mqcore.client import ConsumeConcurrentlyStatus, PushConsumer
    with TestBroker({"autoCreateTopicEnable": "true"}) as broker:
        with Producer("traced-pg3", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True) as p:
            sent = p.send(Message("TracedSubT", b"hi"))
        got: list[str] = []
        c = PushConsumer("traced-cg", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True,
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe("TracedSubT", "*")
        c.register_listener(lambda msgs, ctx: (got.extend(m.msg_id for m in msgs),
                                               ConsumeConcurrentlyStatus.CONSUME_SUCCESS)[1])
        with c:
            assert wait_for(lambda: sent.msg_id in got, timeout=60)
            assert wait_for(lambda: "traced-cg" in _trace(broker.namesrv_addr, sent.msg_id), timeout=30), \
                _trace(broker.namesrv_addr, sent.msg_id)
        text = _trace(broker.namesrv_addr, sent.msg_id)
        assert any(line.startswith("Sub ") and "traced-cg" in line and "success" in line
                   for line in text.splitlines()), text


def test_auto_batched_sends_each_get_their_own_pub_record():
    """One entry per batch on the send path; the dispatcher writes a record per message, split
    over trace messages of at most BATCH_RECORDS (2 x BATCH_RECORDS + 50 need three)."""
    from mqcore.admin import MQAdmin
    from mqcore.client.trace import BATCH_RECORDS
    n = 2 * BATCH_RECORDS + 50
    with TestBroker({"autoCreateTopicEnable": "true"}) as broker:
        with Producer("traced-batched", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True, auto_batch=True,
                      max_async_inflight=1000) as p:
            p.send(Message("TracedBatchT", b"warm"))
            results = [f.result(30) for f in [p.send_async(Message("TracedBatchT", f"b{i}".encode()))
                                              for i in range(n)]]
            tracer = p._tracer
            assert wait_for(lambda: tracer.sent_records >= n + 1, timeout=30), tracer.sent_records
        assert tracer.dropped == 0
        for r in (results[0], results[n // 2], results[-1]):
            text = _trace(broker.namesrv_addr, r.msg_id)
            pubs = [line.split() for line in text.splitlines() if line.startswith("Pub ")]
            assert len(pubs) == 1 and pubs[0][1] == "traced-batched" and pubs[0][-1] == "success", text
        with MQAdmin(broker.namesrv_addr) as admin:  # at least 3 trace messages
            assert sum(o.max_offset for o in admin.topic_stats("RMQ_SYS_TRACE_TOPIC")) >= 3


def test_trace_messages_are_filled_not_sent_a_few_records_at_a_time():
    """A traced sync producer's records go out BATCH_RECORDS to a trace message, not as many
    as happened to be queued while the previous one was sent (that gave ~12 a message and
    kept the dispatcher as busy as the producer)."""
    from mqcore.admin import MQAdmin
    from mqcore.client.trace import BATCH_RECORDS
    n = 2 * BATCH_RECORDS
    with TestBroker({"autoCreateTopicEnable": "true"}) as broker:
        with Producer("traced-filled", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True) as p:
            results = [p.send(Message("TracedFillT", b"x")) for _ in range(n)]
            tracer = p._tracer
            assert wait_for(lambda: tracer.sent_records >= n, timeout=30), tracer.sent_records
        with MQAdmin(broker.namesrv_addr) as admin:
            trace_messages = sum(o.max_offset for o in admin.topic_stats("RMQ_SYS_TRACE_TOPIC"))
        assert 2 <= trace_messages <= 3, trace_messages  # two full ones (and a last partial one)
        assert "Pub" in _trace(broker.namesrv_addr, results[n // 2].msg_id)


def test_every_async_send_gets_its_record_once_its_answer_comes():
    """An async send's record is queued before its answer; the dispatcher writes it once the
    future is done (from a later pass if the answer came after one), with the answer's cost."""
    with TestBroker({"autoCreateTopicEnable": "true"}) as broker:
        with Producer("traced-async", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True,
                      max_async_inflight=1000) as p:
            p.send(Message("TracedAsyncT", b"warm"))
            results = [f.result(30) for f in [p.send_async(Message("TracedAsyncT", f"a{i}".encode()))
                                              for i in range(600)]]
            tracer = p._tracer
        assert tracer.dropped == 0 and tracer.sent_records == 601  # shutdown sent what was left
        for r in (results[0], results[299], results[-1]):
            text = _trace(broker.namesrv_addr, r.msg_id)
            pubs = [line.split() for line in text.splitlines() if line.startswith("Pub ")]
            assert len(pubs) == 1 and pubs[0][1] == "traced-async" and pubs[0][-1] == "success", text


def test_an_async_send_s_record_is_written_when_it_is_settled_in_send_order():
    """An async send's Pub record is encoded by its completion hook (so records queue in the
    order answers came, its cost the time to the answer); a failed send writes none."""
    import threading

    from mqcore.client.loop import SiblingFuture
    from mqcore.client.message import MessageQueue, SendResult, SendStatus
    from mqcore.client.trace import TraceDispatcher
    from mqcore.format.trace import decode_records

    cond = threading.Condition()
    d = TraceDispatcher("127.0.0.1:1", "RMQ_SYS_TRACE_TOPIC", "pg", lambda g, a: None)
    mq = MessageQueue("T", "broker-a", 0)
    futures = [SiblingFuture(cond, lambda f: d.trace_settled(f.traced[0], f, f.traced[1])) for _ in range(3)]
    for i, f in enumerate(futures):
        f.traced = (Message("T", b"body", keys=f"k{i}"), int(time.time() * 1000) - 50)
    futures[2].set_result(SendResult(SendStatus.SEND_OK, "ID2", mq, 2, "OFF2"))
    futures[1].set_exception(TimeoutError("no answer"))
    futures[0].set_result(SendResult(SendStatus.SEND_OK, "ID0", mq, 0, "OFF0"))
    assert d._fill() is False
    assert d._keys == ["ID2", "k2", "ID0", "k0"]
    records, bad = decode_records("".join(d._parts).encode())
    assert bad == 0 and [(r.msg_id, r.offset_msg_id, r.keys) for r in records] == [
        ("ID2", "OFF2", "k2"), ("ID0", "OFF0", "k0")]
    assert all(50 <= r.cost_ms < 10_000 for r in records)
