"""``PullConsumer``: pull a given queue at a given offset (``DefaultMQPullConsumer``).

For tools and custom consumers that manage queues and offsets themselves::

    with PullConsumer("tools", namesrv_addr="127.0.0.1:9876") as pc:
        for mq in pc.fetch_subscribe_message_queues("Orders"):
            result = pc.pull(mq, "*", offset=pc.min_offset(mq), max_nums=32)
            for msg in result.messages: ...
            pc.update_consume_offset(mq, result.next_begin_offset)   # persisted on shutdown / commit()

``pull`` answers at once; ``pull_block_if_not_found`` lets the broker hold the
request until a message arrives (20 s). No rebalancing, no retries, no listeners.

Thread model: every method may be called from any thread (each blocks on the
client's event loop).
"""
from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import Any, TypeVar, Unpack, cast

from mqcore.client.config import MessageModel, PullConsumerConfig, build
from mqcore.client.consumer.offset_store import (
    LocalFileOffsetStore,
    OffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from mqcore.client.consumer.pull_kernel import PullAPIWrapper, build_pull_sys_flag
from mqcore.client.consumer.subscription import build_subscription
from mqcore.client.instance import ClientInstance
from mqcore.client.message import MessageExt, PullResult
from mqcore.client.route import TopicRouteData, route_to_subscribe_info
from mqcore.client.validators import check_topic
from mqcore.client.settings import PullConsumerSettings
from mqcore.clock import Clock, system_clock_ms
from mqcore.errors import ClosedError, ConfigError, IllegalArgumentError, IllegalStateError, MQError
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["PullConsumer"]


class _PullHook:
    """ConsumerHook for the instance: heartbeat as CONSUME_ACTIVELY, persist offsets."""

    def __init__(self, group: str, model: MessageModel, store: OffsetStore) -> None:
        self.group = group
        self.model = model
        self.store = store
        self.topics: set[str] = set()

    def subscribed_topics(self) -> list[str]:
        return sorted(self.topics)

    def needs_route(self, topic: str) -> bool:
        return False

    def on_route_changed(self, topic: str, route: TopicRouteData) -> None:
        """Pull consumers read routes on demand."""

    def consumer_data(self) -> dict[str, Any]:
        subs = [build_subscription(t, "*", 0).to_json_obj() for t in sorted(self.topics)]
        return {"consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "consumeType": "CONSUME_ACTIVELY",
                "groupName": self.group, "messageModel": self.model.value, "subscriptionDataSet": subs,
                "unitMode": False}

    async def do_rebalance(self) -> None:
        """No rebalancing: the caller chooses queues."""

    async def persist_offsets(self) -> None:
        await self.store.persist_all(set(self.store.snapshot()))


class PullConsumer:
    """See the module docstring. Settings are ``PullConsumerConfig`` fields."""

    def __init__(self, consumer_group: str | None = None, *, config: PullConsumerConfig | None = None,
                 clock: Clock = system_clock_ms, **settings: Unpack[PullConsumerSettings]) -> None:
        if consumer_group is not None:
            cast("dict[str, object]", settings)["consumer_group"] = consumer_group  # the config's field: the TypedDict leaves the group out (it is the first parameter)
        self.config: PullConsumerConfig = build(PullConsumerConfig, config, settings)
        if self.config.namespace:  # refused, not ignored: its queues and messages would be misnamed
            raise ConfigError("namespace is not supported by PullConsumer yet (Producer and PushConsumer take it)")
        self._instance = ClientInstance(self.config, clock=clock)
        cfg = self.config
        self.offset_store: OffsetStore = (
            LocalFileOffsetStore(cfg.consumer_group, _offset_dir(), self._instance.client_id)
            if cfg.message_model is MessageModel.BROADCASTING
            else RemoteBrokerOffsetStore(cfg.consumer_group, self._instance))
        self._hook = _PullHook(cfg.consumer_group, cfg.message_model, self.offset_store)
        self._pull_api = PullAPIWrapper(self._instance, cfg.consumer_group)
        self._state = "created"

    def start(self) -> PullConsumer:
        if self._state == "running":
            return self
        if self._state == "shutdown":
            raise ClosedError("this consumer was shut down; create a new one")
        self.offset_store.load()
        self._instance.register_consumer(self._hook)
        self._instance.start()
        self._state = "running"
        return self

    def shutdown(self) -> None:
        """Persist updated offsets, unregister, close. Idempotent."""
        if self._state != "running":
            self._state = "shutdown"
            return
        self._state = "shutdown"
        try:
            self._run(self._shutdown_async())
        except MQError as e:
            log.warning("pull consumer %s: clean shutdown failed: %s", self.config.consumer_group, e)
        finally:
            self._instance.shutdown()

    async def _shutdown_async(self) -> None:
        await self.offset_store.persist_all(set(self.offset_store.snapshot()), oneway=False)
        self._instance.unregister_consumer(self.config.consumer_group)
        await self._instance.unregister_client(None, self.config.consumer_group)

    def __enter__(self) -> PullConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60) -> T:
        if self._state != "running" and self._state != "shutdown":
            coro.close()
            raise IllegalStateError("start() the pull consumer first")
        return self._instance.loop_thread.run(coro, timeout_s=timeout_s)

    # --- metadata -------------------------------------------------------------------------------------
    def fetch_subscribe_message_queues(self, topic: str) -> list[MessageQueue]:
        """Every readable queue of ``topic``."""
        check_topic(topic)
        self._hook.topics.add(topic)
        self._run(self._instance.update_topic_route(topic))
        route = self._instance.route_table.get(topic)
        if route is None:
            raise IllegalArgumentError(f"topic {topic!r} has no route; create it first")
        return sorted(route_to_subscribe_info(topic, route))

    async def _offset(self, kind: str, mq: MessageQueue, arg: int = 0) -> int:
        addr = await self._instance.broker_addr_for(mq)
        api, timeout = self._instance.api, self._instance.config.mq_client_api_timeout_ms
        if kind == "min":
            return await api.get_min_offset(addr, mq, timeout)
        if kind == "max":
            return await api.get_max_offset(addr, mq, timeout)
        if kind == "earliest":
            return await api.get_earliest_msg_storetime(addr, mq, timeout)
        return await api.search_offset(addr, mq, arg, timeout)

    def min_offset(self, mq: MessageQueue) -> int:
        return self._run(self._offset("min", mq))

    def max_offset(self, mq: MessageQueue) -> int:
        """The next offset to be written (one past the last message)."""
        return self._run(self._offset("max", mq))

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._run(self._offset("search", mq, timestamp_ms))

    def earliest_msg_store_time(self, mq: MessageQueue) -> int:
        return self._run(self._offset("earliest", mq))

    # --- pulling ----------------------------------------------------------------------------------------
    def pull(self, mq: MessageQueue, expression: str = "*", offset: int = 0, max_nums: int = 32,
             timeout_ms: float | None = None) -> PullResult:
        """Pull up to ``max_nums`` messages of ``mq`` from ``offset``; answers at once."""
        return self._run(self._pull(mq, expression, offset, max_nums, block=False, timeout_ms=timeout_ms))

    def pull_block_if_not_found(self, mq: MessageQueue, expression: str = "*", offset: int = 0,
                                max_nums: int = 32) -> PullResult:
        """Like ``pull`` but the broker holds the request up to 20 s until a message arrives."""
        return self._run(self._pull(mq, expression, offset, max_nums, block=True, timeout_ms=None))

    async def _pull(self, mq: MessageQueue, expression: str, offset: int, max_nums: int, *, block: bool,
                    timeout_ms: float | None) -> PullResult:
        if offset < 0:
            raise IllegalArgumentError(f"offset must be >= 0, got {offset}")
        if max_nums <= 0:
            raise IllegalArgumentError(f"max_nums must be > 0, got {max_nums}")
        cfg = self.config
        self._hook.topics.add(mq.topic)
        sub = build_subscription(mq.topic, expression, self._instance.clock())
        sys_flag = build_pull_sys_flag(commit_offset=False, suspend=block, subscription=True)
        timeout = cfg.consumer_timeout_ms_when_suspend if block else (timeout_ms or cfg.consumer_pull_timeout_ms)
        return await self._pull_api.pull(mq, sub, offset=offset, max_nums=max_nums, sys_flag=sys_flag,
                                         commit_offset=0, suspend_timeout_ms=cfg.broker_suspend_max_time_ms,
                                         timeout_ms=timeout, expression=sub.sub_string)

    # --- offsets and retries ------------------------------------------------------------------------------
    def fetch_consume_offset(self, mq: MessageQueue, from_store: bool = True) -> int:
        """The group's offset of ``mq`` (-1 if none)."""
        kind = ReadOffsetType.READ_FROM_STORE if from_store else ReadOffsetType.MEMORY_FIRST_THEN_STORE
        return self._run(self.offset_store.read_offset(mq, kind))

    def update_consume_offset(self, mq: MessageQueue, offset: int) -> None:
        """Remember ``offset`` for ``mq``; sent to the broker every 5 s, by ``commit()`` and at shutdown."""
        self._hook.topics.add(mq.topic)
        self.offset_store.update_offset(mq, offset, increase_only=False)

    def commit(self) -> None:
        """Send every updated offset now and wait for the broker. Raises the first failure once
        every queue was tried: ``ConsumerGroupNotFoundError`` when a broker knows no such group
        (RocketMQ 5.x refuses such commits) and would not create it, another ``BrokerError`` or
        ``RemotingError`` otherwise (those offsets stay and go again with the next commit)."""
        self._run(self.offset_store.commit_all(set(self.offset_store.snapshot())))

    def send_message_back(self, msg: MessageExt, delay_level: int = 0, broker_name: str | None = None) -> None:
        """CONSUMER_SEND_MSG_BACK: the broker redelivers ``msg`` through ``%RETRY%<group>``."""
        async def go() -> None:
            name = broker_name or msg.broker_name
            addr = self._instance.find_broker_address_in_publish(name) if name else None
            await self._instance.api.consumer_send_message_back(
                addr or msg.store_host, msg, self.config.consumer_group, delay_level, self.config.max_reconsume_times,
                self._instance.config.mq_client_api_timeout_ms)
        self._run(go())

    def view_message(self, offset_msg_id: str) -> MessageExt:
        """The message with this broker id (``SendResult.offset_msg_id``)."""
        from mqcore.message import decode_offset_msg_id
        ip, port, _phy = decode_offset_msg_id(offset_msg_id)
        addr = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
        return self._run(self._instance.api.view_message(addr, offset_msg_id,
                                                         self._instance.config.mq_client_api_timeout_ms))

    def query_message(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                      end_ms: int | None = None) -> list[MessageExt]:
        """Messages of ``topic`` whose KEYS include ``key``, stored between ``begin_ms`` and ``end_ms``
        (epoch ms, default now), from every broker of the topic's route (``MQAdmin.queryMessage``).

        A broker's index is a hash table, so it may also answer messages whose key only collides
        with ``key``: those are dropped here, as the Java client does."""
        check_topic(topic)
        if max_num <= 0:
            raise IllegalArgumentError(f"max_num must be > 0, got {max_num}")
        end = int(self._instance.clock()) if end_ms is None else end_ms

        async def go() -> list[MessageExt]:
            await self._instance.update_topic_route(topic)
            route = self._instance.route_table.get(topic)
            if route is None:
                raise IllegalArgumentError(f"topic {topic!r} has no route")
            api, timeout = self._instance.api, self._instance.config.mq_client_api_timeout_ms
            out: list[MessageExt] = []
            for bd in route.broker_datas:
                addr = bd.any_addr()
                if addr is not None:
                    found = await api.query_message(addr, topic, key, max_num, begin_ms, end, timeout)
                    out.extend(m for m in found if m.topic == topic and key in m.keys)
            return out
        return self._run(go())

    @property
    def client_id(self) -> str:
        return self._instance.client_id


def _offset_dir() -> str:
    from mqcore.client.config import default_offset_store_dir
    return default_offset_store_dir()
