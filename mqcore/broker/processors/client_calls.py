"""Requests a tool asks the broker to put to one of its consumers: GET_CONSUMER_RUNNING_INFO (307)
and CONSUME_MESSAGE_DIRECTLY (309).

As a 4.9 broker does (``AdminBrokerProcessor.callConsumer``): the consumer is found by group and
client id among the heartbeating channels, the request goes down that channel with the tool's
header fields and body (for 309 the body becomes the message's stored record and ``brokerName`` is
added), and the consumer's answer goes back to the tool unchanged. A consumer not online, or
one too old to answer (before V3_1_8_SNAPSHOT), is SYSTEM_ERROR; one that does not answer within
the timeout is CONSUME_MSG_TIMEOUT, with the Java broker's remarks.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mqcore.errors import IllegalArgumentError, MQError, RemotingTimeoutError
from mqcore.message import decode_offset_msg_id
from mqcore.remoting import ResponseCode, create_response
from mqcore.remoting.codes import RequestCode
from mqcore.remoting.channel import Channel
from mqcore.remoting.command import RemotingCommand, create_request
from mqcore.remoting.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
)

if TYPE_CHECKING:
    from mqcore.broker.clients import ClientChannelInfo, ClientManager
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)

#: ``MQVersion.Version.V3_1_8_SNAPSHOT.ordinal()``: older clients cannot answer these requests
V3_1_8_SNAPSHOT = 62
#: ``Broker2Client.callClient`` waits this long for the consumer
CALL_CLIENT_TIMEOUT_MS = 10_000


class ClientCallProcessor:
    """Forwards 307/309 to a consumer's channel and relays its answer. Runs on the event loop."""

    def __init__(self, *, broker_name: str, store: MessageStore, clients: ClientManager,
                 timeout_ms: int = CALL_CLIENT_TIMEOUT_MS):
        self.broker_name = broker_name
        self.store = store
        self.clients = clients
        self.timeout_ms = timeout_ms

    async def consumer_running_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetConsumerRunningInfoRequestHeader.from_command(request)
        return await self.call_consumer(RequestCode.GET_CONSUMER_RUNNING_INFO, request, h.consumer_group, h.client_id)

    async def consume_message_directly(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = ConsumeMessageDirectlyResultRequestHeader.from_command(request)
        ext = dict(request.ext_fields)
        ext["brokerName"] = self.broker_name
        try:
            _, _, phy = decode_offset_msg_id(h.msg_id or "")
        except IllegalArgumentError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"msgId {h.msg_id!r}: {e}")
        record = self.store.select_one_message_by_offset(phy)
        if record is None:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"can not find message by the offset, {phy}")
        body = bytes(record)
        return await self.call_consumer(RequestCode.CONSUME_MESSAGE_DIRECTLY, request, h.consumer_group,
                                        h.client_id or "", ext=ext, body=body)

    def _find(self, group: str, client_id: str) -> ClientChannelInfo | None:
        g = self.clients.group(group)
        if g is None:
            return None
        return next((info for info in g.channels.values() if info.client_id == client_id), None)

    async def call_consumer(self, code: int, request: RemotingCommand, group: str, client_id: str, *,
                            ext: dict[str, str] | None = None, body: bytes | None = None) -> RemotingCommand:
        info = self._find(group, client_id)
        if info is None:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        if info.version < V3_1_8_SNAPSHOT:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"The Consumer <{client_id}> Version <{info.version}> too low to finish, "
                                   "please upgrade it to V3_1_8_SNAPSHOT")
        fields = dict(request.ext_fields if ext is None else ext)
        fields.pop("AccessKey", None)  # the tool's signature is not the broker's to pass on
        fields.pop("Signature", None)
        call = create_request(code, fields, request.body if body is None else body)
        try:
            answer = await info.channel.invoke(call, self.timeout_ms)
        except RemotingTimeoutError as e:
            return create_response(request, ResponseCode.CONSUME_MSG_TIMEOUT,
                                   f"consumer <{group}> <{client_id}> Timeout: {e}")
        except MQError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"invoke consumer <{group}> <{client_id}> Exception: {e}")
        # the consumer's answer, as it gave it, under the tool's request id
        return create_response(request, answer.code, answer.remark, ext_fields=dict(answer.ext_fields or {}),
                               body=answer.body)
