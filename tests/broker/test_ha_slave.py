"""mqbroker as a slave (brokerRole=SLAVE) of mqbroker, over RocketMQ 4.9's HA protocol.

Real processes: one name server, a master and a slave mqbroker. The slave finds the master's
HA address in the name server's registration answer, copies its commitlog byte for byte,
builds its consume queues from it, syncs topics, groups and offsets, refuses sends and
serves consumers when the master is stopped; restarted, it resumes from its own end. A slave
whose store holds more than its master's is refused and keeps its files as they were.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os

import pytest

from mqcore.admin.api import MQAdmin
from mqcore.client import Message, Producer, PushConsumer
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.client.integration.helpers import FAST, create_topic
from tests.support.ha_checks import (commitlog_mismatch, consume_all, consume_queue_mismatch, keys_on, max_offsets,
                                     metadata_synced, sample_keys, send_fast)
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.protocol import send
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)

FILE = 1 << 20  # 1 MiB commitlog files: a few thousand messages cross file boundaries
CONF = {"mappedFileSizeCommitLog": str(FILE), "haTransferBatchSize": "8192"}
SLAVE = {**CONF, "brokerId": "1", "brokerRole": "SLAVE"}
TOPIC, GROUP = "HaSlaveTopic", "cg-ha-slave"


def _max_offset(admin: MQAdmin, addr: str) -> int:
    return int(admin.broker_runtime_stats(addr)["commitLogMaxOffset"])


def _commitlog_files(store: str) -> dict[str, bytes]:
    return {os.path.basename(p): open(p, "rb").read() for p in sorted(glob.glob(os.path.join(store, "commitlog", "*")))}


def _broker_logs(b: BrokerProcess) -> str:
    out = []
    for p in glob.glob(os.path.join(b.log_dir, "*")):
        with open(p, errors="replace") as f:
            out.append(f.read())
    return "\n".join(out)


def _body(i: int) -> bytes:
    return b"x" * 30 + str(i).encode()


def _produce(ns: str, n: int, start: int = 0) -> None:
    send_fast(ns, TOPIC, n, start=start, body=_body)


def _call(addr: str, code: int, ext=None, body=b"") -> bytes:
    with SyncRemotingClient() as rc:
        r = rc.invoke(addr, create_request(code, ext, body), 5000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        return bytes(r.body or b"")


@contextlib.contextmanager
def _pair_with_backlog(tmp_path, n: int):
    """A name server, a master and its mqbroker slave; TOPIC and GROUP created on the master and
    ``n`` messages sent; yields (ns, master, slave, admin, the master's commitlog end)."""
    with NamesrvProcess() as ns, \
            BrokerProcess(tmp_path / "m", namesrv=ns.addr, conf=CONF) as master, \
            BrokerProcess(tmp_path / "s", namesrv=ns.addr, conf=SLAVE) as slave, \
            MQAdmin(ns.addr) as admin:
        create_topic(master.broker_addr, ns.addr, TOPIC)
        _call(master.broker_addr, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps({"groupName": GROUP}).encode())
        # one batch, then the rest once the slave holds it: the slave is connected and started
        # from offset 0 (a master starts a slave that has nothing at its last file's start)
        _produce(ns.addr, 200)
        assert wait_for(lambda: _max_offset(admin, slave.broker_addr) == _max_offset(admin, master.broker_addr),
                        timeout=60)
        _produce(ns.addr, n - 200, start=200)
        yield ns, master, slave, admin, _max_offset(admin, master.broker_addr)


def test_mqbroker_follows_mqbroker_and_serves_consumers_when_the_master_is_stopped(tmp_path):
    """100,000 messages (issue 35): the slave's commitlog is the master's byte for byte over the
    replicated range, its consume queues agree unit by unit, a sample of keys is found in both
    indexes, topics, groups and offsets are synced, and a consumer reads all 100,000 from the
    slave with the master stopped."""
    n = 100_000
    with _pair_with_backlog(tmp_path, n) as (ns, master, slave, admin, end):
        _call(master.broker_addr, RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0",
                                                              "commitOffset": "7"})
        assert end > FILE  # the copy crosses a commitlog file
        assert wait_for(lambda: _max_offset(admin, slave.broker_addr) == end, timeout=60)

        # the metadata sync (every 10 s, as Apache's SlaveSynchronize)
        def synced() -> bool:
            return (TOPIC.encode() in _call(slave.broker_addr, RC.GET_ALL_TOPIC_CONFIG)
                    and f"{TOPIC}@{GROUP}".encode() in _call(slave.broker_addr, RC.GET_ALL_CONSUMER_OFFSET)
                    and GROUP.encode() in _call(slave.broker_addr, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        assert wait_for(synced, timeout=30)
        assert metadata_synced(master.broker_addr, slave.broker_addr, TOPIC, GROUP)
        offsets = json.loads(_call(slave.broker_addr, RC.GET_ALL_CONSUMER_OFFSET))["offsetTable"]
        assert offsets[f"{TOPIC}@{GROUP}"]["0"] == 7
        # and saved as the slave's own config files
        assert TOPIC in open(tmp_path / "s" / "config" / "topics.json").read()

        # the slave's consume queues count every message, as the master's do
        counts = max_offsets(master.broker_addr, TOPIC)
        assert sum(counts.values()) == n
        assert wait_for(lambda: max_offsets(slave.broker_addr, TOPIC) == counts, timeout=60)
        # its index: a sample of keys found on both, each naming its one message
        sample = sample_keys(n)
        want = {i: [_body(i)] for i in sample}
        assert keys_on(master.broker_addr, TOPIC, sample) == want
        assert wait_for(lambda: keys_on(slave.broker_addr, TOPIC, sample) == want, timeout=30)

        # a slave refuses sends, as Apache's does
        with SyncRemotingClient() as rc:
            r = send(rc, slave, TOPIC)
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "slave" in r.remark, (r.code, r.remark)
        route = admin.topic_route(TOPIC)
        assert sorted(route.broker_datas[0].broker_addrs) == [0, 1]

        master.stop()
        got = consume_all(ns.addr, TOPIC, "cg-ha-reader", n, timeout=90, **FAST)
        assert len(got) == n and got == {_body(i) for i in range(n)}, len(got)
        # the index too: a key lookup on the slave
        assert [m.body for m in admin.query_msg_by_key(TOPIC, "k1234")] == [_body(1234)]

        # restarted in the middle: resumes from its own end
        slave.stop()
        copied = _commitlog_files(str(tmp_path / "s"))
        assert copied == _commitlog_files(str(tmp_path / "m"))  # byte for byte, every file
        assert commitlog_mismatch(tmp_path / "m", tmp_path / "s", FILE, end) is None
        master.start()
        _produce(ns.addr, 500, start=n)
        slave.start()
        resumed_at, end = end, _max_offset(admin, master.broker_addr)
        assert wait_for(lambda: _max_offset(admin, slave.broker_addr) == end, timeout=60)
        assert f"following master 127.0.0.1:" in _broker_logs(slave)
        assert f"from offset {resumed_at}" in _broker_logs(slave)
        counts = max_offsets(master.broker_addr, TOPIC)
        assert wait_for(lambda: max_offsets(slave.broker_addr, TOPIC) == counts, timeout=60)
        master.stop()
        slave.stop()
    assert _commitlog_files(str(tmp_path / "s")) == _commitlog_files(str(tmp_path / "m"))
    assert commitlog_mismatch(tmp_path / "m", tmp_path / "s", FILE, end) is None
    # both stopped (flushed): the consume queues agree unit by unit
    assert sum(counts.values()) == n + 500
    assert consume_queue_mismatch(tmp_path / "m", tmp_path / "s", TOPIC, counts) is None


def test_a_slave_whose_store_is_ahead_of_its_master_is_refused_and_keeps_its_files(tmp_path):
    with NamesrvProcess() as ns:
        # a store with 400 messages, made by a broker on its own ...
        with BrokerProcess(tmp_path / "s", namesrv=ns.addr, conf=CONF):
            create_topic_and_produce(ns.addr, 400)
        before = {k: hashlib.sha256(v).hexdigest() for k, v in _commitlog_files(str(tmp_path / "s")).items()}
        # ... becomes the slave of a master with 10
        with BrokerProcess(tmp_path / "m", namesrv=ns.addr, conf=CONF) as master, MQAdmin(ns.addr) as admin:
            create_topic_and_produce(ns.addr, 10)
            mine = None
            with BrokerProcess(tmp_path / "s", namesrv=ns.addr, conf=SLAVE) as slave:
                mine = _max_offset(admin, slave.broker_addr)
                assert mine > _max_offset(admin, master.broker_addr)
                assert wait_for(lambda: "diverge" in _broker_logs(slave), timeout=30)
                logs = _broker_logs(slave)
                assert f"this slave's commitlog ends at offset {mine}" in logs
                assert "Nothing was overwritten" in logs
                assert _max_offset(admin, slave.broker_addr) == mine
        after = {k: hashlib.sha256(v).hexdigest() for k, v in _commitlog_files(str(tmp_path / "s")).items()}
        assert after == before


def create_topic_and_produce(ns: str, n: int) -> None:
    with Producer("pg-ha", namesrv_addr=ns) as p:
        for i in range(n):
            p.send(Message(TOPIC, b"y" * 200))


def test_a_running_consumer_carries_on_from_the_slave_when_the_master_dies(tmp_path):
    """A push consumer in the middle of a backlog when its master is killed (SIGKILL): it goes on
    pulling from the slave (the route then names only brokerId 1, as Apache's clients read it)
    and gets every message, duplicates allowed, none lost."""
    import threading
    import time

    n = 1500
    got: list[bytes] = []
    lock = threading.Lock()

    def slow(msgs, _ctx):  # ~3 s for the backlog: the master dies a third of the way through
        time.sleep(0.002 * len(msgs))
        with lock:
            got.extend(m.body for m in msgs)

    with _pair_with_backlog(tmp_path, n) as (ns, master, slave, admin, end):
        assert wait_for(lambda: _max_offset(admin, slave.broker_addr) == end, timeout=60)
        assert wait_for(lambda: TOPIC.encode() in _call(slave.broker_addr, RC.GET_ALL_TOPIC_CONFIG), timeout=30)
        c = PushConsumer(GROUP, namesrv_addr=ns.addr, **dict(FAST, consume_from_where="first",
                                                              consume_message_batch_max_size=8))
        c.subscribe(TOPIC)
        c.register_listener(slow)
        with c:
            assert wait_for(lambda: len(got) >= n // 3, timeout=60), len(got)
            master.kill9()
            before = len(got)
            assert before < n  # the rest can only come from the slave
            assert wait_for(lambda: len(set(got)) == n, timeout=90), (len(set(got)), n)
        assert set(got) == {_body(i) for i in range(n)}
