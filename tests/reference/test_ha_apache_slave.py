"""An Apache RocketMQ 4.9.7 broker as the SLAVE of mqbroker (RocketMQ 4.9's HA protocol, the slave
pointed at mqbroker's HA port with ``haMasterAddress`` or told it by the name server): 100,000
messages (issue 35, sent in batches), then the commitlog it received is mqbroker's byte for
byte, its consume queues (built from it) agree with mqbroker's unit by unit, its index finds a
sample of keys as mqbroker's does, it synced the topic, the group and its consumer offsets
(SlaveSynchronize), and with mqbroker stopped a consumer reads all 100,000 from it."""
from __future__ import annotations

import pytest

from mqcore.admin import MQAdmin
from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request
from tests.support.ha_checks import (body_of, commitlog_end, commitlog_mismatch, consume_all, consume_queue_mismatch,
                                     keys_on, max_offsets, metadata_synced, sample_keys, send_fast)
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.reference import JavaBroker, free_port_block
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

FILE = 16 * 1024 * 1024  # the Java test broker's commitlog file size: the geometries must match
N = 100_000


@pytest.mark.parametrize("found_by", ["haMasterAddress", "name server"])
def test_an_apache_slave_follows_mqbroker(tmp_path, found_by):
    # a known listen port: mqbroker then serves listenPort - 2 too, the VIP port Apache's slave
    # asks for topic configs on; the HA port is listenPort + 1
    port = free_port_block(2)
    topic, group = "HaTopic", "ha-synced-cg"
    with NamesrvProcess() as ns, \
            BrokerProcess(tmp_path / "master", namesrv=ns.addr, broker_name="broker-ha", listen_port=port,
                          conf={"mappedFileSizeCommitLog": FILE, "haListenPort": port + 1,
                                "flushDiskType": "ASYNC_FLUSH"}) as master, \
            MQAdmin(ns.addr) as admin:
        admin.create_topic(master.broker_addr, topic, read_queue_nums=4, write_queue_nums=4)
        admin.create_group(master.broker_addr, group)
        slave_conf: dict = {"brokerId": 1, "brokerRole": "SLAVE"}
        if found_by == "haMasterAddress":
            slave_conf["haMasterAddress"] = f"127.0.0.1:{port + 1}"
        # else the registration answer of the name server names the master and its HA address.
        # The slave joins before the backlog: a master starts a slave that has nothing at the
        # start of its last commitlog file (Apache's rule, which mqbroker keeps)
        with JavaBroker(tmp_path / "slave", ns.addr, broker_name="broker-ha", conf=slave_conf) as slave:
            # one batch, then the rest once the slave holds it: the slave is connected and
            # started from offset 0 (it connects a few seconds after it boots)
            send_fast(ns.addr, topic, 200)
            assert wait_for(lambda: commitlog_end(admin, slave.addr) == commitlog_end(admin, master.broker_addr) > 0,
                            timeout=60)
            send_fast(ns.addr, topic, N - 200, start=200)
            with SyncRemotingClient() as rc:
                r = rc.invoke(master.broker_addr, create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": group, "topic": topic, "queueId": "2", "commitOffset": "13"}), 5000)
                assert r.code == ResponseCode.SUCCESS, r
            end = commitlog_end(admin, master.broker_addr)
            assert end > FILE  # the copy crosses a commitlog file
            assert wait_for(lambda: commitlog_end(admin, slave.addr) == end, timeout=120), \
                (commitlog_end(admin, slave.addr), end)
            # every byte of the files replicated into, the zeros past the last record included
            # (the slave's last file is as long and holds exactly what was replicated)
            whole = end - end % FILE + FILE
            assert wait_for(lambda: commitlog_mismatch(master.store_dir, slave.store_dir, FILE, whole) is None,
                            timeout=30), commitlog_mismatch(master.store_dir, slave.store_dir, FILE, whole)
            # the slave built its consume queues from what it received: its max offsets are the master's
            counts = max_offsets(master.broker_addr, topic)
            assert sum(counts.values()) == N
            assert wait_for(lambda: max_offsets(slave.addr, topic) == counts, timeout=60), \
                max_offsets(slave.addr, topic)
            # its index: a sample of keys found on both, each naming its one message
            sample = sample_keys(N)
            want = {i: [body_of(i)] for i in sample}
            assert keys_on(master.broker_addr, topic, sample) == want
            assert wait_for(lambda: keys_on(slave.addr, topic, sample) == want, timeout=30)
            # the master's metadata (SlaveSynchronize, every 10 s): topics (asked for on the VIP
            # port), subscription groups and consumer offsets
            assert wait_for(lambda: metadata_synced(master.broker_addr, slave.addr, topic, group), timeout=60)

            master.stop()  # the slave alone serves what it copied
            got = consume_all(ns.addr, topic, "ha-apache-reader", N, timeout=90, rebalance_interval_ms=1000,
                              poll_name_server_interval_ms=1000)
            assert len(got) == N and got == {body_of(i) for i in range(N)}, len(got)
    # both stopped (flushed): the consume queues agree unit by unit
    assert consume_queue_mismatch(master.store_dir, slave.store_dir, topic, counts) is None
