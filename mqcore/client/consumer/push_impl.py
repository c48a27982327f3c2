"""The push consumer's machinery (``DefaultMQPushConsumerImpl``).

One asyncio task per owned queue long-polls the broker (SUSPEND, 15 s hold, 30 s
client timeout), applies flow control (messages and MiB cached per queue, offset span
for concurrent consumers, lock state for orderly ones) and hands what it got to the
consume service, which runs the listener on the consume thread pool. Offsets go to
the offset store (broker for clustering, local file for broadcasting) and are
persisted every 5 s and at shutdown. Rebalancing, heartbeats and route refresh are
driven by the client instance through the ``ConsumerHook`` methods.

Thread model: the pull tasks, the hook methods and the ``*_async`` methods run on the
event-loop thread; ``send_message_back``/``send_to_retry_topic``/``lock_queue`` and
``schedule`` are called from consume threads.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from typing import Any

from mqcore.client.config import (
    CLIENT_INNER_PRODUCER_GROUP,
    MessageModel,
    ProducerConfig,
    PushConsumerConfig,
)
from mqcore.client.consumer.common import (
    RouteAwareConsumer,
    compute_pull_from_where,
    reset_retry_topic,
)
from mqcore.client.consumer.consume_concurrently import (
    ConsumeMessageConcurrentlyService,
)
from mqcore.client.consumer.consume_orderly import ConsumeMessageOrderlyService
from mqcore.client.consumer.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
)
from mqcore.client.consumer.process_queue import ProcessQueue
from mqcore.client.consumer.pull_kernel import PullAPIWrapper, build_pull_sys_flag
from mqcore.client.consumer.rebalance_impl import PullRequest, RebalanceImpl
from mqcore.client.consumer.running_info import consume_directly, running_info_body
from mqcore.client.consumer.stats import SAMPLE_EVERY_MS, ConsumerStats
from mqcore.client.consumer.subscription import SubscriptionData, build_subscription
from mqcore.client.instance import ClientInstance
from mqcore.client.message import Message, MessageExt, PullResult, PullStatus
from mqcore.client.producer_impl import CommunicationMode, ProducerImpl
from mqcore.errors import BrokerError, ClosedError, MQError, RemotingError
from mqcore.message import Prop, is_retry_topic, retry_topic
from mqcore.remoting.bodies import MessageQueue
from mqcore.remoting.codes import CURRENT_VERSION

log = logging.getLogger(__name__)

__all__ = ["PushConsumerImpl"]

_MIB = 1024 * 1024
#: longest wait of a pull held back by flow control (RocketMQ's fixed delay). The wait ends
#: as soon as consumption brings the queue back under its count and size limits: with the
#: pull batch of 1000 and the per-queue limit of 1000, a fixed 50 ms sleep left a fast
#: listener idle for most of it
PULL_DELAY_WHEN_FLOW_CONTROL_MS = 50
PULL_DELAY_WHEN_SUSPENDED_MS = 1000
OFFSET_MOVED_FIX_DELAY_MS = 10_000
ORDERLY_MAX_RECONSUME_TIMES = 2**31 - 1
#: SUBSCRIPTION_NOT_EXIST, SUBSCRIPTION_NOT_LATEST, SUBSCRIPTION_GROUP_NOT_EXIST: re-send the heartbeat
_RESUBSCRIBE_CODES = frozenset({24, 25, 26})
MAX_DELAY_LEVEL = 18


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class PushConsumerImpl(RouteAwareConsumer):
    """Implements ``ConsumerHook``, ``RebalanceCallbacks`` and ``ConsumerOps``."""

    consume_type = "CONSUME_PASSIVELY"

    def __init__(self, config: PushConsumerConfig, instance: ClientInstance, listener: Any, *,
                 orderly: bool) -> None:
        self.config = config
        self.group = config.consumer_group
        self.instance = instance
        self.clock = instance.clock
        self.orderly = orderly
        self.offset_store: OffsetStore = (
            LocalFileOffsetStore(self.group, config.offset_store_dir, instance.client_id)
            if config.message_model is MessageModel.BROADCASTING
            else RemoteBrokerOffsetStore(self.group, instance))
        self.rebalance = RebalanceImpl(instance, self.group, config.message_model, config.allocate_strategy, self)
        self.pull_api = PullAPIWrapper(instance, self.group)
        self.inner_producer = ProducerImpl(
            ProducerConfig(producer_group=CLIENT_INNER_PRODUCER_GROUP, namesrv_addr=config.namesrv_addr,
                           language=config.language, version=config.version), instance)
        self.executor = concurrent.futures.ThreadPoolExecutor(config.consume_thread_max,
                                                              thread_name_prefix=f"mqcore-consume-{self.group}")
        self.consume_service: ConsumeMessageConcurrentlyService | ConsumeMessageOrderlyService
        if orderly:
            self.consume_service = ConsumeMessageOrderlyService(self, listener, self.executor)
        else:
            self.consume_service = ConsumeMessageConcurrentlyService(self, listener, self.executor)
        self._pull_tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self._service_tasks: list[asyncio.Task[None]] = []
        self.running = False
        self.paused = False
        #: per-topic pull and consume figures (GET_CONSUMER_RUNNING_INFO's statusTable)
        self.stats = ConsumerStats(self.clock)
        self.start_timestamp = self.clock()
        #: pulls put off because a queue held too much (RocketMQ's ``queueFlowControlTimes``)
        self.flow_control_times = 0
        self._last_forced_heartbeat = 0.0
        self._default_thresholds = (config.pull_threshold_for_queue, config.pull_threshold_size_for_queue_mib * _MIB)
        self._thresholds: dict[str, tuple[int, int]] = {}

    # --- properties used by the consume services -------------------------------------------------
    @property
    def message_model(self) -> MessageModel:
        return self.config.message_model

    @property
    def max_reconsume_times(self) -> int:
        if self.config.max_reconsume_times == -1:
            return ORDERLY_MAX_RECONSUME_TIMES if self.orderly else 16
        return self.config.max_reconsume_times

    # --- subscriptions ---------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str | None, expression_type: str = "TAG") -> SubscriptionData:
        sub = build_subscription(topic, expression, self.clock(), expression_type)
        self.rebalance.subscription_inner[topic] = sub
        return sub

    def unsubscribe(self, topic: str) -> None:
        self.rebalance.subscription_inner.pop(topic, None)

    # --- ConsumerHook --------------------------------------------------------------------------------
    def consumer_data(self) -> dict[str, Any]:
        return {
            "consumeFromWhere": self.config.consume_from_where.value,
            "consumeType": self.consume_type,
            "groupName": self.group,
            "messageModel": self.config.message_model.value,
            "subscriptionDataSet": [s.to_json_obj() for s in self.rebalance.subscription_inner.values()],
            "unitMode": False,
        }

    async def do_rebalance(self) -> None:
        if self.running:
            await self.rebalance.do_rebalance(self.orderly)

    async def persist_offsets(self) -> None:
        if self.running:
            await self.offset_store.persist_all(self.rebalance.owned_queues())

    # --- RebalanceCallbacks --------------------------------------------------------------------------
    def new_process_queue(self) -> ProcessQueue:
        return ProcessQueue(self.clock, lock_max_live_time_ms=self.config.lock_max_live_time_ms,
                            pull_max_idle_time_ms=self.config.pull_max_idle_time_ms)

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        await self.offset_store.persist(mq)
        self.offset_store.remove_offset(mq)
        task = self._pull_tasks.pop(mq, None)
        if task is not None:
            task.cancel()
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            deadline = time.monotonic() + 1.0
            while not pq.consume_lock.acquire(blocking=False):
                if time.monotonic() > deadline:
                    pq.try_unlock_times += 1
                    log.warning("queue %s is still being consumed; unlocking it later", mq)
                    return False
                await asyncio.sleep(0.01)
            try:
                await self.rebalance.unlock(mq, oneway=True)
            finally:
                pq.consume_lock.release()
        return True

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        return await compute_pull_from_where(self.instance, self.offset_store, self.config, mq)

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        for pr in requests:
            old = self._pull_tasks.pop(pr.message_queue, None)
            if old is not None:
                old.cancel()
            task = asyncio.ensure_future(self._pull_loop(pr))
            task.set_name(f"pull {pr.message_queue}")
            self._pull_tasks[pr.message_queue] = task

    def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        """Split topic-wide flow-control budgets over the owned queues (Java's
        ``pullThresholdForTopic`` / ``pullThresholdSizeForTopic``, off at -1)."""
        cfg = self.config
        n = max(len(mq_divided), 1)
        count = cfg.pull_threshold_for_queue
        size_mib = cfg.pull_threshold_size_for_queue_mib
        if cfg.pull_threshold_for_topic != -1:
            count = max(1, cfg.pull_threshold_for_topic // n)
        if cfg.pull_threshold_size_for_topic_mib != -1:
            size_mib = max(1, cfg.pull_threshold_size_for_topic_mib // n)
        self._thresholds[topic] = (count, size_mib * _MIB)
        log.debug("group %s: %d queue(s) of %s owned; per-queue limits %d messages, %d MiB", self.group,
                  len(mq_divided), topic, count, size_mib)

    async def reset_offsets(self, offsets: dict[MessageQueue, int]) -> None:
        """An operator moved this group's offsets (RESET_CONSUMER_CLIENT_OFFSET, from
        ``mqadmin resetOffsetByTime``): stop the queues, store the new offsets, and let the
        next rebalance take the queues again from there (Java's ``resetOffset``). Messages
        being consumed when the reset arrives do not commit (their queue is dropped)."""
        for mq in offsets:
            pq = self.rebalance.process_queue_table.get(mq)
            if pq is not None:
                pq.dropped = True
        for mq, offset in offsets.items():
            self.offset_store.update_offset(mq, offset, increase_only=False)
            await self.offset_store.persist(mq)
            self.rebalance.remove_process_queue(mq)
            task = self._pull_tasks.pop(mq, None)
            if task is not None:
                task.cancel()
        log.info("group %s: offsets reset by the broker: %s", self.group,
                 ", ".join(f"{mq.topic}:{mq.broker_name}:{mq.queue_id}={off}" for mq, off in sorted(offsets.items())))

    # --- pulling -------------------------------------------------------------------------------------
    async def _pull_loop(self, pr: PullRequest) -> None:
        pq = pr.process_queue
        while self.running and not pq.dropped:
            try:
                delay_ms = await self._pull_once(pr)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep pulling this queue whatever went wrong once
                log.exception("pull of %s crashed; retrying", pr.message_queue)
                delay_ms = self.config.pull_time_delay_ms_when_exception
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000.0)

    def _flow_control_delay(self, pr: PullRequest) -> int:
        pq, cfg = pr.process_queue, self.config
        if self.paused:
            return PULL_DELAY_WHEN_SUSPENDED_MS
        count, size = self._thresholds.get(pr.message_queue.topic, self._default_thresholds)
        if pq.msg_count > count or pq.msg_size > size or (
                not self.orderly and pq.max_span() > cfg.consume_concurrently_max_span):
            self.flow_control_times += 1
            return PULL_DELAY_WHEN_FLOW_CONTROL_MS
        return 0

    async def _wait_for_room(self, pr: PullRequest) -> None:
        """A pull held back by flow control: wait until consumption brings the queue under its
        count and size limits (then pull again at once), at most
        ``PULL_DELAY_WHEN_FLOW_CONTROL_MS`` (the span limit is only checked again then)."""
        pq = pr.process_queue
        count, size = self._thresholds.get(pr.message_queue.topic, self._default_thresholds)
        loop = asyncio.get_running_loop()
        room = loop.create_future()

        def made_room() -> None:  # on a consume thread
            try:
                loop.call_soon_threadsafe(_resolve, room)
            except RuntimeError:  # the loop closed meanwhile (shutdown): nobody waits any more
                pass

        if not pq.notify_when_room(count, size, made_room):
            return
        try:
            await asyncio.wait_for(room, PULL_DELAY_WHEN_FLOW_CONTROL_MS / 1000.0)
        except asyncio.TimeoutError:
            pass
        finally:
            pq.cancel_room_notification()

    async def _pull_once(self, pr: PullRequest) -> float:
        pq, mq, cfg = pr.process_queue, pr.message_queue, self.config
        pq.touch_pull()
        delay = self._flow_control_delay(pr)
        if delay == PULL_DELAY_WHEN_FLOW_CONTROL_MS:
            await self._wait_for_room(pr)
            return 0
        if delay:
            return delay
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            if not pq.locked:
                return cfg.pull_time_delay_ms_when_exception
            if not pr.previously_locked:
                offset = await self.compute_pull_from_where(mq)
                if offset < 0:
                    return cfg.pull_time_delay_ms_when_exception
                pr.previously_locked = True
                pr.next_offset = offset
        sub = self.rebalance.subscription_inner.get(mq.topic)
        if sub is None:
            return cfg.pull_time_delay_ms_when_exception
        commit_offset = 0
        if self.message_model is MessageModel.CLUSTERING:
            commit_offset = max(self.offset_store.read_offset_memory(mq), 0)
        post_sub = cfg.post_subscription_when_pull
        sys_flag = build_pull_sys_flag(commit_offset=commit_offset > 0, suspend=True, subscription=post_sub)
        began = time.monotonic()
        try:
            result = await self.pull_api.pull(
                mq, sub, offset=pr.next_offset, max_nums=cfg.pull_batch_size, sys_flag=sys_flag,
                commit_offset=commit_offset, suspend_timeout_ms=cfg.broker_suspend_max_time_ms,
                timeout_ms=cfg.consumer_timeout_ms_when_suspend, expression=sub.sub_string if post_sub else None)
            self.stats.on_pull(mq.topic, len(result.messages) if result.status is PullStatus.FOUND else 0,
                               (time.monotonic() - began) * 1000)
        except (RemotingError, BrokerError, MQError) as e:
            level = logging.WARNING if pr.failures == 0 and not is_retry_topic(mq.topic) else logging.DEBUG
            log.log(level, "pull of %s at offset %d failed: %s (retrying every %d ms)", mq, pr.next_offset, e,
                    cfg.pull_time_delay_ms_when_exception)
            pr.failures += 1
            if isinstance(e, BrokerError) and e.code in _RESUBSCRIBE_CODES:
                self._heartbeat_soon()  # e.g. a restarted broker forgot our subscription
            return cfg.pull_time_delay_ms_when_exception
        if pr.failures:
            log.info("pull of %s works again after %d failure(s)", mq, pr.failures)
            pr.failures = 0
        return self._on_pull_result(pr, result)

    def _heartbeat_soon(self) -> None:
        """Send a heartbeat now (at most once a second) instead of waiting up to 30 s."""
        now = time.monotonic()
        if now - self._last_forced_heartbeat < 1.0:
            return
        self._last_forced_heartbeat = now
        task = asyncio.ensure_future(self.instance.send_heartbeat_to_all_brokers())
        self._service_tasks.append(task)
        task.add_done_callback(self._forget_service_task)

    def _forget_service_task(self, task: asyncio.Task[None]) -> None:
        if task in self._service_tasks:
            self._service_tasks.remove(task)

    def _on_pull_result(self, pr: PullRequest, result: PullResult) -> float:
        pq, mq = pr.process_queue, pr.message_queue
        status = result.status
        if status is PullStatus.FOUND:
            pr.next_offset = result.next_begin_offset
            msgs = result.messages
            if not msgs:
                return 0
            dispatch = pq.put_messages(msgs)
            self.consume_service.submit(msgs, pq, mq, dispatch)
            return self.config.pull_interval_ms
        if status in (PullStatus.NO_NEW_MSG, PullStatus.NO_MATCHED_MSG):
            pr.next_offset = result.next_begin_offset
            if pq.msg_count == 0:  # correctTagsOffset: nothing in flight, filtered-out offsets count as done
                self.offset_store.update_offset(mq, pr.next_offset, increase_only=True)
            return 0
        log.warning("offset %d of %s is illegal (queue %d..%d); restarting it from %d", pr.next_offset, mq,
                    result.min_offset, result.max_offset, result.next_begin_offset)
        pq.dropped = True
        asyncio.ensure_future(self._fix_moved_offset(mq, result.next_begin_offset))
        return 0

    async def _fix_moved_offset(self, mq: MessageQueue, next_offset: int) -> None:
        await asyncio.sleep(OFFSET_MOVED_FIX_DELAY_MS / 1000.0)
        self.offset_store.update_offset(mq, next_offset, increase_only=False)
        await self.offset_store.persist(mq)
        self.rebalance.remove_process_queue(mq)
        self._pull_tasks.pop(mq, None)
        log.info("offset of %s reset to %d; the next rebalance takes the queue again", mq, next_offset)

    # --- ConsumerOps (consume threads) -------------------------------------------------------------------
    def schedule(self, delay_ms: float, fn: Any, *args: Any) -> None:
        if not self.running or self.instance.loop_thread.closed:
            return
        loop = self.instance.loop
        try:
            self.instance.loop_thread.call_soon(lambda: loop.call_later(delay_ms / 1000.0, fn, *args))
        except ClosedError:
            log.debug("consumer %s is shutting down; dropped a delayed %s", self.group, fn)

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        reset_retry_topic(msgs, self.group)

    def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> bool:
        try:
            self.instance.loop_thread.run(self._send_back_async(msg, delay_level, broker_name),
                                          timeout_s=2 * self.config.send_back_timeout_ms / 1000.0 + 10)
        except MQError as e:
            log.warning("send-back of %s failed: %s", msg.msg_id, e)
            return False
        return True

    async def _send_back_async(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> None:
        addr = self.instance.find_broker_address_in_publish(broker_name) if broker_name else msg.store_host
        try:
            if addr is None:
                raise BrokerError(14, f"broker {broker_name} is not in any known route")
            await self.instance.api.consumer_send_message_back(addr, msg, self.group, delay_level,
                                                               self.max_reconsume_times,
                                                               self.config.send_back_timeout_ms)
        except (RemotingError, BrokerError) as e:
            log.info("CONSUMER_SEND_MSG_BACK of %s failed (%s); re-sending it to %s", msg.msg_id, e,
                     retry_topic(self.group))
            await self._send_to_retry_async(msg, msg.reconsume_times + 1)

    def send_to_retry_topic(self, msg: MessageExt) -> bool:
        """Orderly: re-send a copy to ``%RETRY%<group>`` (the broker moves it to the DLQ
        when its reconsume count is past the maximum)."""
        try:
            self.instance.loop_thread.run(self._send_to_retry_async(msg, msg.reconsume_times),
                                          timeout_s=self.config.send_back_timeout_ms / 1000.0 + 10)
        except MQError as e:
            log.warning("re-sending %s to %s failed: %s", msg.msg_id, retry_topic(self.group), e)
            return False
        return True

    async def _send_to_retry_async(self, msg: MessageExt, reconsume_times: int) -> None:
        new = Message(retry_topic(self.group), msg.body, flag=msg.flag, properties=dict(msg.properties))
        props = new.properties
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, msg.msg_id)
        props[Prop.RETRY_TOPIC] = msg.topic
        props[Prop.RECONSUME_TIME] = str(reconsume_times)
        props[Prop.MAX_RECONSUME_TIMES] = str(self.max_reconsume_times)
        props.pop(Prop.TRAN_MSG, None)
        new.delay_level = min(3 + msg.reconsume_times, MAX_DELAY_LEVEL)
        prepared = self.inner_producer.prepare(new)
        await self.inner_producer.send(prepared, CommunicationMode.SYNC)

    def lock_queue(self, mq: MessageQueue) -> bool:
        try:
            return self.instance.loop_thread.run(self.rebalance.lock(mq), timeout_s=10)
        except MQError as e:
            log.warning("locking %s failed: %s", mq, e)
            return False

    # --- lifecycle ------------------------------------------------------------------------------------------
    async def start_async(self) -> None:
        self.running = True
        self.start_timestamp = self.clock()
        self._service_tasks.append(asyncio.ensure_future(self._every(
            SAMPLE_EVERY_MS, SAMPLE_EVERY_MS, self._sample_stats)))
        self.offset_store.load()
        # every subscribed topic's route (the group's retry topic too) in one round trip's wait
        await asyncio.gather(*(self._first_route(topic) for topic in list(self.rebalance.subscription_inner)))
        await self.instance.send_heartbeat_to_all_brokers()
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            self._service_tasks.append(asyncio.ensure_future(self._every(
                self.config.lock_interval_ms, self.config.lock_interval_ms, self.rebalance.lock_all)))
        if not self.orderly:
            self._service_tasks.append(asyncio.ensure_future(self._every(
                self.config.clean_expired_interval_ms, self.config.clean_expired_interval_ms, self._clean_expired)))
        self.instance.rebalance_now()

    async def _first_route(self, topic: str) -> None:
        try:
            await self.instance.update_topic_route(topic)
        except (RemotingError, BrokerError) as e:
            log.warning("route of %s not available yet: %s", topic, e)

    async def _every(self, first_ms: int, interval_ms: int, fn: Any) -> None:
        await asyncio.sleep(first_ms / 1000.0)
        while self.running:
            try:
                await fn()
            except (RemotingError, BrokerError, MQError) as e:
                log.warning("group %s: %s failed: %s", self.group, getattr(fn, "__name__", fn), e)
            await asyncio.sleep(interval_ms / 1000.0)

    # --- tools' requests the broker forwards (GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY) ----
    def running_info(self, jstack: bool) -> bytes:
        """``ConsumerRunningInfo`` as JSON (on the loop thread, where the tables change)."""
        return running_info_body(self, self.instance.config.namesrv_addr or "", CURRENT_VERSION.name, jstack)

    async def consume_directly(self, msg: MessageExt, broker_name: str | None) -> dict[str, Any]:
        """The listener run on ``msg`` on a consume thread; ``ConsumeMessageDirectlyResult``."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, consume_directly, self, msg, broker_name)

    async def _sample_stats(self) -> None:
        self.stats.sample()

    async def _clean_expired(self) -> None:
        service = self.consume_service
        if isinstance(service, ConsumeMessageConcurrentlyService):
            for pq in list(self.rebalance.process_queue_table.values()):
                self.executor.submit(service.clean_expired_messages, pq)

    async def stop_pulling_async(self) -> None:
        self.running = False
        tasks = list(self._pull_tasks.values()) + self._service_tasks
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pull_tasks.clear()
        self._service_tasks.clear()

    async def finish_async(self) -> None:
        """After the consume threads stopped: persist offsets, release locks, unregister."""
        owned = self.rebalance.owned_queues()
        await self.offset_store.persist_all(owned, oneway=False)
        if self.orderly and self.message_model is MessageModel.CLUSTERING:
            await self.rebalance.unlock_all(oneway=False)
        for pq in self.rebalance.process_queue_table.values():
            pq.dropped = True
        self.instance.unregister_consumer(self.group)
        self.instance.unregister_producer(CLIENT_INNER_PRODUCER_GROUP)
        await self.instance.unregister_client(None, self.group)
