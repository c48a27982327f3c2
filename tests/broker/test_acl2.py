"""ACL 2.0 on a real mqbroker process (authenticationEnabled, authorizationEnabled): the decision
table of tests/support/acl2.py over raw signed remoting requests, the AUTH_* admin requests
(3001-3010) and their bodies, hand edits of config/auth.json applied without a restart, and a
signed mqcore.client producer."""
from __future__ import annotations

import json
import os

import pytest

from mqcore.acl import SessionCredentials
from mqcore.broker.config import BrokerConfig
from mqcore.client import Message, Producer
from mqcore.errors import FieldConfigError, MQError
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from mqcore.grpc.auth import sign
from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.rawclient import RawClient, d
from tests.support import acl2
from tests.support.processes import BrokerProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("acl2")
    with BrokerProcess(root / "store", conf={**acl2.CONF, **TEST_CONF}) as b:
        b.grpc_addr = grpc_addr(b)
        with SyncRemotingClient() as rc:
            acl2.setup(rc, b.broker_addr)
        yield b


def _logs(b) -> str:
    text = b.output()
    for name in os.listdir(b.log_dir) if os.path.isdir(b.log_dir) else ():
        with open(os.path.join(b.log_dir, name), errors="replace") as f:
            text += f.read()
    return text


def call(rc, addr, code, ext=None, body=b"", account=acl2.SUPER):
    return rc.invoke(addr, acl2.sign(create_request(code, ext or {}, body), account), 5000)


def test_decision_table(broker):
    with SyncRemotingClient() as rc:
        got = acl2.decisions(rc, broker.broker_addr)
    wrong = {name: got[name] for name, case in acl2.CASES.items() if got[name][0] != case[4]}
    assert not wrong, wrong
    assert len(acl2.CASES) >= 30


def test_refusals_carry_apaches_messages(broker):
    with SyncRemotingClient() as rc:
        expect = {
            "unsigned_refused": "username cannot be null.",
            "unknown_user_refused": "User:nobody is not found.",
            "bad_signature_refused": "check signature failed.",
            "disabled_user_refused": "User:dave is disabled.",
            "user_without_acl_refused": "User:carol has no permission to access Topic:orders from 127.0.0.1, "
                                        "no matched policies.",
            "literal_deny_on_pub": "User:alice has no permission to access Topic:orderSecret from 127.0.0.1, "
                                   "the decision is deny.",
            "retry_topic_send_denied_group": "User:alice has no permission to access Group:gDenyX from 127.0.0.1, "
                                             "the decision is deny.",
        }
        for name, remark in expect.items():
            assert acl2.run_case(rc, broker.broker_addr, name) == (ResponseCode.NO_PERMISSION, remark), name


def test_user_requests(broker):
    addr = broker.broker_addr
    with SyncRemotingClient() as rc:
        r = call(rc, addr, 3004, {"username": "alice"})
        assert r.code == ResponseCode.SUCCESS
        assert json.loads(r.body) == {"username": "alice", "password": acl2.ALICE[1], "userType": "Normal",
                                      "userStatus": "enable"}
        assert call(rc, addr, 3004, {"username": "ghost"}).body in (b"", None)  # success, no body
        names = {u["username"] for u in json.loads(call(rc, addr, 3005).body)}
        assert {"rocketmq", "alice", "bob", "dave"} <= names
        assert [u["username"] for u in json.loads(call(rc, addr, 3005, {"filter": "aro"}).body)] == ["carol"]
        r = call(rc, addr, 3001, {"username": "alice"}, b'{"password":"x1234567"}')
        assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "The user is existed")
        r = call(rc, addr, 3001, {"username": "nopw"}, b'{"userType":"Normal"}')
        assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "password can not be blank")
        r = call(rc, addr, 3001, {}, b'{"password":"x1234567"}')
        assert (r.code, r.remark) == (ResponseCode.INVALID_PARAMETER, "The username is blank")
        # a normal user with Cluster Update (frank) may create normal users, never a super user
        r = call(rc, addr, 3001, {"username": "mallory"}, b'{"password":"m1234567","userType":"Super"}',
                 account=acl2.FRANK)
        assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "The super user can only be create by super user")
        r = call(rc, addr, 3001, {"username": "grace"}, b'{"password":"g1234567"}', account=acl2.FRANK)
        assert r.code == ResponseCode.SUCCESS, r.remark
        r = call(rc, addr, 3002, {"username": "rocketmq"}, b'{"password":"stolen12"}', account=acl2.FRANK)
        assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "The super user can only be update by super user")
        r = call(rc, addr, 3003, {"username": "rocketmq"}, account=acl2.FRANK)
        assert r.code == ResponseCode.NO_PERMISSION
        # a new password takes effect at once; deleting the user removes its ACL too
        assert call(rc, addr, 3002, {"username": "grace"}, b'{"password":"g7654321"}').code == ResponseCode.SUCCESS
        body = json.dumps({"subject": "User:grace", "policies": [{"entries": [acl2.entry("Topic:g*", ["Pub"])]}]})
        assert call(rc, addr, 3006, {"subject": "User:grace"}, body.encode()).code == ResponseCode.SUCCESS
        assert call(rc, addr, 3003, {"username": "grace"}).code == ResponseCode.SUCCESS
        assert call(rc, addr, 3004, {"username": "grace"}).body in (b"", None)
        assert call(rc, addr, 3003, {"username": "grace"}).code == ResponseCode.SUCCESS  # absent: still success
        r = call(rc, addr, 3006, {"subject": "User:grace"}, body.encode())
        assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "The subject of User:grace is not exist.")


def test_acl_requests(broker):
    addr = broker.broker_addr
    with SyncRemotingClient() as rc:
        got = json.loads(call(rc, addr, 3009, {"subject": "User:bob"}).body)
        assert got == {"subject": "User:bob", "policies": [{"policyType": "Custom", "entries": [
            {"resource": "*", "actions": ["Pub", "Sub"], "decision": "Allow"},
            {"resource": "Topic:bobNo", "actions": ["Pub"], "decision": "Deny"}]}]}
        # create on an existing ACL merges: the same resource is replaced, a new one added
        body = {"subject": "User:bob", "policies": [{"policyType": "Custom", "entries": [
            acl2.entry("Topic:bobNo", ["Pub", "Sub"], "Deny", ["127.0.0.1"]), acl2.entry("Topic:bobNew", ["Get"])]}]}
        assert call(rc, addr, 3007, {"subject": "User:bob"}, json.dumps(body).encode()).code == ResponseCode.SUCCESS
        entries = json.loads(call(rc, addr, 3009, {"subject": "User:bob"}).body)["policies"][0]["entries"]
        assert [e["resource"] for e in entries] == ["*", "Topic:bobNo", "Topic:bobNew"]
        assert entries[1] == {"resource": "Topic:bobNo", "actions": ["Pub", "Sub"], "decision": "Deny",
                              "sourceIps": ["127.0.0.1"]}
        # one entry deleted, then the whole ACL
        ext = {"subject": "User:bob", "resource": "Topic:bobNew"}
        assert call(rc, addr, 3008, ext).code == ResponseCode.SUCCESS
        assert len(json.loads(call(rc, addr, 3009, {"subject": "User:bob"}).body)["policies"][0]["entries"]) == 2
        listed = json.loads(call(rc, addr, 3010, {"subjectFilter": "alice", "resourceFilter": "pay"}).body)
        assert [e["resource"] for e in listed[0]["policies"][0]["entries"]] == ["Topic:pay*", "Topic:payroll*",
                                                                                "Topic:payrollPublic"]
        for bad, remark in (({"resource": "Nope:x", "actions": ["Pub"], "decision": "Allow"}, "The resource is null."),
                            ({"resource": "Topic:x", "actions": ["Fly"], "decision": "Allow"}, "The actions is empty."),
                            ({"resource": "Topic:x", "actions": ["Any"], "decision": "Allow"},
                             "The actions can not be Any."),
                            ({"resource": "Topic:x", "actions": ["Pub"], "decision": "Maybe"},
                             "The decision is null or illegal."),
                            ({"resource": "Topic:x", "actions": ["Pub"], "decision": "Allow", "sourceIps": ["1.2.3"]},
                             "The source ip is invalid.")):
            body = json.dumps({"subject": "User:bob", "policies": [{"entries": [bad]}]}).encode()
            assert call(rc, addr, 3006, {"subject": "User:bob"}, body).remark == remark
        r = call(rc, addr, 3008, {"subject": "User:carol"})
        assert (r.code, r.remark) == (ResponseCode.NO_PERMISSION, "The acl is not exist.")


def test_hand_edit_of_auth_json_is_applied(broker):
    path = os.path.join(broker.store_dir, "config", "auth.json")
    data = json.load(open(path))
    data["users"].append({"username": "henry", "password": "henryPassword1", "userType": "Normal"})
    data["acls"].append({"subject": "User:henry", "policies": [{"entries": [acl2.entry("Topic:henry", ["Pub"])]}]})
    tmp = path + ".edit"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)
    p = Producer("PG_henry", namesrv_addr=broker.namesrv_addr, retry_times_when_send_failed=0,
                 access_key="henry", secret_key="henryPassword1").start()
    try:
        def sent():
            try:
                return p.send(Message("henry", b"by hand")).status.name == "SEND_OK"
            except MQError:
                return False
        assert wait_for(sent, timeout=15)
        with pytest.raises(MQError) as info:
            p.send(Message("orders", b"not henry's"))
        assert "has no permission to access Topic:orders" in str(info.value)
    finally:
        p.shutdown()
    with open(tmp, "w") as f:
        f.write("{not json")
    os.replace(tmp, path)
    assert wait_for(lambda: "stay in force" in _logs(broker), timeout=15)  # the broken file was read
    with SyncRemotingClient() as rc:  # and the last good rules stay in force
        assert acl2.run_case(rc, broker.broker_addr, "literal_topic_pub")[0] == ResponseCode.SUCCESS
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def test_signed_client_and_whitelist_config():
    with pytest.raises(FieldConfigError, match="exclude each other"):
        BrokerConfig(acl_enable=True, acl_file="/x", broker_access_key="a", broker_secret_key="b",
                     authentication_enabled=True)
    with pytest.raises(FieldConfigError, match="initAuthenticationUser|init_authentication_user|JSON"):
        BrokerConfig(init_authentication_user="rocketmq:12345678")
    with pytest.raises(FieldConfigError, match="only"):
        BrokerConfig(authentication_provider="com.example.Mine")
    assert SessionCredentials(*acl2.ALICE)


def test_grpc_requests_are_checked_by_the_same_users_and_rules(broker):
    date = "20250101T120000Z"

    def meta(user, password):
        return [("x-mq-date-time", date),
                ("authorization", f"MQv2-HMAC-SHA1 Credential={user}, SignedHeaders=x-mq-date-time, "
                                  f"Signature={sign(password, date)}")]

    with RawClient(broker.grpc_addr) as c:
        r = c.send("orders", b"x")
        assert (r.status.code, r.status.message) == (d.UNAUTHORIZED, "username cannot be null.")
    with RawClient(broker.grpc_addr, meta=meta(acl2.ALICE[0], "wrongPassword1")) as c:
        r = c.send("orders", b"x")
        assert (r.status.code, r.status.message) == (d.UNAUTHORIZED, "check signature failed.")
    with RawClient(broker.grpc_addr, meta=meta(*acl2.ALICE)) as c:
        assert c.send("orders", b"x").status.code == d.OK
        r = c.send("orderSecret", b"x")
        assert (r.status.code, r.status.message) == (
            d.FORBIDDEN, "User:alice has no permission to access Topic:orderSecret from 127.0.0.1, the decision is deny.")
        status, _ = c.receive("orders", "gDenyX")
        assert status.code == d.FORBIDDEN and "Group:gDenyX" in status.message
        status, _ = c.receive("orders", "gA")
        assert status.code != d.FORBIDDEN, status
    with RawClient(broker.grpc_addr, meta=meta(*acl2.SUPER)) as c:
        assert c.send("anywhere", b"x").status.code == d.OK


def test_dashboard_logins_are_acl2_super_users():
    import base64

    from mqcore.acl.v2.model import User, UserStatus, UserType
    from mqcore.acl.v2.store import AuthData, dashboard_accounts
    from mqcore.dashboard.auth import AuthResult, check_basic

    data = AuthData({"root": User("root", "rootPassword1", UserType.SUPER),
                     "off": User("off", "offPassword1", UserType.SUPER, UserStatus.DISABLE),
                     "alice": User("alice", "alicePassword1")})

    def login(user, password):
        return check_basic(dashboard_accounts(data), "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())[0]
    assert login("root", "rootPassword1") is AuthResult.ADMIN
    assert login("root", "wrong") is AuthResult.REFUSED
    assert login("alice", "alicePassword1") is AuthResult.REFUSED  # a Normal user is no admin
    assert login("off", "offPassword1") is AuthResult.REFUSED  # disabled
