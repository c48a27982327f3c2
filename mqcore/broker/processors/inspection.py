"""Tooling requests that look into queues, offsets and counters: QUERY_CONSUME_TIME_SPAN (303),
CLEAN_EXPIRED_CONSUMEQUEUE (306), CLONE_GROUP_OFFSET (314), VIEW_BROKER_STATS_DATA (315),
GET_BROKER_CONSUME_STATS (317) and QUERY_CONSUME_QUEUE (321). Codes, remarks and body shapes are
a 4.9 broker's (``AdminBrokerProcessor``), so ``DefaultMQAdminExt`` and mqadmin read them as is.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mqcore.jsonutil import dumps_compact
from mqcore.remoting import ResponseCode, create_response
from mqcore.remoting.channel import Channel
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.headers import (
    CloneGroupOffsetRequestHeader,
    GetConsumeStatsInBrokerHeader,
    QueryConsumeQueueRequestHeader,
    QueryConsumeTimeSpanRequestHeader,
    ViewBrokerStatsDataRequestHeader,
)

if TYPE_CHECKING:
    from mqcore.broker.clients import ClientManager
    from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
    from mqcore.broker.stats_windows import StatsWindows
    from mqcore.broker.topics import TopicConfigManager
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)


def mq_keyed(pairs: Sequence[tuple[dict[str, Any], object]]) -> str:
    """A Java ``Map<MessageQueue, X>`` the way fastjson writes it: object keys."""
    return "{" + ",".join(dumps_compact(k).decode() + ":" + dumps_compact(v).decode() for k, v in pairs) + "}"


class InspectionProcessor:
    """Given the managers it reads, the stats windows, ``broker_addr`` (the advertised address,
    known after start), ``clean_logic_files`` (one disk-cleanup pass over expired consume-queue
    and index files, blocking: run on a worker thread) and ``now_ms``. Runs on the event loop."""

    def __init__(self, *, broker_name: str, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager, clients: ClientManager,
                 windows: StatsWindows, broker_addr: Callable[[], str], clean_logic_files: Callable[[], object],
                 now_ms: Callable[[], int]):
        self.broker_name = broker_name
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.windows = windows
        self.broker_addr = broker_addr
        self.clean_logic_files = clean_logic_files
        self.now_ms = now_ms

    def _mq(self, topic: str, qid: int) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": qid, "topic": topic}

    # --- 303 -------------------------------------------------------------------------------------
    def consume_time_span(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumeTimeSpanRequestHeader.from_command(request)
        tc = self.topics.get(h.topic)
        if tc is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist")
        s = self.store
        spans = []
        for qid in range(tc.write_queue_nums):
            min_time = s.get_earliest_message_time(h.topic, qid)
            max_offset = s.get_max_offset_in_queue(h.topic, qid)
            max_time = s.get_message_store_timestamp(h.topic, qid, max_offset - 1)
            committed = self.offsets.query(h.group, h.topic, qid)
            committed = -1 if committed is None else committed
            consume_time = s.get_message_store_timestamp(h.topic, qid, committed - 1) if committed > 0 else min_time
            delay = 0
            if committed < max_offset:  # the next message to consume has waited this long
                delay = self.now_ms() - s.get_message_store_timestamp(h.topic, qid, max(committed, 0))
            spans.append({"consumeTimeStamp": consume_time, "delayTime": delay, "maxTimeStamp": max_time,
                          "messageQueue": self._mq(h.topic, qid), "minTimeStamp": min_time})
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact({"consumeTimeSpanSet": spans}))

    # --- 306 -------------------------------------------------------------------------------------
    async def clean_expired_consume_queue(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """A cleanup pass now over consume-queue and index files whose units all point below the
        commitlog's first offset (what RocketMQ's cleanExpiredConsumerQueue removes)."""
        log.warning("cleanExpiredConsumeQueue requested by %s", channel.remote_addr)
        await asyncio.get_running_loop().run_in_executor(None, self.clean_logic_files)
        return create_response(request, ResponseCode.SUCCESS)

    # --- 314 -------------------------------------------------------------------------------------
    def clone_group_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = CloneGroupOffsetRequestHeader.from_command(request)
        topics = [h.topic] if h.topic else self.offsets.topics_of(h.src_group)
        for topic in topics:
            if self.topics.get(topic) is None:
                log.warning("[cloneGroupOffset], topic config not exist, %s", topic)
                continue
            if not h.offline and self._unsubscribed(h.src_group, topic):
                log.warning("[cloneGroupOffset], the consumer group[%s], topic[%s] not exist", h.src_group, topic)
                continue
            for qid, offset in self.offsets.query_queues(h.src_group, topic).items():
                self.offsets.commit(h.dest_group, topic, qid, offset)
        log.info("offsets of group %s cloned to %s (topics %s) by %s", h.src_group, h.dest_group, topics,
                 channel.remote_addr)
        return create_response(request, ResponseCode.SUCCESS)

    def _unsubscribed(self, group: str, topic: str) -> bool:
        """The group is online with subscriptions, none of them to ``topic``."""
        g = self.clients.group(group)
        return g is not None and bool(g.subscriptions) and topic not in g.subscriptions

    # --- 315 -------------------------------------------------------------------------------------
    def broker_stats_data(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = ViewBrokerStatsDataRequestHeader.from_command(request)
        found = self.windows.lookup(h.stats_name, h.stats_key)
        if found is None:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"The stats <{h.stats_name}> <{h.stats_key}> not exist")
        minute, hour, day = found
        body = {"statsDay": day.to_json(), "statsHour": hour.to_json(), "statsMinute": minute.to_json()}
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(body))

    def group_tps(self, group: str, topic: str) -> float:
        """Messages per second the group got from the topic over the last minute (``consumeTps``)."""
        found = self.windows.lookup("GROUP_GET_NUMS", f"{topic}@{group}")
        return found[0].tps if found else 0.0

    # --- 317 -------------------------------------------------------------------------------------
    def broker_consume_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsInBrokerHeader.from_command(request)
        groups = []
        total_diff = 0
        for group in self.groups.table.names():
            stats = []
            for topic in self.offsets.topics_of(group):
                tc = self.topics.get(topic)
                if tc is None or (h.is_order and not tc.order) or self._unsubscribed(group, topic):
                    continue
                table, diff = self.offset_table(group, topic, tc.write_queue_nums)
                total_diff += diff
                stats.append('{"consumeTps":' + dumps_compact(self.group_tps(group, topic)).decode()
                             + ',"offsetTable":' + table + "}")
            groups.append("{" + dumps_compact(group).decode() + ":[" + ",".join(stats) + "]}")
        body = ('{"brokerAddr":' + dumps_compact(self.broker_addr()).decode() + ',"consumeStatsList":['
                + ",".join(groups) + '],"totalDiff":' + str(total_diff) + "}")
        return create_response(request, ResponseCode.SUCCESS, body=body.encode())

    def offset_table(self, group: str, topic: str, queues: int) -> tuple[str, int]:
        """``ConsumeStats.offsetTable`` of one topic (fastjson's object keys) and its total lag."""
        pairs = []
        diff = 0
        for qid in range(queues):
            broker_offset = max(0, self.store.get_max_offset_in_queue(topic, qid))
            consumer_offset = max(0, self.offsets.query(group, topic, qid) or 0)
            last = self.store.get_message_store_timestamp(topic, qid, consumer_offset - 1) if consumer_offset else 0
            diff += broker_offset - consumer_offset
            pairs.append((self._mq(topic, qid), {"brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                                                 "lastTimestamp": max(last, 0)}))
        return mq_keyed(pairs), diff

    # --- 321 -------------------------------------------------------------------------------------
    def query_consume_queue(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumeQueueRequestHeader.from_command(request)
        s = self.store
        if s.queues.get(h.topic, h.queue_id) is None:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        body: dict[str, Any] = {"maxQueueIndex": s.get_max_offset_in_queue(h.topic, h.queue_id),
                      "minQueueIndex": max(0, s.get_min_offset_in_queue(h.topic, h.queue_id))}
        if h.consumer_group is not None:
            sub = self.clients.subscription(h.consumer_group, h.topic)
            if sub is None:
                body["filterData"] = f"{h.consumer_group}@{h.topic} is not online!"
            else:
                body["subscriptionData"] = sub.to_json()
                body["filterData"] = "null"  # no ConsumerFilterData: tags filter here, SQL92 is evaluated per pull
        units = s.get_consume_queue_units(h.topic, h.queue_id, h.index, max(0, h.count)) if h.count > 0 else None
        if units is None:
            return create_response(request, ResponseCode.SUCCESS,
                                   f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!")
        phys, sizes, tags = units
        body["queueData"] = [{"eval": False, "physicOffset": int(p), "physicSize": int(n), "tagsCode": int(t)}
                             for p, n, t in zip(phys, sizes, tags)]
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(body))
