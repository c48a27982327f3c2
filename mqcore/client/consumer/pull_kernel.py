"""One PULL_MESSAGE round trip and its result handling (``PullAPIWrapper``).

Shared by the push, lite-pull and low-level pull consumers. ``pull`` picks the broker
node (the master unless the broker suggested a slave last time), sends the request
and turns the answer into a :class:`PullResult`: records decoded (and decompressed),
re-filtered by tag *string* (the broker filtered by hash code), and stamped with the
queue's ``MIN_OFFSET``/``MAX_OFFSET`` as the Java client does.

Thread model: event-loop thread only.
"""
from __future__ import annotations

import logging

from mqcore.client.api import offsets_suffix
from mqcore.client.consumer.subscription import SubscriptionData
from mqcore.client.instance import ClientInstance
from mqcore.client.message import PullResult
from mqcore.client.route import MASTER_ID
from mqcore.errors import NoRouteError
from mqcore.remoting.bodies import MessageQueue
from mqcore.remoting.codes import PullSysFlag
from mqcore.remoting.headers import PullMessageRequestHeader

log = logging.getLogger(__name__)

__all__ = ["PullAPIWrapper", "build_pull_sys_flag", "offsets_suffix"]


def build_pull_sys_flag(*, commit_offset: bool, suspend: bool, subscription: bool,
                        class_filter: bool = False, lite_pull: bool = False) -> int:
    flag = 0
    if commit_offset:
        flag |= PullSysFlag.COMMIT_OFFSET
    if suspend:
        flag |= PullSysFlag.SUSPEND
    if subscription:
        flag |= PullSysFlag.SUBSCRIPTION
    if class_filter:
        flag |= PullSysFlag.CLASS_FILTER
    if lite_pull:
        flag |= PullSysFlag.LITE_PULL
    return int(flag)


class PullAPIWrapper:
    """Pulls for one consumer group."""

    def __init__(self, instance: ClientInstance, group: str) -> None:
        self.instance = instance
        self.group = group
        #: answers decoded straight from the receive buffer (False: the generic path, bodies
        #: copied into the answer first; the same messages)
        self.from_buffer = True
        self._pull_from_which_node: dict[MessageQueue, int] = {}

    async def pull(self, mq: MessageQueue, subscription: SubscriptionData, *, offset: int, max_nums: int,
                   sys_flag: int, commit_offset: int, suspend_timeout_ms: int, timeout_ms: float,
                   expression: str | None = None) -> PullResult:
        broker_id = self._pull_from_which_node.get(mq, MASTER_ID)
        addr = self.instance.find_broker_address_in_subscribe(mq.broker_name, broker_id)
        if addr is None:
            await self.instance.update_topic_route(mq.topic)
            addr = self.instance.find_broker_address_in_subscribe(mq.broker_name, broker_id)
        if addr is None:
            raise NoRouteError(f"broker {mq.broker_name} of {mq.topic} is not in any known route")
        if addr != self.instance.find_broker_address_in_publish(mq.broker_name):
            sys_flag &= ~int(PullSysFlag.COMMIT_OFFSET)  # only a master stores offsets
        header = PullMessageRequestHeader(
            consumer_group=self.group, topic=mq.topic, queue_id=mq.queue_id, queue_offset=offset,
            max_msg_nums=max_nums, sys_flag=sys_flag, commit_offset=commit_offset,
            suspend_timeout_millis=suspend_timeout_ms, sub_version=subscription.sub_version,
            subscription=expression, expression_type=subscription.expression_type, broker_name=mq.broker_name)
        # decoded straight from the receive buffer, MIN_OFFSET / MAX_OFFSET (stamp_offsets)
        # appended by the decoder itself
        status, rh, msgs = await self.instance.api.pull_message(addr, header, mq.broker_name, timeout_ms,
                                                                from_buffer=self.from_buffer)
        self._pull_from_which_node[mq] = rh.suggest_which_broker_id
        if msgs and not subscription.subscribes_all:
            msgs = [m for m in msgs if subscription.matches_tags(m.tags)]
        return PullResult(status, rh.next_begin_offset, rh.min_offset, rh.max_offset, msgs,
                          rh.suggest_which_broker_id)

    def forget(self, mq: MessageQueue) -> None:
        self._pull_from_which_node.pop(mq, None)
