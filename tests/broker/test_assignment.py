"""The broker-side rebalance's allocation (QUERY_ASSIGNMENT): the client's strategies and
popShareQueueNum's widening, as RocketMQ 5.3.3 computes them."""
from __future__ import annotations

from mqcore.broker.assignment import allocate_averagely, allocate_by_circle, assign
from mqcore.broker.request_mode import MessageRequestMode, RequestModeSetting

QUEUES = [("T", "b", q) for q in range(5)]
PULL = RequestModeSetting("T", "G", MessageRequestMode.PULL)


def pop(share: int) -> RequestModeSetting:
    return RequestModeSetting("T", "G", MessageRequestMode.POP, share)


def ids(queues) -> list[int]:
    return sorted(q for _, _, q in queues)


def test_averagely_gives_the_first_clients_the_remainder():
    clients = ["c1", "c2"]
    assert ids(allocate_averagely("c1", QUEUES, clients)) == [0, 1, 2]
    assert ids(allocate_averagely("c2", QUEUES, clients)) == [3, 4]
    assert allocate_averagely("stranger", QUEUES, clients) == []
    # more clients than queues: one each, the last ones idle
    assert ids(allocate_averagely("c3", QUEUES[:2], ["c1", "c2", "c3"])) == []


def test_by_circle_deals_the_queues_round():
    assert ids(allocate_by_circle("c2", QUEUES, ["c1", "c2"])) == [1, 3]


def test_pull_mode_sorts_clients_and_queues_first():
    assert ids(assign("c1", list(reversed(QUEUES)), ["c2", "c1"], allocate_averagely, PULL)) == [0, 1, 2]


def test_pop_without_sharing_pops_every_queue_as_one():
    assert assign("c2", QUEUES, ["c1", "c2"], allocate_averagely, pop(-1)) == {("T", "b", -1)}
    assert assign("c2", QUEUES, ["c1", "c2"], allocate_averagely, pop(0)) == {("T", "b", -1)}


def test_pop_sharing_adds_the_next_clients_queues():
    clients = ["c1", "c2", "c3"]
    assert ids(assign("c1", QUEUES, clients, allocate_averagely, pop(1))) == [0, 1, 2, 3]
    assert ids(assign("c3", QUEUES, clients, allocate_averagely, pop(1))) == [0, 1, 4]  # wraps round
    assert ids(assign("c1", QUEUES, clients, allocate_averagely, pop(5))) == [0, 1, 2, 3, 4]


def test_pop_with_more_clients_than_queues_leaves_none_idle():
    clients = ["c1", "c2", "c3"]
    assert [ids(assign(c, QUEUES[:2], clients, allocate_averagely, pop(1))) for c in clients] == [[0], [1], [0]]
    assert assign("stranger", QUEUES[:2], clients, allocate_averagely, pop(1)) == set()
