"""``LitePullConsumer``: ``poll()`` for messages yourself (``DefaultLitePullConsumer``).

::

    with LitePullConsumer("reports", namesrv_addr="127.0.0.1:9876") as consumer:
        consumer.subscribe("Orders", "*")           # group-balanced queues...
        # consumer.assign([...]) instead: exactly these queues, no rebalance
        while running:
            for msg in consumer.poll(timeout_ms=1000):
                handle(msg)

Background tasks long-poll every assigned queue (``pull_batch_size`` 10) into a
local cache bounded by ``pull_threshold_for_all`` / per-queue thresholds; ``poll``
takes one pulled batch from it. With ``auto_commit`` (default) the offsets of what
earlier ``poll`` calls returned are committed at the next ``poll`` once
``auto_commit_interval_ms`` has passed (at-least-once); otherwise call
``commit_sync()``. ``seek`` restarts a queue at any offset.

Thread model: one thread polls (``poll``, ``commit*``, ``seek*``, ``pause``/``resume``
may be called from any thread but are meant for the polling thread); pulling runs on
the client's event loop.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import queue
import threading
import time
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar, Unpack, cast

from mqcore.client.config import LitePullConsumerConfig, MessageModel, build
from mqcore.client.consumer.common import RouteAwareConsumer, compute_pull_from_where
from mqcore.client.consumer.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    RemoteBrokerOffsetStore,
)
from mqcore.client.consumer.process_queue import ProcessQueue
from mqcore.client.consumer.pull_kernel import PullAPIWrapper, build_pull_sys_flag
from mqcore.client.consumer.rebalance_impl import PullRequest, RebalanceImpl
from mqcore.client.consumer.subscription import SubscriptionData, build_subscription
from mqcore.client.instance import ClientInstance
from mqcore.client.message import MessageExt, PullStatus
from mqcore.client.route import route_to_subscribe_info
from mqcore.client.validators import check_topic
from mqcore.client.settings import LitePullConsumerSettings
from mqcore.clock import Clock, system_clock_ms
from mqcore.errors import (
    BrokerError,
    ClosedError,
    ConfigError,
    IllegalArgumentError,
    IllegalStateError,
    MQError,
    RemotingError,
)
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["LitePullConsumer"]

_MIB = 1024 * 1024
FLOW_CONTROL_DELAY_MS = 50
PAUSED_DELAY_MS = 1000


class _Mode(enum.Enum):
    UNSET = "unset"
    SUBSCRIBE = "subscribe"
    ASSIGN = "assign"


class _Request:
    __slots__ = ("msgs", "mq", "pq")

    def __init__(self, msgs: list[MessageExt], mq: MessageQueue, pq: ProcessQueue) -> None:
        self.msgs, self.mq, self.pq = msgs, mq, pq


class _LiteImpl(RouteAwareConsumer):
    """Loop-thread side: rebalance callbacks, pull tasks, offset persistence."""

    consume_type = "CONSUME_ACTIVELY"

    def __init__(self, owner: LitePullConsumer, instance: ClientInstance) -> None:
        cfg = owner.config
        self.owner = owner
        self.config = cfg
        self.group = cfg.consumer_group
        self.instance = instance
        self.offset_store: OffsetStore = (
            LocalFileOffsetStore(self.group, cfg.offset_store_dir, instance.client_id)
            if cfg.message_model is MessageModel.BROADCASTING else RemoteBrokerOffsetStore(self.group, instance))
        self.rebalance = RebalanceImpl(instance, self.group, cfg.message_model, cfg.allocate_strategy, self)
        self.pull_api = PullAPIWrapper(instance, self.group)
        self.queues: dict[MessageQueue, ProcessQueue] = {}
        self.pull_offsets: dict[MessageQueue, int] = {}
        self.tasks: dict[MessageQueue, asyncio.Task[None]] = {}
        self.paused: set[MessageQueue] = set()
        self.running = False

    # --- ConsumerHook ---------------------------------------------------------------------------
    def consumer_data(self) -> dict[str, Any]:
        return {"consumeFromWhere": self.config.consume_from_where.value, "consumeType": self.consume_type,
                "groupName": self.group, "messageModel": self.config.message_model.value,
                "subscriptionDataSet": [s.to_json_obj() for s in self.rebalance.subscription_inner.values()],
                "unitMode": False}

    async def do_rebalance(self) -> None:
        if self.running and self.owner._mode is _Mode.SUBSCRIBE:
            await self.rebalance.do_rebalance(False)

    async def persist_offsets(self) -> None:
        if self.running:
            await self.offset_store.persist_all(set(self.queues))

    # --- RebalanceCallbacks ----------------------------------------------------------------------
    def new_process_queue(self) -> ProcessQueue:
        return ProcessQueue(self.instance.clock)

    async def remove_unnecessary_message_queue(self, mq: MessageQueue, pq: ProcessQueue) -> bool:
        self._stop_queue(mq)
        await self.offset_store.persist(mq)
        self.offset_store.remove_offset(mq)
        return True

    async def compute_pull_from_where(self, mq: MessageQueue) -> int:
        return await compute_pull_from_where(self.instance, self.offset_store, self.config, mq)

    def dispatch_pull_requests(self, requests: list[PullRequest]) -> None:
        for pr in requests:
            self.start_queue(pr.message_queue, pr.process_queue, pr.next_offset)

    def message_queue_changed(self, topic: str, mq_all: set[MessageQueue], mq_divided: set[MessageQueue]) -> None:
        log.info("lite pull group %s now owns %d queue(s) of %s", self.group, len(mq_divided), topic)

    # --- pulling ------------------------------------------------------------------------------------
    def start_queue(self, mq: MessageQueue, pq: ProcessQueue, offset: int) -> None:
        self._stop_queue(mq)
        self.queues[mq] = pq
        self.pull_offsets[mq] = offset
        task = asyncio.ensure_future(self._pull_loop(mq, pq))
        task.set_name(f"lite-pull {mq}")
        self.tasks[mq] = task

    def _stop_queue(self, mq: MessageQueue) -> None:
        task = self.tasks.pop(mq, None)
        if task is not None:
            task.cancel()
        pq = self.queues.pop(mq, None)
        if pq is not None:
            pq.dropped = True

    async def _pull_loop(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        while self.running and not pq.dropped:
            try:
                delay = await self._pull_once(mq, pq)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the queue alive whatever one pull did
                log.exception("lite pull of %s crashed; retrying", mq)
                delay = self.config.pull_time_delay_ms_when_exception
            if delay:
                await asyncio.sleep(delay / 1000.0)

    def _flow_delay(self, mq: MessageQueue, pq: ProcessQueue) -> int:
        cfg = self.config
        if mq in self.paused:
            return PAUSED_DELAY_MS
        if self.owner._cache.qsize() * cfg.pull_batch_size > cfg.pull_threshold_for_all:
            return FLOW_CONTROL_DELAY_MS
        if pq.msg_count > cfg.pull_threshold_for_queue or pq.msg_size > cfg.pull_threshold_size_for_queue_mib * _MIB:
            return FLOW_CONTROL_DELAY_MS
        return 0

    def _subscription(self, topic: str) -> SubscriptionData:
        sub = self.rebalance.subscription_inner.get(topic)
        return sub if sub is not None else build_subscription(topic, "*", 0)

    async def _pull_once(self, mq: MessageQueue, pq: ProcessQueue) -> float:
        delay = self._flow_delay(mq, pq)
        if delay:
            return delay
        pq.touch_pull()
        cfg = self.config
        offset = self.pull_offsets.get(mq, -1)
        if offset < 0:
            offset = await self.compute_pull_from_where(mq)
            if offset < 0:
                return cfg.pull_time_delay_ms_when_exception
            self.pull_offsets[mq] = offset
        sub = self._subscription(mq.topic)
        sys_flag = build_pull_sys_flag(commit_offset=False, suspend=True, subscription=True, lite_pull=True)
        try:
            result = await self.pull_api.pull(
                mq, sub, offset=offset, max_nums=cfg.pull_batch_size, sys_flag=sys_flag, commit_offset=0,
                suspend_timeout_ms=cfg.broker_suspend_max_time_ms, timeout_ms=cfg.consumer_timeout_ms_when_suspend,
                expression=sub.sub_string)
        except (RemotingError, BrokerError, MQError) as e:
            log.warning("lite pull of %s at %d failed: %s", mq, offset, e)
            return cfg.pull_time_delay_ms_when_exception
        if pq.dropped:
            return 0
        if result.status is PullStatus.OFFSET_ILLEGAL:
            log.warning("offset %d of %s is illegal; continuing at %d", offset, mq, result.next_begin_offset)
        elif result.status is PullStatus.FOUND and result.messages:
            pq.put_messages(result.messages)
            self.owner._cache.put(_Request(result.messages, mq, pq))
        self.pull_offsets[mq] = result.next_begin_offset
        return 0

    # --- assignment / seek / commit ---------------------------------------------------------------------
    async def assign(self, mqs: set[MessageQueue]) -> None:
        for mq in list(self.queues):
            if mq not in mqs:
                await self.remove_unnecessary_message_queue(mq, self.queues[mq])
        for mq in sorted(mqs):
            if mq not in self.queues:
                self.start_queue(mq, self.new_process_queue(), -1)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        if mq not in self.queues:
            raise IllegalStateError(f"{mq} is not assigned to this consumer; seek works on assigned queues")
        addr = await self.instance.broker_addr_for(mq)
        timeout = self.instance.config.mq_client_api_timeout_ms
        lo = await self.instance.api.get_min_offset(addr, mq, timeout)
        hi = await self.instance.api.get_max_offset(addr, mq, timeout)
        if offset == -1:
            offset = hi
        elif offset == -2:
            offset = lo
        if not lo <= offset <= hi:
            raise IllegalArgumentError(f"seek offset {offset} of {mq} is outside {lo}..{hi}")
        new_pq = self.new_process_queue()
        if mq in self.rebalance.process_queue_table:
            self.rebalance.process_queue_table[mq] = new_pq
        self.offset_store.update_offset(mq, offset, increase_only=False)
        self.owner._consume_offsets.pop(mq, None)
        self.start_queue(mq, new_pq, offset)

    async def commit(self, offsets: dict[MessageQueue, int], *, oneway: bool, strict: bool = False) -> None:
        """``strict``: raise the first failure (``commit_sync``), else log it (auto-commit, shutdown)."""
        for mq, offset in offsets.items():
            if mq in self.queues:
                self.offset_store.update_offset(mq, offset, increase_only=False)
        if strict:
            await self.offset_store.commit_all(set(self.queues))
        else:
            await self.offset_store.persist_all(set(self.queues), oneway=oneway)

    async def start_async(self) -> None:
        self.running = True
        self.offset_store.load()
        for topic in list(self.rebalance.subscription_inner):
            try:
                await self.instance.update_topic_route(topic)
            except (RemotingError, BrokerError) as e:
                log.warning("route of %s not available yet: %s", topic, e)
        await self.instance.send_heartbeat_to_all_brokers()
        self.instance.rebalance_now()

    async def shutdown_async(self, offsets: dict[MessageQueue, int]) -> None:
        self.running = False
        tasks = list(self.tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.commit(offsets, oneway=False)
        for mq in list(self.queues):
            self._stop_queue(mq)
        self.instance.unregister_consumer(self.group)
        await self.instance.unregister_client(None, self.group)


class LitePullConsumer:
    """See the module docstring. Settings are ``LitePullConsumerConfig`` fields."""

    def __init__(self, consumer_group: str | None = None, *, config: LitePullConsumerConfig | None = None,
                 clock: Clock = system_clock_ms, **settings: Unpack[LitePullConsumerSettings]) -> None:
        if consumer_group is not None:
            cast("dict[str, object]", settings)["consumer_group"] = consumer_group  # the config's field: the TypedDict leaves the group out (it is the first parameter)
        self.config: LitePullConsumerConfig = build(LitePullConsumerConfig, config, settings)
        if self.config.namespace:  # refused, not ignored: its queues and messages would be misnamed
            raise ConfigError("namespace is not supported by LitePullConsumer yet (Producer and PushConsumer take it)")
        self._clock = clock
        self._mode = _Mode.UNSET
        self._subscriptions: dict[str, str] = {}
        self._assigned: set[MessageQueue] = set()
        self._cache: queue.Queue[_Request] = queue.Queue()
        self._consume_offsets: dict[MessageQueue, int] = {}
        self._offsets_lock = threading.Lock()
        self._next_auto_commit = 0.0
        self._instance: ClientInstance | None = None
        self._impl: _LiteImpl | None = None
        self._state = "created"

    # --- configuration -----------------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic`` with queues balanced across the group."""
        check_topic(topic)
        if self._mode is _Mode.ASSIGN:
            raise IllegalStateError("subscribe() and assign() cannot be mixed on one consumer")
        self._mode = _Mode.SUBSCRIBE
        self._subscriptions[topic] = expression
        if self._impl is not None and self._state == "running":
            self._impl.rebalance.subscription_inner[topic] = build_subscription(topic, expression, self._clock())
            self._run(self._after_subscription_change(topic))

    async def _after_subscription_change(self, topic: str) -> None:
        assert self._instance is not None
        await self._instance.update_topic_route(topic)
        await self._instance.send_heartbeat_to_all_brokers()
        self._instance.rebalance_now()

    def assign(self, message_queues: Iterable[MessageQueue]) -> None:
        """Consume exactly these queues (no group rebalancing)."""
        if self._mode is _Mode.SUBSCRIBE:
            raise IllegalStateError("subscribe() and assign() cannot be mixed on one consumer")
        self._mode = _Mode.ASSIGN
        self._assigned = set(message_queues)
        if self._impl is not None and self._state == "running":
            self._sync_assign_subscriptions()
            self._run(self._impl.assign(set(self._assigned)))

    def _sync_assign_subscriptions(self) -> None:
        assert self._impl is not None
        inner = self._impl.rebalance.subscription_inner
        for topic in {mq.topic for mq in self._assigned}:
            inner.setdefault(topic, build_subscription(topic, "*", self._clock()))

    # --- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> LitePullConsumer:
        if self._state == "running":
            return self
        if self._state == "shutdown":
            raise ClosedError("this consumer was shut down; create a new one")
        broadcasting = self.config.message_model is MessageModel.BROADCASTING
        instance = ClientInstance(self.config, clock=self._clock, change_instance_name=not broadcasting,
                                  rebalance_interval_ms=self.config.rebalance_interval_ms)
        impl = _LiteImpl(self, instance)
        for topic, expression in self._subscriptions.items():
            impl.rebalance.subscription_inner[topic] = build_subscription(topic, expression, self._clock())
        self._instance, self._impl = instance, impl
        if self._mode is _Mode.ASSIGN:
            self._sync_assign_subscriptions()
        instance.register_consumer(impl)
        instance.start()
        try:
            instance.loop_thread.run(impl.start_async(), timeout_s=60)
            if self._mode is _Mode.ASSIGN:
                instance.loop_thread.run(impl.assign(set(self._assigned)), timeout_s=60)
        except MQError:
            instance.shutdown()
            raise
        self._state = "running"
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000.0
        log.info("lite pull consumer %s started as %s", self.config.consumer_group, instance.client_id)
        return self

    def shutdown(self) -> None:
        """Commit what ``poll`` returned, stop pulling, unregister. Idempotent."""
        if self._state != "running":
            self._state = "shutdown"
            return
        self._state = "shutdown"
        assert self._instance is not None and self._impl is not None
        try:
            self._instance.loop_thread.run(self._impl.shutdown_async(self._take_offsets()), timeout_s=30)
        except MQError as e:
            log.warning("lite pull consumer %s: clean shutdown failed: %s", self.config.consumer_group, e)
        finally:
            self._instance.shutdown()

    def __enter__(self) -> LitePullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _check_running(self) -> None:
        if self._state != "running":
            raise IllegalStateError(f"lite pull consumer {self.config.consumer_group} is {self._state}; start() it")

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self._instance is not None
        return self._instance.loop_thread.run(coro, timeout_s=60)

    # --- polling ----------------------------------------------------------------------------------------------
    def poll(self, timeout_ms: float | None = None) -> list[MessageExt]:
        """The next pulled batch, or ``[]`` after ``timeout_ms`` (default ``poll_timeout_ms``)."""
        self._check_running()
        if self.config.auto_commit and time.monotonic() >= self._next_auto_commit:
            self._auto_commit()
        timeout = (self.config.poll_timeout_ms if timeout_ms is None else timeout_ms) / 1000.0
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                req = self._cache.get(timeout=max(remaining, 0)) if remaining > 0 else self._cache.get_nowait()
            except queue.Empty:
                return []
            if req.pq.dropped:
                continue
            offset = req.pq.remove_messages(req.msgs)
            if offset >= 0:
                with self._offsets_lock:
                    self._consume_offsets[req.mq] = offset
            return req.msgs

    def _take_offsets(self) -> dict[MessageQueue, int]:
        with self._offsets_lock:
            return dict(self._consume_offsets)

    def _auto_commit(self) -> None:
        assert self._instance is not None and self._impl is not None
        self._next_auto_commit = time.monotonic() + self.config.auto_commit_interval_ms / 1000.0
        future = self._instance.loop_thread.submit(self._impl.commit(self._take_offsets(), oneway=True))
        future.add_done_callback(_log_commit_failure)

    def commit_sync(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        """Commit the offsets of what ``poll`` returned so far (or ``offsets``) and wait; raises
        the first failure as ``PullConsumer.commit`` does (``ConsumerGroupNotFoundError`` included)."""
        self._check_running()
        assert self._impl is not None
        self._run(self._impl.commit(offsets if offsets is not None else self._take_offsets(), oneway=False,
                                    strict=True))

    def committed(self, mq: MessageQueue) -> int:
        """The group's stored offset of ``mq`` (asks the broker), -1 if none."""
        self._check_running()
        assert self._impl is not None
        from mqcore.client.consumer.offset_store import ReadOffsetType
        return self._run(self._impl.offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE))

    # --- seeking and flow ---------------------------------------------------------------------------------------
    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Continue ``mq`` at ``offset`` (messages pulled but not polled are dropped)."""
        self._check_running()
        assert self._impl is not None
        self._run(self._impl.seek(mq, offset))

    def seek_to_begin(self, mq: MessageQueue) -> None:
        self.seek(mq, -2)

    def seek_to_end(self, mq: MessageQueue) -> None:
        self.seek(mq, -1)

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        if self._impl is not None:
            self._impl.paused.update(mqs)

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        if self._impl is not None:
            self._impl.paused.difference_update(mqs)

    def assignment(self) -> set[MessageQueue]:
        """Queues currently pulled by this consumer."""
        if self._impl is None or self._state != "running":
            return set()
        return self._run(_queues(self._impl))

    def fetch_message_queues(self, topic: str) -> list[MessageQueue]:
        """All readable queues of ``topic`` (for ``assign``)."""
        self._check_running()
        assert self._instance is not None and self._impl is not None
        self._run(self._instance.update_topic_route(topic))
        route = self._instance.route_table.get(topic)
        if route is None:
            raise IllegalArgumentError(f"topic {topic!r} has no route; create it first")
        return sorted(route_to_subscribe_info(topic, route))

    @property
    def client_id(self) -> str | None:
        return self._instance.client_id if self._instance is not None else None

    def __repr__(self) -> str:
        return f"LitePullConsumer(group={self.config.consumer_group!r}, {self._mode.value}, {self._state})"


async def _queues(impl: _LiteImpl) -> set[MessageQueue]:
    return set(impl.queues)


def _log_commit_failure(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("auto-commit failed: %s", future.exception())
