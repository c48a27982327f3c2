"""Queue allocation strategies: which consumer of a group reads which queues.

Every consumer of a group runs the same pure function over the same sorted inputs
(all queues of the topic, all client ids from GET_CONSUMER_LIST_BY_GROUP), so they
agree without talking to each other. The five strategies are RocketMQ's
(``AllocateMessageQueue*.java``) and give the same answers as the Java client, so
Python and Java consumers can share a group.

A strategy is any object with ``name`` and
``allocate(group, current_cid, mq_all, cid_all) -> list[MessageQueue]``; inputs are
sorted by the caller. Pure; any thread.
"""
from __future__ import annotations

import bisect
import hashlib
import logging
from collections.abc import Iterable, Sequence
from typing import Protocol

from mqcore.errors import IllegalArgumentError
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = [
    "AllocateStrategy",
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateConsistentHash",
    "AllocateByMachineRoom",
    "AllocateByConfig",
]


class AllocateStrategy(Protocol):
    name: str

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]: ...


def _check(group: str, current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]) -> bool:
    if not current_cid:
        raise IllegalArgumentError("current_cid is empty")
    if not mq_all or not cid_all:
        return False
    if current_cid not in cid_all:
        log.info("[BUG] consumer group %s: %s is not in the consumer list %s", group, current_cid, list(cid_all))
        return False
    return True


class AllocateAveragely:
    """Contiguous blocks; the first ``len(mq) % len(cid)`` consumers get one extra
    (RocketMQ's default)."""

    name = "AVG"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(group, current_cid, mq_all, cid_all):
            return []
        n, c = len(mq_all), len(cid_all)
        index = list(cid_all).index(current_cid)
        mod = n % c
        if n <= c:
            average = 1
        elif mod > 0 and index < mod:
            average = n // c + 1
        else:
            average = n // c
        start = index * average if (mod > 0 and index < mod) else index * average + mod
        count = min(average, n - start)
        return [mq_all[(start + i) % n] for i in range(max(count, 0))]


class AllocateAveragelyByCircle:
    """Deal queues round the table: consumer ``i`` gets queues ``i, i+c, i+2c...``."""

    name = "AVG_BY_CIRCLE"

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(group, current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        c = len(cid_all)
        return [mq_all[i] for i in range(index, len(mq_all)) if i % c == index]


def _md5_hash(key: str) -> int:
    """``ConsistentHashRouter.MD5Hash``: the first 4 digest bytes, big-endian."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _mq_key(mq: MessageQueue) -> str:
    """``MessageQueue.toString()``, the key Java hashes."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


class AllocateConsistentHash:
    """A hash ring with ``virtual_node_count`` virtual nodes per consumer (MD5):
    adding or removing one consumer moves few queues."""

    name = "CONSISTENT_HASH"

    def __init__(self, virtual_node_count: int = 10) -> None:
        if virtual_node_count < 1:
            raise IllegalArgumentError("virtual_node_count must be >= 1")
        self.virtual_node_count = virtual_node_count

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(group, current_cid, mq_all, cid_all):
            return []
        ring: dict[int, str] = {}
        for cid in cid_all:
            for i in range(self.virtual_node_count):
                ring[_md5_hash(f"{cid}-{i}")] = cid  # TreeMap.put: a later node wins a collision
        keys = sorted(ring)
        out = []
        for mq in mq_all:
            h = _md5_hash(_mq_key(mq))
            pos = bisect.bisect_left(keys, h)  # tailMap(h) includes h itself
            owner = ring[keys[pos] if pos < len(keys) else keys[0]]
            if owner == current_cid:
                out.append(mq)
        return out


class AllocateByMachineRoom:
    """Only queues of brokers named ``<room>@<name>`` whose room is in
    ``consumer_idcs``, split evenly, remainder dealt one each."""

    name = "MACHINE_ROOM"

    def __init__(self, consumer_idcs: Iterable[str]) -> None:
        self.consumer_idcs = frozenset(consumer_idcs)

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        if not _check(group, current_cid, mq_all, cid_all):
            return []
        index = list(cid_all).index(current_cid)
        pre = [mq for mq in mq_all if mq.broker_name.split("@")[0] in self.consumer_idcs]
        c = len(cid_all)
        mod, rem = divmod(len(pre), c)
        out = pre[mod * index: mod * index + mod]
        if rem > index:
            out.append(pre[index + mod * c])
        return out


class AllocateByConfig:
    """A fixed list of queues, whatever the group looks like."""

    name = "CONFIG"

    def __init__(self, message_queues: Iterable[MessageQueue]) -> None:
        self.message_queues = list(message_queues)

    def allocate(self, group: str, current_cid: str, mq_all: Sequence[MessageQueue],
                 cid_all: Sequence[str]) -> list[MessageQueue]:
        return list(self.message_queues)
