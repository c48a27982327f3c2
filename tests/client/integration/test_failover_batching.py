"""Two brokers with one killed; auto-batching against a real broker."""
from __future__ import annotations

import pytest

from mqcore.client import Message, Producer
from tests.support.waiting import wait_for

from .helpers import create_topic, pull_everything

pytestmark = pytest.mark.timeout(240)


def two_broker_topic(ns, a, b, topic: str) -> None:
    create_topic(a.broker_addr, ns.addr, topic)
    create_topic(b.broker_addr, ns.addr, topic)


@pytest.mark.parametrize("latency_fault", [False, True])
def test_producer_keeps_sending_when_a_broker_dies_and_avoids_it(two_brokers, latency_fault):
    ns, a, b = two_brokers
    two_broker_topic(ns, a, b, "HA")
    with Producer("pg-ha", namesrv_addr=ns.addr, send_latency_fault_enable=latency_fault,
                  send_msg_timeout_ms=3000) as p:
        before = {p.send(Message("HA", f"pre{i}")).message_queue.broker_name for i in range(16)}
        assert before == {"broker-a", "broker-b"}
        failures_on_b: list[int] = []
        strategy = p._impl.fault_strategy
        record = strategy.update_fault_item

        def counting(broker_name, latency, isolation):
            if broker_name == "broker-b" and isolation:
                failures_on_b.append(latency)
            record(broker_name, latency, isolation)
        strategy.update_fault_item = counting  # type: ignore[method-assign]
        b.kill9()  # the name server still routes broker-b for a while
        results = [p.send(Message("HA", f"post{i}")) for i in range(40)]
        assert {r.message_queue.broker_name for r in results} == {"broker-a"}
        assert all(r.ok for r in results)
        if latency_fault:  # one failed attempt puts broker-b in back-off: never tried again
            assert len(failures_on_b) == 1
            assert not strategy.fault_tolerance.is_available("broker-b")
        else:  # plain round-robin keeps landing on broker-b first, then retries on broker-a: with 4
            # queues per broker one send in four starts on broker-b, so 40 sends fail over 9 or 10
            # times depending on the random index the round-robin starts from
            assert len(failures_on_b) >= 9
    got = {m.body for m in pull_everything(ns.addr, "HA")}
    assert {f"post{i}".encode() for i in range(40)} <= got


def test_auto_batching_produces_the_same_messages_as_unbatched_sends(broker):
    ns = broker.namesrv_addr
    for topic in ("Plain", "Batched"):
        create_topic(broker.broker_addr, ns, topic)

    def messages(topic: str) -> list[Message]:
        out = []
        for i in range(300):
            m = Message(topic, f"body-{i}" * (1 + i % 5), tags=["A", "B", None][i % 3], keys=[f"k{i}"], flag=i % 4)
            m.put_user_property("seq", str(i))
            out.append(m)
        return out

    with Producer("pg-plain", namesrv_addr=ns) as p:
        plain = [p.send(m) for m in messages("Plain")]
    with Producer("pg-batched", namesrv_addr=ns, auto_batch=True, batch_max_delay_ms=5) as p:
        futures = [p.send_async(m) for m in messages("Batched")]
        batched = [f.result(30) for f in futures]
    assert len({r.msg_id for r in batched}) == 300 and all(r.ok for r in batched)

    def view(topic: str) -> dict:
        return {m.properties["seq"]: (m.body, m.tags, m.keys, m.flag, m.properties.get("seq"))
                for m in pull_everything(ns, topic)}

    assert wait_for(lambda: len(view("Batched")) == 300 and len(view("Plain")) == 300)
    assert view("Plain") == view("Batched")
    stored = {m.msg_id: m for m in pull_everything(ns, "Batched")}
    for r in batched:
        m = stored[r.msg_id]
        assert (m.offset_msg_id, m.queue_id, m.queue_offset) == (r.offset_msg_id, r.message_queue.queue_id,
                                                                  r.queue_offset)
    del plain
