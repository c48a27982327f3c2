"""ACL 2.0 against Apache RocketMQ 5.3.3: the decision table of tests/support/acl2.py on a 5.3.3
broker (the same users and rules, created with the same AUTH_* requests, the same signed requests),
and Apache 5.3.3's mqadmin managing mqbroker's users and rules (createUser, createAcl, getUser,
getAcl, listUser, listAcl) with a client signed as the new user then allowed or refused by them."""
from __future__ import annotations

import json

import pytest

from mqcore.client import Message, Producer
from mqcore.errors import MQError
from mqcore.remoting import SyncRemotingClient
from tests.support import acl2
from tests.support.processes import BrokerProcess
from tests.support.reference5 import Java5Broker, Java5Namesrv, mqadmin5_batch
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)


def test_apache_533_decides_the_table_as_recorded(tmp_path):
    with Java5Namesrv(tmp_path / "ns") as ns, Java5Broker(tmp_path / "b", ns.addr, conf=dict(acl2.CONF)) as b:
        with SyncRemotingClient() as rc:
            acl2.setup(rc, b.broker_addr)
            got = acl2.decisions(rc, b.broker_addr)
    for name, (allowed, code, remark) in got.items():
        print(f"{name}: {'ALLOW' if allowed else 'DENY'} {code} {remark}")
    expected = {name: acl2.APACHE.get(name, case[4]) for name, case in acl2.CASES.items()}
    wrong = {name: got[name] for name in acl2.CASES if got[name][0] != expected[name]}
    assert not wrong, wrong


TOOLS_YML = f"accessKey: {acl2.SUPER[0]}\nsecretKey: {acl2.SUPER[1]}\n"


def test_apache_mqadmin_manages_mqbroker_users_and_acls(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=dict(acl2.CONF)) as b:
        addr, ns = b.broker_addr, b.namesrv_addr
        out = mqadmin5_batch([
            ["createUser", "-n", ns, "-b", addr, "-u", "zoe", "-p", "zoePassword1", "-t", "Normal"],
            ["createAcl", "-n", ns, "-b", addr, "-s", "User:zoe", "-r", "Topic:zoe*,Group:zoeGroup",
             "-a", "Pub,Sub", "-d", "Allow", "-i", "127.0.0.1"],
            ["createAcl", "-n", ns, "-b", addr, "-s", "User:zoe", "-r", "Topic:zoeSecret", "-a", "Pub", "-d", "Deny"],
            ["getUser", "-n", ns, "-b", addr, "-u", "zoe"],
            ["listUser", "-n", ns, "-b", addr],
            ["getAcl", "-n", ns, "-b", addr, "-s", "User:zoe"],
            ["listAcl", "-n", ns, "-b", addr],
        ], home=tmp_path, tools_yml=TOOLS_YML)
        for text in out:
            print(text)
        assert f"create user to {addr} success." in out[0], out[0]
        assert f"create acl to {addr} success." in out[1] and f"create acl to {addr} success." in out[2], out[1:3]
        assert "zoe" in out[3] and "Normal" in out[3] and "zoePassword1" in out[3], out[3]
        assert "zoe" in out[4] and acl2.SUPER[0] in out[4], out[4]
        for text in out[5:7]:
            assert "User:zoe" in text and "Topic:zoe*" in text and "Topic:zoeSecret" in text and "Deny" in text, text
        # what mqadmin wrote is what mqbroker decides by
        with open(tmp_path / "store" / "config" / "auth.json") as f:
            stored = json.load(f)
        assert {"username": "zoe", "password": "zoePassword1", "userType": "Normal", "userStatus": "enable"} \
            in stored["users"]
        p = Producer("zoeGroup", namesrv_addr=ns, retry_times_when_send_failed=0, access_key="zoe",
                     secret_key="zoePassword1").start()
        try:
            assert wait_for(lambda: p.send(Message("zoeOrders", b"allowed")).status.name == "SEND_OK", timeout=15)
            for topic, why in (("zoeSecret", "the decision is deny."), ("orders", "no matched policies.")):
                with pytest.raises(MQError) as info:
                    p.send(Message(topic, b"refused"))
                assert f"User:zoe has no permission to access Topic:{topic} from 127.0.0.1, {why}" in str(info.value)
        finally:
            p.shutdown()
        # a refusal reaches mqadmin as Apache's tool shows it: zoe is no super user
        out = mqadmin5_batch([["createUser", "-n", ns, "-b", addr, "-u", "yan", "-p", "yanPassword1"]],
                             home=tmp_path, tools_yml="accessKey: zoe\nsecretKey: zoePassword1\n")
        print(out[0])
        assert "success" not in out[0] and "no permission to access Cluster:" in out[0], out[0]
