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
