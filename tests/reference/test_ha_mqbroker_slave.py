"""mqbroker as the SLAVE of an Apache RocketMQ 4.9.7 master (RocketMQ 4.9's HA protocol): the
slave finds the master's HA address in the name server's registration answer, its commitlog
is the master's byte for byte, it builds its consume queues from it (their max offsets count
every message) and agree with the master's unit by unit, its index finds a sample of keys as the
master's does, it syncs the master's topics, groups and consumer offsets (SlaveSynchronize), and
with the master stopped it serves every message to pulls and to a push consumer. 100,000
messages (issue 35), sent in batches."""
from __future__ import annotations

from pathlib import Path

import pytest

from mqcore.admin import MQAdmin
from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request
from tests.support.ha_checks import (body_of, commitlog_end, commitlog_mismatch, consume_all, consume_queue_mismatch,
                                     keys_on, max_offsets, metadata_synced, sample_keys, send_fast)
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.protocol import decode, pull
from tests.support.reference import JavaBroker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

FILE = 16 * 1024 * 1024  # the Java test broker's commitlog file size: the geometries must match
N = 100_000
QUEUES = 4


def test_mqbroker_follows_an_apache_master(tmp_path):
    topic, group = "HaFromJava", "ha-java-cg"
    with NamesrvProcess() as ns, \
            JavaBroker(tmp_path / "master", ns.addr, broker_name="broker-ha") as master, \
            MQAdmin(ns.addr) as admin:
        admin.create_topic(master.addr, topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        admin.create_group(master.addr, group)
        # the slave joins before the backlog: Apache's master starts a slave that has nothing at
        # the start of its last commitlog file, so a slave joining after 100,000 messages (two
        # 16 MiB files) would get only the second
        with BrokerProcess(tmp_path / "slave", namesrv=ns.addr, broker_name="broker-ha",
                           conf={"mappedFileSizeCommitLog": FILE, "brokerId": 1, "brokerRole": "SLAVE"}) as slave:
            # one batch, then the rest once the slave holds it: the slave is connected and
            # started from offset 0 (it connects a few seconds after it boots)
            send_fast(ns.addr, topic, 200)
            assert wait_for(lambda: commitlog_end(admin, slave.broker_addr) == commitlog_end(admin, master.addr) > 0,
                            timeout=60)
            send_fast(ns.addr, topic, N - 200, start=200)
            with SyncRemotingClient() as rc:
                r = rc.invoke(master.addr, create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": group, "topic": topic, "queueId": "1", "commitOffset": "11"}), 5000)
                assert r.code == ResponseCode.SUCCESS, r
            end = commitlog_end(admin, master.addr)
            assert wait_for(lambda: commitlog_end(admin, slave.broker_addr) == end, timeout=120)
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
                assert wait_for(lambda: metadata_synced(master.addr, slave.broker_addr, topic, group), timeout=30)
                counts = max_offsets(master.addr, topic, QUEUES)
                assert sum(counts.values()) == N
                # the index: a sample of keys found on both, each naming its one message
                sample = sample_keys(N)
                want = {i: [body_of(i)] for i in sample}
                assert keys_on(master.addr, topic, sample) == want
                assert wait_for(lambda: keys_on(slave.broker_addr, topic, sample) == want, timeout=30)

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
                assert bodies == {body_of(i) for i in range(N)}
            # and a push consumer, routed to the slave by the name server
            got = consume_all(ns.addr, topic, "ha-java-reader", N, timeout=90,
                              rebalance_interval_ms=1000, poll_name_server_interval_ms=1000)
            assert len(got) == N and got == bodies, len(got)
        # both stopped (flushed): the slave's file is the master's, byte for byte (zeros past the end included)
    master_file = Path(master.store_dir) / "commitlog" / f"{0:020d}"
    slave_file = tmp_path / "slave" / "commitlog" / f"{0:020d}"
    assert slave_file.read_bytes() == master_file.read_bytes()
    assert end > FILE  # the copy crosses a commitlog file
    assert commitlog_mismatch(master.store_dir, tmp_path / "slave", FILE, end) is None
    assert consume_queue_mismatch(master.store_dir, tmp_path / "slave", topic, counts) is None
