"""The dashboard's reads and changes on a ``DashboardSource`` built from managers alone (a real
store and real metadata tables in a temp dir, an injected clock), no broker and no browser:
the interface is all the dashboard needs."""
from __future__ import annotations

import asyncio
import base64

import pytest

from mqcore.acl.config import parse_plain_acl
from mqcore.broker.clients import ClientManager
from mqcore.broker.config import BrokerConfig
from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
from mqcore.broker.metadata import TopicConfig
from mqcore.broker.stats import BrokerStats
from mqcore.broker.topics import TopicConfigManager
from mqcore.clock import ManualClock
from mqcore.dashboard import actions, messages, queries
from mqcore.dashboard.auth import AuthResult, check_basic
from mqcore.dashboard.history import RateHistory
from mqcore.dashboard.source import DashboardSource
from mqcore.message import Prop
from mqcore.permissions import PERM_READ, PERM_WRITE
from mqcore.store.message_store import MessageStore
from tests.support import acl
from tests.support.store import STORE, msg, small_config


@pytest.fixture
def src(tmp_path):
    clock = ManualClock(1_700_000_000_000)
    store_cfg = small_config(tmp_path / "store")
    store = MessageStore(store_cfg, clock=clock)
    store.load()
    store.start()
    cdir = store_cfg.config_dir
    topics = TopicConfigManager(BrokerConfig(broker_name="b1", broker_cluster_name="c1"), cdir, clock)
    topics.load()
    groups = SubscriptionGroupManager(cdir, clock, True)
    groups.load()
    offsets = ConsumerOffsetManager.in_dir(cdir)
    resets = []

    async def reset_offset(group, topic, ts):
        resets.append((group, topic, ts))
        return True, "offsets reset"

    def create_topic(name, read_queues, write_queues, perm):
        tc = TopicConfig(name, read_queues, write_queues, perm)
        topics.update(tc)
        return tc

    s = DashboardSource(cluster_name="c1", broker_name="b1", version="V4_9_8 (mqcore)",
                        listen_addr=lambda: "127.0.0.1:10911", store=store, topics=topics, groups=groups,
                        offsets=offsets, clients=ClientManager(clock, 120_000), stats=BrokerStats(),
                        runtime_figures=lambda: {"putTps": "1.00 1.00 1.00"},
                        disk_paths=lambda: {"commitlog": store_cfg.commitlog_dir},
                        grpc_clients=list, acl=lambda: None, schedule_register=lambda: None,
                        store_host=lambda: STORE, reset_offset=reset_offset, create_topic=create_topic)
    s.resets = resets  # type: ignore[attr-defined]
    yield s
    store.shutdown()


def _put(src, topic, body, qid=0, **props):
    r = src.store.put_message(msg(topic, body, qid, **props))
    assert r.ok
    src.stats.on_put(topic, r)
    return r


def test_topic_created_deleted_and_listed(src):
    actions.create_topic(src, "Orders", 2, 2, PERM_READ | PERM_WRITE)
    _put(src, "Orders", b"a", 0)
    _put(src, "Orders", b"b", 1)
    rows = {r["name"]: r for r in queries.topic_list(src, {})}
    assert rows["Orders"]["messages"] == 2 and rows["Orders"]["kind"] == "normal"
    assert rows["b1"]["kind"] == rows["c1"]["kind"] == rows["TBW102"]["kind"] == "system"
    t = queries.topic_detail(src, "Orders")
    assert [(q["id"], q["min"], q["max"]) for q in t["queues"]] == [(0, 0, 1), (1, 0, 1)]
    with pytest.raises(actions.ActionError, match="queue numbers"):
        actions.create_topic(src, "Bad", 0, 1, PERM_READ)
    with pytest.raises(actions.ActionError):
        actions.create_topic(src, "bad name", 1, 1, PERM_READ)
    actions.delete_topic(src, "Orders")
    assert queries.topic_detail(src, "Orders") is None
    with pytest.raises(actions.ActionError, match="no topic"):
        actions.delete_topic(src, "Orders")


def test_group_lag_retry_and_dlq_counts(src):
    actions.create_topic(src, "Orders", 2, 2, PERM_READ | PERM_WRITE)
    for i in range(5):
        _put(src, "Orders", b"m", i % 2)
    src.offsets.commit("g1", "Orders", 0, 1)
    src.offsets.commit("g1", "Orders", 1, 0)
    src.topics.create_group_topic("%DLQ%g1")
    _put(src, "%DLQ%g1", b"dead")
    g = queries.group_detail(src, "g1")
    assert [(r["queue"], r["lag"]) for r in g["lag"]] == [(0, 2), (1, 2)]
    assert g["total_lag"] == 4 and g["dlq"] == 1 and g["retry"] == 0
    assert [r for r in queries.group_list(src) if r["name"] == "g1"][0]["lag"] == 4


def test_messages_by_key_time_and_id_and_where_they_went(src):
    actions.create_topic(src, "Orders", 1, 1, PERM_READ | PERM_WRITE)
    r = _put(src, "Orders", b'{"id": 7}', KEYS="order-7", UNIQ_KEY="U7")
    _put(src, "Orders", b"\x00\xffbinary", KEYS="order-8", UNIQ_KEY="U8")
    assert [m.body for m in messages.by_key(src, "Orders", "order-7")] == [b'{"id": 7}']
    assert len(messages.by_time(src, "Orders", 0, 1 << 62)) == 2
    assert messages.by_time(src, "Orders", 1 << 61, 1 << 62) == []
    found = messages.by_id(src, r.msg_id)
    assert len(found) == 1 and found[0].properties["UNIQ_KEY"] == "U7"
    assert [m.properties["UNIQ_KEY"] for m in messages.by_id(src, "U7", "Orders")] == ["U7"]
    views = messages.body_views(b'{"id": 7}')
    assert views["json"] == '{\n  "id": 7\n}' and views["text"] == '{"id": 7}'
    binary = messages.body_views(b"\x00\xffbinary")
    assert binary["text"] is None and binary["json"] is None and binary["hex"].startswith("00000000  00 ff 62")
    # a group consumed queue offset 0 only; a retry copy and a dead letter of the first message
    src.offsets.commit("g1", "Orders", 0, 1)
    first = found[0]
    src.topics.create_group_topic("%RETRY%g1")
    src.topics.create_group_topic("%DLQ%g1")
    _put(src, "%RETRY%g1", b'{"id": 7}', UNIQ_KEY="U7", **{Prop.RETRY_TOPIC: "Orders"})
    dead = _put(src, "%DLQ%g1", b'{"id": 7}', UNIQ_KEY="U7", **{Prop.RETRY_TOPIC: "Orders"})
    trail = messages.trail(src, first)
    assert trail["consumed"] == [{"group": "g1", "committed": 1, "consumed": True}]
    assert sorted(c["kind"] for c in trail["copies"]) == ["dlq", "retry"]
    second = messages.by_key(src, "Orders", "order-8")[0]
    assert messages.trail(src, second)["consumed"][0]["consumed"] is False
    # the dead letter resent: a copy in the group's retry topic, retry count 0, original topic kept
    dlq_msg = messages.at_offset(src, dead.phy_offset)
    copy = asyncio.run(actions.resend_dlq(src, dlq_msg))
    assert copy.topic == "%RETRY%g1" and copy.reconsume_times == 0 and copy.body == b'{"id": 7}'
    assert copy.properties[Prop.RETRY_TOPIC] == "Orders" and copy.properties["UNIQ_KEY"] == "U7"
    with pytest.raises(actions.ActionError, match="not in a dead-letter queue"):
        asyncio.run(actions.resend_dlq(src, first))


def test_reset_goes_through_the_brokers_reset(src):
    actions.create_topic(src, "Orders", 1, 1, PERM_READ | PERM_WRITE)
    with pytest.raises(actions.ActionError, match="no offsets"):
        asyncio.run(actions.reset_offset(src, "g1", "Orders", 0))
    src.offsets.commit("g1", "Orders", 0, 0)
    assert asyncio.run(actions.reset_offset(src, "g1", "Orders", 123)) == "offsets reset"
    assert src.resets == [("g1", "Orders", 123)]


def test_rates_are_differences_of_the_counters(src):
    h = RateHistory(src.stats)
    h.sample(0)
    assert h.series() == {"t": [], "put": [], "get": []}  # one sample: no rate yet
    src.stats.put["A"] = [50, 5000]
    src.stats.pulled[("g", "A")] = [10, 1000]
    h.sample(5000)
    src.stats.put["A"] = [60, 6000]
    src.stats.put["B"] = [5, 500]
    h.sample(10_000)
    assert h.series() == {"t": [5.0, 10.0], "put": [10.0, 3.0], "get": [2.0, 0.0]}
    assert h.series("B")["put"] == [0.0, 1.0]
    assert h.latest_rates()["A"] == (2.0, 0.0)
    del src.stats.put["A"]  # a deleted topic: its counter goes, the rate never goes negative
    h.sample(15_000)
    assert h.series()["put"][-1] == 0.0


def _basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_only_an_admin_account_gets_in():
    cfg = parse_plain_acl(acl.PLAIN_ACL_YML)
    assert check_basic(None, None)[0] is AuthResult.OPEN
    assert check_basic(cfg, None)[0] is AuthResult.MISSING
    assert check_basic(cfg, "Bearer x")[0] is AuthResult.MISSING
    assert check_basic(cfg, "Basic !!!")[0] is AuthResult.REFUSED
    assert check_basic(cfg, _basic(*acl.ADMIN)) == (AuthResult.ADMIN, acl.ADMIN[0])
    assert check_basic(cfg, _basic(acl.ADMIN[0], "wrongSecret1"))[0] is AuthResult.REFUSED
    assert check_basic(cfg, _basic(*acl.NORMAL))[0] is AuthResult.REFUSED
    assert check_basic(cfg, _basic("nobodyUser", "x"))[0] is AuthResult.REFUSED
