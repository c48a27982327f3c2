"""Allocation strategies give the Java client's answers."""
from __future__ import annotations

import itertools

import pytest

from mqcore.client.consumer.rebalance import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
)
from mqcore.remoting.bodies import MessageQueue


def mqs(n: int, broker: str = "b") -> list[MessageQueue]:
    return [MessageQueue("T", broker, i) for i in range(n)]


def ids(result: list[MessageQueue]) -> list[int]:
    return [mq.queue_id for mq in result]


@pytest.mark.parametrize("n,c,expected", [
    (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
    (8, 2, [[0, 1, 2, 3], [4, 5, 6, 7]]),
    (4, 3, [[0, 1], [2], [3]]),
    (2, 3, [[0], [1], []]),
    (5, 5, [[0], [1], [2], [3], [4]]),
])
def test_averagely(n, c, expected):
    cids = [f"c{i}" for i in range(c)]
    assert [ids(AllocateAveragely().allocate("g", cid, mqs(n), cids)) for cid in cids] == expected


def test_averagely_by_circle():
    cids = ["c0", "c1", "c2"]
    got = [ids(AllocateAveragelyByCircle().allocate("g", cid, mqs(8), cids)) for cid in cids]
    assert got == [[0, 3, 6], [1, 4, 7], [2, 5]]


@pytest.mark.parametrize("strategy", [AllocateAveragely(), AllocateAveragelyByCircle(), AllocateConsistentHash()])
@pytest.mark.parametrize("n,c", [(1, 1), (4, 2), (7, 3), (16, 5), (3, 6)])
def test_every_queue_exactly_once(strategy, n, c):
    cids = [f"10.0.0.{i}@pid#{i}" for i in range(c)]
    parts = [strategy.allocate("g", cid, mqs(n), cids) for cid in cids]
    flat = list(itertools.chain.from_iterable(parts))
    assert sorted(flat) == mqs(n)


def test_unknown_client_gets_nothing():
    assert AllocateAveragely().allocate("g", "zz", mqs(4), ["a", "b"]) == []
    assert AllocateAveragely().allocate("g", "a", [], ["a"]) == []


def test_consistent_hash_moves_few_queues():
    queues = [MessageQueue("T", "b", i) for i in range(32)]
    before_ids = [f"c{i}" for i in range(4)]
    after_ids = before_ids + ["c4"]
    strategy = AllocateConsistentHash(virtual_node_count=10)
    before = {mq: cid for cid in before_ids for mq in strategy.allocate("g", cid, queues, before_ids)}
    after = {mq: cid for cid in after_ids for mq in strategy.allocate("g", cid, queues, after_ids)}
    moved = [mq for mq in queues if before[mq] != after[mq]]
    assert all(after[mq] == "c4" for mq in moved)  # only the newcomer takes queues


def test_machine_room():
    queues = mqs(3, "room1@b1") + mqs(2, "room2@b2") + mqs(2, "room3@b3")
    strategy = AllocateByMachineRoom(["room1", "room2"])
    cids = ["c0", "c1"]
    got = [strategy.allocate("g", cid, queues, cids) for cid in cids]
    assert [mq.broker_name for mq in got[0]] == ["room1@b1", "room1@b1", "room2@b2"]
    assert [mq.broker_name for mq in got[1]] == ["room1@b1", "room2@b2"]


def test_by_config():
    fixed = [MessageQueue("T", "x", 9)]
    assert AllocateByConfig(fixed).allocate("g", "c", mqs(4), ["c"]) == fixed
