"""A producer with ``enable_msg_trace=True`` writes Pub trace records, in batches from its
dispatcher thread, that mqcore's ``mqadmin queryMsgTraceById`` finds by message id."""
from __future__ import annotations

import contextlib
import io

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


def test_an_unanswered_async_send_holds_the_records_behind_it_in_order():
    """The dispatcher stops at an async send with no answer yet (it and what follows wait for a
    later pass) instead of looking past it, and the records leave in send order; on the last
    pass (shutdown) an unanswered send is set aside and the rest still go."""
    import threading

    from mqcore.client.loop import SiblingFuture
    from mqcore.client.message import MessageQueue, SendResult, SendStatus
    from mqcore.client.trace import TraceDispatcher

    cond = threading.Condition()
    d = TraceDispatcher("127.0.0.1:1", "RMQ_SYS_TRACE_TOPIC", "pg", lambda g, a: None)
    futures = [SiblingFuture(cond) for _ in range(3)]
    mq = MessageQueue("T", "broker-a", 0)

    def answer(i: int) -> None:
        futures[i].settled_ms = 1_700_000_000_010
        futures[i].set_result(SendResult(SendStatus.SEND_OK, f"ID{i}", mq, i, f"OFF{i}"))

    for i, f in enumerate(futures):
        f.settled_ms = 0
        d.trace_pending(Message("T", b"body"), f, 1_700_000_000_000)
    answer(0)
    answer(2)
    assert d._fill() is False
    assert d._keys == ["ID0"] and len(d._queue) == 2  # the unanswered ID1 and ID2 behind it wait
    answer(1)
    assert d._fill() is False
    assert d._keys == ["ID0", "ID1", "ID2"] and not d._queue
    assert ["Pub" in p and f"ID{i}" in p for i, p in enumerate(d._parts)] == [True] * 3
    late = SiblingFuture(cond)
    late.settled_ms = 0
    d.trace_pending(Message("T", b"x"), late, 1_700_000_000_000)
    d.trace_send(Message("T", b"y"), SendResult(SendStatus.SEND_OK, "ID9", mq, 9, "OFF9"), 1_700_000_000_000,
                 None)
    assert d._fill(last_pass=True) is False
    assert d._keys[-1] == "ID9" and [item[1] for item in d._unsettled] == [late]
