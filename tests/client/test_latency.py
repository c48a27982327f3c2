"""Latency fault tolerance (4.9.8 tables, seed 000), with an injected clock."""
from __future__ import annotations

import pytest

from mqcore.client.latency import (
    LatencyFaultTolerance,
    MQFaultStrategy,
    compute_not_available_duration,
    fault_order,
)
from mqcore.client.route import (
    BrokerData,
    QueueData,
    TopicPublishInfo,
    TopicRouteData,
    route_to_publish_info,
)

LAT = (50, 100, 550, 1000, 2000, 3000, 15000)
DUR = (0, 0, 30000, 60000, 120000, 180000, 600000)


@pytest.mark.parametrize("latency,duration", [
    (0, 0), (49, 0), (50, 0), (549, 0), (550, 30000), (999, 30000), (1000, 60000), (2000, 120000),
    (3000, 180000), (14999, 180000), (15000, 600000), (30000, 600000)])
def test_not_available_duration_table(latency, duration):
    assert compute_not_available_duration(latency, LAT, DUR) == duration


def test_fault_item_availability(clock):
    lft = LatencyFaultTolerance(clock)
    assert lft.is_available("a")  # unknown brokers are available
    lft.update_fault_item("a", 600, 30000)
    assert not lft.is_available("a")
    clock.advance(29999)
    assert not lft.is_available("a")
    clock.advance(1)
    assert lft.is_available("a")


def test_sort_order_available_then_latency_then_start(clock):
    lft = LatencyFaultTolerance(clock)
    lft.update_fault_item("slow-ok", 500, 0)
    lft.update_fault_item("banned-early", 10, 1000)
    lft.update_fault_item("fast-ok", 20, 0)
    lft.update_fault_item("banned-late", 10, 5000)
    lft.update_fault_item("fast-ok-2", 20, -10)
    names = [i.name for i in lft.sorted_items()]
    assert names == ["fast-ok-2", "fast-ok", "slow-ok", "banned-early", "banned-late"]


def test_pick_one_at_least_round_robins_the_better_half(clock):
    lft = LatencyFaultTolerance(clock)
    assert lft.pick_one_at_least() is None
    lft.update_fault_item("only", 10, 99999)
    assert lft.pick_one_at_least() == "only"
    for i, lat in enumerate([10, 20, 30, 40]):
        lft.update_fault_item(f"b{i}", lat, 99999)
    lft.remove("only")
    picks = {lft.pick_one_at_least() for _ in range(10)}
    assert picks == {"b0", "b1"}  # better half of 4 sorted items


def info(*brokers: str, n: int = 2) -> TopicPublishInfo:
    route = TopicRouteData(tuple(QueueData(b, n, n) for b in brokers),
                           tuple(BrokerData("C", b, {0: f"{b}:1"}) for b in brokers))
    return route_to_publish_info("T", route)


def test_round_robin_skips_last_failed_broker():
    strategy = MQFaultStrategy(enabled=False)
    tp = info("a", "b")
    for _ in range(20):
        assert strategy.select_one_message_queue(tp, "a").broker_name == "b"
    seen = {strategy.select_one_message_queue(tp, None) for _ in range(4)}
    assert len(seen) == 4  # plain round-robin visits every queue


def test_round_robin_falls_back_when_only_the_failed_broker_exists():
    strategy = MQFaultStrategy(enabled=False)
    assert strategy.select_one_message_queue(info("a"), "a").broker_name == "a"


def test_fault_strategy_avoids_failed_broker_until_it_recovers(clock):
    strategy = MQFaultStrategy(enabled=True, clock=clock)
    tp = info("a", "b")
    strategy.update_fault_item("a", 5, isolation=True)  # failure: 30 s latency => 600 s ban
    assert {strategy.select_one_message_queue(tp, None).broker_name for _ in range(20)} == {"b"}
    clock.advance(600_000)
    assert {strategy.select_one_message_queue(tp, None).broker_name for _ in range(20)} == {"a", "b"}


def test_fault_strategy_slow_broker_backs_off(clock):
    strategy = MQFaultStrategy(enabled=True, clock=clock)
    tp = info("a", "b")
    strategy.update_fault_item("b", 1200, isolation=False)  # 1000 <= 1200 => 60 s
    assert {strategy.select_one_message_queue(tp, None).broker_name for _ in range(10)} == {"a"}
    clock.advance(60_000)
    assert "b" in {strategy.select_one_message_queue(tp, None).broker_name for _ in range(10)}


def test_fault_strategy_all_down_uses_least_bad_broker(clock):
    strategy = MQFaultStrategy(enabled=True, clock=clock)
    tp = info("a", "b")
    strategy.update_fault_item("a", 4000, isolation=False)  # 180 s
    strategy.update_fault_item("b", 700, isolation=False)  # 30 s, lower latency => better
    picks = [strategy.select_one_message_queue(tp, None) for _ in range(6)]
    assert {mq.broker_name for mq in picks} == {"b"}
    assert all(0 <= mq.queue_id < 2 for mq in picks)


def test_fault_strategy_forgets_broker_without_write_queues(clock):
    strategy = MQFaultStrategy(enabled=True, clock=clock)
    tp = info("a")
    strategy.update_fault_item("a", 1, isolation=True)
    strategy.update_fault_item("gone", 0, isolation=True)  # lowest latency: picked as least bad
    mq = strategy.select_one_message_queue(tp, None)
    assert mq.broker_name == "a"  # plain round-robin after forgetting "gone"
    assert [i.name for i in strategy.fault_tolerance.items()] == ["a"]


def test_disabled_strategy_records_nothing(clock):
    strategy = MQFaultStrategy(enabled=False, clock=clock)
    strategy.update_fault_item("a", 99999, isolation=True)
    assert strategy.fault_tolerance.items() == []


def test_fault_order_ranks_available_then_latency_then_start():
    now = 10_000
    latency = [500, 100, 100, 3000, 50]
    start = [0, 20_000, 5_000, 0, 9_000]
    # available: 0 (500), 2 (100, start 5000), 3 (3000), 4 (50) -> by latency: 4, 2, 0, 3; then 1 (isolated)
    assert fault_order(latency, start, now) == [4, 2, 0, 3, 1]
    assert fault_order([], [], now) == []
    # equal keys keep their positions: a total order
    assert fault_order([7, 7, 7], [0, 0, 0], now) == [0, 1, 2]
