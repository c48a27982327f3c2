"""The official 5.x remoting push consumer in POP mode (DefaultMQPushConsumer with
setClientRebalance(false), rocketmq-client 5.3.3) against mqbroker and against Apache RocketMQ
5.3.3's broker: the group's mode is set to POP through the admin API (SET_MESSAGE_REQUEST_MODE),
the consumer learns its queues from the broker (QUERY_ASSIGNMENT) and pops them; N messages are
all consumed, and the one the listener fails once comes back (its invisible time changed) as a
second delivery. Without both requests the client falls back to pulling: no POP_CK on the
messages and no pop queues, which the test refuses. Malformed and refused requests get the
same codes from both brokers."""
from __future__ import annotations

import json

from mqcore.remoting import RequestCode as RC
from mqcore.remoting import SyncRemotingClient, create_request
from tests.support.processes import BrokerProcess
from tests.support.reference5 import Java5Broker, Java5Namesrv, run_java5_driver

N = 6
Q = {"topic": "PopPush", "consumerGroup": "GPopPush", "clientId": "c1", "strategyName": "AVG",
     "messageModel": "CLUSTERING"}
S = {"topic": "PopPush", "consumerGroup": "GPopPush", "mode": "POP", "popShareQueueNum": -1}
#: requests both brokers refuse (or answer with nothing), with the same codes
REFUSED = [
    (RC.SET_MESSAGE_REQUEST_MODE, None), (RC.SET_MESSAGE_REQUEST_MODE, b"{not json"),
    (RC.SET_MESSAGE_REQUEST_MODE, b"[1, 2]"), (RC.SET_MESSAGE_REQUEST_MODE, json.dumps({**S, "topic": None})),
    (RC.SET_MESSAGE_REQUEST_MODE, json.dumps({**S, "popShareQueueNum": "x"})),
    (RC.SET_MESSAGE_REQUEST_MODE, json.dumps({**S, "topic": "%RETRY%GPopPush"})),
    (RC.SET_MESSAGE_REQUEST_MODE, json.dumps({**S, "topic": "NoSuchTopic"})),
    (RC.QUERY_ASSIGNMENT, None), (RC.QUERY_ASSIGNMENT, b"\xff\xfe"),
    (RC.QUERY_ASSIGNMENT, json.dumps({**Q, "messageModel": None})),
    (RC.QUERY_ASSIGNMENT, json.dumps({**Q, "topic": "NoSuchTopic"})),
    (RC.QUERY_ASSIGNMENT, json.dumps({**Q, "strategyName": "NO_SUCH_STRATEGY"})),
]


def _refusals(broker_addr: str) -> list[tuple[int, bytes]]:
    rc = SyncRemotingClient()
    try:
        out = []
        for code, body in REFUSED:
            resp = rc.invoke(broker_addr, create_request(code, body=body.encode() if isinstance(body, str) else body),
                             5000)
            out.append((resp.code, bytes(resp.body or b"")))
        return out
    finally:
        rc.close()


def _run(namesrv: str, broker_addr: str, share: int, tmp_path) -> dict:
    proc = run_java5_driver("PopPushConsumer.java", [namesrv, broker_addr, "PopPush", "GPopPush", str(N), str(share)],
                            timeout_s=240, workdir=tmp_path)
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results and "error" not in results[-1], proc.stdout[-3000:] + proc.stderr[-3000:]
    return results[-1]


def test_pop_push_consumer_matches_apache_5(tmp_path):
    with BrokerProcess(tmp_path / "store") as b:
        ours = _run(b.namesrv_addr, b.broker_addr, -1, tmp_path)
        our_refusals = _refusals(b.broker_addr)
        saved = json.loads((tmp_path / "store" / "config" / "messageRequestMode.json").read_text())
    with Java5Namesrv(tmp_path / "ns") as ns, Java5Broker(tmp_path / "jb", ns.addr) as jb:
        theirs = _run(ns.addr, jb.broker_addr, -1, tmp_path)
        their_refusals = _refusals(jb.broker_addr)
        their_saved = json.loads((tmp_path / "jb" / "config" / "messageRequestMode.json").read_text())
    assert ours == theirs
    assert our_refusals == their_refusals
    assert [code for code, _ in our_refusals] == [1, 1, 1, 1, 1, 16, 17, 1, 1, 1, 0, 0]
    assert our_refusals[-1][1] == b"{}"  # SUCCESS without assignments: the client keeps its queues
    assert ours["all_popped"] is True and ours["pop_queues"] == [-1]
    consumed = ours["consumed"]
    assert sorted(consumed) == [f"m-{i}" for i in range(N)]
    assert consumed["m-1"] == [0, 1]  # failed once, then delivered again as a retry
    assert all(times == [0] for body, times in consumed.items() if body != "m-1")
    assert saved == their_saved  # the same file as RocketMQ's MessageRequestModeManager writes
    assert saved["messageRequestModeMap"]["PopPush"]["GPopPush"] == {
        "topic": "PopPush", "consumerGroup": "GPopPush", "mode": "POP", "popShareQueueNum": -1}
