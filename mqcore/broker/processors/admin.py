"""Queries and admin requests: QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33), topic
admin (17, 21, 215), consume stats (208), consumer connections (203), topic stats
(202), subscription groups (200, 201), offsets tables (43, 45), runtime info (28).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from mqcore.broker.metadata import TopicConfig
from mqcore.errors import IllegalArgumentError, ProtocolError, StoreIOError
from mqcore.jsonutil import dumps_compact
from mqcore.message import reply_topic, system_topic_refusal, validate_topic
from mqcore.permissions import topic_perm_problem
from mqcore.remoting import RemotingCommand, ResponseCode, create_response
from mqcore.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    QueryMessageRequestHeader,
    ViewMessageRequestHeader,
)

if TYPE_CHECKING:
    from mqcore.broker.clients import ClientManager
    from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
    from mqcore.broker.topics import TopicConfigManager
    from mqcore.remoting.channel import Channel
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)


class AdminProcessor:
    """Admin and tooling requests: message queries, topic and group changes, stats, runtime info.

    Given only the managers it uses and the broker's facts as callables:
    ``schedule_register`` (re-register with the name servers soon), ``delay_offsets_json``
    (the delay-level progress table), ``holding_count`` (parked long polls) and
    ``runtime_figures`` (the runtime-info keys the broker samples, uptime included).
    Runs on the broker's event loop.
    """

    def __init__(self, *, broker_name: str, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager, clients: ClientManager,
                 schedule_register: Callable[[], None], delay_offsets_json: Callable[[], bytes],
                 holding_count: Callable[[], int], runtime_figures: Callable[[], dict[str, str]]) -> None:
        self.broker_name = broker_name
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.schedule_register = schedule_register
        self.delay_offsets_json = delay_offsets_json
        self.holding_count = holding_count
        self.runtime_figures = runtime_figures
        #: (group, topic) -> messages per second the group got over the last minute (consumeTps)
        self.consume_tps: Callable[[str, str], float] = lambda group, topic: 0.0

    def query_message(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_command(request)
        max_num = self.store.config.default_query_max_num if h.unique_key_query else h.max_num
        result = self.store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        ext = {"indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
               "indexLastUpdatePhyoffset": str(result.index_last_update_phyoffset)}
        if not result.buffers:
            return create_response(request, ResponseCode.QUERY_NOT_FOUND,
                                   "can not find message, maybe time range not correct", ext_fields=ext)
        return create_response(request, ResponseCode.SUCCESS, ext_fields=ext, body=result.body())

    def view_message(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_command(request)
        rec = self.store.select_one_message_by_offset(h.offset)
        if rec is None:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"can not find message by the offset, {h.offset}")
        return create_response(request, ResponseCode.SUCCESS, body=bytes(rec))

    # --- topics ------------------------------------------------------------------------------------
    def create_topic(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_command(request)
        try:
            validate_topic(h.topic)
        except IllegalArgumentError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, str(e))
        if h.topic == reply_topic(self.topics.cfg.broker_cluster_name):  # a system topic of this broker, as in 4.9
            return create_response(request, ResponseCode.SYSTEM_ERROR, system_topic_refusal(h.topic))
        if h.read_queue_nums <= 0 or h.write_queue_nums <= 0 or h.read_queue_nums > 1024 or h.write_queue_nums > 1024:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "queue numbers must be 1..1024")
        problem = topic_perm_problem(h.perm)
        if problem is not None:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"topic {h.topic}: {problem}")
        try:
            tc = TopicConfig(h.topic, h.read_queue_nums, h.write_queue_nums, h.perm,
                             h.topic_filter_type or "SINGLE_TAG", h.topic_sys_flag or 0, bool(h.order))
        except ValueError as e:  # a field of the wrong shape (topicFilterType, perm): the request's fault
            raise ProtocolError(f"UPDATE_AND_CREATE_TOPIC: {e}") from None
        try:
            self.topics.update(tc)
        except StoreIOError as e:  # not persisted, so not changed
            return create_response(request, ResponseCode.SYSTEM_ERROR, e.strerror)
        # no schedule_register: the broker registers the created topic (alone, as RocketMQ's
        # registerIncrementBrokerData) before this answer goes (Broker._registered)
        return create_response(request, ResponseCode.SUCCESS, ext_fields={
            "readQueueNums": tc.read_queue_nums, "writeQueueNums": tc.write_queue_nums, "perm": tc.perm})

    def delete_topic(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicRequestHeader.from_command(request)
        self.topics.delete(h.topic)
        self.store.delete_topic(h.topic)
        self.offsets.remove_topic(h.topic)
        self.schedule_register()
        return create_response(request, ResponseCode.SUCCESS)

    def all_topic_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(self.topics.serialize_wrapper()))

    def topic_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        topic = request.ext_fields.get("topic", "")
        tc = self.topics.get(topic)
        if tc is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table = ObjectKeyed()
        for qid in range(tc.write_queue_nums):
            lo = max(0, self.store.get_min_offset_in_queue(topic, qid))
            hi = self.store.get_max_offset_in_queue(topic, qid)
            last = self.store.get_message_store_timestamp(topic, qid, hi - 1) if hi > 0 else 0
            table.append([{"brokerName": self.broker_name, "queueId": qid, "topic": topic},
                          {"lastUpdateTimestamp": max(last, 0), "maxOffset": hi, "minOffset": lo}])
        return create_response(request, ResponseCode.SUCCESS, body=_object_keyed({"offsetTable": table}))

    # --- consumers ---------------------------------------------------------------------------------
    def consume_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        group = request.ext_fields.get("consumerGroup", "")
        only_topic = request.ext_fields.get("topic") or None
        table = ObjectKeyed()
        total_diff = 0
        tps = 0.0
        for topic in sorted(self.offsets.topics_of(group)):
            if only_topic and topic != only_topic:
                continue
            tc = self.topics.get(topic)
            for qid in range(tc.read_queue_nums if tc else 0):
                broker_offset = self.store.get_max_offset_in_queue(topic, qid)
                consumer_offset = self.offsets.query(group, topic, qid)
                consumer_offset = max(consumer_offset or 0, 0)
                last = self.store.get_message_store_timestamp(topic, qid, consumer_offset - 1) if consumer_offset else 0
                total_diff += broker_offset - consumer_offset
                table.append([{"brokerName": self.broker_name, "queueId": qid, "topic": topic},
                              {"brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                               "lastTimestamp": max(last, 0)}])
            tps += self.consume_tps(group, topic)
        body = _object_keyed({"consumeTps": tps, "offsetTable": table})
        return create_response(request, ResponseCode.SUCCESS, body=body)

    def consumer_connections(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        group = request.ext_fields.get("consumerGroup", "")
        g = self.clients.group(group)
        if g is None:
            return create_response(request, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {"connectionSet": [{"clientAddr": ch.remote_addr, "clientId": info.client_id,
                                   "language": _language(info.language), "version": info.version}
                                  for ch, info in g.channels.items()],
                "consumeFromWhere": g.consume_from_where, "consumeType": g.consume_type,
                "messageModel": g.message_model,
                "subscriptionTable": {t: s.to_json() for t, s in g.subscriptions.items()}}
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(body))

    def all_consumer_offsets(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=self.offsets.encode_json())

    def all_delay_offsets(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=self.delay_offsets_json())

    def update_group(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        self.groups.update_from_json(cast(bytes, request.body))  # a received body is bytes (a list is only sent)
        return create_response(request, ResponseCode.SUCCESS)

    def all_groups(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=self.groups.encode_json())

    def runtime_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        s = self.store
        table = {"commitLogMaxOffset": str(s.get_max_phy_offset()), "commitLogMinOffset": str(s.get_min_phy_offset()),
                 "pullHoldingCount": str(self.holding_count())}
        table.update(self.runtime_figures())
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact({"table": table}))


def _language(code: int) -> str:
    from mqcore.remoting import LanguageCode
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


class ObjectKeyed(list[list[dict[str, Any]]]):
    """(key object, value) pairs of a Java ``Map<MessageQueue, X>``."""


def _object_keyed(obj: dict[str, Any]) -> bytes:
    """fastjson writes Map<MessageQueue, X> with object keys (``{{"brokerName":..}:{..}}``);
    Java clients parse that shape, and our lenient reader does too."""
    def enc(v: Any) -> str:
        if isinstance(v, ObjectKeyed):
            return "{" + ",".join(dumps_compact(k).decode() + ":" + dumps_compact(val).decode() for k, val in v) + "}"
        return dumps_compact(v).decode()
    return ("{" + ",".join(f'"{k}":{enc(v)}' for k, v in sorted(obj.items())) + "}").encode()
