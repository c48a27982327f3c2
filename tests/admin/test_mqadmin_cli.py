"""``mqadmin`` (mqcore.admin) against a live mqbroker: every subcommand, --json, and errors
that name what was wrong in one line. The same scenarios run against Apache RocketMQ in
tests/reference/test_mqadmin_cli_java.py."""
from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from mqcore.client import Message, Producer
from mqcore.errors import BrokerError
from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request

from tests.support.processes import BrokerProcess

from . import scenarios
from .scenarios import Target, wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("admin") / "store", broker_name="broker-adm") as b:
        yield Target(b.namesrv_addr, b.broker_addr, "broker-adm")


def test_broker_state(target):
    scenarios.broker_state(target)


def test_topic_lifecycle(target):
    scenarios.topic_lifecycle(target, "AdmLifecycle")


def test_messages(target):
    scenarios.messages(target, "AdmMessages")


def test_groups_and_offsets(target):
    scenarios.groups_and_offsets(target, "AdmOffsets", "adm-cg")


def test_put_tps_reflects_sends(target):
    """brokerStatus/clusterList TPS come from the broker's per-second samples of its totals."""
    scenarios.create_topic(target, "AdmTps", 1)
    with Producer("adm-tps", namesrv_addr=target.namesrv) as p:
        for i in range(50):
            p.send(Message("AdmTps", b"x"))

    def put_tps():
        return float(target.ok("brokerStatus", "-b", target.broker_addr, "--json").json["putTps"].split()[0])

    assert wait_for(lambda: put_tps() > 0, 15)
    status = target.ok("brokerStatus", "-b", target.broker_addr, "--json").json
    assert int(status["earliestMessageTimeStamp"]) > 0


def test_update_broker_config_changes_behaviour_and_refuses_fixed_keys(target):
    t = target
    r = t.ok("updateBrokerConfig", "-b", t.broker_addr, "-k", "autoCreateTopicEnable", "-v", "false")
    assert f"update broker config success, {t.broker_addr}" in r.out
    try:
        assert t.ok("getBrokerConfig", "-b", t.broker_addr, "--json").json["autoCreateTopicEnable"] == "false"
        with Producer("adm-noauto", namesrv_addr=t.namesrv, retry_times_when_send_failed=0,
                      send_msg_timeout_ms=3000) as p:
            with pytest.raises(Exception) as e:
                p.send(Message("AdmNeverCreated", b"x"))
        assert "AdmNeverCreated" in str(e.value) or isinstance(e.value, BrokerError)
        scenarios.no_route(t, "AdmNeverCreated")
    finally:
        t.ok("updateBrokerConfig", "-c", t.cluster, "-k", "autoCreateTopicEnable", "-v", "true")
    assert t.ok("getBrokerConfig", "-b", t.broker_addr, "--json").json["autoCreateTopicEnable"] == "true"
    fixed = t.run("updateBrokerConfig", "-b", t.broker_addr, "-k", "brokerName", "-v", "other")
    assert fixed.rc == 1 and "brokerName cannot change while the broker runs" in fixed.err
    unknown = t.run("updateBrokerConfig", "-b", t.broker_addr, "-k", "noSuchKey", "-v", "1")
    assert unknown.rc == 1 and "unknown key noSuchKey" in unknown.err
    bad = t.run("updateBrokerConfig", "-b", t.broker_addr, "-k", "brokerPermission", "-v", "9")
    assert bad.rc == 1 and "brokerPermission=9" in bad.err


def test_read_only_broker_is_announced_read_only(target):
    """brokerPermission=4 at run time: the route says read-only and sends are refused; 6 undoes it."""
    t = target
    scenarios.create_topic(t, "AdmReadOnly", 1)

    def perm():
        return t.ok("topicRoute", "-t", "AdmReadOnly", "--json").json["queueDatas"][0]["perm"]

    t.ok("updateBrokerConfig", "-b", t.broker_addr, "-k", "brokerPermission", "-v", "4")
    try:
        assert wait_for(lambda: perm() == 4)
        refused = t.run("sendMessage", "-t", "AdmReadOnly", "-p", "x")
        assert refused.rc == 1 and "no writable queue" in refused.err and "Traceback" not in refused.err
    finally:
        t.ok("updateBrokerConfig", "-b", t.broker_addr, "-k", "brokerPermission", "-v", "6")
    assert wait_for(lambda: perm() == 6)
    assert t.ok("sendMessage", "-t", "AdmReadOnly", "-p", "x", "--json").json["sendStatus"] == "SEND_OK"


def test_delete_group_forgets_config_and_offsets(target):
    t = target
    scenarios.create_topic(t, "AdmDelGroup", 1)
    t.ok("updateSubGroup", "-b", t.broker_addr, "-g", "adm-del")
    # the retry topic a consumer's heartbeat would create: consumerProgress finds the group's
    # brokers through its route, and a route lookup never creates a topic (issue 11, as RocketMQ)
    scenarios.create_topic(t, "%RETRY%adm-del", 1)
    with Producer("adm-del-pg", namesrv_addr=t.namesrv) as p:
        p.send(Message("AdmDelGroup", b"x"))
    # a committed offset gives the group progress to forget
    with SyncRemotingClient() as rc:
        resp = rc.invoke(t.broker_addr, create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
            "consumerGroup": "adm-del", "topic": "AdmDelGroup", "queueId": "0", "commitOffset": "1"}), 5000)
        assert resp.code == ResponseCode.SUCCESS
    assert t.ok("consumerProgress", "-g", "adm-del", "--json").json["queues"]
    t.ok("deleteSubGroup", "-b", t.broker_addr, "-g", "adm-del", "-r", "true")
    r = t.run("consumerProgress", "-g", "adm-del")
    # -r true deleted the retry topic too, so the group has no route left to find progress by
    assert r.rc == 1 and ("no consume progress" in r.err or "no route for topic '%RETRY%adm-del'" in r.err), r.err


def test_errors_are_one_line_without_traceback(target, tmp_path):
    t = target
    usage = t.run("updateTopic", "-t", "X")
    assert usage.rc == 2 and "give a broker address (-b host:port) or a cluster name (-c)" in usage.err
    cluster = t.run("updateTopic", "-c", "NoSuchCluster", "-t", "X")
    assert cluster.rc == 1 and "unknown cluster 'NoSuchCluster'" in cluster.err
    with pytest.raises(SystemExit) as bad_perm:  # argparse's usage error, as for any bad choice
        t.run("updateTopic", "-b", t.broker_addr, "-t", "AdmPerm", "-p", "5")
    assert bad_perm.value.code == 2
    assert t.ok("updateTopic", "-b", t.broker_addr, "-t", "AdmPerm", "-p", "7").rc == 0
    # a peer that accepts and never answers: the timeout is named
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        addr = "127.0.0.1:%d" % silent.getsockname()[1]
        timed_out = t.run("brokerStatus", "-b", addr, "--timeout", "300")
    assert timed_out.rc == 1 and "timeout" in timed_out.err.lower()
    # the console script itself: nothing listens here, one line on stderr, exit 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = "127.0.0.1:%d" % s.getsockname()[1]
    p = subprocess.run([sys.executable, "-m", "mqcore.admin.cli", "clusterList", "-n", dead],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "cannot connect" in p.stderr and "Traceback" not in p.stderr


def test_api_is_usable_on_its_own(target):
    """The admin API the CLI is built on, used directly (as docs/mqadmin.md shows)."""
    from mqcore.admin import MQAdmin
    scenarios.create_topic(target, "AdmApi", 2)
    with MQAdmin(target.namesrv) as admin:
        assert [b.master_addr for b in admin.cluster_info().brokers()] == [target.broker_addr]
        assert "AdmApi" in admin.topic_list()
        assert [(r.queue_id, r.max_offset) for r in admin.topic_stats("AdmApi")] == [(0, 0), (1, 0)]
        results = []
        threads = [threading.Thread(target=lambda: results.append(admin.broker_runtime_stats(target.broker_addr)))
                   for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert len(results) == 4 and all("brokerVersionDesc" in r for r in results)


def test_operator_requests_with_bad_input_get_an_answer_and_the_broker_keeps_serving(target):
    t = target
    cases = [
        (RequestCode.UPDATE_BROKER_CONFIG, {}, b"\xff\xfe not utf-8"),
        (RequestCode.UPDATE_BROKER_CONFIG, {}, b"brokerPermission=abc\n"),
        (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "AdmNoSuchTopic", "group": "g", "timestamp": "1"}, b""),
        (RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {"topic": "TBW102", "group": "g", "timestamp": "soon"}, b""),
        (RequestCode.GET_PRODUCER_CONNECTION_LIST, {}, b""),
        (RequestCode.DELETE_SUBSCRIPTIONGROUP, {}, b""),
        (RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {}, b""),
    ]
    with SyncRemotingClient() as rc:
        for code, ext, body in cases:
            resp = rc.invoke(t.broker_addr, create_request(code, ext, body), 5000)
            assert resp.code in (ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR), (code, resp.code, resp.remark)
            if code == RequestCode.UPDATE_BROKER_CONFIG or code == RequestCode.INVOKE_BROKER_TO_RESET_OFFSET:
                assert resp.code == ResponseCode.SYSTEM_ERROR and resp.remark, (code, resp)
    assert t.ok("getBrokerConfig", "-b", t.broker_addr, "--json").json["brokerPermission"] == "6"
    assert t.ok("clusterList", "--json").json


def test_update_order_conf_refuses_a_value_clients_could_not_read(target):
    """A route's orderTopicConf is parsed by every client (brokerName:queueNums;...): a value
    that is not one is refused before anything is stored, and -m names its three methods."""
    t = target
    for bad in ("broker-a", "broker-a:x", ":4", "broker-a:0", "broker-a:4:5", ";"):
        r = t.run("updateOrderConf", "-t", "AdmOrderConf", "-m", "put", "-v", bad)
        assert r.rc == 2 and "brokerName:queueNums" in r.err, (bad, r.err)
    assert t.run("updateOrderConf", "-t", "AdmOrderConf", "-m", "put").rc == 2  # no -v
    assert t.run("updateOrderConf", "-t", "AdmOrderConf", "-m", "set", "-v", "broker-a:4").rc == 2
    missing = t.run("updateOrderConf", "-t", "AdmOrderConf", "-m", "get")
    assert missing.rc == 1 and "code 22 (QUERY_NOT_FOUND)" in missing.err, missing.err  # nothing was stored
    t.ok("updateOrderConf", "-t", "AdmOrderConf", "-m", "put", "-v", f"{t.broker_name}:4")
    assert t.ok("updateOrderConf", "-t", "AdmOrderConf", "-m", "get", "--json").json == \
        {"topic": "AdmOrderConf", "orderConf": f"{t.broker_name}:4"}
    t.ok("updateOrderConf", "-t", "AdmOrderConf", "-m", "delete")
    assert t.run("updateOrderConf", "-t", "AdmOrderConf", "-m", "get").rc == 1
