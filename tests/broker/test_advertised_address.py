"""brokerIP1 differs from listenHost (a NAT or container address) with the embedded name
server: the broker registers over loopback, advertises brokerIP1, and READY names
addresses where something listens (issue 11)."""
from __future__ import annotations

import socket

import pytest

from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from mqcore.remoting.headers import GetRouteInfoRequestHeader
from mqcore.jsonutil import loads_lenient
from tests.support.processes import BrokerProcess

pytestmark = pytest.mark.timeout(120)

ADVERTISED = "10.255.255.1"  # not an address of this machine: nothing listens there


def listens(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(2)
        return s.connect_ex((host, int(port))) == 0


def test_registers_locally_and_advertises_broker_ip1(tmp_path):
    conf = {"brokerIP1": ADVERTISED, "listenHost": "127.0.0.1"}
    with BrokerProcess(tmp_path / "store", conf=conf) as b, SyncRemotingClient() as rc:
        assert listens(b.broker_addr) and listens(b.namesrv_addr)
        assert b.namesrv_addr.startswith("127.0.0.1:") and b.broker_addr.startswith("127.0.0.1:")
        assert b.advertised_addr == f"{ADVERTISED}:{b.broker_addr.rsplit(':', 1)[1]}"
        r = rc.invoke(b.namesrv_addr, create_request(RC.GET_ROUTEINFO_BY_TOPIC,
                                                     GetRouteInfoRequestHeader(topic="TBW102").to_ext()), 5000)
        assert r.code == ResponseCode.SUCCESS, r.remark  # the registration reached the name server
        [bd] = loads_lenient(r.body)["brokerDatas"]
        assert bd["brokerAddrs"] == {"0": b.advertised_addr}


def test_every_address_without_acl_is_warned_and_the_bound_address_printed(tmp_path):
    """listenHost=0.0.0.0 with the ACL off serves anyone who reaches the machine: the start says
    so, and names the address it bound (not the loopback address it reaches itself on)."""
    with BrokerProcess(tmp_path / "store", conf={"listenHost": "0.0.0.0"}) as b:
        out = b.output()
        port = b.broker_addr.rsplit(":", 1)[1]
        assert f"listening on 0.0.0.0:{port} (every address)" in out, out
        assert "WARNING: listening on 0.0.0.0 with aclEnable=false" in out, out
    with BrokerProcess(tmp_path / "store2", conf={"listenHost": "127.0.0.1"}) as b:
        assert "WARNING" not in b.output() and "listening on 127.0.0.1:" in b.output()
