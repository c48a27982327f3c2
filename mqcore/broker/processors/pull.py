"""PULL_MESSAGE (11) with long polling.

Store statuses map to response codes as docs/remoting-pulls.md tables them (RocketMQ 4.9.7's
and 5.3.3's answers, measured). A pull with the SUSPEND flag that finds nothing new is parked
in the hold service for up to ``suspendTimeoutMillis`` and re-executed when a message lands
in its queue. Tags are filtered by the strings of the subscription (request or heartbeat),
never by hash codes a client sent. The body is the stored records, unchanged.

The stages - ``route``, ``tag_codes`` (the TAG filter; SQL92 in ``_codes``), ``lookup``,
the offset commit and the answer - are named methods: the PULL pipeline
(``pull_pipeline.PullPipeline``) runs the common case of the same stages straight from a
connection's received bytes and leaves every other pull (long polling, SQL92, refusals,
errors) to ``pull`` here.
"""
from __future__ import annotations

import asyncio

import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Union

from mqcore.broker.clients import Subscription, subscription_codes
from mqcore.broker.filtering import pull_filter, select_matching
from mqcore.broker.stats import BrokerStats
from mqcore.broker.topics import readable
from mqcore.filter.sql92 import Sql92Filter
from mqcore.remoting import PullSysFlag, RemotingCommand, ResponseCode, create_response
from mqcore.remoting.headers import PullMessageRequestHeader
from mqcore.store.results import GetMessageResult, GetMessageStatus

if TYPE_CHECKING:
    from mqcore.broker.clients import ClientManager
    from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
    from mqcore.broker.long_polling import PullRequestHoldService
    from mqcore.broker.topics import TopicConfigManager
    from mqcore.remoting.channel import Channel
    from mqcore.remoting.command import Body
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)

#: what a pull filters by: tag hash codes (None = all) or a SQL92 filter
Filter = Union[frozenset[int], Sql92Filter, None]

PULL_CODES = {
    GetMessageStatus.FOUND: ResponseCode.SUCCESS,
    GetMessageStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetMessageStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetMessageStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
}


_HAS_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)  # a plain int: a Flag's ``&`` runs in Python

#: the same keyed by the status's name: an enum member's hash runs in Python (every pull asks)
_CODE_BY_NAME = {status.name: code for status, code in PULL_CODES.items()}

#: pull outcome label of the pull-request counter, by the code as a plain int (same reason)
_PULL_KIND = {int(ResponseCode.SUCCESS): "found", int(ResponseCode.PULL_NOT_FOUND): "not_found",
              int(ResponseCode.PULL_OFFSET_MOVED): "offset_moved", int(ResponseCode.PULL_RETRY_IMMEDIATELY): "retry"}


class PullProcessor:
    """PULL_MESSAGE, given only what it uses. A pull that finds messages (or nothing,
    without SUSPEND) is answered at once, inline; only a parked pull returns an
    awaitable (the dispatcher gives it a task)."""

    def __init__(self, *, store: MessageStore, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 offsets: ConsumerOffsetManager, clients: ClientManager, hold: PullRequestHoldService,
                 long_polling_enable: bool, short_polling_time_mills: int = 1000, stats: BrokerStats | None = None,
                 enable_property_filter: bool = False) -> None:
        self.short_polling_time_mills = short_polling_time_mills
        self.stats = stats if stats is not None else BrokerStats()
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.hold = hold
        self.long_polling_enable = long_polling_enable
        self.enable_property_filter = enable_property_filter

    def pull(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | Awaitable[RemotingCommand | None]:
        h = PullMessageRequestHeader.from_command(request)
        problem = self.route(h.topic, h.queue_id, h.consumer_group)
        if problem is not None:
            return create_response(request, *problem)
        codes = self._codes(h, request)
        if isinstance(codes, tuple):  # an error response
            return codes[0]
        if h.sys_flag & PullSysFlag.COMMIT_OFFSET and h.commit_offset >= 0:
            self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        suspend = bool(h.sys_flag & PullSysFlag.SUSPEND)
        result, code = self._get(h, codes)
        if code == ResponseCode.PULL_NOT_FOUND and suspend and h.suspend_timeout_millis > 0:
            return self._park(channel, request, h, codes)
        self.stats.on_pull(h.consumer_group, h.topic, result, _PULL_KIND.get(int(code), "other"), False)
        return self._response(request, result, code, h)

    async def _park(self, channel: Channel, request: RemotingCommand, h: PullMessageRequestHeader,
                    codes: Filter) -> RemotingCommand | None:
        # longPollingEnable=false: RocketMQ still parks the pull, for shortPollingTimeMills
        wait_ms = h.suspend_timeout_millis if self.long_polling_enable else self.short_polling_time_mills
        wait_closed = getattr(channel, "wait_closed", None)
        gone = asyncio.ensure_future(wait_closed()) if wait_closed is not None else None
        try:
            await self.hold.hold(h.topic, h.queue_id, h.queue_offset, wait_ms, gone)
        finally:
            if gone is not None and not gone.done():
                gone.cancel()
        if gone is not None and gone.done() and not gone.cancelled():
            return None  # the consumer left: no one to answer, nothing to count
        result, code = self._get(h, codes)
        self.stats.on_pull(h.consumer_group, h.topic, result, _PULL_KIND.get(int(code), "other"), True)
        return self._response(request, result, code, h)

    # --- stages (the pull pipeline calls these same ones by name) -----------------------------
    def route(self, topic: str, queue_id: int, group: str) -> tuple[int, str] | None:
        """The route stage: ``(code, remark)`` refusing the pull (no such topic, not readable,
        queue out of range, no such group), or None."""
        tc = self.topics.get(topic)
        if tc is None:
            return ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
        if not readable(tc):
            return ResponseCode.NO_PERMISSION, f"the topic[{topic}] pulling message is forbidden"
        if queue_id < 0 or queue_id >= tc.read_queue_nums:
            # INVALID_PARAMETER as RocketMQ 5.x answers (4.9.7: SYSTEM_ERROR; clients raise either)
            return (ResponseCode.INVALID_PARAMETER,
                    f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{tc.read_queue_nums}]")
        if not self.groups.ensure(group):
            return ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group [{group}] does not exist"
        return None

    def _codes(self, h: PullMessageRequestHeader, request: RemotingCommand) -> Filter | tuple[RemotingCommand]:
        """Tag hash codes to filter by (None = all), a SQL92 filter, or (error response,)."""
        sub = self.clients.subscription(h.consumer_group, h.topic)
        sql = pull_filter(self.enable_property_filter, request, h, sub)
        if sql is not None:
            return sql
        return self.tag_codes(h.sys_flag, h.subscription, sub)

    @staticmethod
    def tag_codes(sys_flag: int, subscription: str | None, sub: Subscription | None) -> frozenset[int] | None:
        """The tag filter stage of a TAG pull: the hash codes to deliver (None = all), from the
        request's expression or the group's heartbeat subscription ``sub``."""
        if sys_flag & _HAS_SUBSCRIPTION:
            return subscription_codes(subscription)
        if sub is None:
            # no heartbeat yet: an expression in the request still tells us what to deliver
            if subscription:
                return subscription_codes(subscription)
            return None
        return sub.codes

    def _get(self, h: PullMessageRequestHeader, codes: Filter) -> tuple[GetMessageResult, ResponseCode]:
        return self.lookup(h.topic, h.queue_id, h.queue_offset, h.max_msg_nums, codes)

    def lookup(self, topic: str, queue_id: int, queue_offset: int, max_msg_nums: int,
               codes: Filter) -> tuple[GetMessageResult, ResponseCode]:
        """The lookup stage: the store's read from the consume queue (tag codes or a SQL92
        filter applied) and the answer code for its status."""
        if isinstance(codes, Sql92Filter):
            result = select_matching(self.store.get_message(topic, queue_id, queue_offset, max_msg_nums),
                                     codes, self.store.k)
        else:
            result = self.store.get_message(topic, queue_id, queue_offset, max_msg_nums, tag_codes=codes)
        status = result.status
        if status is GetMessageStatus.NO_MESSAGE_IN_QUEUE:
            code = ResponseCode.PULL_OFFSET_MOVED if queue_offset != 0 else ResponseCode.PULL_NOT_FOUND
        else:
            code = _CODE_BY_NAME[status._name_]
        return result, code

    def _response(self, request: RemotingCommand, result: GetMessageResult, code: int,
                  h: PullMessageRequestHeader) -> RemotingCommand:
        ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(result.next_begin_offset),
               "minOffset": str(result.min_offset), "maxOffset": str(result.max_offset)}
        body: Body = b""
        if code == ResponseCode.SUCCESS:
            # the store's views of the commitlog, up to the committed end, handed to the
            # transport as they are (no copy); a file is unmapped only once no view is out
            body = result.buffers[0] if len(result.buffers) == 1 else list(result.buffers)
        return create_response(request, code, result.status.value, ext_fields=ext, body=body)
