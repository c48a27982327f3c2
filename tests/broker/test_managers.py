"""Unit tests of the broker's managers: topics, groups and offsets, clients and locks, long polling.

Real files in a temp dir, an injected ``ManualClock``, a real asyncio loop; no broker
process, so each rule is checked directly.
"""
from __future__ import annotations

import asyncio
import json
import threading

import pytest

from mqcore.broker.clients import ClientManager, RebalanceLockManager
from mqcore.broker.config import BrokerConfig
from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
from mqcore.broker.long_polling import PullRequestHoldService
from mqcore.broker.metadata import TopicConfig
from mqcore.broker.topics import TopicConfigManager, readable, writable
from mqcore.clock import ManualClock
from mqcore.errors import ProtocolError
from mqcore.permissions import PERM_INHERIT, PERM_READ


# --- topics -------------------------------------------------------------------------------------------
def _topics(tmp_path, clock=None, **cfg):
    m = TopicConfigManager(BrokerConfig(broker_name="b1", **cfg), str(tmp_path), clock or ManualClock())
    m.load()
    return m


def test_system_topics_exist_after_load(tmp_path):
    m = _topics(tmp_path, auto_create_topic_enable=True)
    for name in ("SELF_TEST_TOPIC", "BenchmarkTest", "OFFSET_MOVED_EVENT", "SCHEDULE_TOPIC_XXXX", "TBW102", "b1"):
        assert m.get(name) is not None, name
    assert m.get("TBW102").perm & PERM_INHERIT
    assert _topics(tmp_path / "off", auto_create_topic_enable=False).get("TBW102") is None


def test_send_creates_topics_from_tbw102_without_inherit(tmp_path):
    m = _topics(tmp_path, auto_create_topic_enable=True, default_topic_queue_nums=8)
    tc = m.create_in_send("Orders", "TBW102", 32)
    assert (tc.read_queue_nums, tc.write_queue_nums) == (8, 8)  # capped by the default topic
    assert not tc.perm & PERM_INHERIT and readable(tc) and writable(tc)
    assert m.create_in_send("Other", "NoSuchDefault", 4) is None
    # the change is persisted: a new manager over the same directory sees it
    assert _topics(tmp_path).get("Orders").write_queue_nums == 8


def test_sends_create_topics_only_when_allowed_and_group_topics_get_one_queue(tmp_path):
    off = _topics(tmp_path / "off", auto_create_topic_enable=False)
    assert off.create_in_send("Orders", "TBW102", 4) is None  # no TBW102 when auto-creation is off
    retry = off.create_group_topic("%RETRY%g1")  # retry topics are created whatever the setting
    assert retry.write_queue_nums == 1 and off.get("%RETRY%g1") == retry
    on = _topics(tmp_path / "on", auto_create_topic_enable=True)
    assert on.create_in_send("Orders", "TBW102", 4).write_queue_nums == 4


def test_update_delete_and_data_version(tmp_path):
    clock = ManualClock(1_000)
    m = _topics(tmp_path, clock)
    before = m.serialize_wrapper()["dataVersion"]["counter"]
    clock.advance(5)
    m.update(TopicConfig("T", 2, 3, PERM_READ))
    wrapper = m.serialize_wrapper()
    assert wrapper["dataVersion"] == {"counter": before + 1, "timestamp": 1_005}
    assert wrapper["topicConfigTable"]["T"]["writeQueueNums"] == 3
    assert not writable(m.get("T"))
    assert m.delete("T") and m.get("T") is None and not m.delete("T")
    on_disk = json.loads((tmp_path / "topics.json").read_text())
    assert "T" not in on_disk["topicConfigTable"]


# --- groups and offsets ----------------------------------------------------------------------------------
def test_groups_are_created_on_demand_only_when_allowed(tmp_path):
    on = SubscriptionGroupManager(str(tmp_path / "on"), ManualClock(), auto_create=True)
    on.load()
    assert on.ensure("g1") and on.retry_max_times("g1") == 16
    off = SubscriptionGroupManager(str(tmp_path / "off"), ManualClock(), auto_create=False)
    off.load()
    assert not off.ensure("g1")
    off.update_from_json(b'{"groupName":"g1","retryMaxTimes":3}')
    assert off.ensure("g1") and off.retry_max_times("g1") == 3
    with pytest.raises(ProtocolError):
        off.update_from_json(b'{"groupName":"g2","retryMaxTimes":"many"}')
    again = SubscriptionGroupManager(str(tmp_path / "off"), ManualClock(), auto_create=False)
    again.load()  # update_from_json persisted
    assert again.retry_max_times("g1") == 3


def test_consumer_offsets_by_group_and_topic(tmp_path):
    m = ConsumerOffsetManager.in_dir(str(tmp_path))
    m.commit("g1", "A", 0, 10)
    m.commit("g1", "B", 1, 5)
    m.commit("g2", "A", 0, 7)
    assert sorted(m.topics_of("g1")) == ["A", "B"]
    m.remove_topic("A")
    assert m.query("g1", "A", 0) is None and m.query("g2", "A", 0) is None and m.query("g1", "B", 1) == 5
    m.persist()
    again = ConsumerOffsetManager.in_dir(str(tmp_path))
    assert again.load() and again.query("g1", "B", 1) == 5


# --- clients and rebalance locks ---------------------------------------------------------------------------
def _heartbeat(group, topic="T", sub="*", version=1):
    return {"consumerDataSet": [{"groupName": group, "consumeType": "CONSUME_PASSIVELY",
                                 "messageModel": "CLUSTERING", "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                                 "subscriptionDataSet": [{"topic": topic, "subString": sub,
                                                          "subVersion": version}]}],
            "producerDataSet": [{"groupName": "pg"}]}


def test_heartbeats_register_members_and_report_changes(tmp_path):
    clock = ManualClock(0)
    changes = []
    m = ClientManager(clock, 120_000, lambda group, channels: changes.append((group, sorted(channels))))
    assert m.heartbeat("ch1", "c1", 0, 0, _heartbeat("g")) == ["g"]
    assert changes == [("g", ["ch1"])]
    m.heartbeat("ch1", "c1", 0, 0, _heartbeat("g"))  # same member, same subscription: no change
    assert len(changes) == 1
    m.heartbeat("ch1", "c1", 0, 0, _heartbeat("g", sub="TagA || TagB", version=2))
    sub = m.subscription("g", "T")
    assert len(changes) == 2 and sub.tags == {"TagA", "TagB"} and sub.sub_version == 2
    assert sub.codes == {2598919, 2598920}  # Java "TagA".hashCode(), "TagB".hashCode()
    m.heartbeat("ch2", "c2", 0, 0, _heartbeat("g"))
    assert sorted(m.group("g").client_ids()) == ["c1", "c2"]
    m.channel_closed("ch1")
    assert changes[-1] == ("g", ["ch2"]) and "ch1" not in m.producers["pg"]
    m.unregister("ch2", "pg", "g")
    assert m.group("g") is None


def test_silent_channels_expire_by_the_injected_clock():
    clock = ManualClock(0)
    m = ClientManager(clock, 1_000)
    m.heartbeat("old", "c1", 0, 0, _heartbeat("g"))
    clock.advance(900)
    m.heartbeat("new", "c2", 0, 0, _heartbeat("g"))
    assert m.scan_expired() == []
    clock.advance(200)  # "old" is 1,100 ms silent, "new" 200 ms
    assert m.scan_expired() == ["old"]


def test_rebalance_locks_belong_to_one_client_until_they_expire():
    clock = ManualClock(0)
    locks = RebalanceLockManager(clock, max_live_ms=60_000)
    q0, q1 = ("T", "b", 0), ("T", "b", 1)
    assert locks.try_lock_batch("g", [q0, q1], "c1") == [q0, q1]
    assert locks.try_lock_batch("g", [q0, q1], "c2") == []
    assert locks.try_lock_batch("other", [q0], "c2") == [q0]  # locks are per group
    locks.unlock_batch("g", [q1], "c2")  # not the owner: nothing happens
    assert locks.try_lock_batch("g", [q1], "c2") == []
    locks.unlock_batch("g", [q1], "c1")
    assert locks.try_lock_batch("g", [q1], "c2") == [q1]
    clock.advance(60_001)  # c1 did not renew q0
    assert locks.try_lock_batch("g", [q0], "c2") == [q0]


# --- long polling --------------------------------------------------------------------------------------------
def test_long_polling_wakes_on_arrival_times_out_and_wakes_all():
    async def scenario():
        svc = PullRequestHoldService(asyncio.get_running_loop())
        waiting = asyncio.ensure_future(svc.hold("T", 0, 5, 30_000))
        other = asyncio.ensure_future(svc.hold("T", 1, 0, 30_000))
        while svc.waiting_count < 2:
            await asyncio.sleep(0)
        svc.notify("T", 0, 5)  # max offset 5 is not past offset 5: keep waiting
        await asyncio.sleep(0)
        assert not waiting.done()
        # a notify from another thread (the store's dispatcher) wakes the pull on the loop
        t = threading.Thread(target=svc.notify, args=("T", 0, 6))
        t.start()
        t.join()
        assert await asyncio.wait_for(waiting, 5) is True
        assert not other.done() and svc.waiting_count == 1
        assert await svc.hold("T", 2, 0, 1) is False  # 1 ms timeout, nothing arrives
        svc.wake_all()  # shutdown answers what is parked
        assert await asyncio.wait_for(other, 5) is False
        assert svc.waiting_count == 0
    asyncio.run(scenario())


def test_long_polling_notify_from_another_thread_for_a_queue_nobody_waits_on():
    """The dispatcher notifies on every put, mostly for queues no pull is parked on: from its
    thread that must not touch the loop at all (no callback per message), and a wake that
    reaches an already answered pull leaves it as it is."""
    async def scenario():
        loop = asyncio.get_running_loop()
        scheduled = []

        class CountingLoop:  # the real loop, with its thread-safe scheduling counted
            def __getattr__(self, name):
                return getattr(loop, name)

            def call_soon_threadsafe(self, *args):
                scheduled.append(args[1:])
                return loop.call_soon_threadsafe(*args)

        svc = PullRequestHoldService(loop)
        svc.loop = CountingLoop()
        waiting = asyncio.ensure_future(svc.hold("T", 0, 0, 30_000))
        while svc.waiting_count < 1:
            await asyncio.sleep(0)
        for args in (("T", 1, 9), ("Other", 0, 9)):  # queues nobody waits on
            t = threading.Thread(target=svc.notify, args=args)
            t.start()
            t.join()
        assert scheduled == [] and not waiting.done()
        t = threading.Thread(target=svc.notify, args=("T", 0, 1))
        t.start()
        t.join()
        assert scheduled == [("T", 0, 1)]
        svc._wake("T", 0, 2)  # a second wake before the woken pull ran: the answer stays True
        assert await asyncio.wait_for(waiting, 5) is True
        assert svc.waiting_count == 0
    asyncio.run(scenario())


def test_long_polling_sees_a_message_that_landed_before_the_pull_parked():
    # the dispatcher (another thread) can land a message after the pull found nothing and
    # before its waiter exists; the hold must not sleep out its suspend time over it
    async def scenario():
        max_offsets = {("T", 0): 0}
        svc = PullRequestHoldService(asyncio.get_running_loop(), lambda t, q: max_offsets[(t, q)])
        max_offsets[("T", 0)] = 1
        svc.notify("T", 0, 1)  # nobody is registered yet: this wake is lost
        assert await asyncio.wait_for(svc.hold("T", 0, 0, 30_000), 5) is True
        assert await svc.hold("T", 0, 1, 1) is False  # nothing past offset 1: times out as before
        assert svc.waiting_count == 0
    asyncio.run(scenario())

