"""4.x and 5.x clients share topics on one broker: a 4.x producer (mqcore.client) to the
official Python 5.x consumer, and the Python 5.x producer to a 4.x consumer, with tags, keys
and user properties intact; and a 5.x group's acks become the group's committed offsets."""
from __future__ import annotations

from mqcore.client import Message, Producer, PullConsumer
from tests.grpc.conftest import run_py5
from tests.grpc.helpers import pull_all


def test_4x_producer_to_5x_consumer(grpc_broker, py5_python):
    big = "z" * 6000  # the 4.x client compresses bodies from 4 KiB: the 5.x consumer gets it inflated
    with Producer("pg-cross", namesrv_addr=grpc_broker.namesrv_addr) as p:
        sent = [p.send(Message("Cross4to5", f"m{i}".encode(), tags="TagA", keys=[f"order-{i}", "shared"],
                               properties={"color": "blue", "n": str(i)})) for i in range(3)]
        p.send(Message("Cross4to5", big, tags="TagZ"))  # filtered out by the 5.x consumer's tag below
        compressed = p.send(Message("Cross4to5", big, tags="TagA", keys=["big"]))
    results = run_py5(py5_python, grpc_broker.grpc_addr, [
        {"op": "receive", "topic": "Cross4to5", "group": "G45", "want": 4, "invisible_s": 30, "ack": True,
         "tag": "TagA"}])
    got = sorted(results[0]["messages"], key=lambda m: m["body"])
    assert got[-1]["body"] == big and got[-1]["id"] == compressed.msg_id and not got[-1]["corrupted"]
    got = got[:-1]
    assert [m["body"] for m in got] == ["m0", "m1", "m2"]
    assert [m["id"] for m in got] == [r.msg_id for r in sent]  # the 4.x UNIQ_KEY is the 5.x message id
    for i, m in enumerate(got):
        assert (m["tag"], m["keys"], m["props"]) == ("TagA", sorted([f"order-{i}", "shared"]),
                                                     {"color": "blue", "n": str(i)})
        assert m["attempt"] == 1 and not m["corrupted"]


def test_5x_producer_to_4x_consumer_and_shared_offsets(grpc_broker, py5_python):
    results = run_py5(py5_python, grpc_broker.grpc_addr, [
        *[{"op": "send", "topic": "Cross5to4", "body": f"m{i}", "tag": "TagB", "keys": [f"k{i}"],
           "props": {"origin": "py5", "i": str(i)}} for i in range(3)],
        {"op": "receive", "topic": "Cross5to4", "group": "GShared", "want": 3, "invisible_s": 30, "ack": True},
    ])
    ids = [r["message_id"] for r in results[:3]]
    got = sorted(pull_all(grpc_broker.namesrv_addr, "Cross5to4", 3), key=lambda m: m.body)
    assert [m.body for m in got] == [b"m0", b"m1", b"m2"]
    assert [m.msg_id for m in got] == ids
    for i, m in enumerate(got):
        assert (m.tags, m.keys) == ("TagB", [f"k{i}"])
        assert (m.get_property("origin"), m.get_property("i")) == ("py5", str(i))
    # the 5.x group acked everything: its committed offsets, as a 4.x consumer of the group sees them
    with PullConsumer("GShared", namesrv_addr=grpc_broker.namesrv_addr) as c:
        queues = c.fetch_subscribe_message_queues("Cross5to4")
        committed = {mq.queue_id: c.fetch_consume_offset(mq) for mq in queues}
        maxes = {mq.queue_id: c.max_offset(mq) for mq in queues}
    assert committed == maxes and sum(maxes.values()) == 3
