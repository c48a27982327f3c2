"""The interface the broker hands the web dashboard (mqcore.dashboard.source): the broker's
real managers have every member the dashboard's Protocols name, with the same parameters,
and ``Broker.dashboard_source()`` wires the callables to the broker's live state.

The broker module is not yet under mypy --strict, which would check where it builds the
source; this checks it at run time, so a renamed manager method (or a new call the dashboard
makes without declaring it) fails here rather than in a browser test.
"""
from __future__ import annotations

import pytest

from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.config import StoreConfig
from mqcore.dashboard import source as S
from mqcore.permissions import PERM_READ, PERM_WRITE
from tests.grpc.test_source import _check, _members


@pytest.fixture
def source(tmp_path):
    broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="src"),
                    StoreConfig(store_path=str(tmp_path / "store")))
    broker.topics.load()
    return broker, broker.dashboard_source()


def test_the_brokers_managers_are_what_the_dashboard_declares(source):
    broker, src = source
    pairs = [(S.Topics, src.topics), (S.Table, src.topics.table), (S.Groups, src.groups),
             (S.Table, src.groups.table), (S.Offsets, src.offsets), (S.Clients, src.clients),
             (S.Stats, src.stats)]
    wrong = [w for proto, obj in pairs for w in _check(proto, obj)]
    assert not wrong, wrong
    # they are the broker's own managers, not copies
    assert (src.topics, src.groups, src.offsets, src.clients, src.stats) == \
        (broker.topics, broker.groups, broker.offsets, broker.clients, broker.stats)


def test_a_topic_created_through_the_source_is_in_the_brokers_table(source):
    broker, src = source
    tc = src.create_topic("Orders", 2, 4, PERM_READ | PERM_WRITE)
    assert isinstance(tc, S.CreatedTopic) and tc.topic_name == "Orders"
    made = broker.topics.get("Orders")
    assert made is not None and (made.read_queue_nums, made.write_queue_nums, made.perm) == (2, 4, PERM_READ | PERM_WRITE)


def test_the_check_fails_for_a_manager_without_a_declared_member():
    class Offsets:
        def query(self, group, topic, queue_id): ...
        def query_queues(self, topic, group): ...  # parameters swapped

    assert _members(S.Offsets)
    wrong = _check(S.Offsets, Offsets())
    assert any("no remove_topic" in w for w in wrong) and any("query_queues" in w for w in wrong)
