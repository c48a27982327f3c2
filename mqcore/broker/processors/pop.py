"""RocketMQ 5's POP over remoting: POP_MESSAGE, ACK_MESSAGE, BATCH_ACK_MESSAGE,
CHANGE_MESSAGE_INVISIBLETIME, PEEK_MESSAGE, NOTIFICATION and POLLING_INFO, served by the
broker's one ``PopService`` (the 5.x gRPC endpoint's receives use the same one).

What goes on the wire is what the 5.x Java client (``MQClientAPIImpl``, which RocketMQ's
proxy uses in cluster mode) reads: a pop answer's body is the stored records as they are,
and its headers (``popTime``, ``invisibleTime``, ``reviveQid``, ``restNum``,
``startOffsetInfo``, ``msgOffsetInfo``, ``orderCountInfo``) let the client build each
message's receipt handle (``POP_CK``, ``mqcore.pop.handle``) itself. Refusals carry the
Java broker's codes (tests/reference/test_pop_bad_input_reference.py compares them): a queue
id past the topic's read queues is INVALID_PARAMETER on pop and MESSAGE_ILLEGAL on ack, an
offset outside the queue NO_MESSAGE, more than 32 messages INVALID_PARAMETER, an unknown
group SUBSCRIPTION_GROUP_NOT_EXIST (without auto-creation), a pop that finds nothing (after
waiting up to its ``pollTime``) POLLING_TIMEOUT; an ack naming no group or nothing in flight
is a harmless SUCCESS, as there. A refused request changes nothing. Stricter than RocketMQ,
which reads a POP header leniently (a missing or non-numeric field as 0, a missing group as a
NullPointerException): those get SYSTEM_ERROR naming the field, a negative invisible time
INVALID_PARAMETER. A zero invisible time is taken, as there: the message is revived at once.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from mqcore.broker.topics import readable
from mqcore.errors import FilterExpressionError, IllegalArgumentError
from mqcore.filter.sql92 import Sql92Filter, compile_sql92
from mqcore.permissions import PERM_READ
from mqcore.pop.handle import (POP_ORDER_REVIVE_QUEUE, TYPE_RETRY, PopHandle, msg_offset_info, order_count_info,
                               pop_retry_topic, start_offset_info)
from mqcore.pop.service import AckStatus, Popped, PopService
from mqcore.remoting import ResponseCode, create_response
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.pop_headers import (AckMessageRequestHeader, ChangeInvisibleTimeRequestHeader,
                                         ChangeInvisibleTimeResponseHeader, NotificationRequestHeader,
                                         NotificationResponseHeader, PeekMessageRequestHeader,
                                         PollingInfoRequestHeader, PollingInfoResponseHeader, PopMessageRequestHeader,
                                         PopMessageResponseHeader, parse_batch_ack_body)
from mqcore.store.results import GetMessageStatus

log = logging.getLogger(__name__)

#: a processor's answer: at once, or (a parked pop) once it has waited
Answer = RemotingCommand | Coroutine[Any, Any, RemotingCommand | None]

MAX_POP_BATCH = 32
#: a pop whose client waited this much longer than its pollTime before we saw it is answered at once
TIMEOUT_TOO_MUCH_MS = 500


def _with_pop_header(response: RemotingCommand) -> RemotingCommand:
    """A refused pop carries the answer header's required fields as zeros, as the Java broker's
    does (the 5.x client reads them whatever the code)."""
    response.ext_fields = {**(response.ext_fields or {}),
                           **PopMessageResponseHeader(pop_time=0, invisible_time=0, revive_qid=0, rest_num=0).to_ext()}
    return response


class PopProcessor:
    """The POP family over remoting, given only what it uses. ``broker_permission`` and
    ``broker_name`` are read per request (``updateBrokerConfig`` changes them)."""

    def __init__(self, *, pop: PopService, store: Any, topics: Any, groups: Any, stats: Any, clock: Callable[[], int],
                 broker_name: Callable[[], str], broker_permission: Callable[[], int],
                 enable_property_filter: Callable[[], bool]) -> None:
        self.pop = pop
        self.store = store
        self.topics = topics
        self.groups = groups
        self.stats = stats
        self.clock = clock
        self.broker_name = broker_name
        self.broker_permission = broker_permission
        self.enable_property_filter = enable_property_filter
        #: parked pops by (topic, group, queue id) (POLLING_INFO counts them)
        self._parked: dict[tuple[str, str, int], int] = {}

    # --- POP_MESSAGE ---------------------------------------------------------------------------
    def pop_message(self, channel: Any, request: RemotingCommand) -> Answer:
        ext = request.ext_fields
        if ext is not None and ext.get("bornTime", "0") == "0":
            ext["bornTime"] = str(self.clock())  # a proxy in cluster mode sends none: its time is now
        h = PopMessageRequestHeader.from_command(request)
        if self.clock() - h.born_time - h.poll_time > TIMEOUT_TOO_MUCH_MS:
            return _with_pop_header(create_response(request, ResponseCode.POLLING_TIMEOUT,
                                                    "the pop message is timeout too much"))
        if h.invisible_time < 0:  # RocketMQ takes it (and revives at once); a clear refusal here
            return _with_pop_header(create_response(request, ResponseCode.INVALID_PARAMETER,
                                                    f"invisibleTime {h.invisible_time} is negative"))
        if h.max_msg_nums > MAX_POP_BATCH:
            return _with_pop_header(create_response(
                request, ResponseCode.INVALID_PARAMETER,
                f"the broker[{self.broker_name()}] pop message's num is greater than {MAX_POP_BATCH}"))
        refusal = self._refusal(request, h.topic, h.consumer_group, h.queue_id, "pop")
        if refusal is not None:
            return _with_pop_header(refusal)
        expression = self._expression(h)
        if expression is None:
            return _with_pop_header(create_response(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                                    "parse the consumer's subscription failed"))
        answer = self._pop_answer(request, h, expression)
        if answer is not None:
            return answer
        if h.poll_time > 0:
            return self._park(channel, request, h, expression)
        return self._nothing(request, h)

    def _refusal(self, request: RemotingCommand, topic: str, group: str, queue_id: int,
                 what: str) -> RemotingCommand | None:
        if not self.broker_permission() & PERM_READ:
            return create_response(request, ResponseCode.NO_PERMISSION,
                                   f"the broker[{self.broker_name()}] {what} message is forbidden")
        tc = self.topics.get(topic)
        if tc is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not readable(tc):
            return create_response(request, ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden")
        if queue_id >= tc.read_queue_nums:
            return create_response(request, ResponseCode.INVALID_PARAMETER,
                                   f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                   f"topicConfig.readQueueNums:[{tc.read_queue_nums}]")
        if not self.groups.ensure(group):
            return create_response(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                   f"subscription group [{group}] does not exist")
        if not self.groups.consume_enabled(group):
            return create_response(request, ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        return None

    def _expression(self, h: PopMessageRequestHeader) -> str | Sql92Filter | None:
        """The tag expression or compiled SQL92 filter; None when it does not parse."""
        exp = h.exp or "*"
        if (h.exp_type or "TAG").upper() == "SQL92":
            if not self.enable_property_filter():
                return None
            try:
                return compile_sql92(exp)
            except FilterExpressionError:
                return None
        if (h.exp_type or "TAG").upper() != "TAG" or "\x00" in exp:
            return None
        return exp

    def _queues(self, topic: str, queue_id: int) -> list[int]:
        if queue_id >= 0:
            return [queue_id]
        n = self.topics.get(topic).read_queue_nums
        return list(range(n))

    def _pop_answer(self, request: RemotingCommand, h: PopMessageRequestHeader,
                    expression: str | Sql92Filter) -> RemotingCommand | None:
        """The SUCCESS answer with what was popped, or None when nothing was."""
        orderly = bool(h.order)
        popped = self.pop.pop_topic(h.consumer_group, h.topic, self._queues(h.topic, h.queue_id), h.max_msg_nums,
                                    expression, h.invisible_time, orderly)
        if not popped:
            return None
        body, by_queue = bytearray(), dict[tuple[str, int], list[Popped]]()
        for p in popped:
            raw = self.store.select_one_message_by_offset(p.flight.commitlog_offset)
            if raw is None:  # cleaned up under us: it cannot be delivered, so it is done
                self.pop.ack(h.consumer_group, p.store_topic, p.queue_id, p.flight.queue_offset)
                continue
            body += raw
            by_queue.setdefault((p.store_topic, p.queue_id), []).append(p)
        if not by_queue:
            return None
        starts, offsets, counts = [], [], []
        for (store_topic, qid), ps in by_queue.items():
            starts.append((store_topic, qid, ps[0].flight.ck_offset))
            offsets.append((store_topic, qid, [p.flight.queue_offset for p in ps]))
            counts += [(store_topic, qid, p.flight.queue_offset, p.flight.attempt - 1) for p in ps]
        self.stats.on_delivered(h.consumer_group, h.topic, sum(len(v) for v in by_queue.values()), len(body))
        header = PopMessageResponseHeader(
            pop_time=popped[0].flight.pop_time_ms, invisible_time=h.invisible_time,
            revive_qid=POP_ORDER_REVIVE_QUEUE if orderly else 0, rest_num=self._rest(h),
            start_offset_info=start_offset_info(starts), msg_offset_info=msg_offset_info(offsets),
            order_count_info=order_count_info(counts) if orderly else None)
        return create_response(request, ResponseCode.SUCCESS, GetMessageStatus.FOUND.value,
                               ext_fields=header.to_ext(), body=bytes(body))

    def _rest(self, h: PopMessageRequestHeader | NotificationRequestHeader) -> int:
        return sum(self.pop.rest(h.consumer_group, h.topic, q) for q in self._queues(h.topic, h.queue_id))

    def _nothing(self, request: RemotingCommand, h: PopMessageRequestHeader) -> RemotingCommand:
        header = PopMessageResponseHeader(pop_time=self.clock(), invisible_time=h.invisible_time,
                                          revive_qid=POP_ORDER_REVIVE_QUEUE if h.order else 0, rest_num=self._rest(h),
                                          start_offset_info="", msg_offset_info="")
        return create_response(request, ResponseCode.POLLING_TIMEOUT, GetMessageStatus.NO_MESSAGE_IN_QUEUE.value,
                               ext_fields=header.to_ext())

    async def _park(self, channel: Any, request: RemotingCommand, h: PopMessageRequestHeader,
                    expression: str | Sql92Filter) -> RemotingCommand | None:
        """Wait up to ``pollTime`` for a message (or a FIFO queue to become free), popping
        again on each arrival; POLLING_TIMEOUT when none came."""
        arrivals = self.pop.arrivals
        assert arrivals is not None  # the broker starts the pop service before it serves
        topics = [h.topic, pop_retry_topic(h.consumer_group, h.topic)]
        key = (h.topic, h.consumer_group, h.queue_id)
        deadline = self.clock() + h.poll_time
        wait_closed = getattr(channel, "wait_closed", None)
        gone = asyncio.ensure_future(wait_closed()) if wait_closed is not None else None
        self._parked[key] = self._parked.get(key, 0) + 1
        try:
            while True:
                since = arrivals.generation(topics)
                answer = self._pop_answer(request, h, expression)
                left = deadline - self.clock()
                if answer is not None or left <= 0:
                    break
                await arrivals.wait(topics, left / 1000, since)
                if gone is not None and gone.done():
                    return None  # the consumer left: nothing popped for no one
        finally:
            self._parked[key] -= 1
            if not self._parked[key]:
                del self._parked[key]
            if gone is not None and not gone.done():
                gone.cancel()
        return answer if answer is not None else self._nothing(request, h)

    # --- ACK_MESSAGE / BATCH_ACK_MESSAGE -------------------------------------------------------
    def ack_message(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        h = AckMessageRequestHeader.from_command(request)
        handle = self._handle(request, h, inclusive_end=True)
        if not isinstance(handle, PopHandle):
            return handle  # the refusal
        if handle.queue_id != h.queue_id or handle.queue_offset != h.offset:
            log.debug("ack of %s:%d@%d carries the handle of %d@%d", h.topic, h.queue_id, h.offset,
                      handle.queue_id, handle.queue_offset)
        self._ack(h.consumer_group, h.topic, h.queue_id, h.offset)
        return create_response(request, ResponseCode.SUCCESS)

    def batch_ack_message(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        body = request.body
        _broker, acks = parse_batch_ack_body(bytes(body) if isinstance(body, (bytes, bytearray, memoryview)) else None)
        if not acks:
            return create_response(request, ResponseCode.NO_MESSAGE)
        for a in acks:
            if a.retry not in ("0", TYPE_RETRY):
                continue  # a v2 retry topic: this broker has none
            topic = pop_retry_topic(a.consumer_group, a.topic) if a.retry == TYPE_RETRY else a.topic
            if self.topics.get(topic) is None or not 0 <= a.queue_id < self.topics.get(topic).read_queue_nums:
                continue  # as RocketMQ: an entry naming no queue is skipped
            lo = self.store.get_min_offset_in_queue(topic, a.queue_id)
            hi = self.store.get_max_offset_in_queue(topic, a.queue_id)
            if self.groups.exists(a.consumer_group):
                self.pop.ack_many(a.consumer_group, topic, a.queue_id, [o for o in a.offsets if lo <= o <= hi])
        return create_response(request, ResponseCode.SUCCESS)

    def _handle(self, request: RemotingCommand, h: AckMessageRequestHeader | ChangeInvisibleTimeRequestHeader,
                inclusive_end: bool) -> PopHandle | RemotingCommand:
        """The receipt handle (``extraInfo``) of an ack or change naming a message of the
        topic's queues, or the refusal, in the Java broker's order of checks."""
        refusal = self._offset_refusal(request, h.topic, h.queue_id, h.offset, inclusive_end)
        if refusal is not None:
            return refusal
        try:
            return PopHandle.decode(h.extra_info)
        except IllegalArgumentError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"IllegalArgumentException: {e}")

    def _offset_refusal(self, request: RemotingCommand, topic: str, queue_id: int, offset: int,
                        inclusive_end: bool) -> RemotingCommand | None:
        tc = self.topics.get(topic)
        if tc is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!")
        if not 0 <= queue_id < tc.read_queue_nums:
            return create_response(request, ResponseCode.MESSAGE_ILLEGAL,
                                   f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                                   f"topicConfig.readQueueNums:[{tc.read_queue_nums}]")
        lo = self.store.get_min_offset_in_queue(topic, queue_id)
        hi = self.store.get_max_offset_in_queue(topic, queue_id)
        if offset < lo or offset > hi or (offset == hi and not inclusive_end):
            return create_response(request, ResponseCode.NO_MESSAGE,
                                   f"offset is illegal, key:{topic}@{queue_id}, commit:{offset}, store:{lo}~{hi}")
        return None

    def _ack(self, group: str, store_topic: str, queue_id: int, offset: int) -> None:
        if not self.groups.exists(group):
            return  # no such group: nothing of it is in flight, and nothing is made for it
        if self.pop.ack(group, store_topic, queue_id, offset) is AckStatus.NOT_FOUND:
            log.debug("ack of %s:%d@%d for %s names no message in flight", store_topic, queue_id, offset, group)

    # --- CHANGE_MESSAGE_INVISIBLETIME ----------------------------------------------------------
    def change_invisible_time(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        h = ChangeInvisibleTimeRequestHeader.from_command(request)
        handle = self._handle(request, h, inclusive_end=False)
        if not isinstance(handle, PopHandle):
            return handle  # the refusal
        if h.invisible_time < 0:
            return create_response(request, ResponseCode.INVALID_PARAMETER,
                                   f"invisibleTime {h.invisible_time} is negative")
        flight = None
        if self.groups.exists(h.consumer_group):
            flight = self.pop.change_invisible(h.consumer_group, h.topic, h.queue_id, h.offset, h.invisible_time)
            if flight is None:
                flight = self.pop.adopt(h.consumer_group, h.topic, h.queue_id, h.offset, handle.commitlog_offset,
                                        h.invisible_time)
        if flight is None:
            # acked, revived already, or never popped: RocketMQ still answers with a new handle
            # (its new checkpoint finds nothing to revive); so does this broker, storing nothing
            pop_time = self.clock()
        else:
            pop_time = flight.pop_time_ms
        header = ChangeInvisibleTimeResponseHeader(pop_time=pop_time, invisible_time=h.invisible_time,
                                                   revive_qid=handle.revive_qid)
        return create_response(request, ResponseCode.SUCCESS, ext_fields=header.to_ext())

    # --- PEEK_MESSAGE, NOTIFICATION, POLLING_INFO -----------------------------------------------
    def peek_message(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        """Up to ``maxMsgNums`` messages from the group's pop position, nothing changed."""
        h = PeekMessageRequestHeader.from_command(request)
        if h.max_msg_nums > MAX_POP_BATCH:
            return create_response(request, ResponseCode.INVALID_PARAMETER,
                                   f"the broker[{self.broker_name()}] peek message's num is greater than {MAX_POP_BATCH}")
        refusal = self._refusal(request, h.topic, h.consumer_group, h.queue_id, "peek")
        if refusal is not None:
            return refusal
        body = bytearray()
        left = h.max_msg_nums
        for qid in self._queues(h.topic, h.queue_id):
            if left <= 0:
                break
            start = self.pop.queue(h.consumer_group, h.topic, qid).next
            result = self.store.get_message(h.topic, qid, start, left)
            if result.status is GetMessageStatus.FOUND:
                for buf in result.buffers:
                    body += buf
                left -= result.message_count
        if not body:
            return create_response(request, ResponseCode.PULL_NOT_FOUND, GetMessageStatus.NO_MESSAGE_IN_QUEUE.value)
        header = PopMessageResponseHeader(pop_time=self.clock(), invisible_time=0, revive_qid=0, rest_num=0)
        return create_response(request, ResponseCode.SUCCESS, GetMessageStatus.FOUND.value,
                               ext_fields=header.to_ext(), body=bytes(body))

    def notification(self, channel: Any, request: RemotingCommand) -> Answer:
        """Whether the group has messages to pop (the retry queue included), waiting up to
        ``pollTime`` for one to arrive."""
        h = NotificationRequestHeader.from_command(request)
        refusal = self._refusal(request, h.topic, h.consumer_group, h.queue_id, "peeking")
        if refusal is not None:
            return refusal
        if self._has_message(h) or h.poll_time <= 0:
            return self._notified(request, h)
        return self._notify_later(request, h)

    def _has_message(self, h: NotificationRequestHeader) -> bool:
        retry = pop_retry_topic(h.consumer_group, h.topic)
        if self.topics.get(retry) is not None and self.pop.rest(h.consumer_group, retry, 0) > 0:
            return True
        return any(self.pop.rest(h.consumer_group, h.topic, q) > 0 for q in self._queues(h.topic, h.queue_id))

    def _notified(self, request: RemotingCommand, h: NotificationRequestHeader) -> RemotingCommand:
        header = NotificationResponseHeader(has_msg=self._has_message(h), polling_full=False)
        return create_response(request, ResponseCode.SUCCESS, ext_fields=header.to_ext())

    async def _notify_later(self, request: RemotingCommand, h: NotificationRequestHeader) -> RemotingCommand:
        arrivals = self.pop.arrivals
        assert arrivals is not None
        topics = [h.topic, pop_retry_topic(h.consumer_group, h.topic)]
        deadline = self.clock() + h.poll_time
        while not self._has_message(h):
            left = deadline - self.clock()
            if left <= 0:
                break
            since = arrivals.generation(topics)
            if self._has_message(h):
                break
            await arrivals.wait(topics, left / 1000, since)
        return self._notified(request, h)

    def polling_info(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        h = PollingInfoRequestHeader.from_command(request)
        refusal = self._refusal(request, h.topic, h.consumer_group, h.queue_id, "peeking")
        if refusal is not None:
            return refusal
        n = self._parked.get((h.topic, h.consumer_group, h.queue_id), 0)
        return create_response(request, ResponseCode.SUCCESS, ext_fields=PollingInfoResponseHeader(polling_num=n).to_ext())
