"""Apache RocketMQ 5.3.3's proxy in cluster mode in front of mqbroker: the proxy speaks 4.x
remoting to mqbroker (SEND, POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME ...) and
the official 5.x Java client talks gRPC to the proxy. Sends, a push consumer (normal, FIFO,
timed messages, each consumed once), and a push consumer whose listener fails once (the
message comes back after the backoff, through mqbroker's retry queue)."""
from __future__ import annotations

from mqcore.admin import MQAdmin
from tests.grpc.test_java_client import check_all_once, check_nack_comes_back, run_java5
from tests.support.processes import BrokerProcess
from tests.support.protocol import create_topic
from tests.support.reference5 import Java5ClusterProxy

CONF = {"flushConsumerOffsetInterval": "500"}


def test_java5_client_through_the_proxy_in_cluster_mode(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=CONF) as b:
        create_topic(b, "ProxyC")
        with Java5ClusterProxy(tmp_path / "px", b.namesrv_addr) as px:
            proc, results = run_java5(px.grpc_addr, "ProxyC", "GProxyC", tmp_path, bulk=10, settleMs=3000)
            got = check_all_once(proc, results, 10)
            assert got["normal"]["tag"] == "TagJ" and got["normal"]["attempt"] == 1
            assert got["fifo-0"]["group"] == "jgroup"


def test_a_nack_through_the_proxy_comes_back_after_the_backoff(tmp_path):
    """The 5.x push consumer's FAILURE: the proxy changes the invisible time on mqbroker
    (CHANGE_MESSAGE_INVISIBLETIME); when it runs out mqbroker revives the message into the
    group's retry queue and the proxy pops it from there: attempt 2."""
    with BrokerProcess(tmp_path / "store", conf=CONF) as b:
        create_topic(b, "ProxyN")
        with Java5ClusterProxy(tmp_path / "px", b.namesrv_addr) as px:
            proc, results = run_java5(px.grpc_addr, "ProxyN", "GProxyN", tmp_path, failOnce="true", settleMs=1000)
    assert proc.returncode == 0 and results[-1] == {"all_consumed": True}, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the proxy's default backoff for a first retry of a push consumer is 1 s
    check_nack_comes_back(results[4:-1], 1000)


def test_a_simple_consumer_through_the_proxy(tmp_path):
    """Receive with an invisible time (10 s, the proxy's minimum), ack all but one: that one
    comes back from mqbroker's retry queue once its invisible time is over, attempt 2."""
    with BrokerProcess(tmp_path / "store", conf=CONF) as b:
        create_topic(b, "ProxyS")
        with Java5ClusterProxy(tmp_path / "px", b.namesrv_addr) as px:
            proc, results = run_java5(px.grpc_addr, "ProxyS", "GProxyS", tmp_path, simple="true")
    assert proc.returncode == 0 and results[-1] == {"all_consumed": True}, proc.stdout[-3000:] + proc.stderr[-3000:]
    deliveries = results[4:-1]
    normal = [r for r in deliveries if r["body"] == "normal"]
    assert [(r["attempt"], r.get("failed", False)) for r in normal] == [(1, True), (2, False)], normal
    assert normal[1]["received_ms"] - normal[0]["received_ms"] >= 9_000
    assert sorted(r["body"] for r in deliveries if not r.get("failed")) == ["fifo-0", "fifo-1", "later", "normal"]


def test_a_fifo_group_through_the_proxy(tmp_path):
    """A FIFO group (consumeMessageOrderly): the proxy pops orderly (order=true) from mqbroker;
    the first message of the message group fails once and is delivered again in place before
    the second one."""
    with BrokerProcess(tmp_path / "store", conf=CONF) as b:
        create_topic(b, "ProxyF")
        with MQAdmin(b.namesrv_addr) as admin:
            admin.create_group(b.broker_addr, "GProxyF", consume_message_orderly=True)
        with Java5ClusterProxy(tmp_path / "px", b.namesrv_addr) as px:
            proc, results = run_java5(px.grpc_addr, "ProxyF", "GProxyF", tmp_path, failOnce="fifo-0", settleMs=1000)
    assert proc.returncode == 0 and results[-1] == {"all_consumed": True}, proc.stdout[-3000:] + proc.stderr[-3000:]
    fifo = [(r["body"], r["attempt"], r.get("failed", False)) for r in results[4:-1] if r["body"].startswith("fifo")]
    assert fifo == [("fifo-0", 1, True), ("fifo-0", 2, False), ("fifo-1", 1, False)], fifo
