"""An Apache RocketMQ 4.9.7 broker as the SLAVE of mqbroker (RocketMQ 4.9's HA protocol, the slave
pointed at mqbroker's HA port with ``haMasterAddress``): the commitlog it receives is mqbroker's,
byte for byte, and it builds its own consume queues from it (its max offsets count every
message sent to the master)."""
from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.admin import MQAdmin
from mqcore.client import Message, Producer
from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request
from tests.support.processes import BrokerProcess
from tests.support.reference import JavaBroker, free_port_block
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

FILE = 16 * 1024 * 1024  # the Java test broker's commitlog file size: the geometries must match
N = 2000


def _bytes(commitlog: Path, n: int) -> bytes:
    """The first ``n`` bytes of a commitlog (one file here)."""
    with open(commitlog / f"{0:020d}", "rb") as f:
        return f.read(n)


@pytest.mark.parametrize("found_by", ["haMasterAddress", "name server"])
def test_an_apache_slave_follows_mqbroker(tmp_path, found_by):
    ha_port = free_port_block(1)
    with BrokerProcess(tmp_path / "master", broker_name="broker-ha",
                       conf={"mappedFileSizeCommitLog": FILE, "haListenPort": ha_port,
                             "flushDiskType": "ASYNC_FLUSH"}) as master:
        topic = "HaTopic"
        with MQAdmin(master.namesrv_addr) as admin:
            admin.create_group(master.broker_addr, "ha-synced-cg")
        with Producer("ha-pg", namesrv_addr=master.namesrv_addr) as p:
            sent = [p.send(Message(topic, f"ha-{i}".encode(), keys=[f"k{i}"])) for i in range(N)]
        assert all(r.ok for r in sent)
        # every byte of the master's one file, the zeros past its last record included (the
        # slave's file is as long and holds exactly what was replicated)
        end = FILE
        slave_conf: dict = {"brokerId": 1, "brokerRole": "SLAVE"}
        if found_by == "haMasterAddress":
            slave_conf["haMasterAddress"] = f"127.0.0.1:{ha_port}"
        # else the registration answer of mqbroker's name server names the master and its HA address
        with JavaBroker(tmp_path / "slave", master.namesrv_addr, broker_name="broker-ha", conf=slave_conf) as slave:
            master_cl = Path(master.store_dir) / "commitlog"
            slave_cl = Path(slave.store_dir) / "commitlog"

            def replicated() -> bool:
                f = slave_cl / f"{0:020d}"
                return f.exists() and _bytes(slave_cl, end) == _bytes(master_cl, end)
            assert wait_for(replicated, timeout=120), "the slave's commitlog never matched the master's"
            # the slave built its consume queues from what it received: its max offsets count every message
            with SyncRemotingClient() as rc:
                def queued() -> int:
                    total = 0
                    for q in range(4):
                        r = rc.invoke(slave.addr, create_request(RequestCode.GET_MAX_OFFSET,
                                                                 {"topic": topic, "queueId": str(q)}), 5000)
                        assert r.code == ResponseCode.SUCCESS, r
                        total += int(r.ext_fields["offset"])
                    return total
                assert wait_for(lambda: queued() == N, timeout=60), queued()
                if found_by == "name server":
                    # it knows the master from the name server, so it syncs the master's metadata
                    # (SlaveSynchronize, every 10 s): the subscription groups here. (Topic configs it
                    # asks for on the master's VIP port, listenPort - 2, which mqbroker does not serve.)
                    def slave_groups() -> str:
                        r = rc.invoke(slave.addr, create_request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 5000)
                        return bytes(r.body or b"").decode()
                    assert wait_for(lambda: '"ha-synced-cg"' in slave_groups(), timeout=60), slave_groups()[:2000]
