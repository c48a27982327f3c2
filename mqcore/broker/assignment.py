"""The broker-side rebalance of RocketMQ 5 (QUERY_ASSIGNMENT): which of a topic's queues each
client of a group consumes, computed by the broker from the group's live clients instead of by
each client.

The strategies are the client's own (``AllocateMessageQueueAveragely`` "AVG" and
``AllocateMessageQueueAveragelyByCircle`` "AVG_BY_CIRCLE") over the queues and client ids sorted
as RocketMQ sorts them, so a client gets what its own rebalance would have given it. In POP mode
``popShareQueueNum`` widens that: <= 0 gives every client every queue as one "queue" -1 (a pop
of all queues), N > 0 adds the queues of the N clients after it in the sorted list, and with more
clients than queues each client gets queue ``index % queues`` so that none is idle.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

from mqcore.broker.request_mode import MessageRequestMode, RequestModeSetting

#: (topic, broker name, queue id), ordered as RocketMQ's MessageQueue.compareTo
Queue = tuple[str, str, int]
Strategy = Callable[[str, Sequence[Queue], Sequence[str]], list[Queue]]


class MessageModel(enum.Enum):
    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


def allocate_averagely(client_id: str, queues: Sequence[Queue], clients: Sequence[str]) -> list[Queue]:
    """Consecutive blocks; the first ``len(queues) % len(clients)`` clients get one more."""
    if client_id not in clients:
        return []
    index, n, c = clients.index(client_id), len(queues), len(clients)
    mod = n % c
    if n <= c:
        size = 1
    else:
        size = n // c + 1 if index < mod else n // c
    start = index * size if index < mod else index * size + mod
    return [queues[(start + i) % n] for i in range(max(0, min(size, n - start)))]


def allocate_by_circle(client_id: str, queues: Sequence[Queue], clients: Sequence[str]) -> list[Queue]:
    """Every ``len(clients)``-th queue from the client's own index."""
    if client_id not in clients:
        return []
    return list(queues[clients.index(client_id)::len(clients)])


STRATEGIES: dict[str, Strategy] = {"AVG": allocate_averagely, "AVG_BY_CIRCLE": allocate_by_circle}


def assign(client_id: str, queues: Sequence[Queue], clients: Sequence[str], strategy: Strategy,
           setting: RequestModeSetting) -> set[Queue]:
    """The queues ``client_id`` consumes in a CLUSTERING group (``queues`` and ``clients`` non-empty)."""
    queues, clients = sorted(queues), sorted(clients)
    if setting.mode is not MessageRequestMode.POP:
        return set(strategy(client_id, queues, clients))
    share = setting.pop_share_queue_num
    if share <= 0:
        return {(topic, broker, -1) for topic, broker, _ in queues}
    if len(clients) > len(queues):
        if client_id not in clients:
            return set()
        return {queues[clients.index(client_id) % len(queues)]}
    out = set(strategy(client_id, queues, clients))
    if client_id in clients:
        index = clients.index(client_id)
        for i in range(1, share + 1):
            out.update(strategy(clients[(index + i) % len(clients)], queues, clients))
    return out
