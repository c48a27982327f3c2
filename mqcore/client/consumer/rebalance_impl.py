"""``RebalanceImpl``: keeps a consumer's set of owned queues in line with the group.

Every ``rebalance_interval_ms`` (and at once when a broker sends
NOTIFY_CONSUMER_IDS_CHANGED) each subscribed topic is re-divided: clustering
consumers ask a broker for the group's client ids, sort ids and queues, and run the
allocation strategy; broadcasting consumers take every queue. Then the process-queue
table is updated: queues no longer owned are dropped (offset persisted, orderly lock
released), new ones get a process queue, a start offset (``compute_pull_from_where``)
and a pull request. Orderly consumers must hold the broker lock (LOCK_BATCH_MQ) on a
queue before taking it, and renew all locks every ``lock_interval_ms``.

The consumer-specific parts (push vs lite pull) are callbacks (``RebalanceCallbacks``).

Thread model: event-loop thread only. Consume threads only see the ``ProcessQueue``
objects handed to them.
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import defaultdict
from collections.abc import Iterator
from typing import Protocol

from mqcore.client.config import MessageModel
from mqcore.client.consumer.process_queue import ProcessQueue
from mqcore.client.consumer.rebalance import AllocateAveragely, AllocateStrategy
from mqcore.client.consumer.subscription import SubscriptionData
from mqcore.client.instance import ClientInstance
from mqcore.client.route import MASTER_ID
from mqcore.errors import BrokerError, MQError, RemotingError
from mqcore.message import is_retry_topic
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["PullRequest", "RebalanceCallbacks", "RebalanceImpl"]

LOCK_TIMEOUT_MS = 1000


@dataclasses.dataclass(slots=True, eq=False)
class PullRequest:
    consumer_group: str
    message_queue: MessageQueue
    process_queue: ProcessQueue
    next_offset: int
    previously_locked: bool = False
    #: consecutive failed pulls (the first is logged as a warning, the rest at debug level)
    failures: int = 0


class RebalanceCallbacks(Protocol):
    consume_type: str

    def new_process_queue(self) -> ProcessQueue: ...

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool: ...

    async def compute_pull_from_where(self, mq: MessageQueue) -> int: ...

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None: ...

    def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None: ...


class RebalanceImpl:
    """Owned queues of one consumer group on one client."""

    def __init__(self, instance: ClientInstance, group: str, message_model: MessageModel,
                 strategy: AllocateStrategy | None, callbacks: RebalanceCallbacks) -> None:
        self.instance = instance
        self.group = group
        self.message_model = message_model
        self.strategy: AllocateStrategy = strategy or AllocateAveragely()
        self.callbacks = callbacks
        self.subscription_inner: dict[str, SubscriptionData] = {}
        self.topic_subscribe_info: dict[str, set[MessageQueue]] = {}
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}

    # --- rebalance ------------------------------------------------------------------------------
    async def do_rebalance(self, is_order: bool) -> None:
        for topic in list(self.subscription_inner):
            try:
                await self._rebalance_by_topic(topic, is_order)
            except (RemotingError, BrokerError, MQError) as e:
                if not is_retry_topic(topic):
                    log.warning("rebalance of %s in group %s failed: %s", topic, self.group, e)
        await self._truncate_queues_not_subscribed()

    async def _rebalance_by_topic(self, topic: str, is_order: bool) -> None:
        mq_set = self.topic_subscribe_info.get(topic)
        if self.message_model is MessageModel.BROADCASTING:
            if mq_set is None:
                log.warning("rebalance of group %s: topic %s has no route yet", self.group, topic)
                return
            if await self.update_process_queue_table(topic, set(mq_set), is_order):
                self.callbacks.message_queue_changed(topic, mq_set, set(mq_set))
            return
        cid_all = await self.instance.find_consumer_id_list(topic, self.group)
        if mq_set is None:
            if not is_retry_topic(topic):
                log.warning("rebalance of group %s: topic %s has no route yet", self.group, topic)
            return
        if not cid_all:
            log.warning("rebalance of group %s: no consumer ids for %s", self.group, topic)
            return
        mq_all = sorted(mq_set)
        cid_sorted = sorted(set(cid_all))
        try:
            allocated = self.strategy.allocate(self.group, self.instance.client_id, mq_all, cid_sorted)
        except MQError as e:
            log.error("allocation strategy %s failed for group %s: %s", self.strategy.name, self.group, e)
            return
        divided = set(allocated)
        if await self.update_process_queue_table(topic, divided, is_order):
            log.info("rebalance of group %s, topic %s: %d consumers, %d queues, mine: %s", self.group, topic,
                     len(cid_sorted), len(mq_all), sorted(divided))
            self.callbacks.message_queue_changed(topic, mq_set, divided)

    async def update_process_queue_table(self, topic: str, mq_set: set[MessageQueue], is_order: bool) -> bool:
        """Drop queues no longer owned (or idle too long in push mode), add new ones."""
        changed = False
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic != topic:
                continue
            stale = mq not in mq_set
            if not stale and pq.is_pull_expired() and self.callbacks.consume_type == "CONSUME_PASSIVELY":
                log.warning("queue %s of group %s was not pulled for a long time; dropping it", mq, self.group)
                stale = True
            if stale:
                pq.dropped = True
                if await self.callbacks.remove_unnecessary_message_queue(mq, pq):
                    self.process_queue_table.pop(mq, None)
                    changed = True
                    log.info("group %s no longer consumes %s", self.group, mq)
        requests: list[PullRequest] = []
        added = [mq for mq in sorted(mq_set) if mq not in self.process_queue_table]
        # a concurrently consuming group asks for every new queue's start offset at once: one
        # round trip's wait instead of one per queue before the first pull (orderly groups take
        # each queue's lock first, one by one, as RocketMQ does)
        early = {} if is_order or len(added) < 2 else dict(zip(added, await asyncio.gather(
            *(self._start_offset(mq) for mq in added))))
        for mq in added:
            if mq in self.process_queue_table:
                continue  # taken by a rebalance that ran while this one waited
            if is_order and not await self.lock(mq):
                log.warning("group %s: cannot take %s yet, its lock is held by another consumer", self.group, mq)
                continue
            pq = self.callbacks.new_process_queue()
            if is_order:
                pq.mark_locked(True)
            next_offset = early[mq] if mq in early else await self._start_offset(mq)
            if next_offset is None:
                continue
            if next_offset < 0:
                log.warning("group %s: no start offset for %s yet; retrying at the next rebalance", self.group, mq)
                continue
            self.process_queue_table[mq] = pq
            requests.append(PullRequest(self.group, mq, pq, next_offset))
            changed = True
            log.info("group %s now consumes %s from offset %d", self.group, mq, next_offset)
        if requests:
            self.callbacks.dispatch_pull_requests(requests)
        return changed

    async def _start_offset(self, mq: MessageQueue) -> int | None:
        """``compute_pull_from_where``; None (logged) when the broker could not say."""
        try:
            return await self.callbacks.compute_pull_from_where(mq)
        except (RemotingError, BrokerError, MQError) as e:
            log.warning("group %s: cannot compute the start offset of %s: %s", self.group, mq, e)
            return None

    async def _truncate_queues_not_subscribed(self) -> None:
        for mq, pq in list(self.process_queue_table.items()):
            if mq.topic not in self.subscription_inner:
                pq.dropped = True
                self.process_queue_table.pop(mq, None)
                log.info("group %s unsubscribed %s; dropped its queue %s", self.group, mq.topic, mq)

    def remove_process_queue(self, mq: MessageQueue) -> None:
        pq = self.process_queue_table.pop(mq, None)
        if pq is not None:
            pq.dropped = True

    def owned_queues(self) -> set[MessageQueue]:
        return set(self.process_queue_table)

    # --- orderly locks ----------------------------------------------------------------------------
    def _master(self, broker_name: str) -> str | None:
        return self.instance.find_broker_address_in_subscribe(broker_name, MASTER_ID, True)

    async def lock(self, mq: MessageQueue) -> bool:
        addr = self._master(mq.broker_name)
        if addr is None:
            return False
        try:
            locked = await self.instance.api.lock_batch_mq(addr, self.group, self.instance.client_id, [mq],
                                                           LOCK_TIMEOUT_MS)
        except (RemotingError, BrokerError) as e:
            log.warning("locking %s for group %s failed: %s", mq, self.group, e)
            return False
        for m in locked:
            pq = self.process_queue_table.get(m)
            if pq is not None:
                pq.mark_locked(True)
        return mq in locked

    def _owned_by_master(self) -> Iterator[tuple[str, str, list[MessageQueue]]]:
        """(broker name, master address, owned queues) per broker whose master is known."""
        by_broker: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in self.process_queue_table:
            by_broker[mq.broker_name].append(mq)
        for broker_name, mqs in by_broker.items():
            addr = self._master(broker_name)
            if addr is not None:
                yield broker_name, addr, mqs

    async def lock_all(self) -> None:
        """Renew the broker locks of every owned queue (orderly consumers)."""
        for broker_name, addr, mqs in self._owned_by_master():
            try:
                locked = await self.instance.api.lock_batch_mq(addr, self.group, self.instance.client_id, mqs,
                                                               LOCK_TIMEOUT_MS)
            except (RemotingError, BrokerError) as e:
                log.warning("renewing locks on %s for group %s failed: %s", broker_name, self.group, e)
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is None:
                    continue
                if mq in locked:
                    if not pq.locked:
                        log.info("group %s locked %s", self.group, mq)
                    pq.mark_locked(True)
                else:
                    if pq.locked:
                        log.warning("group %s lost the lock of %s", self.group, mq)
                    pq.mark_locked(False)

    async def unlock(self, mq: MessageQueue, *, oneway: bool) -> None:
        addr = self._master(mq.broker_name)
        if addr is None:
            return
        try:
            await self.instance.api.unlock_batch_mq(addr, self.group, self.instance.client_id, [mq],
                                                    LOCK_TIMEOUT_MS, oneway=oneway)
        except (RemotingError, BrokerError) as e:
            log.warning("unlocking %s for group %s failed: %s", mq, self.group, e)

    async def unlock_all(self, *, oneway: bool) -> None:
        for broker_name, addr, mqs in self._owned_by_master():
            try:
                await self.instance.api.unlock_batch_mq(addr, self.group, self.instance.client_id, mqs,
                                                        LOCK_TIMEOUT_MS, oneway=oneway)
            except (RemotingError, BrokerError) as e:
                log.warning("unlocking queues on %s for group %s failed: %s", broker_name, self.group, e)
                continue
            for mq in mqs:
                pq = self.process_queue_table.get(mq)
                if pq is not None:
                    pq.mark_locked(False)
