"""The official Node.js 5.x client (npm rocketmq-client-nodejs 1.0.8) against mqbroker's gRPC
endpoint: normal/FIFO/delay sends, a simple consumer's receive, ack and redelivery, and a push
consumer that gets every message exactly once (it checks each body against its digest and
discards a mismatch: with a CRC32 digest, which it renders in decimal, it discarded them all)."""
from __future__ import annotations

import re
from collections import Counter

from tests.grpc.conftest import run_node5, run_py5

V1_ID = re.compile(r"^01[0-9A-F]{32}$")


def test_node_round_trip(grpc_broker, node5_dir):
    results = run_node5(node5_dir, grpc_broker.grpc_addr, [
        {"op": "send", "topic": "Node5", "body": "normal", "tag": "TagN", "keys": ["a", "b"],
         "props": {"lang": "node"}},
        {"op": "send", "topic": "Node5", "body": "fifo-0", "group": "grp"},
        {"op": "send", "topic": "Node5", "body": "fifo-1", "group": "grp"},
        {"op": "send", "topic": "Node5", "body": "later", "delay_s": 2},
        {"op": "receive", "topic": "Node5", "group": "GNode", "want": 4, "invisible_s": 6, "timeout_s": 20},
        # nothing acked: everything comes back with delivery attempt 2; acked this time
        {"op": "receive", "topic": "Node5", "group": "GNode", "want": 4, "invisible_s": 30, "ack": True,
         "timeout_s": 20},
        {"op": "receive", "topic": "Node5", "group": "GNode", "want": 1, "invisible_s": 30, "timeout_s": 4},
    ])
    sent = [r["message_id"] for r in results[:4]]
    assert all(V1_ID.match(i) for i in sent), sent
    first, second, third = results[4]["messages"], results[5]["messages"], results[6]["messages"]
    assert sorted(m["id"] for m in first) == sorted(sent) == sorted(m["id"] for m in second)
    assert {m["attempt"] for m in first} == {1} and {m["attempt"] for m in second} == {2}
    normal = next(m for m in first if m["body"] == "normal")
    assert (normal["tag"], normal["keys"], normal["props"]) == ("TagN", ["a", "b"], {"lang": "node"})
    assert [m["body"] for m in first if m["group"] == "grp"] == ["fifo-0", "fifo-1"]
    later = next(m for m in first if m["body"] == "later")
    assert later["delivery_ts"] > 0 and later["received_ms"] >= later["delivery_ts"]
    assert third == []


def test_node_producer_to_python_consumer(grpc_broker, node5_dir, py5_python):
    sent = run_node5(node5_dir, grpc_broker.grpc_addr, [
        {"op": "send", "topic": "NodePy5", "body": "from-node", "tag": "x", "props": {"k": "v"}}])
    got = run_py5(py5_python, grpc_broker.grpc_addr, [
        {"op": "receive", "topic": "NodePy5", "group": "GNP", "want": 1, "invisible_s": 30, "ack": True}])
    m = got[0]["messages"][0]
    assert (m["id"], m["body"], m["tag"], m["props"]) == (sent[0]["message_id"], "from-node", "x", {"k": "v"})


def test_node_push_consumer_gets_every_message_once(grpc_broker, node5_dir):
    n = 20
    sent = run_node5(node5_dir, grpc_broker.grpc_addr, [
        {"op": "send", "topic": "NodePush5", "body": f"push-{i}", "tag": "P"} for i in range(n)])
    got = run_node5(node5_dir, grpc_broker.grpc_addr, [
        {"op": "push", "topic": "NodePush5", "group": "GNodePush", "want": n, "timeout_s": 40, "settle_s": 2}])
    deliveries = got[0]["deliveries"]
    counts = Counter(d["id"] for d in deliveries)
    assert sorted(counts) == sorted(r["message_id"] for r in sent), deliveries
    assert set(counts.values()) == {1}, counts
    assert sorted(d["body"] for d in deliveries) == sorted(f"push-{i}" for i in range(n))
