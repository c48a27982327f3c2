"""The official Python 5.x client (rocketmq-python-client 5.1.2, its own venv) against
mqbroker's gRPC endpoint: producer normal/delay/FIFO, simple consumer receive/ack/change
invisible, retry with a higher delivery attempt and then the DLQ."""
from __future__ import annotations

import re

from tests.grpc.conftest import run_py5
from tests.grpc.helpers import preset_group, pull_all

V1_ID = re.compile(r"^01[0-9A-F]{32}$")


def test_send_normal_delay_fifo_and_receive(grpc_broker, py5_python):
    results = run_py5(py5_python, grpc_broker.grpc_addr, [
        {"op": "send", "topic": "Orders5", "body": "normal", "tag": "created", "keys": ["k1", "k2"],
         "props": {"color": "red", "size": "L"}},
        *[{"op": "send", "topic": "Orders5", "body": f"fifo-{i}", "group": "order-42"} for i in range(4)],
        {"op": "send", "topic": "Orders5", "body": "delayed", "delay_s": 3},
        {"op": "receive", "topic": "Orders5", "group": "G5", "want": 6, "invisible_s": 30, "ack": True,
         "timeout_s": 25},
    ])
    sent = [r["message_id"] for r in results[:6]]
    assert all(V1_ID.match(i) for i in sent), sent
    got = {m["body"]: m for m in results[6]["messages"]}
    assert sorted(got) == sorted(["normal", "delayed"] + [f"fifo-{i}" for i in range(4)])
    normal = got["normal"]
    assert (normal["id"], normal["tag"], normal["keys"], normal["props"]) == \
        (sent[0], "created", ["k1", "k2"], {"color": "red", "size": "L"})
    assert normal["type"] == 1 and normal["attempt"] == 1 and not normal["corrupted"]
    # FIFO: one message group, one queue, in send order
    fifo = [m for m in results[6]["messages"] if m["body"].startswith("fifo-")]
    assert [m["body"] for m in fifo] == [f"fifo-{i}" for i in range(4)]
    assert {m["group"] for m in fifo} == {"order-42"} and {m["type"] for m in fifo} == {2}
    # delay: not handed out before its delivery time
    delayed = got["delayed"]
    assert delayed["type"] == 3 and delayed["delivery_ts"] > 0
    assert delayed["received_ms"] >= delayed["delivery_ts"]


def test_unacked_returns_with_higher_attempt_then_dlq(tmp_path, py5_python):
    from tests.grpc.conftest import TEST_CONF, grpc_addr
    from tests.support.processes import BrokerProcess
    preset_group(tmp_path / "store", "GRetry", retry_max_times=2)  # 3 deliveries, then the DLQ
    with BrokerProcess(tmp_path / "store", conf=TEST_CONF) as b:
        steps = [{"op": "send", "topic": "Retry5", "body": "poison", "tag": "t"}]
        steps += [{"op": "receive", "topic": "Retry5", "group": "GRetry", "want": 1, "invisible_s": 1,
                   "timeout_s": 15} for _ in range(3)]
        steps.append({"op": "receive", "topic": "Retry5", "group": "GRetry", "want": 1, "invisible_s": 1,
                      "timeout_s": 4, "await_s": 2})
        results = run_py5(py5_python, grpc_addr(b), steps)
        deliveries = [r["messages"] for r in results[1:4]]
        assert [len(d) for d in deliveries] == [1, 1, 1]
        assert [d[0]["attempt"] for d in deliveries] == [1, 2, 3]
        assert {d[0]["id"] for d in deliveries} == {results[0]["message_id"]}
        assert {d[0]["tag"] for d in deliveries} == {"t"}
        assert results[4]["messages"] == []  # after the third delivery it went to the DLQ
        dlq = pull_all(b.namesrv_addr, "%DLQ%GRetry", 1)
        assert len(dlq) == 1 and dlq[0].body == b"poison"
        assert dlq[0].properties["UNIQ_KEY"] == results[0]["message_id"]
        assert dlq[0].reconsume_times == 3


def test_change_invisible_duration_and_ack(grpc_broker, py5_python):
    results = run_py5(py5_python, grpc_broker.grpc_addr, [
        {"op": "send", "topic": "Inv5", "body": "a"},
        {"op": "send", "topic": "Inv5", "body": "b"},
        {"op": "receive", "topic": "Inv5", "group": "GInv", "want": 2, "invisible_s": 1},
    ])
    ids = {m["body"]: m["id"] for m in results[2]["messages"]}
    results = run_py5(py5_python, grpc_broker.grpc_addr, [
        {"op": "receive", "topic": "Inv5", "group": "GInv2", "want": 2, "invisible_s": 2},
        {"op": "change_invisible", "group": "GInv2", "id": ids["a"], "invisible_s": 30},
        {"op": "ack", "group": "GInv2", "ids": [ids["b"]]},
        # "a" would be back after 2 s without the change, "b" without the ack: neither comes
        {"op": "receive", "topic": "Inv5", "group": "GInv2", "want": 1, "invisible_s": 2, "timeout_s": 5,
         "await_s": 4},
    ])
    assert sorted(m["body"] for m in results[0]["messages"]) == ["a", "b"]
    assert results[3]["messages"] == []
