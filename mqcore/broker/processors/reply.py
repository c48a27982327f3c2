"""SEND_REPLY_MESSAGE (324) and SEND_REPLY_MESSAGE_V2 (325): request-reply (RIP-16).

A requester sends an ordinary message stamped with ``CORRELATION_ID``, ``REPLY_TO_CLIENT``
(its client id) and ``TTL``; whoever consumes it answers with a reply message on the
cluster's reply topic (``<cluster>_REPLY_TOPIC``, ``MSG_TYPE=reply``, the three properties
copied), sent with one of these codes. The broker does what Apache RocketMQ 4.9 does (checked
against the Java 4.9.7 broker, tests/broker/test_reply.py and
tests/reference/test_reply_reference.py):

1. the send checks (name, permission, topic auto-creation from TBW102, queue id);
2. push the reply to the requester's connection, found by the client id of a *producer*
   heartbeat, as PUSH_REPLY_MESSAGE_TO_CLIENT (326) with ``PUSH_REPLY_TIME`` added, and wait
   for its answer (up to ``push_timeout_ms``, Apache's 10 s);
3. with ``storeReplyMessageEnable`` (on), store the reply in its topic as well, whatever the
   push did; the properties are stored as the replier sent them;
4. answer SUCCESS when the push was acknowledged, else SYSTEM_ERROR naming why (no
   ``REPLY_TO_CLIENT``, no such requester, the requester refused or did not answer); the
   answer carries the stored record's msgId/queueId/queueOffset (``"0"``/0 when not stored).

The broker never reads ``TTL`` or ``CORRELATION_ID``: the requester matches and expires.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from typing import TYPE_CHECKING, Any, Callable

from mqcore.broker.processors.send import peer_host
from mqcore.broker.topics import writable
from mqcore.errors import DiskFullError, MQError
from mqcore.message import MessageExtBrokerInner, Prop, properties_to_string, string_to_properties
from mqcore.permissions import PERM_WRITE
from mqcore.remoting import LanguageCode, RemotingCommand, RequestCode, ResponseCode, create_response
from mqcore.remoting.command import create_request
from mqcore.remoting.headers import ReplyMessageRequestHeader, SendMessageRequestHeader
from mqcore.remoting.ratelimit import RateLimitedLog
from mqcore.store.results import PutMessageResult

if TYPE_CHECKING:
    from mqcore.broker.clients import ClientManager
    from mqcore.broker.processors.send import SendProcessor
    from mqcore.remoting.channel import Channel

log = logging.getLogger(__name__)

#: how long the broker waits for the requester to acknowledge a push (Broker2Client.callClient)
PUSH_TIMEOUT_MS = 10_000


class ReplyProcessor:
    """SEND_REPLY_MESSAGE(_V2), given only what it uses.

    ``send`` is the broker's SendProcessor: its configuration, topics, store, put pool,
    stats, store host and answer are shared (a reply is a send that is pushed first).
    ``clients`` finds the requester's channel; ``store_host_text`` is the broker's address
    as ``host:port`` (the push's ``storeHost``); ``clock`` gives epoch ms.
    """

    def __init__(self, *, send: SendProcessor, clients: ClientManager, store_host_text: Callable[[], str],
                 clock: Callable[[], int], push_timeout_ms: int = PUSH_TIMEOUT_MS) -> None:
        self.send = send
        self.clients = clients
        self.store_host_text = store_host_text
        self.clock = clock
        self.push_timeout_ms = push_timeout_ms
        #: one warning per interval for replies nobody waits for, not one per reply
        self.push_log = RateLimitedLog(log)

    async def reply(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            return await self._reply(channel, request)
        except DiskFullError as e:  # an auto-created topic could not be persisted: nothing stored
            refused: RemotingCommand = self.send._disk_full(request, e)
            return refused

    async def _reply(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        send = self.send
        cfg = send.cfg
        h = SendMessageRequestHeader.from_command(request)  # a malformed header: SYSTEM_ERROR (dispatcher)
        topic = h.topic
        if not cfg.broker_permission & PERM_WRITE:
            return self._refused(request, ResponseCode.NO_PERMISSION,
                                 f"the broker[{cfg.broker_name}] sending message is forbidden")
        tc = send.topics.get(topic)
        if tc is None and cfg.auto_create_topic_enable:  # as a send: from the default topic (TBW102)
            tc = send.topics.create_in_send(topic, h.default_topic, h.default_topic_queue_nums)
            if tc is not None:
                send.schedule_register()
        if tc is None:
            return self._refused(request, ResponseCode.TOPIC_NOT_EXIST,
                                 f"topic[{topic}] not exist, apply first please!")
        if not writable(tc):
            return self._refused(request, ResponseCode.NO_PERMISSION,
                                 f"the topic[{topic}] sending message is forbidden")
        queue_id = h.queue_id
        if queue_id >= max(tc.read_queue_nums, tc.write_queue_nums):
            return self._refused(request, ResponseCode.SYSTEM_ERROR,
                                 f"request queueId[{queue_id}] is illegal, topic {topic} has "
                                 f"{tc.write_queue_nums} write queues, Producer: {channel.remote_addr}")
        if queue_id < 0:
            queue_id = random.randrange(max(1, tc.write_queue_nums))
        props = string_to_properties(h.properties)
        body = bytes(request.body)
        pushed_ok, remark = await self._push(channel, h, props, body)
        result = None
        if cfg.store_reply_message_enable:
            msg = MessageExtBrokerInner(topic=topic, body=body, queue_id=queue_id, flag=h.flag, properties=props,
                                        sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                                        born_host=peer_host(channel), store_host=send.store_host(),
                                        reconsume_times=h.reconsume_times or 0, properties_as_sent=True)
            result = await self._put(topic, msg)
        return self._answer(request, pushed_ok, remark, queue_id, result)

    async def _push(self, channel: Channel, h: SendMessageRequestHeader, props: dict[str, str],
                    body: bytes) -> tuple[bool, str | None]:
        """Push the reply to its requester: (acknowledged, why not). The pushed header names the
        queue id the replier asked for (-1 included), as Apache's does."""
        requester_id = props.get(Prop.REPLY_TO_CLIENT)
        if requester_id is None:
            return False, f"reply message properties[{Prop.REPLY_TO_CLIENT}] is null"
        target = self.clients.producer_channel_of(requester_id)
        if target is None:
            remark = f"push reply message fail, channel of <{requester_id}> not found."
            self.push_log.warning("no requester", "%s", remark)
            return False, remark
        pushed = dict(props)
        pushed[Prop.PUSH_REPLY_TIME] = str(self.clock())
        header = ReplyMessageRequestHeader(
            producer_group=h.producer_group, topic=h.topic, default_topic=h.default_topic,
            default_topic_queue_nums=h.default_topic_queue_nums, queue_id=h.queue_id, sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp, flag=h.flag, born_host=channel.remote_addr,
            store_host=self.store_host_text(), store_timestamp=self.clock(), properties=properties_to_string(pushed),
            reconsume_times=h.reconsume_times, unit_mode=h.unit_mode)
        push = create_request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, header.to_ext(), body,
                              language=LanguageCode.JAVA)
        failed = f"push reply message to {requester_id}fail."  # Apache's words, space and all
        try:
            answer = await target.invoke(push, self.push_timeout_ms)
        except MQError as e:  # closed, timed out: the replier hears it; the reply may still be stored
            self.push_log.warning("push failed", "push reply message to <%s> failed: %s", requester_id, e)
            return False, failed
        if answer.code != ResponseCode.SUCCESS:
            self.push_log.warning("push refused", "push reply message to <%s> answered %d: %s", requester_id,
                                  answer.code, answer.remark)
            return False, failed
        return True, None

    async def _put(self, topic: str, msg: MessageExtBrokerInner) -> PutMessageResult:
        send = self.send
        t0 = time.perf_counter()
        result: PutMessageResult
        if send.pool is None:
            result = send.store.put_message(msg)
        else:  # SYNC_FLUSH: the put waits for its fsync, off the event loop
            result = await asyncio.get_running_loop().run_in_executor(
                send.pool, functools.partial(send.store.put_message, msg))
        send.stats.put_latency.observe(time.perf_counter() - t0)
        send.stats.on_put(topic, result)
        if not result.status.stored:
            log.warning("a reply to %s was pushed or refused but not stored: %s %s", topic, result.status.value,
                        result.remark)
        return result

    def _answer(self, request: RemotingCommand, pushed_ok: bool, remark: str | None, queue_id: int,
                result: PutMessageResult | None) -> RemotingCommand:
        """The answer Apache gives: the push decides the code; a stored reply gives the ids."""
        cfg = self.send.cfg
        ext: dict[str, Any] = {"MSG_REGION": cfg.region_id, "TRACE_ON": "true" if cfg.trace_on else "false"}
        if result is not None and result.status.stored:
            ext.update(msgId=result.msg_id, queueId=str(queue_id), queueOffset=str(result.queue_offset))
        elif pushed_ok:
            ext.update(msgId="0", queueId=str(queue_id), queueOffset="0")
        code = ResponseCode.SUCCESS if pushed_ok else ResponseCode.SYSTEM_ERROR
        return create_response(request, code, remark, ext)

    def _refused(self, request: RemotingCommand, code: int, remark: str) -> RemotingCommand:
        cfg = self.send.cfg
        return create_response(request, code, remark, {"MSG_REGION": cfg.region_id,
                                                       "TRACE_ON": "true" if cfg.trace_on else "false"})
