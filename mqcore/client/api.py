"""Typed client RPCs over the remoting layer (``MQClientAPIImpl``).

One coroutine per request the 4.x client sends; each builds the typed header, calls
the broker or name server, and turns the answer into a value or an error:
non-success codes raise :class:`~mqcore.errors.BrokerError` (``retriable`` for the
codes a producer retries), network failures raise
:class:`~mqcore.errors.RemotingError` subclasses. Nothing here retries or decides
policy; that is the caller's job.

Thread model: coroutines run on the client's event loop only; ``send_message_blocking``
runs on the calling thread (any thread but the loop's).
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Coroutine, Iterable, Sequence
from typing import Any, Protocol, TypeVar, cast

from mqcore.client.message import (
    MessageExt,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
    decode_messages,
)
from mqcore.client.route import TopicRouteData
from mqcore.errors import BrokerError, RemotingError
from mqcore.format.properties import format_properties
from mqcore.message import Prop, decode_offset_msg_id
from mqcore.remoting.bodies import (
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    UnlockBatchRequestBody,
)
from mqcore.kernel_api import SendTemplate, StoreKernels
from mqcore.remoting.blocking import AnswerHeader
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.codes import LanguageCode, RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand, create_request
from mqcore.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetEarliestMsgStoretimeRequestHeader,
    GetEarliestMsgStoretimeResponseHeader,
    GetMaxOffsetRequestHeader,
    GetMinOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    OffsetResponseHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    QueryMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
    ViewMessageRequestHeader,
)

log = logging.getLogger(__name__)

__all__ = ["MQClientAPI", "SEND_STATUS_BY_CODE", "PULL_STATUS_BY_CODE", "decode_pull_answer", "offsets_suffix"]

SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}

PULL_STATUS_BY_CODE: dict[int, PullStatus] = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


def _check(resp: RemotingCommand, addr: str, ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
    if resp.code not in ok:
        raise BrokerError(resp.code, resp.remark, addr)
    return resp


def offsets_suffix(min_offset: int, max_offset: int) -> bytes:
    """The encoded MIN_OFFSET / MAX_OFFSET properties the Java client stamps on pulled messages."""
    return format_properties({Prop.MIN_OFFSET: str(min_offset), Prop.MAX_OFFSET: str(max_offset)}).encode()


def decode_pull_answer(addr: str, broker_name: str, answer: RemotingCommand, body: bytes | memoryview,
                       start: int, end: int, *, kernels: StoreKernels | None = None
                       ) -> tuple[PullStatus, PullMessageResponseHeader, list[MessageExt]]:
    """A PULL_MESSAGE answer: its status (:class:`BrokerError` for a code that is none), its
    header, and for FOUND the messages of ``body[start:end]``, decoded (and decompressed), each
    stamped with the queue's MIN_OFFSET / MAX_OFFSET (by the decoder: appended to its
    properties). The same function reads the answer straight from the receive buffer (an
    answer decoder, ``body`` a view of it: every message takes copies, nothing keeps the view)
    and from a decoded command (``body`` its bytes: the generic path)."""
    status = PULL_STATUS_BY_CODE.get(answer.code)
    if status is None:
        raise BrokerError(answer.code, answer.remark, addr)
    header = PullMessageResponseHeader.from_command(answer)
    if status is not PullStatus.FOUND or start >= end:
        return status, header, []
    msgs = decode_messages(body, broker_name, props_suffix=offsets_suffix(header.min_offset, header.max_offset),
                           start=start, end=end, kernels=kernels)
    return status, header, msgs


#: the request code as a plain int: the kernel takes exact ints only
_SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)


def _language_name(language: int) -> str | None:
    try:
        return LanguageCode(language).name
    except ValueError:
        return None


#: a blocking send over the loop (TLS) waits this much past its own deadline for a stuck loop
_LOOP_GUARD_S = 5.0

_T = TypeVar("_T")


class OnLoop(Protocol):
    """``on_loop(coro, timeout_s)`` (``LoopThread.run``): run ``coro`` on the client's loop, wait for its result."""

    def __call__(self, coro: Coroutine[Any, Any, _T], timeout_s: float | None = None) -> _T: ...


class MQClientAPI:
    """Request builders and response parsers; one per client instance."""

    def __init__(self, remoting: RemotingClient, *, language: int, version: int,
                 namesrv_addrs: Sequence[str], on_loop: OnLoop | None = None) -> None:
        """``on_loop(coro, timeout_s)``: run a coroutine on the client's loop and wait for it
        (the blocking sends take that way when the connections are TLS: the blocking
        sockets' kernels write plaintext)."""
        self.remoting = remoting
        self._on_loop = on_loop if remoting is not None and remoting.tls is not None else None
        self.language = language
        self.version = version
        self.namesrv_addrs = list(namesrv_addrs)
        self._namesrv_index = 0
        # the JSON header names the language; a code LanguageCode does not know takes the generic path
        self._language_name: str | None = _language_name(language)
        #: (access key, secret key) of plain ACL without a security token: send templates sign
        #: their frames themselves (``SessionCredentials.sign``'s signature); None: unsigned
        self.template_keys: tuple[str, str] | None = None

    def request(self, code: int, ext: dict[str, Any] | None = None, body: bytes | memoryview = b"") -> RemotingCommand:
        return create_request(code, ext, body, language=self.language, version=self.version)

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout_ms: float) -> RemotingCommand:
        return await self.remoting.invoke(addr, cmd, timeout_ms)

    # --- name server -----------------------------------------------------------------------
    async def invoke_namesrv(self, cmd_factory: Any, timeout_ms: float) -> tuple[str, RemotingCommand]:
        """Ask the current name server, moving on to the next one on network errors."""
        last: RemotingError | None = None
        n = len(self.namesrv_addrs)
        for attempt in range(n):
            addr = self.namesrv_addrs[(self._namesrv_index + attempt) % n]
            try:
                resp = await self.invoke(addr, cmd_factory(), timeout_ms)
            except RemotingError as e:
                log.info("name server %s failed: %s", addr, e)
                last = e
                continue
            self._namesrv_index = (self._namesrv_index + attempt) % n
            return addr, resp
        assert last is not None
        raise last

    async def get_topic_route(self, topic: str, timeout_ms: float) -> TopicRouteData | None:
        """The route, or None when the name server knows no such topic."""
        ext = GetRouteInfoRequestHeader(topic=topic).to_ext()
        addr, resp = await self.invoke_namesrv(lambda: self.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext),
                                               timeout_ms)
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        _check(resp, addr)
        if not resp.body:
            return None
        return TopicRouteData.decode(bytes(resp.body))

    # --- sending -----------------------------------------------------------------------------
    def build_send_request(self, header: SendMessageRequestHeader, body: bytes | memoryview, *, batch: bool,
                           use_v2: bool, reply: bool = False) -> RemotingCommand:
        if batch:
            code = RequestCode.SEND_BATCH_MESSAGE
        elif reply:  # request-reply: the broker pushes it to the requester (and stores it)
            code = RequestCode.SEND_REPLY_MESSAGE_V2 if use_v2 else RequestCode.SEND_REPLY_MESSAGE
        else:
            code = RequestCode.SEND_MESSAGE_V2 if use_v2 else RequestCode.SEND_MESSAGE
        ext = header.to_ext_v2() if (batch or use_v2) else header.to_ext_v1()
        return self.request(code, ext, body)

    async def send_message(self, addr: str, broker_name: str, topic: str, uniq_id: str,
                           cmd: RemotingCommand, timeout_ms: float) -> SendResult:
        resp = await self.invoke(addr, cmd, timeout_ms)
        return self.process_send_response(addr, broker_name, topic, uniq_id, resp)

    def send_message_blocking(self, addr: str, broker_name: str, topic: str, uniq_id: str,
                              cmd: RemotingCommand, timeout_ms: float) -> SendResult:
        """``send_message`` on the calling thread (no event loop; any thread but the loop's)."""
        if self._on_loop is not None:  # TLS: over the loop's connection
            return self._on_loop(self.send_message(addr, broker_name, topic, uniq_id, cmd, timeout_ms),
                                 timeout_ms / 1000.0 + _LOOP_GUARD_S)
        resp = self.remoting.invoke_blocking(addr, cmd, timeout_ms)
        return self.process_send_response(addr, broker_name, topic, uniq_id, resp)

    def send_message_v2_blocking(self, addr: str, broker_name: str, topic: str, uniq_id: str,
                                 values: tuple[Any, ...], body: bytes, timeout_ms: float, *,
                                 mq: MessageQueue | None = None) -> SendResult | None:
        """A SEND_MESSAGE_V2 written by the ``encode_request_frame`` kernel and exchanged by
        the ``exchange`` kernel (write, wait, answer read in one call): the frame
        ``build_send_request`` + ``send_message_blocking`` would send, byte for byte, with
        ``values`` the header's fields in ``SendMessageRequestHeader.V2_KEYS`` order (None:
        absent). None, with nothing sent, when the kernel declines (the caller then takes
        the generic path). ``mq``: the queue sent to, reused in the result when the answer
        names it."""
        language = self._language_name
        if language is None or self._on_loop is not None:
            return None
        answer = self.remoting.blocking.call(addr, _SEND_V2, language, self.version, SendMessageRequestHeader.V2_KEYS,
                                             values, body, timeout_ms)
        if answer is None:
            return None
        if type(answer) is tuple:
            code, _opaque, _flag, remark, ext = answer
            return self.send_result(addr, broker_name, topic, uniq_id, code, remark, ext, mq)
        # not a tuple: a RemotingCommand (``type(...) is`` does not narrow the rest)
        return self.process_send_response(addr, broker_name, topic, uniq_id, cast(RemotingCommand, answer))

    def send_template(self, producer_group: str, default_topic: str, default_topic_queue_nums: int,
                      mq: MessageQueue) -> SendTemplate | None:
        """The frame template of a plain SEND_MESSAGE_V2 to ``mq`` (see
        ``WireClientKernels.send_template``), None when the kernel would not write it."""
        language = self._language_name
        if language is None or self.remoting.tls is not None:  # the template writes a plaintext socket
            return None
        keys = self.template_keys
        return self.remoting.blocking.kernels.send_template(
            _SEND_V2, language, self.version, producer_group, mq.topic, default_topic, default_topic_queue_nums,
            mq.queue_id, mq.broker_name, mq, SendResult, SendStatus.SEND_OK,
            *(keys if keys is not None else ()))

    def send_answer(self, addr: str, broker_name: str, topic: str, uniq_id: str,
                    answer: AnswerHeader | RemotingCommand, mq: MessageQueue | None = None) -> SendResult:
        """The SendResult (or BrokerError) of a send's answer that the kernel did not turn
        into a SendResult itself: a decoded header, or a command from the generic decoder."""
        if type(answer) is tuple:
            code, _opaque, _flag, remark, ext = answer
            return self.send_result(addr, broker_name, topic, uniq_id, code, remark, ext, mq)
        assert isinstance(answer, RemotingCommand)
        return self.process_send_response(addr, broker_name, topic, uniq_id, answer)

    async def send_message_oneway(self, addr: str, cmd: RemotingCommand, timeout_ms: float) -> None:
        await self.remoting.invoke_oneway(addr, cmd, timeout_ms)

    @staticmethod
    def process_send_response(addr: str, broker_name: str, topic: str, uniq_id: str,
                              resp: RemotingCommand) -> SendResult:
        return MQClientAPI.send_result(addr, broker_name, topic, uniq_id, resp.code, resp.remark, resp.ext_fields)

    @staticmethod
    def send_result(addr: str, broker_name: str, topic: str, uniq_id: str, code: int, remark: str | None,
                    ext: dict[str, str], mq: MessageQueue | None = None) -> SendResult:
        """The SendResult of a send's answer (code, remark, ext fields), or its BrokerError.
        ``mq``: the queue sent to, used as the result's queue when it is the one answered."""
        status = SEND_STATUS_BY_CODE.get(code)
        if status is None:
            raise BrokerError(code, remark, addr)
        header = SendMessageResponseHeader.from_ext(ext)
        if mq is None or mq.queue_id != header.queue_id or mq.topic != topic or mq.broker_name != broker_name:
            mq = MessageQueue(topic, broker_name, header.queue_id)
        return SendResult(status, uniq_id, mq,
                          header.queue_offset, header.msg_id, header.transaction_id,
                          ext.get("MSG_REGION", "DefaultRegion"), ext.get("TRACE_ON", "true") != "false")

    # --- pulling -----------------------------------------------------------------------------
    async def pull_message(self, addr: str, header: PullMessageRequestHeader, broker_name: str, timeout_ms: float,
                           *, from_buffer: bool = True
                           ) -> tuple[PullStatus, PullMessageResponseHeader, list[MessageExt]]:
        """PULL_MESSAGE: status, answer header and the messages found (``decode_pull_answer``).
        The answer is read straight from the connection's receive buffer: a 1,000-message answer
        is not copied into a ``bytes`` body first (that copy, and the fresh pages of its 1 MiB
        allocation, were a fifth of a consumer's loop thread at 1 KiB per message).
        ``from_buffer=False`` takes the generic path (the answer as a command with a bytes
        body, then the same decoder): the reference the buffer path is tested against."""
        cmd = self.request(RequestCode.PULL_MESSAGE, header.to_ext())
        decode = functools.partial(decode_pull_answer, addr, broker_name)
        if from_buffer:
            return await self.remoting.invoke_decoded(addr, cmd, timeout_ms, decode)
        resp = await self.invoke(addr, cmd, timeout_ms)
        body = bytes(resp.body)  # a decoded command's body is bytes already: no copy
        return decode(resp, body, 0, len(body))

    @staticmethod
    def to_pull_result(status: PullStatus, header: PullMessageResponseHeader, body: bytes,
                       broker_name: str) -> PullResult:
        """Decode the records (no tag filtering here; see the pull kernel)."""
        msgs = decode_messages(body, broker_name) if status is PullStatus.FOUND else []
        return PullResult(status, header.next_begin_offset, header.min_offset, header.max_offset, msgs,
                          header.suggest_which_broker_id)

    # --- clients -------------------------------------------------------------------------------
    async def heartbeat(self, addr: str, body: bytes, timeout_ms: float) -> int:
        resp = _check(await self.invoke(addr, self.request(RequestCode.HEART_BEAT, None, body), timeout_ms), addr)
        return resp.version

    async def unregister_client(self, addr: str, client_id: str, producer_group: str | None,
                                consumer_group: str | None, timeout_ms: float) -> None:
        ext = UnregisterClientRequestHeader(client_id=client_id, producer_group=producer_group,
                                            consumer_group=consumer_group).to_ext()
        _check(await self.invoke(addr, self.request(RequestCode.UNREGISTER_CLIENT, ext), timeout_ms), addr)

    async def get_consumer_id_list(self, addr: str, group: str, timeout_ms: float) -> list[str]:
        ext = GetConsumerListByGroupRequestHeader(consumer_group=group).to_ext()
        resp = _check(await self.invoke(addr, self.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, ext),
                                        timeout_ms), addr)
        if not resp.body:
            return []
        return GetConsumerListByGroupResponseBody.decode(bytes(resp.body)).consumer_id_list

    # --- offsets -------------------------------------------------------------------------------
    async def query_consumer_offset(self, addr: str, group: str, mq: MessageQueue, timeout_ms: float) -> int:
        ext = QueryConsumerOffsetRequestHeader(consumer_group=group, topic=mq.topic, queue_id=mq.queue_id,
                                               broker_name=mq.broker_name).to_ext()
        resp = _check(await self.invoke(addr, self.request(RequestCode.QUERY_CONSUMER_OFFSET, ext), timeout_ms),
                      addr)
        return OffsetResponseHeader.from_command(resp).offset

    async def update_consumer_offset(self, addr: str, group: str, mq: MessageQueue, offset: int,
                                     timeout_ms: float, *, oneway: bool) -> None:
        ext = UpdateConsumerOffsetRequestHeader(consumer_group=group, topic=mq.topic, queue_id=mq.queue_id,
                                                commit_offset=offset, broker_name=mq.broker_name).to_ext()
        cmd = self.request(RequestCode.UPDATE_CONSUMER_OFFSET, ext)
        if oneway:
            await self.remoting.invoke_oneway(addr, cmd, timeout_ms)
        else:
            _check(await self.invoke(addr, cmd, timeout_ms), addr)

    async def _offset_call(self, addr: str, code: int, header: Any, timeout_ms: float) -> int:
        resp = _check(await self.invoke(addr, self.request(code, header.to_ext()), timeout_ms), addr)
        return OffsetResponseHeader.from_command(resp).offset

    async def get_max_offset(self, addr: str, mq: MessageQueue, timeout_ms: float) -> int:
        header = GetMaxOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, broker_name=mq.broker_name)
        return await self._offset_call(addr, RequestCode.GET_MAX_OFFSET, header, timeout_ms)

    async def get_min_offset(self, addr: str, mq: MessageQueue, timeout_ms: float) -> int:
        header = GetMinOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, broker_name=mq.broker_name)
        return await self._offset_call(addr, RequestCode.GET_MIN_OFFSET, header, timeout_ms)

    async def search_offset(self, addr: str, mq: MessageQueue, timestamp_ms: int, timeout_ms: float) -> int:
        header = SearchOffsetRequestHeader(topic=mq.topic, queue_id=mq.queue_id, timestamp=timestamp_ms,
                                           broker_name=mq.broker_name)
        return await self._offset_call(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, header, timeout_ms)

    async def get_earliest_msg_storetime(self, addr: str, mq: MessageQueue, timeout_ms: float) -> int:
        ext = GetEarliestMsgStoretimeRequestHeader(topic=mq.topic, queue_id=mq.queue_id,
                                                   broker_name=mq.broker_name).to_ext()
        resp = _check(await self.invoke(addr, self.request(RequestCode.GET_EARLIEST_MSG_STORETIME, ext),
                                        timeout_ms), addr)
        return GetEarliestMsgStoretimeResponseHeader.from_command(resp).timestamp

    # --- consuming helpers ---------------------------------------------------------------------
    async def consumer_send_message_back(self, addr: str, msg: MessageExt, group: str, delay_level: int,
                                         max_reconsume_times: int, timeout_ms: float) -> None:
        ext = ConsumerSendMsgBackRequestHeader(
            offset=msg.commitlog_offset, group=group, delay_level=delay_level, origin_msg_id=msg.msg_id,
            origin_topic=msg.topic, unit_mode=False, max_reconsume_times=max_reconsume_times,
            broker_name=msg.broker_name).to_ext()
        _check(await self.invoke(addr, self.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext), timeout_ms), addr)

    async def lock_batch_mq(self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue],
                            timeout_ms: float) -> set[MessageQueue]:
        body = LockBatchRequestBody(consumer_group=group, client_id=client_id, mq_set=sorted(mqs)).encode()
        resp = _check(await self.invoke(addr, self.request(RequestCode.LOCK_BATCH_MQ, None, body), timeout_ms),
                      addr)
        return set(LockBatchResponseBody.decode(bytes(resp.body)).lock_ok_mq_set) if resp.body else set()

    async def unlock_batch_mq(self, addr: str, group: str, client_id: str, mqs: Iterable[MessageQueue],
                              timeout_ms: float, *, oneway: bool) -> None:
        body = UnlockBatchRequestBody(consumer_group=group, client_id=client_id, mq_set=sorted(mqs)).encode()
        cmd = self.request(RequestCode.UNLOCK_BATCH_MQ, None, body)
        if oneway:
            await self.remoting.invoke_oneway(addr, cmd, timeout_ms)
        else:
            _check(await self.invoke(addr, cmd, timeout_ms), addr)

    async def query_message(self, addr: str, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int,
                            timeout_ms: float) -> list[MessageExt]:
        """QUERY_MESSAGE by key on one broker: what its index holds for ``key`` (hash matches
        included; the caller filters), or [] when the broker answers QUERY_NOT_FOUND."""
        ext = QueryMessageRequestHeader(topic=topic, key=key, max_num=max_num, begin_timestamp=begin_ms,
                                        end_timestamp=end_ms).to_ext()
        resp = _check(await self.invoke(addr, self.request(RequestCode.QUERY_MESSAGE, ext), timeout_ms), addr,
                      ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        if resp.code == ResponseCode.QUERY_NOT_FOUND:
            return []
        return decode_messages(bytes(resp.body), None)

    async def view_message(self, addr: str, offset_msg_id: str, timeout_ms: float) -> MessageExt:
        _ip, _port, phy = decode_offset_msg_id(offset_msg_id)
        ext = ViewMessageRequestHeader(offset=phy).to_ext()
        resp = _check(await self.invoke(addr, self.request(RequestCode.VIEW_MESSAGE_BY_ID, ext), timeout_ms), addr)
        msgs = decode_messages(bytes(resp.body), None, 1)
        if not msgs:
            raise BrokerError(ResponseCode.SYSTEM_ERROR, f"no message at {offset_msg_id}", addr)
        return msgs[0]
