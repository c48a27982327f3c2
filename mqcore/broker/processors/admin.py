"""Queries and admin requests: QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33), topic
admin (17, 21, 215), consume stats (208), consumer connections (203), topic stats
(202), subscription groups (200, 201), offsets tables (43, 45), runtime info (28).
"""
from __future__ import annotations

import logging

from mqcore.broker.topics import TopicConfig
from mqcore.errors import IllegalArgumentError, ProtocolError
from mqcore.jsonutil import dumps_compact
from mqcore.message import validate_topic
from mqcore.remoting import ResponseCode, create_response
from mqcore.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    QueryMessageRequestHeader,
    ViewMessageRequestHeader,
)

log = logging.getLogger(__name__)

#: extField the name server sets when it creates a topic for a route lookup (mqcore only)
AUTO_CREATE_FIELD = "mqcoreAutoCreate"


class AdminProcessor:
    """Admin and tooling requests: message queries, topic and group changes, stats, runtime info."""

    def __init__(self, broker):
        self.b = broker

    def query_message(self, channel, request):
        h = QueryMessageRequestHeader.from_command(request)
        max_num = self.b.store.config.default_query_max_num if h.unique_key_query else h.max_num
        result = self.b.store.query_message(h.topic, h.key, max_num, h.begin_timestamp, h.end_timestamp)
        ext = {"indexLastUpdateTimestamp": str(result.index_last_update_timestamp),
               "indexLastUpdatePhyoffset": str(result.index_last_update_phyoffset)}
        if not result.buffers:
            return create_response(request, ResponseCode.QUERY_NOT_FOUND,
                                   "can not find message, maybe time range not correct", ext_fields=ext)
        return create_response(request, ResponseCode.SUCCESS, ext_fields=ext, body=result.body())

    def view_message(self, channel, request):
        h = ViewMessageRequestHeader.from_command(request)
        rec = self.b.store.select_one_message_by_offset(h.offset)
        if rec is None:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"can not find message by the offset, {h.offset}")
        return create_response(request, ResponseCode.SUCCESS, body=bytes(rec))

    # --- topics ------------------------------------------------------------------------------------
    def create_topic(self, channel, request):
        h = CreateTopicRequestHeader.from_command(request)
        try:
            validate_topic(h.topic)
        except IllegalArgumentError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, str(e))
        if h.read_queue_nums <= 0 or h.write_queue_nums <= 0 or h.read_queue_nums > 1024 or h.write_queue_nums > 1024:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "queue numbers must be 1..1024")
        if request.ext_fields.get(AUTO_CREATE_FIELD) == "true":
            # the name server creating a topic for a route lookup: never overrides an existing one
            tc = self.b.topics.auto_create(h.topic)
            if tc is None:
                return create_response(request, ResponseCode.NO_PERMISSION, "autoCreateTopicEnable is false")
        else:
            try:
                tc = TopicConfig(h.topic, h.read_queue_nums, h.write_queue_nums, h.perm,
                                 h.topic_filter_type or "SINGLE_TAG", h.topic_sys_flag or 0, bool(h.order))
            except ValueError as e:  # a field of the wrong shape (topicFilterType, perm): the request's fault
                raise ProtocolError(f"UPDATE_AND_CREATE_TOPIC: {e}") from None
            self.b.topics.update(tc)
        self.b.schedule_register()
        return create_response(request, ResponseCode.SUCCESS, ext_fields={
            "readQueueNums": tc.read_queue_nums, "writeQueueNums": tc.write_queue_nums, "perm": tc.perm})

    def delete_topic(self, channel, request):
        h = DeleteTopicRequestHeader.from_command(request)
        self.b.topics.delete(h.topic)
        self.b.store.delete_topic(h.topic)
        self.b.offsets.remove_topic(h.topic)
        self.b.schedule_register()
        return create_response(request, ResponseCode.SUCCESS)

    def all_topic_config(self, channel, request):
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(self.b.topics.serialize_wrapper()))

    def topic_stats(self, channel, request):
        topic = request.ext_fields.get("topic", "")
        tc = self.b.topics.get(topic)
        if tc is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        table = []
        for qid in range(tc.write_queue_nums):
            lo = max(0, self.b.store.get_min_offset_in_queue(topic, qid))
            hi = self.b.store.get_max_offset_in_queue(topic, qid)
            last = self.b.store.get_message_store_timestamp(topic, qid, hi - 1) if hi > 0 else 0
            table.append([{"brokerName": self.b.cfg.broker_name, "queueId": qid, "topic": topic},
                          {"lastUpdateTimestamp": max(last, 0), "maxOffset": hi, "minOffset": lo}])
        return create_response(request, ResponseCode.SUCCESS, body=_object_keyed({"offsetTable": ObjectKeyed(table)}))

    # --- consumers ---------------------------------------------------------------------------------
    def consume_stats(self, channel, request):
        group = request.ext_fields.get("consumerGroup", "")
        only_topic = request.ext_fields.get("topic") or None
        table = []
        total_diff = 0
        for topic in sorted(self.b.offsets.topics_of(group)):
            if only_topic and topic != only_topic:
                continue
            tc = self.b.topics.get(topic)
            for qid in range(tc.read_queue_nums if tc else 0):
                broker_offset = self.b.store.get_max_offset_in_queue(topic, qid)
                consumer_offset = self.b.offsets.query(group, topic, qid)
                consumer_offset = max(consumer_offset or 0, 0)
                last = self.b.store.get_message_store_timestamp(topic, qid, consumer_offset - 1) if consumer_offset else 0
                total_diff += broker_offset - consumer_offset
                table.append([{"brokerName": self.b.cfg.broker_name, "queueId": qid, "topic": topic},
                              {"brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                               "lastTimestamp": max(last, 0)}])
        body = _object_keyed({"consumeTps": 0.0, "offsetTable": ObjectKeyed(table)})
        return create_response(request, ResponseCode.SUCCESS, body=body)

    def consumer_connections(self, channel, request):
        group = request.ext_fields.get("consumerGroup", "")
        g = self.b.clients.group(group)
        if g is None:
            return create_response(request, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        body = {"connectionSet": [{"clientAddr": ch.remote_addr, "clientId": info.client_id,
                                   "language": _language(info.language), "version": info.version}
                                  for ch, info in g.channels.items()],
                "consumeFromWhere": g.consume_from_where, "consumeType": g.consume_type,
                "messageModel": g.message_model,
                "subscriptionTable": {t: s.to_json() for t, s in g.subscriptions.items()}}
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(body))

    def all_consumer_offsets(self, channel, request):
        return create_response(request, ResponseCode.SUCCESS, body=self.b.offsets.encode_json())

    def all_delay_offsets(self, channel, request):
        return create_response(request, ResponseCode.SUCCESS, body=self.b.delay_offsets_json())

    def update_group(self, channel, request):
        self.b.groups.update_from_json(request.body)
        return create_response(request, ResponseCode.SUCCESS)

    def all_groups(self, channel, request):
        return create_response(request, ResponseCode.SUCCESS, body=self.b.groups.encode_json())

    def runtime_info(self, channel, request):
        s = self.b.store
        table = {"brokerVersion": "409", "brokerVersionDesc": "V4_9_8 (mqcore)",
                 "commitLogMaxOffset": str(s.get_max_phy_offset()), "commitLogMinOffset": str(s.get_min_phy_offset()),
                 "pullHoldingCount": str(self.b.hold.waiting_count),
                 "runtime": self.b.runtime_text()}
        table.update(self.b.runtime_figures())
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact({"table": table}))


def _language(code: int) -> str:
    from mqcore.remoting import LanguageCode
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


class ObjectKeyed(list):
    """(key object, value) pairs of a Java ``Map<MessageQueue, X>``."""


def _object_keyed(obj: dict) -> bytes:
    """fastjson writes Map<MessageQueue, X> with object keys (``{{"brokerName":..}:{..}}``);
    Java clients parse that shape, and our lenient reader does too."""
    def enc(v):
        if isinstance(v, ObjectKeyed):
            return "{" + ",".join(dumps_compact(k).decode() + ":" + dumps_compact(val).decode() for k, val in v) + "}"
        return dumps_compact(v).decode()
    return ("{" + ",".join(f'"{k}":{enc(v)}' for k, v in sorted(obj.items())) + "}").encode()
