"""Client-management and queue-fact requests.

HEART_BEAT (34), UNREGISTER_CLIENT (35), GET_CONSUMER_LIST_BY_GROUP (38),
LOCK_BATCH_MQ (41) / UNLOCK_BATCH_MQ (42), QUERY_CONSUMER_OFFSET (14),
UPDATE_CONSUMER_OFFSET (15), SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30),
GET_MIN_OFFSET (31), GET_EARLIEST_MSG_STORETIME (32).
"""
from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, cast

from mqcore.errors import DiskFullError, ProtocolError
from mqcore.jsonutil import loads_lenient
from mqcore.message import retry_topic
from mqcore.remoting import RemotingCommand, ResponseCode, create_response
from mqcore.remoting.bodies import (
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    UnlockBatchRequestBody,
)
from mqcore.remoting.headers import (
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

if TYPE_CHECKING:
    from mqcore.broker.clients import ClientManager, RebalanceLockManager
    from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
    from mqcore.broker.topics import TopicConfigManager
    from mqcore.remoting.channel import Channel
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)


class ClientProcessor:
    """Client requests: heartbeats, unregistration, consumer lists, queue locks and offset queries.

    Given only the managers it uses; ``register_now`` registers the broker with the name
    servers at once (a new retry topic must be routable before the heartbeat's answer).
    Runs on the broker's event loop.
    """

    def __init__(self, *, clients: ClientManager, locks: RebalanceLockManager, groups: SubscriptionGroupManager,
                 topics: TopicConfigManager, offsets: ConsumerOffsetManager, store: MessageStore,
                 register_now: Callable[[], Awaitable[None]]) -> None:
        self.clients = clients
        self.locks = locks
        self.groups = groups
        self.topics = topics
        self.offsets = offsets
        self.store = store
        self.register_now = register_now

    async def heartbeat(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            # a received request's body is bytes (a list body is only ever sent)
            data = loads_lenient(cast(bytes, request.body)) if request.body else {}
        except ProtocolError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"malformed heartbeat body: {e}")
        if not isinstance(data, dict):
            return create_response(request, ResponseCode.SYSTEM_ERROR, "heartbeat body is not a JSON object")
        client_id = str(data.get("clientID") or channel.remote_addr)
        groups = self.clients.heartbeat(channel, client_id, request.language, request.version, data)
        created = False
        for group in groups:
            self.groups.ensure(group)
            g = self.clients.group(group)
            if g is not None and g.message_model == "CLUSTERING":
                if self.topics.get(retry_topic(group)) is None:
                    try:
                        self.topics.create_group_topic(retry_topic(group))
                    except DiskFullError as e:  # created by a later heartbeat, once there is room
                        log.warning("heartbeat of %s: %s", client_id, e.strerror)
                        continue
                    created = True
        if created:
            # registered before the answer, as the Java broker does: a Java client looks up
            # %RETRY%group's route right after its first heartbeat and otherwise not for 30 s,
            # so a retry would wait that long to be consumed
            await self.register_now()
        return create_response(request, ResponseCode.SUCCESS)

    def unregister(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_command(request)
        self.clients.unregister(channel, h.producer_group, h.consumer_group)
        return create_response(request, ResponseCode.SUCCESS)

    def consumer_list(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_command(request)
        g = self.clients.group(h.consumer_group)
        if g is None or not g.channels:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"no consumer for this group, {h.consumer_group}")
        return create_response(request, ResponseCode.SUCCESS,
                               body=GetConsumerListByGroupResponseBody(g.client_ids()).encode())

    def lock_batch(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        body = LockBatchRequestBody.decode(request.body)
        mqs = [(mq.topic, mq.broker_name, mq.queue_id) for mq in body.mq_set]
        locked = self.locks.try_lock_batch(body.consumer_group, mqs, body.client_id)
        ok = [MessageQueue(topic=t, broker_name=b, queue_id=q) for t, b, q in locked]
        return create_response(request, ResponseCode.SUCCESS, body=LockBatchResponseBody(ok).encode())

    def unlock_batch(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        body = UnlockBatchRequestBody.decode(request.body)
        self.locks.unlock_batch(body.consumer_group, [(mq.topic, mq.broker_name, mq.queue_id)
                                                        for mq in body.mq_set], body.client_id)
        return create_response(request, ResponseCode.SUCCESS)

    # --- offsets ----------------------------------------------------------------------------------
    def query_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_command(request)
        offset = self.offsets.query(h.consumer_group, h.topic, h.queue_id)
        if offset is None or offset < 0:
            # never committed: start at 0 while the queue's first message is still there (Java)
            if self.store.get_min_offset_in_queue(h.topic, h.queue_id) <= 0 or h.set_zero_if_not_found:
                offset = 0
            else:
                return create_response(request, ResponseCode.QUERY_NOT_FOUND,
                                       "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def update_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_command(request)
        if h.commit_offset >= 0:  # some clients send -1 for a queue at offset 0: ignore
            self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        return create_response(request, ResponseCode.SUCCESS)

    def search_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_command(request)
        offset = self.store.get_offset_in_queue_by_time(h.topic, h.queue_id, h.timestamp)
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def max_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_command(request)
        return create_response(request, ResponseCode.SUCCESS,
                               ext_fields={"offset": str(self.store.get_max_offset_in_queue(h.topic, h.queue_id))})

    def min_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_command(request)
        offset = max(0, self.store.get_min_offset_in_queue(h.topic, h.queue_id))
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def earliest_time(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_command(request)
        ts = self.store.get_earliest_message_time(h.topic, h.queue_id)
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"timestamp": str(max(ts, 0))})
