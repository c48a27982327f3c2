"""mqbroker as the SLAVE of an Apache RocketMQ 4.9.7 master (RocketMQ 4.9's HA protocol): the
slave finds the master's HA address in the name server's registration answer, its commitlog
is the master's byte for byte, it builds its consume queues from it (their max offsets count
every message), it syncs the master's topics and groups (SlaveSynchronize), and with the master
stopped it serves every message to pulls."""
from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.admin import MQAdmin
from mqcore.client import Message, Producer
from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.protocol import decode, pull
from tests.support.reference import JavaBroker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

FILE = 16 * 1024 * 1024  # the Java test broker's commitlog file size: the geometries must match
N = 2000
QUEUES = 4


def test_mqbroker_follows_an_apache_master(tmp_path):
    topic, group = "HaFromJava", "ha-java-cg"
    with NamesrvProcess() as ns, \
            JavaBroker(tmp_path / "master", ns.addr, broker_name="broker-ha") as master, \
            MQAdmin(ns.addr) as admin:
        admin.create_topic(master.addr, topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        admin.create_group(master.addr, group)
        with Producer("ha-pg", namesrv_addr=ns.addr) as p:
            sent = [p.send(Message(topic, f"ha-{i}".encode(), keys=[f"k{i}"])) for i in range(N)]
        assert all(r.ok for r in sent)
        end = int(admin.broker_runtime_stats(master.addr)["commitLogMaxOffset"])
        with BrokerProcess(tmp_path / "slave", namesrv=ns.addr, broker_name="broker-ha",
                           conf={"mappedFileSizeCommitLog": FILE, "brokerId": 1, "brokerRole": "SLAVE"}) as slave:
            assert wait_for(lambda: int(admin.broker_runtime_stats(slave.broker_addr)["commitLogMaxOffset"]) == end,
                            timeout=120)
            with SyncRemotingClient() as rc:
                def queued() -> int:
                    total = 0
                    for q in range(QUEUES):
                        r = rc.invoke(slave.broker_addr, create_request(RequestCode.GET_MAX_OFFSET,
                                                                        {"topic": topic, "queueId": str(q)}), 5000)
                        total += int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else 0
                    return total
                assert wait_for(lambda: queued() == N, timeout=60), queued()

                def synced() -> bool:
                    topics = rc.invoke(slave.broker_addr, create_request(RequestCode.GET_ALL_TOPIC_CONFIG), 5000)
                    groups = rc.invoke(slave.broker_addr,
                                       create_request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG), 5000)
                    return topic.encode() in bytes(topics.body or b"") and group.encode() in bytes(groups.body or b"")
                assert wait_for(synced, timeout=30)

                master.stop()  # the slave alone serves what it copied
                bodies = set()
                for q in range(QUEUES):
                    offset = 0
                    while True:
                        r = pull(rc, slave, topic, offset, queue_id=q)
                        if r.code != ResponseCode.SUCCESS:
                            break
                        got = decode(bytes(r.body))
                        bodies.update(m.body for m in got)
                        offset = int(r.ext_fields["nextBeginOffset"])
                assert bodies == {f"ha-{i}".encode() for i in range(N)}
        # both stopped (flushed): the slave's file is the master's, byte for byte (zeros past the end included)
    master_file = Path(master.store_dir) / "commitlog" / f"{0:020d}"
    slave_file = tmp_path / "slave" / "commitlog" / f"{0:020d}"
    assert slave_file.read_bytes() == master_file.read_bytes()
