"""Request-reply (RocketMQ's RIP-16): a producer sends a request and waits for its reply.

The requester stamps its message with ``CORRELATION_ID`` (a fresh UUID), ``REPLY_TO_CLIENT``
(its client id) and ``TTL`` (the timeout in ms) and sends it as usual. A consumer of the
request answers with :func:`create_reply_message` (or ``Producer.send_reply``): a message on
the cluster's reply topic (``<cluster>_REPLY_TOPIC``, from the request's ``CLUSTER``
property) with ``MSG_TYPE=reply`` and the three properties copied; a producer sends it with
SEND_REPLY_MESSAGE_V2. The broker pushes it to the requester's connection as
PUSH_REPLY_MESSAGE_TO_CLIENT, and :class:`ReplyTable` hands it to the waiting request by
correlation id (RocketMQ's ``RequestFutureTable`` and ``ClientRemotingProcessor
.receiveReplyMessage``).

Thread model: the table is used on the client's event-loop thread only.
"""
from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from mqcore.client.message import Message, MessageExt, decompress_body
from mqcore.errors import IllegalArgumentError, MessageDecodeError, MQError, RemotingTimeoutError
from mqcore.format import layout as L
from mqcore.message import REPLY_MESSAGE_FLAG, Prop, reply_topic
from mqcore.remoting.channel import Channel
from mqcore.remoting.codes import ResponseCode
from mqcore.remoting.command import RemotingCommand, create_response
from mqcore.remoting.headers import ReplyMessageRequestHeader

log = logging.getLogger(__name__)

__all__ = ["ReplyMessage", "ReplyTable", "RequestTimeoutError", "create_reply_message", "is_reply", "new_correlation_id",
           "stamp_request"]


class RequestTimeoutError(RemotingTimeoutError):
    """The request was sent, but no reply arrived within its timeout (Java's
    ``RequestTimeoutException``)."""


def new_correlation_id() -> str:
    return str(uuid.uuid4())


def stamp_request(msg: Message, client_id: str, timeout_ms: float) -> str:
    """Mark ``msg`` as a request of ``client_id`` answered within ``timeout_ms``; returns
    its new correlation id."""
    correlation_id = new_correlation_id()
    props = msg.properties
    props[Prop.CORRELATION_ID] = correlation_id
    props[Prop.REPLY_TO_CLIENT] = client_id
    props[Prop.TTL] = str(int(timeout_ms))
    return correlation_id


class ReplyMessage(Message):
    """What :func:`create_reply_message` returns: a Message that producers send with
    SEND_REPLY_MESSAGE_V2 and never put into an auto-batch (a batch is stored, not pushed)."""

    __slots__ = ()


def create_reply_message(request: Message, body: bytes | bytearray | memoryview | str) -> ReplyMessage:
    """The reply to a received request (``MessageUtil.createReplyMessage``): addressed to the
    reply topic of the cluster that stored the request, carrying its correlation id,
    requester and TTL back. Send it with any producer. Raises IllegalArgumentError for a
    message that did not come through a broker (no ``CLUSTER`` property)."""
    if request is None:
        raise IllegalArgumentError("create reply message fail, requestMessage cannot be null.")
    cluster = request.properties.get(Prop.CLUSTER)
    if not cluster:
        raise IllegalArgumentError(f"create reply message fail, requestMessage error, property[{Prop.CLUSTER}] "
                                   "is null: reply to a message received from a broker")
    reply = ReplyMessage(reply_topic(cluster), body)
    props = reply.properties
    props[Prop.MSG_TYPE] = REPLY_MESSAGE_FLAG
    for key in (Prop.CORRELATION_ID, Prop.REPLY_TO_CLIENT, Prop.TTL):
        value = request.properties.get(key)
        if value is not None:
            props[key] = value
    return reply


def is_reply(properties: dict[str, str]) -> bool:
    """True for a message a producer sends with SEND_REPLY_MESSAGE_V2, not SEND_MESSAGE_V2."""
    return properties.get(Prop.MSG_TYPE) == REPLY_MESSAGE_FLAG


class ReplyTable:
    """The requests of one client waiting for their replies, by correlation id."""

    def __init__(self, clock: Any) -> None:
        self.clock = clock
        self._waiting: dict[str, asyncio.Future[MessageExt]] = {}

    def __len__(self) -> int:
        return len(self._waiting)

    def expect(self, correlation_id: str) -> asyncio.Future[MessageExt]:
        """A future the reply to ``correlation_id`` completes (before the request is sent:
        a reply can overtake the send's own answer)."""
        future: asyncio.Future[MessageExt] = asyncio.get_running_loop().create_future()
        self._waiting[correlation_id] = future
        return future

    def forget(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    async def on_push(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """PUSH_REPLY_MESSAGE_TO_CLIENT: SUCCESS once the reply is taken (also for a reply
        nobody waits for any more: logged); SYSTEM_ERROR for one that cannot be read or
        names no correlation id, as the Java client answers."""
        try:
            reply = decode_pushed_reply(request, self.clock())
        except (MQError, ValueError) as e:
            log.warning("unreadable reply message from %s: %s", channel.remote_addr, e)
            return create_response(request, ResponseCode.SYSTEM_ERROR, "process reply message fail")
        correlation_id = reply.properties.get(Prop.CORRELATION_ID)
        if correlation_id is None:
            log.warning("reply message from %s without %s", channel.remote_addr, Prop.CORRELATION_ID)
            return create_response(request, ResponseCode.SYSTEM_ERROR, "process reply message fail")
        future = self._waiting.pop(correlation_id, None)
        if future is None or future.done():
            log.warning("receive reply message, but not matched any request, CorrelationId: %s, reply from host: %s",
                        correlation_id, reply.born_host)
        else:
            future.set_result(reply)
        return create_response(request, ResponseCode.SUCCESS)


def decode_pushed_reply(request: RemotingCommand, arrive_time_ms: int) -> MessageExt:
    """The reply message a PUSH_REPLY_MESSAGE_TO_CLIENT carries, stamped ``ARRIVE_TIME``."""
    h = ReplyMessageRequestHeader.from_command(request)
    body = bytes(request.body)
    if h.sys_flag & L.SYSFLAG_COMPRESSED:
        try:
            body = decompress_body(body, h.sys_flag)
        except MessageDecodeError:
            log.warning("a reply body for %s does not decompress; handed over as sent", h.topic)
    props = (h.properties or "").encode("utf-8", "surrogatepass")
    msg = MessageExt(h.topic, body, props)
    msg.queue_id = h.queue_id
    msg.flag = h.flag
    msg.sys_flag = h.sys_flag
    msg.born_timestamp = h.born_timestamp
    msg.born_host = h.born_host.lstrip("/")
    msg.store_timestamp = h.store_timestamp
    msg.store_host = h.store_host.lstrip("/")
    msg.reconsume_times = h.reconsume_times or 0
    msg.stamp_property(Prop.ARRIVE_TIME, str(arrive_time_ms))
    return msg
