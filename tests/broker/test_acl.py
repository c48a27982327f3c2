"""Plain ACL on a real mqbroker process (aclEnable=true, plain_acl.yml), with real clients:
mqcore.client, MQAdmin, raw signed requests and the Apache C++ client (rocketmq==0.4.4)."""
from __future__ import annotations

import os
import random
import time

import pytest

from mqcore.acl import SessionCredentials
from mqcore.admin.api import MQAdmin
from mqcore.client import LitePullConsumer, Message, Producer
from mqcore.errors import MQError
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.support import abuse, acl
from tests.support.cpp_client import run_cpp
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

ACL_ERROR = "org.apache.rocketmq.acl.common.AclException: "


def acl_conf(path) -> dict:
    return {"aclEnable": "true", "plainAclFile": str(path), "brokerAccessKey": acl.ADMIN[0],
            "brokerSecretKey": acl.ADMIN[1]}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("acl")
    yml = root / "plain_acl.yml"
    yml.write_text(acl.PLAIN_ACL_YML)
    with BrokerProcess(root / "store", conf=acl_conf(yml)) as b:
        yield b


def producer(b, account, **kw) -> Producer:
    creds = {} if account is None else {"access_key": account[0], "secret_key": account[1]}
    return Producer("PG_acl", namesrv_addr=b.namesrv_addr, retry_times_when_send_failed=0, **creds, **kw).start()


def refused(fn) -> str:
    """The remark of the ACL refusal ``fn`` raises (and that it is one)."""
    with pytest.raises(MQError) as info:
        fn()
    text = str(info.value)
    assert ACL_ERROR in text, text
    return text


def raw(rc, addr, code, ext=None, body=b"", account=None):
    cmd = create_request(code, ext, body)
    if account is not None:
        SessionCredentials(*account).sign(cmd)
    return rc.invoke(addr, cmd, 5000)


def test_signed_plain_sends_take_the_signed_template_sync_and_async(broker):
    """With credentials, Producer.send and unbatched send_async write their frames from the
    queue's signed SendTemplate (the kernel signs as SessionCredentials.sign does) and the
    broker accepts them; a wrong secret is refused on the same path."""
    p = producer(broker, acl.NORMAL, auto_batch=False)
    try:
        sync = [p.send(Message("TopicPub", b"signed sync %d" % i)) for i in range(20)]
        futures = [p.send_async(Message("TopicPub", b"signed async %d" % i)) for i in range(50)]
        asynced = [f.result(30) for f in futures]
        templates = list(p._impl._templates.values())
    finally:
        p.shutdown()
    assert all(r.status.name == "SEND_OK" for r in sync + asynced)
    assert templates and all(t.signed for t in templates)  # not the generic path
    bad = producer(broker, (acl.NORMAL[0], "not-the-secret"), auto_batch=False)
    try:
        refused(lambda: bad.send(Message("TopicPub", b"x")))
        assert all(t.signed for t in bad._impl._templates.values())
        with pytest.raises(MQError):
            bad.send_async(Message("TopicPub", b"x")).result(30)
    finally:
        bad.shutdown()


def test_right_credentials_send_and_consume(broker):
    p = producer(broker, acl.NORMAL)
    try:
        results = [p.send(Message("TopicBoth", f"allowed {i}".encode())) for i in range(5)]
    finally:
        p.shutdown()
    assert all(r.status.name == "SEND_OK" for r in results)
    c = LitePullConsumer("CG_acl_ok", namesrv_addr=broker.namesrv_addr, access_key=acl.NORMAL[0],
                         secret_key=acl.NORMAL[1], consume_from_where="first")
    c.subscribe("TopicBoth", "*")
    c.start()
    got = []
    try:
        assert wait_for(lambda: got.extend(c.poll(500)) or len(got) >= 5, timeout=30)
    finally:
        c.shutdown()
    assert sorted(m.body for m in got) == sorted(f"allowed {i}".encode() for i in range(5))


def test_wrong_missing_and_denied_are_refused(broker):
    p = producer(broker, (acl.NORMAL[0], "wrongSecret1"))
    try:
        assert "Check signature failed for accessKey=normalUser" in refused(
            lambda: p.send(Message("TopicBoth", b"x")))
    finally:
        p.shutdown()
    p = producer(broker, None)
    try:
        assert "No accessKey is configured" in refused(lambda: p.send(Message("TopicBoth", b"x")))
    finally:
        p.shutdown()
    p = producer(broker, acl.NORMAL)
    try:
        assert "No default permission for topic:TopicDenied" in refused(lambda: p.send(Message("TopicDenied", b"x")))
        # SUB only: may consume, may not send
        assert "No default permission for topic:TopicSub" in refused(lambda: p.send(Message("TopicSub", b"x")))
        assert "No default permission for topic:TopicOther" in refused(lambda: p.send(Message("TopicOther", b"x")))
        # the same producer (same connection) still works after the refusals
        assert p.send(Message("TopicPub", b"fine")).status.name == "SEND_OK"
    finally:
        p.shutdown()


def test_consumer_needs_sub_on_topic_and_group(broker):
    with SyncRemotingClient() as rc:
        ext = {"consumerGroup": "GroupDenied", "topic": "TopicBoth", "queueId": "0", "queueOffset": "0",
               "maxMsgNums": "1", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0",
               "subscription": "*", "subVersion": "0"}
        r = raw(rc, broker.broker_addr, RC.PULL_MESSAGE, ext, account=acl.NORMAL)
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, ACL_ERROR + "No default permission for group:GroupDenied")
        r = raw(rc, broker.broker_addr, RC.PULL_MESSAGE, {**ext, "topic": "TopicPub", "consumerGroup": "CG_x"},
                account=acl.NORMAL)
        assert r.remark == ACL_ERROR + "No default permission for topic:TopicPub"
        r = raw(rc, broker.broker_addr, RC.PULL_MESSAGE, {**ext, "consumerGroup": "CG_x"}, account=acl.NORMAL)
        assert r.code != ResponseCode.SYSTEM_ERROR, r.remark  # allowed: a pull answer, not a refusal
        # an offset reset rewrites any group's progress: admin only
        reset = {"topic": "TopicBoth", "group": "CG_x", "timestamp": "0", "isForce": "true"}
        r = raw(rc, broker.broker_addr, RC.INVOKE_BROKER_TO_RESET_OFFSET, reset, account=acl.NORMAL)
        assert r.remark.startswith(ACL_ERROR + "Need admin permission for request code=222")


def test_admin_commands_need_an_admin_account(broker):
    with MQAdmin(broker.namesrv_addr, access_key=acl.NORMAL[0], secret_key=acl.NORMAL[1]) as admin:
        text = refused(lambda: admin.create_topic(broker.broker_addr, "TopicByUser"))
        assert "Need admin permission for request code=17, but accessKey=normalUser is not" in text
    with MQAdmin(broker.namesrv_addr) as admin:  # unsigned
        assert "No accessKey is configured" in refused(lambda: admin.create_topic(broker.broker_addr, "TopicAnon"))
    with MQAdmin(broker.namesrv_addr, access_key=acl.ADMIN[0], secret_key=acl.ADMIN[1]) as admin:
        admin.create_topic(broker.broker_addr, "TopicByAdmin")
        with SyncRemotingClient() as rc:  # the broker's signed registration reached the ACL'd name server
            assert wait_for(lambda: raw(rc, broker.namesrv_addr, RC.GET_ROUTEINFO_BY_TOPIC,
                                        {"topic": "TopicByAdmin"}).code == ResponseCode.SUCCESS, timeout=15)


def test_mqadmin_cli_signs_with_access_key_options(broker, capsys):
    from mqcore.admin.cli import main
    base = ["updateTopic", "-n", broker.namesrv_addr, "-b", broker.broker_addr, "-t", "TopicByCli"]
    assert main(base + ["--accessKey", acl.NORMAL[0], "--secretKey", acl.NORMAL[1]]) == 1
    assert "Need admin permission for request code=17" in capsys.readouterr().err
    assert main(base + ["--accessKey", acl.ADMIN[0]]) == 2  # half a credential is a usage error
    assert main(base + ["--accessKey", acl.ADMIN[0], "--secretKey", acl.ADMIN[1]]) == 0


def test_name_server_writes_need_an_admin_signature(broker):
    kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicX", "value": "broker-a:4"}
    with SyncRemotingClient() as rc:
        ns = broker.namesrv_addr
        r = raw(rc, ns, RC.PUT_KV_CONFIG, kv)
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, ACL_ERROR + "No accessKey is configured")
        r = raw(rc, ns, RC.PUT_KV_CONFIG, kv, account=acl.NORMAL)
        assert r.remark == ACL_ERROR + "Need admin permission for request code=100, but accessKey=normalUser is not"
        # a fake broker's registration, or unregistering the real one, is refused without admin keys
        reg = {"brokerName": "fake", "brokerAddr": "127.0.0.1:1", "clusterName": "DefaultCluster",
               "haServerAddr": "127.0.0.1:2", "brokerId": "0", "compressed": "false"}
        assert raw(rc, ns, RC.REGISTER_BROKER, reg, b"{}").remark.startswith(ACL_ERROR)
        unreg = {"brokerName": "broker-a", "brokerAddr": broker.broker_addr, "clusterName": "DefaultCluster",
                 "brokerId": "0"}
        assert raw(rc, ns, RC.UNREGISTER_BROKER, unreg, account=acl.NORMAL).remark.startswith(ACL_ERROR)
        assert raw(rc, ns, RC.DELETE_TOPIC_IN_NAMESRV, {"topic": "TopicBoth"}).remark.startswith(ACL_ERROR)
        # reads stay open; the real broker is still routed
        r = raw(rc, ns, RC.GET_BROKER_CLUSTER_INFO)
        assert r.code == ResponseCode.SUCCESS and broker.broker_addr.split(":")[1] in r.body.decode()
        assert b"fake" not in r.body
        assert raw(rc, ns, RC.PUT_KV_CONFIG, kv, account=acl.ADMIN).code == ResponseCode.SUCCESS
        r = raw(rc, ns, RC.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicX"})
        assert (r.code, r.ext_fields.get("value")) == (ResponseCode.SUCCESS, "broker-a:4")


def test_standalone_mqnamesrv_with_acl_takes_only_signed_registrations(tmp_path):
    """A broker the name server refuses for ACL reasons (no key, or a wrong brokerSecretKey)
    used to print READY while no client could find it; it now stops at start with a message
    naming the settings to fix, and exit status 1."""
    yml = tmp_path / "plain_acl.yml"
    yml.write_text(acl.PLAIN_ACL_YML)
    ns = NamesrvProcess()
    ns.argv += ["--acl", str(yml)]
    with ns, SyncRemotingClient() as rc:
        signed_conf = {"brokerAccessKey": acl.ADMIN[0], "brokerSecretKey": acl.ADMIN[1]}  # ACL off on the broker
        with BrokerProcess(tmp_path / "signed", namesrv=ns.addr, conf=signed_conf, broker_name="broker-signed"):
            for name, conf, why in (("broker-unsigned", {}, "No accessKey is configured"),
                                    ("broker-wrongkey", dict(signed_conf, brokerSecretKey="wrongSecret1"),
                                     "signature")):
                b = BrokerProcess(tmp_path / name, namesrv=ns.addr, conf=conf, broker_name=name)
                with pytest.raises(RuntimeError, match="did not start"):
                    b.start()
                out = b.output()
                assert f"name server {ns.addr} refused this broker's registration" in out, out[-3000:]
                assert why in out and "brokerSecretKey" in out and "READY" not in out, out[-3000:]
                assert "Traceback" not in out, out[-3000:]
            body = raw(rc, ns.addr, RC.GET_BROKER_CLUSTER_INFO).body.decode()
            assert "broker-signed" in body and "broker-unsigned" not in body and "broker-wrongkey" not in body


def test_cpp_client_with_session_credentials(broker, tmp_path):
    base = {"mode": "produce", "namesrv": broker.namesrv_addr, "report_failures": True, "send_timeout_ms": 3000}
    events = run_cpp({**base, "access_key": acl.NORMAL[0], "secret_key": acl.NORMAL[1],
                      "messages": [{"topic": "TopicBoth", "body": f"cpp {i}"} for i in range(3)]}, tmp_path)
    assert [e["status"] for e in events if "sent" in e] == [0, 0, 0], events
    events = run_cpp({**base, "access_key": acl.NORMAL[0], "secret_key": "wrongSecret1",
                      "messages": [{"topic": "TopicBoth", "body": "bad secret"}]}, tmp_path)
    assert [e["send_failed"] for e in events if "send_failed" in e] == [0], events
    events = run_cpp({**base, "access_key": acl.NORMAL[0], "secret_key": acl.NORMAL[1],
                      "messages": [{"topic": "TopicSub", "body": "sub only"}]}, tmp_path)
    assert [e["send_failed"] for e in events if "send_failed" in e] == [0], events
    events = run_cpp({**base, "messages": [{"topic": "TopicBoth", "body": "unsigned"}]}, tmp_path)
    assert [e["send_failed"] for e in events if "send_failed" in e] == [0], events
    # a signed push consumer receives what was sent
    events = run_cpp({"mode": "push", "namesrv": broker.namesrv_addr, "group": "CG_cpp_acl", "topic": "TopicBoth",
                      "access_key": acl.NORMAL[0], "secret_key": acl.NORMAL[1], "expect": 3, "timeout": 40,
                      "linger": 1}, tmp_path)
    assert {f"cpp {i}" for i in range(3)} <= {e["got"]["body"] for e in events if "got" in e}


def test_edits_take_effect_without_restart_and_a_bad_edit_keeps_the_last_good_file(tmp_path):
    yml = tmp_path / "plain_acl.yml"
    yml.write_text(acl.PLAIN_ACL_YML)
    with BrokerProcess(tmp_path / "store", conf=acl_conf(yml)) as b, SyncRemotingClient() as rc:
        ext = {"topic": "TopicBoth", "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4",
               "perm": "6", "topicFilterType": "SINGLE_TAG"}
        assert raw(rc, b.broker_addr, RC.UPDATE_AND_CREATE_TOPIC, ext).remark == ACL_ERROR + "No accessKey is configured"
        # a per-account white address: that account needs no (right) signature from there
        yml.write_text(acl.PLAIN_ACL_YML.replace("    whiteRemoteAddress:\n", "    whiteRemoteAddress: 127.0.0.1\n"))
        assert wait_for(lambda: raw(rc, b.broker_addr, RC.SEND_MESSAGE_V2, _send_ext("TopicBoth"), b"w",
                                    account=(acl.NORMAL[0], "notTheSecret")).code == ResponseCode.SUCCESS, timeout=15)
        # a global white address: anyone from there, unsigned, even admin requests
        yml.write_text("globalWhiteRemoteAddresses:\n  - 127.0.0.{1,2}\n" + acl.PLAIN_ACL_YML.split("\n", 2)[2])
        assert wait_for(lambda: raw(rc, b.broker_addr, RC.UPDATE_AND_CREATE_TOPIC, ext).code == ResponseCode.SUCCESS,
                        timeout=15)
        # a broken edit: logged once, the previous (white-listed) config stays in force
        yml.write_text("accounts:\n  - accessKey: normalUser\n    secretKey: short\n")
        log_path = os.path.join(b.log_dir, "broker.log")
        assert wait_for(lambda: "previous config stays in force" in _read(log_path), timeout=15)
        assert raw(rc, b.broker_addr, RC.UPDATE_AND_CREATE_TOPIC, ext).code == ResponseCode.SUCCESS
        assert _read(log_path).count("previous config stays in force") == 1
        # fixed again: the original rules are back
        yml.write_text(acl.PLAIN_ACL_YML)
        assert wait_for(lambda: raw(rc, b.broker_addr, RC.UPDATE_AND_CREATE_TOPIC, ext).code != ResponseCode.SUCCESS,
                        timeout=15)
        assert b.proc.poll() is None


def test_a_bad_file_stops_the_start_with_a_clear_error(tmp_path):
    yml = tmp_path / "plain_acl.yml"
    yml.write_text("accounts:\n  - accessKey: normalUser\n    secretKey: normalSecret1\n    topicPerms:\n"
                   "      - TopicA=PUBLISH\n")
    b = BrokerProcess(tmp_path / "store", conf=acl_conf(yml))
    with pytest.raises(Exception) as info:
        b.start()
    b.stop()
    assert "'PUBLISH' is not a permission" in str(info.value) + b.output()


def _send_ext(topic: str) -> dict:
    return {"a": "PG_acl", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1700000000000", "h": "0",
            "i": "", "j": "0", "k": "false", "m": "false"}


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""




def _hostile_credentials(rng: random.Random, request) -> None:
    """Sign a third with a real account (so hostile names reach the permission checks), give
    a third hostile AccessKey/Signature/SecurityToken values, leave a third unsigned."""
    roll = rng.random()
    if roll < 0.34:
        SessionCredentials(*rng.choice([acl.NORMAL, acl.ADMIN])).sign(request)
    elif roll < 0.67:
        hostile = ["", " ", "x" * 5000, "normalUser", "adminUser", "\u00e9", "=", "%RETRY%g", "null"]
        for key in ("AccessKey", "Signature", "SecurityToken"):
            if rng.random() < 0.7:
                request.ext_fields[key] = rng.choice(hostile)


def test_fuzz_with_hostile_credentials_leaves_the_acl_broker_serving(broker):
    """6,000 framed requests with hostile names, half of them signed or with hostile
    credential fields: each is answered, nothing crashes, and a signed client works after."""
    rng = random.Random(1712)
    per_conn, conns = 2000, 3
    frames = [list(abuse.fuzz_frames(rng, per_conn, prepare=_hostile_credentials)) for _ in range(conns)]
    t0 = time.monotonic()
    answered = abuse.blast(broker.broker_addr, frames, conns)
    assert broker.proc.poll() is None, broker.output()[-3000:]
    assert answered >= conns * per_conn * 0.9, (answered, time.monotonic() - t0)
    log = broker.output()
    assert log.count("Traceback") <= 5, log[-3000:]
    p = producer(broker, acl.NORMAL)
    try:
        assert p.send(Message("TopicBoth", b"after fuzz")).status.name == "SEND_OK"
    finally:
        p.shutdown()
