"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), CONSUMER_SEND_MSG_BACK (36).

The send path (remoting-protocol.md §7): header -> topic checks and auto-creation ->
retry/DLQ redirect for ``%RETRY%`` topics -> record with the broker's CLUSTER property
(WAIT is removed by the store) -> store -> response with msgId/queueId/queueOffset and
MSG_REGION/TRACE_ON. Store statuses map to response codes without exceptions.

This is the general path of the SEND pipeline: the plain sends of a receive buffer run
its read/route/store/answer stages in one go (``send_pipeline.SendPipeline``), and hand
any frame they cannot finish exactly as this processor would to it, before anything of
that frame is written.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Union, cast

from mqcore.broker.stats import BrokerStats
from mqcore.broker.topics import writable
from mqcore.errors import DiskFullError, IllegalArgumentError
from mqcore.format import layout as L
from mqcore.message import (
    RETRY_GROUP_TOPIC_PREFIX,
    MessageExtBrokerInner,
    Prop,
    dlq_topic,
    is_retry_topic,
    pack_host,
    retry_topic,
    string_to_properties,
    validate_topic,
)
from mqcore.netaddr import parse_host_port as parse_addr
from mqcore.permissions import PERM_READ, PERM_WRITE
from mqcore.remoting import (
    CURRENT_VERSION,
    FLAG_RESPONSE,
    LanguageCode,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SerializeType,
    create_response,
)
from mqcore.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    SendMessageRequestHeader,
)
from mqcore.remoting.ratelimit import RateLimitedLog
from mqcore.store.results import PutMessageResult, PutMessageStatus
from mqcore.store.timer.recall import build_recall_handle

if TYPE_CHECKING:
    import concurrent.futures

    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.groups import SubscriptionGroupManager
    from mqcore.broker.ha import HAServer
    from mqcore.broker.topics import TopicConfigManager
    from mqcore.broker.transaction import TransactionService
    from mqcore.remoting.channel import Channel
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)

#: a send's answer: a response now, or an awaitable of it (SYNC_FLUSH, SYNC_MASTER, a topic to register)
Answer = Union[RemotingCommand, Awaitable[RemotingCommand]]

V3_4_9 = 121
_VERSION = int(CURRENT_VERSION)
_INT32 = 1 << 31

STATUS_CODES = {
    PutMessageStatus.PUT_OK: ResponseCode.SUCCESS,
    PutMessageStatus.FLUSH_DISK_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: ResponseCode.SERVICE_NOT_AVAILABLE,
    PutMessageStatus.CREATE_MAPEDFILE_FAILED: ResponseCode.SYSTEM_ERROR,
    PutMessageStatus.OS_PAGECACHE_BUSY: ResponseCode.SYSTEM_ERROR,
    PutMessageStatus.UNKNOWN_ERROR: ResponseCode.SYSTEM_ERROR,
    PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL: ResponseCode.MESSAGE_ILLEGAL,
    PutMessageStatus.WHEEL_TIMER_NOT_ENABLE: ResponseCode.MESSAGE_ILLEGAL,
}
_TIMER_REFUSALS = (PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL, PutMessageStatus.WHEEL_TIMER_NOT_ENABLE)


def peer_host(channel: Channel) -> bytes:
    """The connection's peer as a record's BORNHOST field, parsed once per connection."""
    packed: bytes | None = channel.attributes.get("born_host")
    if packed is None:
        host, port = parse_addr(channel.remote_addr)
        packed = channel.attributes["born_host"] = pack_host(host, port)
    return packed


class SendProcessor:
    """SEND_MESSAGE / V2 / BATCH and CONSUMER_SEND_MSG_BACK, given only what they use.

    ``pool`` is None under ASYNC_FLUSH: a put runs inline and the answer is returned at
    once (the dispatcher writes it without a task). Under SYNC_FLUSH a put waits for its
    fsync, so it runs in ``pool`` and the processor returns an awaitable answer.
    ``store_host`` returns the broker's packed address (known once it listens, then fixed:
    the send pipeline's C core asks until it is not empty and again only after ``cfg`` is
    replaced). ``pool`` is fixed too (the core reads it with the configuration).
    """

    def __init__(self, *, cfg: BrokerConfig, topics: TopicConfigManager, groups: SubscriptionGroupManager,
                 store: MessageStore, pool: concurrent.futures.Executor | None, schedule_register: Callable[[], None],
                 store_host: Callable[[], bytes], stats: BrokerStats | None = None,
                 register_now: Callable[[], Awaitable[None]] | None = None,
                 transactions: TransactionService | None = None, replica: HAServer | None = None) -> None:
        #: per-request counters and the put-latency histogram (the metrics endpoint reads them)
        self.stats = stats if stats is not None else BrokerStats()
        self.cfg = cfg
        self.topics = topics
        self.groups = groups
        self.store = store
        self.pool = pool
        self.schedule_register = schedule_register
        #: async: register with the name servers now (a send that created its topic waits for it)
        self.register_now = register_now
        self.store_host = store_host
        #: a full disk refuses every topic creation: one line per interval, not per request
        self.disk_full_log = RateLimitedLog(log)
        #: half messages (TRAN_MSG): ``broker.transaction.TransactionService``; None refuses them
        self.transactions = transactions
        #: SYNC_MASTER: the HA server a stored send waits on (``HAServer.slave_ok`` and
        #: ``wait_replica``) before it is answered; None (ASYNC_MASTER) answers at once. Fixed,
        #: like ``pool``: the send pipeline's C core reads it with the configuration and hands
        #: every send to this path while it is set
        self.replica = replica

    def _put(self, request: RemotingCommand, topic: str, fn: Callable[..., PutMessageResult], *args: Any,
             replica_wait: bool = True, **kwargs: Any) -> Answer:
        """Run a store put and answer: a response now, or an awaitable of it (SYNC_FLUSH, or
        SYNC_MASTER waiting for a slave). Counted once per request (``stats``): its messages,
        bytes and latency. ``replica_wait``: the message's WAIT property is not "false"."""
        if self.pool is None:
            t0 = time.perf_counter()
            result = fn(*args, **kwargs)
            self.stats.put_latency.observe(time.perf_counter() - t0)
            self.stats.on_put(topic, result)
            if self.replica is not None and replica_wait and result.status.stored:
                return self.replicated(request, result)
            return self.response(request, result)
        return self._put_in_pool(request, topic, functools.partial(fn, *args, **kwargs), replica_wait)

    async def _put_in_pool(self, request: RemotingCommand, topic: str, call: Callable[[], PutMessageResult],
                           replica_wait: bool = True) -> RemotingCommand:
        t0 = time.perf_counter()
        result = await asyncio.get_running_loop().run_in_executor(self.pool, call)
        self.stats.put_latency.observe(time.perf_counter() - t0)
        self.stats.on_put(topic, result)
        if self.replica is not None and replica_wait and result.status.stored:
            answer = self.replicated(request, result)
            # SLAVE_NOT_AVAILABLE is answered at once: a response, not an awaitable
            return answer if isinstance(answer, RemotingCommand) else await answer
        return self.response(request, result)

    def replicated(self, request: RemotingCommand, result: PutMessageResult) -> Answer:
        """SYNC_MASTER (Apache's ``submitReplicaRequest``): SLAVE_NOT_AVAILABLE at once with no
        slave or one ``haSlaveFallbehindMax`` behind; else the answer once a slave reported the
        message's end offset, FLUSH_SLAVE_TIMEOUT after ``slaveTimeout``. Stored either way,
        so the answer carries msgId and offsets as SEND_OK does (no remark), as Apache's."""
        end = result.phy_offset + result.wrote_bytes
        cfg = self.cfg
        replica = cast("HAServer", self.replica)  # called only while there is one
        if not replica.slave_ok(end, cfg.ha_slave_fallbehind_max):
            result.status = PutMessageStatus.SLAVE_NOT_AVAILABLE
            return self.response(request, result)
        return self._replica_answer(request, result, replica.wait_replica(end, cfg.slave_timeout_ms / 1000))

    async def _replica_answer(self, request: RemotingCommand, result: PutMessageResult,
                              acked: Awaitable[bool]) -> RemotingCommand:
        if not await acked:
            result.status = PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        return self.response(request, result)

    # --- SEND_MESSAGE / V2 / BATCH -----------------------------------------------------------
    def send(self, channel: Channel, request: RemotingCommand) -> Answer:
        created = [False]  # set by _send when this send created the topic
        try:
            response = self._send(channel, request, created)
        except DiskFullError as e:  # a topic or group it needed could not be persisted: not created
            return self._disk_full(request, e)
        if created[0] and self.register_now is not None:
            # routed before the answer, as the Java broker does: a Java consumer started right
            # after this send would otherwise miss the route until its next 30 s poll
            return self._registered_then(response)
        return response

    async def _registered_then(self, response: Answer) -> RemotingCommand:
        register_now = self.register_now
        if register_now is not None:  # always: send calls this only then
            await register_now()
        return (await response) if inspect.isawaitable(response) else response

    def _send(self, channel: Channel, request: RemotingCommand, created_flag: list[bool]) -> Answer:
        h = SendMessageRequestHeader.from_command(request)
        topic = h.topic
        try:
            validate_topic(topic)
        except IllegalArgumentError as e:
            return create_response(request, ResponseCode.MESSAGE_ILLEGAL, str(e))
        if not self.cfg.broker_permission & PERM_WRITE:
            return create_response(request, ResponseCode.NO_PERMISSION,
                                   f"the broker[{self.cfg.broker_name}] sending message is forbidden")
        tc = self.topics.get(topic)
        if tc is None:
            tc = (self.topics.create_group_topic(topic) if is_retry_topic(topic)
                  else self.topics.create_in_send(topic, h.default_topic, h.default_topic_queue_nums)
                  if self.cfg.auto_create_topic_enable else None)
            if tc is None:
                return create_response(request, ResponseCode.TOPIC_NOT_EXIST,
                                       f"topic[{topic}] not exist, apply first please!")
            created_flag[0] = True
            self.schedule_register()
        if not writable(tc):
            return create_response(request, ResponseCode.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        queue_id = h.queue_id
        if queue_id < 0:
            queue_id = random.randrange(tc.write_queue_nums)
        if queue_id >= max(tc.read_queue_nums, tc.write_queue_nums):
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"request queueId[{queue_id}] is illegal, topic {tc.topic_name} has "
                                   f"{tc.write_queue_nums} write queues")
        props = string_to_properties(h.properties)
        half = props.get(Prop.TRAN_MSG) == "true"
        refused = self.transaction_stage(request, props)
        if refused is not None:
            return refused
        reconsume = h.reconsume_times or 0
        if is_retry_topic(topic):
            if not self.groups.ensure(topic[len(RETRY_GROUP_TOPIC_PREFIX):]):
                return create_response(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                       f"subscription group not exist, {topic[len(RETRY_GROUP_TOPIC_PREFIX):]}")
            # a client's own re-send: the counts come in the header or (other clients) as properties
            reconsume = reconsume or _int_prop(props, Prop.RECONSUME_TIME, 0)
            topic, queue_id, props = self._redirect_retry(request, h, topic, queue_id, reconsume, props)
        born = peer_host(channel)
        if request.code == RequestCode.SEND_BATCH_MESSAGE or h.batch:
            if half:
                return create_response(request, ResponseCode.MESSAGE_ILLEGAL,
                                       "a batch cannot be a transaction message; send each half message alone")
            return self._put(request, topic, self.store.put_batch, topic, queue_id, bytes(request.body),
                             sys_flag=h.sys_flag, born_timestamp=h.born_timestamp, born_host=born,
                             store_host=self.store_host(), batch_properties=props,
                             replica_wait=_wait_store_ok(props))
        msg = MessageExtBrokerInner(topic=topic, body=bytes(request.body), queue_id=queue_id, flag=h.flag,
                                    properties=props, sys_flag=h.sys_flag, born_timestamp=h.born_timestamp,
                                    born_host=born, store_host=self.store_host(), reconsume_times=reconsume)
        # a half message got here only with a transaction service (transaction_stage refuses it otherwise)
        return self._put(request, topic, cast("TransactionService", self.transactions).put_half if half
                         else self.store.put_message, msg,
                         replica_wait=_wait_store_ok(props))

    def transaction_stage(self, request: RemotingCommand, props: dict[str, str]) -> RemotingCommand | None:
        """The send pipeline's transaction stage: a transaction's half message
        (``TRAN_MSG=true``) is refused while ``rejectTransactionMessage`` is set or the broker
        has no transaction service; None lets the send go on, and ``send`` then stores it
        through ``TransactionService.put_half``. (The kernel read stage hands every TRAN_MSG
        send here.)"""
        if props.get(Prop.TRAN_MSG) == "true" and (self.cfg.reject_transaction_message or self.transactions is None):
            return create_response(request, ResponseCode.NO_PERMISSION,
                                   f"the broker[{self.cfg.broker_name}] sending transaction message is forbidden")
        return None

    def _redirect_retry(self, request: RemotingCommand, h: SendMessageRequestHeader, topic: str, queue_id: int,
                        reconsume: int, props: dict[str, str]) -> tuple[str, int, dict[str, str]]:
        """A client re-sending to ``%RETRY%group`` itself: past the maximum it goes to the DLQ."""
        group = topic[len(RETRY_GROUP_TOPIC_PREFIX):]
        max_times = self.groups.retry_max_times(group)
        if h.max_reconsume_times is not None and request.version >= V3_4_9:
            max_times = h.max_reconsume_times
            self.groups.note_client_max_retries(group, max_times)
        else:
            max_times = _int_prop(props, Prop.MAX_RECONSUME_TIMES, max_times)
            if Prop.MAX_RECONSUME_TIMES in props:
                self.groups.note_client_max_retries(group, max_times)
        if reconsume >= max_times:
            topic = dlq_topic(group)
            self.topics.create_group_topic(topic, 1, PERM_READ | PERM_WRITE)
            self.schedule_register()
            props.pop(Prop.DELAY, None)
            queue_id = 0
        return topic, queue_id, props

    def response(self, request: RemotingCommand, result: PutMessageResult) -> RemotingCommand:
        code = STATUS_CODES.get(result.status, ResponseCode.SYSTEM_ERROR)
        if not result.status.stored:
            if result.status is PutMessageStatus.SERVICE_NOT_AVAILABLE:
                remark = f"service not available now: {result.remark or 'the broker refuses writes'}"
            elif result.status in _TIMER_REFUSALS:
                remark = result.remark
            else:
                remark = f"the message is illegal: {result.remark}" if code == ResponseCode.MESSAGE_ILLEGAL \
                    else result.remark or result.status.value
            return create_response(request, code, remark)
        # keys in Java HashMap order (test-vectors §7.3), fixed so it is not recomputed per send
        trace_on, region = "true" if self.cfg.trace_on else "false", self.cfg.region_id
        queue_id, msg_id, queue_offset = str(result.queue_id), result.msg_id, str(result.queue_offset)
        ext = {"queueId": queue_id, "TRACE_ON": trace_on, "MSG_REGION": region, "msgId": msg_id,
               "queueOffset": queue_offset}
        handle = self.recall_handle(request, result.timer_out_ms) if result.timer_out_ms else None
        if handle:  # a held timer: the handle that recalls it (RECALL_MESSAGE)
            ext["recallHandle"] = handle
            return RemotingCommand(code, LanguageCode.JAVA, CURRENT_VERSION, request.opaque, FLAG_RESPONSE, None, ext,
                                   b"", request.serialize_type)
        cmd = RemotingCommand(code, LanguageCode.JAVA, CURRENT_VERSION, request.opaque, FLAG_RESPONSE, None, ext,
                              b"", request.serialize_type)
        if cmd.serialize_type == SerializeType.JSON and region.isascii() and region.isprintable() \
                and '"' not in region and "\\" not in region and -_INT32 <= cmd.opaque < _INT32:
            # the answer to every send: its JSON header in one step, the bytes the generic
            # writer gives for these plain ASCII values (tests/broker/test_send_fast_paths.py)
            cmd.encoded_header = (
                f'{{"code":{int(code)},"extFields":{{"queueId":"{queue_id}","TRACE_ON":"{trace_on}",'
                f'"MSG_REGION":"{region}","msgId":"{msg_id}","queueOffset":"{queue_offset}"}},"flag":1,'
                f'"language":"JAVA","opaque":{cmd.opaque},"serializeTypeCurrentRPC":"JSON",'
                f'"version":{_VERSION}}}').encode()
        return cmd

    def recall_handle(self, request: RemotingCommand, timer_out_ms: int) -> str | None:
        """The send answer's ``recallHandle`` for a held timer (None for a retry topic, as the
        Java broker): its topic, this broker, the slot time + 1 and the message's UNIQ_KEY."""
        h = SendMessageRequestHeader.from_command(request)
        props = string_to_properties(h.properties)
        uniq = props.get(Prop.UNIQ_KEY)
        if is_retry_topic(h.topic) or not uniq:
            return None
        return build_recall_handle(h.topic, self.cfg.broker_name, timer_out_ms + 1, uniq)

    # --- CONSUMER_SEND_MSG_BACK -------------------------------------------------------------------
    def _disk_full(self, request: RemotingCommand, e: DiskFullError) -> RemotingCommand:
        """Status 14, as a put refused on a full disk gets: the request changed nothing."""
        self.disk_full_log.warning("disk full", "refused a request: %s", e.strerror)
        return create_response(request, ResponseCode.SERVICE_NOT_AVAILABLE, e.strerror)

    async def send_back(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """Store a copy of a consumed message for another try (``%RETRY%group``, delayed)
        or, past the maximum or with a negative delay level, in ``%DLQ%group``
        (v4 ``asyncConsumerSendMsgBack``; store-format.md §7)."""
        try:
            return await self._send_back(request)
        except DiskFullError as e:
            return self._disk_full(request, e)

    async def _send_back(self, request: RemotingCommand) -> RemotingCommand:
        h = ConsumerSendMsgBackRequestHeader.from_command(request)
        group = h.group
        if not self.groups.ensure(group):
            return create_response(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                   f"subscription group not exist, {group}")
        if not self.cfg.broker_permission & PERM_WRITE:
            return create_response(request, ResponseCode.NO_PERMISSION,
                                   f"the broker[{self.cfg.broker_name}] sending message is forbidden")
        gc = self.groups.table.get(group)
        retry_queues = gc.retry_queue_nums if gc is not None else 1
        if retry_queues <= 0:  # the group opted out of retries: the message is dropped, as in RocketMQ
            return create_response(request, ResponseCode.SUCCESS)
        orig = self.store.look_message_by_offset(h.offset)
        if orig is None:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {h.offset}")
        props = dict(orig.properties)
        props.setdefault(Prop.RETRY_TOPIC, orig.topic)
        props.pop(Prop.DELAY, None)
        props.pop(Prop.CLUSTER, None)
        props[Prop.WAIT] = "false"  # as RocketMQ: a send-back never waits for a sync flush
        max_times = self.groups.retry_max_times(group)
        if h.max_reconsume_times is not None and request.version >= V3_4_9:
            max_times = h.max_reconsume_times
            self.groups.note_client_max_retries(group, max_times)
        reconsume = orig.reconsume_times
        if reconsume >= max_times or h.delay_level < 0:
            topic, queue_id = dlq_topic(group), 0
            self.topics.create_group_topic(topic, 1, PERM_READ | PERM_WRITE)
        else:
            topic = retry_topic(group)
            tc = self.topics.create_group_topic(topic, retry_queues)
            if not writable(tc):
                return create_response(request, ResponseCode.NO_PERMISSION,
                                       f"the topic[{topic}] sending message is forbidden")
            queue_id = random.randrange(max(1, min(retry_queues, tc.write_queue_nums)))
            level = h.delay_level if h.delay_level > 0 else 3 + reconsume
            props[Prop.DELAY] = str(level)
        self.schedule_register()
        # the first message's broker id (lookMessageByOffset's msgId), kept across every retry
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, orig.offset_msg_id)
        msg = MessageExtBrokerInner(topic=topic, body=orig.body, queue_id=queue_id, flag=orig.flag, properties=props,
                                    sys_flag=orig.sys_flag & ~(L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6),
                                    born_timestamp=orig.born_timestamp,
                                    born_host=pack_host(*parse_addr(orig.born_host)),
                                    store_host=self.store_host(), reconsume_times=reconsume + 1)
        t0 = time.perf_counter()
        if self.pool is None:
            result = self.store.put_message(msg)
        else:
            result = await asyncio.get_running_loop().run_in_executor(
                self.pool, functools.partial(self.store.put_message, msg))
        self.stats.put_latency.observe(time.perf_counter() - t0)
        self.stats.on_send_back(group, topic, result)
        if result.status.stored:
            return create_response(request, ResponseCode.SUCCESS)
        return create_response(request, ResponseCode.SYSTEM_ERROR, f"send back failed: {result.status.value} {result.remark}")


def _wait_store_ok(props: dict[str, str]) -> bool:
    """Java's ``isWaitStoreMsgOK``: no WAIT property, or one Boolean.parseBoolean reads as true."""
    wait = props.get(Prop.WAIT)
    return wait is None or wait.lower() == "true"


def _int_prop(props: dict[str, str], key: str, default: int) -> int:
    try:
        return int(props[key])
    except (KeyError, ValueError):
        return default
