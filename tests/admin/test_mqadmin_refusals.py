"""``mqadmin`` says so when the cluster says no or cannot be reached: against a real mqbroker
with ``aclEnable=true`` and no credentials, and against a broker the name server routes but
nothing answers, every subcommand that asks a broker prints the refusal (code and remark) or the
connection failure on stderr and exits 1; none prints a row of zeros (``0.00(None,Nonems)``)
and exits 0, as clusterList once did."""
from __future__ import annotations

import json
import socket

import pytest

from mqcore.admin import MQAdmin
from mqcore.admin.cli import COMMANDS, build_parser
from mqcore.message import offset_msg_id
from mqcore.remoting import SyncRemotingClient, create_request
from mqcore.remoting.codes import RequestCode as RC
from mqcore.remoting.headers import RegisterBrokerRequestHeader
from tests.support import acl
from tests.support.processes import BrokerProcess
from tests.support.waiting import wait_for

from .scenarios import Target

pytestmark = pytest.mark.timeout(300)

TOPIC = "TopicBoth"
GROUP = "acl-cg"


def _commands(t: Target, topic: str, group: str, broker_addr: str, broker_name: str) -> dict[str, list[str]]:
    """Every subcommand, with arguments that make it ask the broker (or the name server's
    writes) about state that exists."""
    host, port = broker_addr.split(":")
    some_id = offset_msg_id(socket.inet_aton(host) + int(port).to_bytes(4, "big"), 0)
    b = ["-b", broker_addr]
    return {
        "clusterList": [],
        "brokerStatus": b,
        "topicList": ["-c"],
        "topicRoute": ["-t", topic],
        "topicClusterList": ["-t", topic],
        "topicStatus": ["-t", topic],
        "updateTopic": [*b, "-t", "TopicMadeByNobody"],
        "deleteTopic": ["-c", t.cluster, "-t", topic],
        "updateSubGroup": [*b, "-g", "group-made-by-nobody"],
        "deleteSubGroup": [*b, "-g", group],
        "consumerProgress": [],
        "consumerConnection": ["-g", group],
        "producerConnection": ["-g", "some-pg", "-t", topic],
        "queryMsgByKey": ["-t", topic, "-k", "k1"],
        "queryMsgById": ["-i", some_id],
        "queryMsgByOffset": ["-t", topic, "-b", broker_name, "-i", "0", "-o", "0"],
        "resetOffsetByTime": ["-g", group, "-t", topic, "-s", "now"],
        "sendMessage": ["-t", topic, "-p", "hello"],
        "consumeMessage": ["-t", topic],
        "getBrokerConfig": b,
        "updateBrokerConfig": [*b, "-k", "autoCreateSubscriptionGroup", "-v", "true"],
        "consumerStatus": ["-g", group],
        "getNamesrvConfig": [],
        "updateNamesrvConfig": ["-k", "orderMessageEnable", "-v", "true"],
        "wipeWritePerm": ["-b", broker_name],
        "addWritePerm": ["-b", broker_name],
        "brokerConsumeStats": b,
        "statsAll": [],
        "cloneGroupOffset": ["-s", group, "-d", "clone-made-by-nobody", "-t", topic],
        "queryMsgTraceById": ["-i", "AC1100010000000000000000000000000", "-t", topic],
        "updateOrderConf": ["-t", topic, "-m", "put", "-v", f"{broker_name}:4"],
        "createUser": [*b, "-u", "user-made-by-nobody", "-p", "somePassword1"],
        "updateUser": [*b, "-u", "user-made-by-nobody", "-s", "disable"],
        "deleteUser": [*b, "-u", "user-made-by-nobody"],
        "getUser": [*b, "-u", "user-made-by-nobody"],
        "listUser": b,
        "createAcl": [*b, "-s", "User:nobody", "-r", f"Topic:{topic}", "-a", "Pub", "-d", "Allow"],
        "updateAcl": [*b, "-s", "User:nobody", "-r", f"Topic:{topic}", "-a", "Sub", "-d", "Allow"],
        "deleteAcl": [*b, "-s", "User:nobody"],
        "getAcl": [*b, "-s", "User:nobody"],
        "listAcl": b,
    }


def test_every_subcommand_is_listed():
    build_parser()
    assert set(_commands(Target("x", "1.2.3.4:5", "b"), "T", "g", "1.2.3.4:5", "b")) == set(COMMANDS)


# --- ACL: no credentials ------------------------------------------------------------------------
#: name-server reads stay open on a name server of an ACL cluster (as RocketMQ's): these get
#: their answer without credentials
NAMESRV_READS = {"topicRoute", "topicClusterList", "getNamesrvConfig"}


@pytest.fixture(scope="module")
def acl_target(tmp_path_factory):
    root = tmp_path_factory.mktemp("acl-admin")
    yml = root / "plain_acl.yml"
    yml.write_text(acl.PLAIN_ACL_YML)
    conf = {"aclEnable": "true", "plainAclFile": str(yml), "brokerAccessKey": acl.ADMIN[0],
            "brokerSecretKey": acl.ADMIN[1]}
    with BrokerProcess(root / "store", conf=conf) as b:
        t = Target(b.namesrv_addr, b.broker_addr, b.broker_name)
        with MQAdmin(b.namesrv_addr, access_key=acl.ADMIN[0], secret_key=acl.ADMIN[1]) as admin:
            for topic in (TOPIC, "%RETRY%" + GROUP):  # the group's retry topic routes it, as a consumer's would
                admin.create_topic(b.broker_addr, topic, read_queue_nums=2, write_queue_nums=2)
            admin.create_group(b.broker_addr, GROUP)
            assert wait_for(lambda: {TOPIC, "%RETRY%" + GROUP} <= set(admin.topic_list()), timeout=30)
        yield t


def test_refused_requests_are_said_and_exit_1(acl_target):
    t = acl_target
    creds = ["--accessKey", acl.ADMIN[0], "--secretKey", acl.ADMIN[1]]
    assert t.run("clusterList", *creds).rc == 0  # the state is fine for an admin account
    for name, args in _commands(t, TOPIC, GROUP, t.broker_addr, t.broker_name).items():
        r = t.run(name, *args)
        if name in NAMESRV_READS:
            assert r.rc == 0, (name, r.err)
            continue
        assert r.rc == 1, (name, r.rc, r.out, r.err)
        assert "AclException: No accessKey is configured" in r.err and "code 1 (SYSTEM_ERROR)" in r.err, (name, r.err)
        assert "Traceback" not in r.err and "None" not in r.out, (name, r.out)


def test_name_server_reads_stay_open(acl_target):
    t = acl_target
    creds = ["--accessKey", acl.ADMIN[0], "--secretKey", acl.ADMIN[1]]
    assert t.run("updateOrderConf", "-t", TOPIC, "-m", "put", "-v", f"{t.broker_name}:2", *creds).rc == 0
    got = t.run("updateOrderConf", "-t", TOPIC, "-m", "get")
    assert got.rc == 0 and f"orderConf=[{t.broker_name}:2]" in got.out, got.err
    listed = t.run("topicList")
    assert listed.rc == 0 and TOPIC in listed.out.split()
    assert t.run("updateOrderConf", "-t", TOPIC, "-m", "delete").rc == 1  # a write: refused
    assert t.run("updateOrderConf", "-t", TOPIC, "-m", "delete", *creds).rc == 0


def test_cluster_list_shows_the_broker_it_could_not_read(acl_target):
    t = acl_target
    r = t.run("clusterList")
    assert r.rc == 1 and "0.00(" not in r.out
    row = [line.split() for line in r.out.splitlines()[1:]]
    assert row == [[t.cluster, t.broker_name, "0", t.broker_addr, "-", "-", "-", "-", "-", "-"]], r.out
    assert r.err == (f"mqadmin clusterList: broker {t.broker_name}: refused by {t.broker_addr}: code 1 (SYSTEM_ERROR): "
                     "org.apache.rocketmq.acl.common.AclException: No accessKey is configured\n")
    j = t.run("clusterList", "--json")
    assert j.rc == 1
    (entry,) = json.loads(j.out)
    assert entry["runtime"] is None and "No accessKey is configured" in entry["error"]


# --- a routed broker nothing answers --------------------------------------------------------------
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def dead_target(tmp_path_factory):
    """A live mqbroker, and a second broker registered in the same cluster at a port nothing
    listens on (registered over a connection this fixture keeps open, so the name server keeps
    routing it): the live one's name server and a dead broker's address."""
    with BrokerProcess(tmp_path_factory.mktemp("dead-admin") / "store", broker_name="broker-live") as b, \
            SyncRemotingClient() as rc:
        dead_addr = f"127.0.0.1:{_closed_port()}"
        table = {t: {"topicName": t, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
                 for t in ("DeadTopic", "%RETRY%dead-cg", "RMQ_SYS_TRACE_TOPIC")}
        body = json.dumps({"topicConfigSerializeWrapper": {"dataVersion": {"counter": 1, "timestamp": 1},
                                                           "topicConfigTable": table},
                           "filterServerList": []}).encode()
        h = RegisterBrokerRequestHeader(broker_name="broker-dead", broker_addr=dead_addr, cluster_name="DefaultCluster",
                                        ha_server_addr="", broker_id=0)
        assert rc.invoke(b.namesrv_addr, create_request(RC.REGISTER_BROKER, h.to_ext(), body), 5000).code == 0
        yield Target(b.namesrv_addr, dead_addr, "broker-dead"), b


def test_an_unreachable_broker_is_said_and_exit_1(dead_target):
    t, live = dead_target
    for name, args in _commands(t, "DeadTopic", "dead-cg", t.broker_addr, t.broker_name).items():
        r = t.run(name, *args, "--timeout", "2000")
        if name in ("topicRoute", "topicClusterList", "getNamesrvConfig", "updateNamesrvConfig", "wipeWritePerm",
                    "addWritePerm", "updateOrderConf"):
            assert r.rc == 0, (name, r.err)  # the name server's business: it answers
            continue
        assert r.rc == 1, (name, r.rc, r.out, r.err)
        assert "cannot connect" in r.err and t.broker_addr in r.err, (name, r.err)
        assert "Traceback" not in r.err and "None" not in r.out, (name, r.out)
    r = t.run("clusterList")  # the live broker's row is printed, the dead one's says nothing false
    rows = {line.split()[1]: line.split() for line in r.out.splitlines()[1:]}
    assert r.rc == 1 and rows["broker-dead"][4:] == ["-"] * 6 and rows["broker-live"][3] == live.broker_addr
    assert r.err.count("\n") == 1 and "broker broker-dead: cannot connect" in r.err, r.err
