"""A store written as a slave opens as the master (the last step of a switch-over, docs/migration.md
"Moving without downtime"): mqbroker follows an mqbroker master, the master is made read-only and
stopped, and the slave restarted on its store with brokerId=0 serves what it copied (from the
start of the master's last commitlog file, as Apache's slave copies). Its consume queues begin
there, end where the master's did (new sends get the next queue offsets), the topic, group and
committed offsets the slave sync wrote to config/*.json are the master's, and a consumer of that
group resumes at its committed offset: it gets only what it had not consumed, plus what is sent
after the switch and a delay message that was still waiting. Then the same with traffic running across the whole switch."""
from __future__ import annotations

import contextlib
import json
import time

import pytest

from mqcore.admin import MQAdmin
from mqcore.client import Message, Producer, PushConsumer
from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request
from tests.client.integration.helpers import FAST, Sink, create_topic
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.switchover import SwitchTraffic, caught_up, switch_over, switch_report
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)

FILE = 1 << 20  # 1 MiB commitlog files: N messages fill one and go on in a second
NAME, TOPIC, GROUP, BEHIND = "broker-move", "MoveTopic", "move-cg", "behind-cg"
SLAVE = {"mappedFileSizeCommitLog": FILE, "brokerId": 1, "brokerRole": "SLAVE"}
MASTER = {"mappedFileSizeCommitLog": FILE, "brokerId": 0, "brokerRole": "ASYNC_MASTER"}
N, COMMITTED = 4000, 2500


def _send(ns: str, n: int, start: int) -> list:
    with Producer("move-pg", namesrv_addr=ns) as p:
        return [p.send(Message(TOPIC, b"m" * 300 + str(i).encode())) for i in range(start, start + n)]


def _ask(addr: str, code: int, queue: int, **ext: str) -> int:
    with SyncRemotingClient() as rc:
        r = rc.invoke(addr, create_request(code, {"topic": TOPIC, "queueId": str(queue), **ext}), 5000)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return int(r.ext_fields["offset"])


@pytest.mark.parametrize("slave_end", ["stopped", "killed"])
def test_a_store_written_as_a_slave_opens_as_the_master(tmp_path, slave_end):
    """``killed``: the slave is killed (SIGKILL) instead of stopped: the master it becomes
    recovers the store as after a crash."""
    with NamesrvProcess() as ns, MQAdmin(ns.addr) as admin, contextlib.ExitStack() as stack:
        old = stack.enter_context(BrokerProcess(tmp_path / "old", namesrv=ns.addr, broker_name=NAME, conf=MASTER))
        create_topic(old.broker_addr, ns.addr, TOPIC)
        admin.create_group(old.broker_addr, GROUP)
        sent = _send(ns.addr, N, 0)
        assert all(r.ok for r in sent)
        # the group committed the first COMMITTED messages (by queue offset, per queue)
        committed: dict[int, int] = {}
        for r in sent[:COMMITTED]:
            q = r.message_queue.queue_id
            committed[q] = max(committed.get(q, 0), r.queue_offset + 1)
        # ... and BEHIND only the first message of each queue
        admin.create_group(old.broker_addr, BEHIND)
        with SyncRemotingClient() as rc:
            for group, offs in ((GROUP, committed), (BEHIND, dict.fromkeys(committed, 1))):
                for q, off in offs.items():
                    r = rc.invoke(old.broker_addr, create_request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                        "consumerGroup": group, "topic": TOPIC, "queueId": str(q), "commitOffset": str(off)}),
                        5000)
                    assert r.code == ResponseCode.SUCCESS, r.remark
        ends = {q: max(r.queue_offset for r in sent if r.message_queue.queue_id == q) + 1 for q in committed}

        # a delay message still waiting at the switch (level 3: 10 s): the new master delivers it
        with Producer("move-delay-pg", namesrv_addr=ns.addr) as p:
            assert p.send(Message(TOPIC, b"delayed", delay_level=3)).ok

        new = stack.enter_context(BrokerProcess(tmp_path / "new", namesrv=ns.addr, broker_name=NAME, conf=SLAVE))
        admin.update_broker_config(old.broker_addr, {"brokerPermission": "4"})
        assert caught_up(admin, old.broker_addr, new.broker_addr, TOPIC, GROUP, exact=True)
        old.stop()
        if slave_end == "killed":
            new.kill9()
        else:
            new.stop()
        # an empty slave copies from the start of the master's last commitlog file, as Apache's does
        old_files = sorted(p.name for p in (tmp_path / "old" / "commitlog").iterdir())
        assert len(old_files) == 2
        assert sorted(p.name for p in (tmp_path / "new" / "commitlog").iterdir()) == old_files[1:]
        # what the slave's sync wrote is the master's: the topic, the group, the committed offsets
        cfg = tmp_path / "new" / "config"
        assert json.loads((cfg / "topics.json").read_text())["topicConfigTable"][TOPIC]["writeQueueNums"] == 4
        assert GROUP in json.loads((cfg / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
        offsets = json.loads((cfg / "consumerOffset.json").read_text())["offsetTable"][f"{TOPIC}@{GROUP}"]
        assert {int(q): o for q, o in offsets.items()} == committed

        new.conf.update(MASTER)
        new.start()
        promoted_ms = int(time.time() * 1000)
        assert wait_for(lambda: [b.broker_addrs for b in admin.topic_route(TOPIC).broker_datas]
                        == [{0: new.broker_addr}], timeout=30)
        assert {q: _ask(new.broker_addr, RequestCode.QUERY_CONSUMER_OFFSET, q, consumerGroup=GROUP)
                for q in committed} == committed
        assert {q: _ask(new.broker_addr, RequestCode.GET_MAX_OFFSET, q) for q in ends} == ends
        # its queues begin where the copy began: the group's committed offsets lie past that
        firsts = {q: _ask(new.broker_addr, RequestCode.GET_MIN_OFFSET, q) for q in ends}
        assert all(0 < firsts[q] < committed[q] for q in ends), (firsts, committed)
        # the queues go on where the master's ended
        after = _send(ns.addr, 100, N)
        assert all(r.ok for r in after)
        for q in ends:
            assert sorted(r.queue_offset for r in after if r.message_queue.queue_id == q) == \
                list(range(ends[q], ends[q] + sum(r.message_queue.queue_id == q for r in after)))
        # a consumer of the group resumes at its committed offsets (first = only for a group without any)
        sink = Sink()
        c = PushConsumer(GROUP, namesrv_addr=ns.addr, **dict(FAST, consume_from_where="first"))
        c.subscribe(TOPIC)
        c.register_listener(sink)
        with c:
            assert wait_for(lambda: len(sink) >= N - COMMITTED + 101, timeout=60), len(sink)
            assert not wait_for(lambda: len(sink) > N - COMMITTED + 101, timeout=2)
        expected = {b"m" * 300 + str(i).encode() for i in range(COMMITTED, N + 100)} | {b"delayed"}
        assert sorted(m.body for m in sink.msgs) == sorted(expected)
        # delivered (written to the topic) by the new master, after its start (the delivered copy
        # keeps the original's store host, as Apache's does)
        assert [m.store_timestamp >= promoted_ms for m in sink.msgs if m.body == b"delayed"] == [True]
        # a group behind the copy's start moves to the new master's first offsets (OFFSET_ILLEGAL
        # corrected, as against any RocketMQ broker whose old files were deleted)
        behind = Sink()
        c = PushConsumer(BEHIND, namesrv_addr=ns.addr, **dict(FAST, consume_from_where="first"))
        c.subscribe(TOPIC)
        c.register_listener(behind)
        copied = sum(ends[q] - firsts[q] for q in ends) + 100 + 1
        with c:
            assert wait_for(lambda: len(behind) >= copied, timeout=60), (len(behind), copied)
            assert not wait_for(lambda: len(behind) > copied, timeout=2)
        assert {q: min(m.queue_offset for m in behind.msgs if m.queue_id == q) for q in ends} == firsts


@pytest.mark.parametrize("clients", ["fast", "defaults", "fast-app-retry"])
def test_traffic_across_a_switch_between_mqbrokers(tmp_path, clients):
    """``fast``: clients polling the name server every second; ``defaults``: every 30 s (RocketMQ's
    default), so they keep sending to the old address until their next poll; ``fast-app-retry``:
    the application retries failed sends with a back-off, and none is given up on."""
    with NamesrvProcess() as ns, MQAdmin(ns.addr) as admin, contextlib.ExitStack() as stack:
        old = stack.enter_context(BrokerProcess(tmp_path / "old", namesrv=ns.addr, broker_name=NAME, conf=MASTER))
        create_topic(old.broker_addr, ns.addr, TOPIC)
        admin.create_group(old.broker_addr, GROUP)
        t = stack.enter_context(SwitchTraffic(ns.addr, TOPIC, GROUP, fast_clients=clients.startswith("fast"),
                                              app_retry=clients.endswith("app-retry")))
        assert t.wait_acked(800), t.report()
        new = stack.enter_context(BrokerProcess(tmp_path / "new", namesrv=ns.addr, broker_name=NAME, conf=SLAVE))
        assert caught_up(admin, old.broker_addr, new.broker_addr, TOPIC, GROUP), t.report()
        acked = switch_over(admin, t, old, old.broker_addr, new, new.broker_addr, TOPIC, GROUP)
        assert t.wait_acked(acked + 800, timeout=120), t.report()
        t.stop_sending()
        assert t.wait_consumed_all(120), t.report()
        assert t.duplicates() <= acked // 10, t.report()
        assert 0 < t.refused_window_s() < (10 if clients.startswith("fast") else 45), t.report()
        if t.app_retry:  # every message sent until acknowledged: sw-0, sw-1, ... with no gap
            assert t.acked == [f"sw-{i}".encode() for i in range(len(t.acked))]
        print(switch_report(t))
        t.close()
        assert wait_for(lambda: admin.consume_stats(GROUP, TOPIC).diff_total == 0, timeout=30)
