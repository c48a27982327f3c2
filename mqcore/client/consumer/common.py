"""Helpers shared by the push, lite-pull and pull consumers.

Thread model: the coroutines run on the client's event loop; the plain functions
are pure and may run anywhere.
"""
from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any

from mqcore.client.config import ConsumeFromWhere
from mqcore.client.consumer.offset_store import OffsetStore, ReadOffsetType
from mqcore.client.instance import ClientInstance
from mqcore.client.message import MessageExt
from mqcore.client.route import TopicRouteData, route_to_subscribe_info
from mqcore.message import Prop, is_retry_topic, retry_topic
from mqcore.remoting.bodies import MessageQueue

if TYPE_CHECKING:  # annotations only (rebalance_impl is a heavier import)
    from mqcore.client.consumer.rebalance_impl import RebalanceImpl

__all__ = ["RouteAwareConsumer", "compute_pull_from_where", "consume_timestamp_ms", "reset_retry_topic"]


class RouteAwareConsumer:
    """The route half of the ConsumerHook, shared by consumers that rebalance: which topics
    they need routes for, and where new routes go (``self.rebalance`` is a RebalanceImpl)."""

    rebalance: RebalanceImpl

    def subscribed_topics(self) -> list[str]:
        return list(self.rebalance.subscription_inner)

    def needs_route(self, topic: str) -> bool:
        return topic in self.rebalance.subscription_inner and topic not in self.rebalance.topic_subscribe_info

    def on_route_changed(self, topic: str, route: TopicRouteData) -> None:
        if topic in self.rebalance.subscription_inner:
            self.rebalance.topic_subscribe_info[topic] = route_to_subscribe_info(topic, route)


def consume_timestamp_ms(text: str | None, now_ms: int) -> int:
    """``yyyyMMddHHmmss`` (local time) -> epoch ms; ``None`` = now - 30 min (Java's default)."""
    if text is None:
        return now_ms - 30 * 60_000
    return int(_dt.datetime.strptime(text, "%Y%m%d%H%M%S").timestamp() * 1000)


async def compute_pull_from_where(instance: ClientInstance, offset_store: OffsetStore, config: Any,
                                  mq: MessageQueue) -> int:
    """``computePullFromWhereWithException``: the stored offset, else per
    ``consume_from_where`` (a retry topic starts at 0 or its end); -1 = not now."""
    last = await offset_store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
    if last >= 0:
        return last
    if last != -1:
        return -1
    where = config.consume_from_where
    if where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET or (
            is_retry_topic(mq.topic) and where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET):
        return 0
    addr = await instance.broker_addr_for(mq)
    timeout = instance.config.mq_client_api_timeout_ms
    if where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET or is_retry_topic(mq.topic):
        return await instance.api.get_max_offset(addr, mq, timeout)
    ts = consume_timestamp_ms(config.consume_timestamp, instance.clock())
    return await instance.api.search_offset(addr, mq, ts, timeout)


def reset_retry_topic(msgs: list[MessageExt], group: str) -> None:
    """Messages redelivered through ``%RETRY%<group>`` show their original topic again."""
    group_topic = retry_topic(group)
    for msg in msgs:
        if msg.topic == group_topic:
            original = msg.properties.get(Prop.RETRY_TOPIC)
            if original:
                msg.topic = original
