"""The producer's send machinery (``DefaultMQProducerImpl``), on the event loop.

Sending is split in two so the caller's thread does the CPU work and the loop only
does I/O:

* ``prepare``/``prepare_batch`` (any thread): validate, assign ``UNIQ_KEY``s,
  compress bodies of 4 KiB or more (zlib level 5, sysFlag ``0x301`` as a 4.9.8
  client sends), render the properties string. The caller's ``Message`` gets its
  ``UNIQ_KEY`` (as in Java) and is otherwise untouched.
* ``send`` (loop thread): find the topic's publish info (route lookup, TBW102
  fallback), choose a queue (round-robin avoiding the broker that just failed, or
  latency fault tolerance), and send; on network errors and the retriable response
  codes retry on another broker, up to ``1 + retry_times`` attempts, all within
  ``send_msg_timeout_ms``. A chosen queue (explicit or by selector) gets one attempt,
  as in Java.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

from mqcore._compat import default_wire_client_kernels
from mqcore.client.config import ProducerConfig
from mqcore.client.instance import ClientInstance
from mqcore.client.latency import MQFaultStrategy
from mqcore.client.loop import copy_outcome
from mqcore.client.message import (
    Message,
    MessageExt,
    SendResult,
    SendStatus,
    compress_body,
    encode_batch_body,
)
from mqcore.client.request import RequestTimeoutError, is_reply, stamp_request
from mqcore.client.route import MASTER_ID, TopicPublishInfo, TopicRouteData, route_to_publish_info
from mqcore.client.selector import MessageQueueSelector
from mqcore.client.validators import check_batch, check_message
from mqcore.errors import (
    BrokerError,
    ClientError,
    IllegalArgumentError,
    NoRouteError,
    RemotingError,
    SendTimeoutError,
)
from mqcore.clock import system_clock_ms
from mqcore.format import layout as L
from mqcore.kernel_api import SendTemplate
from mqcore.kernel_api import PendingBatchApi
from mqcore.message import Prop, is_retry_topic, properties_to_string
from mqcore.remoting.bodies import MessageQueue
from mqcore.remoting.codes import RequestCode, ResponseCode
from mqcore.remoting.headers import SendMessageRequestHeader

log = logging.getLogger(__name__)

T = TypeVar("T")
#: extra wait for a route lookup on the loop beyond the send's deadline, against a stuck loop
_LOOP_GUARD_S = 5.0

__all__ = ["CommunicationMode", "PreparedSend", "ProducerImpl"]

#: properties that take a message off ``send_plain_blocking`` (delay, transaction, retry
#: headers, a reply's MSG_TYPE: replies go as SEND_REPLY_MESSAGE_V2)
_PLAIN_EXCLUDED = frozenset((Prop.DELAY, Prop.TRAN_MSG, Prop.RECONSUME_TIME, Prop.MAX_RECONSUME_TIMES,
                             Prop.MSG_TYPE))
#: send templates kept per producer (one per queue sent to); more means routes changed: start over
_MAX_TEMPLATES = 4096
_SEND_V2 = int(RequestCode.SEND_MESSAGE_V2)
_UNIQ_KEY = Prop.UNIQ_KEY


class CommunicationMode(enum.Enum):
    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"


_SYNC = CommunicationMode.SYNC
_ASYNC = CommunicationMode.ASYNC
#: a send answer's header ``(code, opaque, flag, remark, ext)``, read by the wire kernel
_READ_ANSWER = default_wire_client_kernels().decode_json_answer


@dataclasses.dataclass(slots=True)
class PreparedSend:
    """A message (or explicit batch) ready for the wire."""

    topic: str
    body: bytes | memoryview
    sys_flag: int
    flag: int
    properties: str
    uniq_id: str
    batch: bool = False
    count: int = 1
    reconsume_times: int | None = None
    max_reconsume_times: int | None = None
    tags: str | None = None
    #: the body's size as the user gave it (``body`` may be compressed)
    original_size: int = 0
    #: a request-reply reply (``MSG_TYPE=reply``): sent as SEND_REPLY_MESSAGE(_V2)
    reply: bool = False


class ProducerImpl:
    """Send logic of one producer group on one client instance (``ProducerHook``)."""

    def __init__(self, config: ProducerConfig, instance: ClientInstance) -> None:
        self.config = config
        self.group = config.producer_group
        self.instance = instance
        self.fault_strategy = MQFaultStrategy(
            enabled=config.send_latency_fault_enable, clock=instance.clock,
            latency_max=config.latency_max_ms, not_available_duration=config.not_available_duration_ms)
        self.publish_info: dict[str, TopicPublishInfo] = {}
        self._checked_topics: set[str] = set()
        # send_plain_blocking: what it reads of the config per send (a body limit of 0 when
        # SEND_MESSAGE_V2 is off: no message is plain), its topics and its frame templates
        self._plain_body_limit = (min(config.compress_msg_body_over_howmuch, config.max_message_size_bytes + 1)
                                  if config.use_send_message_v2 else 0)
        self._send_timeout_ms = config.send_msg_timeout_ms
        self._plain_topics: set[str] = set()
        self._templates: dict[int, SendTemplate] = {}
        self._blocking_pool = instance.api.remoting.blocking
        ids = instance.uniq_ids
        self._id_writer = default_wire_client_kernels().UniqIdWriter(ids, ids.clock is system_clock_ms)

    # --- ProducerHook -------------------------------------------------------------------------
    def publish_topics(self) -> Iterable[str]:
        return list(self.publish_info)

    def needs_route(self, topic: str) -> bool:
        info = self.publish_info.get(topic)
        return info is not None and not info.ok

    def on_route_changed(self, topic: str, route: TopicRouteData) -> None:
        if topic in self.publish_info:
            self.publish_info[topic] = route_to_publish_info(topic, route)

    # --- preparation (any thread) -----------------------------------------------------------------
    @property
    def checked_topics(self) -> set[str]:
        """Topic names that passed ``check`` (read-only use)."""
        return self._checked_topics

    def check(self, msg: Message) -> None:
        """``check_message``; a topic name that passed once is not re-checked."""
        topic_ok = msg.topic in self._checked_topics
        check_message(msg, self.config.max_message_size_bytes, topic_checked=topic_ok)
        if not topic_ok and len(self._checked_topics) < 10_000:
            self._checked_topics.add(msg.topic)

    def prepare(self, msg: Message) -> PreparedSend:
        cfg = self.config
        self.check(msg)
        props = msg.properties
        uniq = props.get(Prop.UNIQ_KEY)
        if not uniq:
            uniq = props[Prop.UNIQ_KEY] = self.instance.uniq_ids.next_id()
        body, sys_flag = msg.body, 0
        if len(body) >= cfg.compress_msg_body_over_howmuch:
            body, sys_flag = compress_body(body, cfg.compress_level, cfg.compress_type)
        if props.get(Prop.TRAN_MSG) == "true":
            sys_flag |= L.SYSFLAG_TRANSACTION_PREPARED
        reconsume = max_reconsume = None
        if is_retry_topic(msg.topic) and (Prop.RECONSUME_TIME in props or Prop.MAX_RECONSUME_TIMES in props):
            props = dict(props)  # these two travel in the header, not in the stored properties
            raw = props.pop(Prop.RECONSUME_TIME, None)
            reconsume = int(raw) if raw and raw.isdigit() else None
            raw = props.pop(Prop.MAX_RECONSUME_TIMES, None)
            max_reconsume = int(raw) if raw and raw.isdigit() else None
        return PreparedSend(msg.topic, body, sys_flag, msg.flag, properties_to_string(props), uniq,
                            reconsume_times=reconsume, max_reconsume_times=max_reconsume, tags=msg.tags,
                            original_size=len(msg.body), reply=is_reply(props))

    def prepare_batch(self, msgs: Sequence[Message], *, validated: bool = False,
                      body: bytes | None = None) -> PreparedSend:
        """An explicit batch (SEND_BATCH_MESSAGE): each message gets its own UNIQ_KEY;
        bodies are not compressed (Java never compresses batches). ``body``: the batch
        already encoded (the auto-batcher's joined items, every message stamped)."""
        msgs = list(msgs)
        if not validated:
            check_batch(msgs, self.config.max_message_size_bytes)
        ids = self._id_writer.stamp_all(msgs)  # the UNIQ_KEYs, written by the wire kernels
        if body is None:
            body = encode_batch_body(msgs)
        if len(body) > self.config.max_message_size_bytes:
            raise IllegalArgumentError(
                f"the batch encodes to {len(body)} bytes, over max_message_size_bytes={self.config.max_message_size_bytes}; "
                "split it into smaller batches")
        wait = "true" if msgs[0].wait_store_msg_ok else "false"
        return PreparedSend(msgs[0].topic, body, 0, 0, properties_to_string({Prop.WAIT: wait}), ",".join(ids),
                            batch=True, count=len(msgs))

    def prepare_joined(self, batch: PendingBatchApi) -> PreparedSend:
        """An auto-batch (SEND_BATCH_MESSAGE) whose items the batcher kernel encoded as its
        messages joined (each stamped with its UNIQ_KEY, its topic checked). The body is the
        batch's own buffer (a view, not a copy: up to 2 MiB at the defaults); nothing writes
        to it once the batch has left."""
        body = batch.body
        if len(body) > self.config.max_message_size_bytes:
            raise IllegalArgumentError(
                f"the batch encodes to {len(body)} bytes, over max_message_size_bytes={self.config.max_message_size_bytes}")
        return PreparedSend(batch.topic, body, 0, 0, properties_to_string({Prop.WAIT: "true" if batch.wait else "false"}),
                            ",".join(batch.uniq_ids), batch=True, count=batch.count)

    # --- publish info (loop thread) ------------------------------------------------------------------
    async def find_publish_info(self, topic: str) -> TopicPublishInfo:
        """``tryToFindTopicPublishInfo``: cached, else the topic's route, else the
        ``create_topic_key`` (TBW102) route so the broker auto-creates the topic."""
        info = self.publish_info.get(topic)
        if info is None or not info.ok:
            if info is None:
                self.publish_info[topic] = TopicPublishInfo(topic, [], None)
            await self.instance.update_topic_route(topic)
            info = self.publish_info[topic]
        if info.ok:
            return info
        if info.have_route:  # e.g. every broker of the topic was made read-only (brokerPermission=4)
            raise NoRouteError(f"topic {topic!r} has a route but no writable queue: its brokers or the topic "
                               "do not allow writes")
        await self.instance.update_topic_route(topic, default_topic=self.config.create_topic_key,
                                               default_queue_nums=self.config.default_topic_queue_nums)
        info = self.publish_info[topic]
        if not info.ok:
            raise NoRouteError(
                f"no route for topic {topic!r}: the name server {self.instance.config.namesrv_addr} knows "
                f"neither it nor {self.config.create_topic_key!r}; create the topic or enable autoCreateTopicEnable")
        return info

    # --- sending (loop thread) -----------------------------------------------------------------------
    async def send(self, prepared: PreparedSend, mode: CommunicationMode, *, queue: MessageQueue | None = None,
                   selector: MessageQueueSelector | None = None, selector_msg: Message | None = None,
                   arg: object = None, timeout_ms: float | None = None) -> SendResult | None:
        begin = self.instance.clock()
        timeout = self.config.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        info = await self.find_publish_info(prepared.topic)
        queue = self._chosen_queue(prepared, info, queue, selector, selector_msg, arg)
        if queue is not None:
            return await self._send_kernel(prepared, queue, mode, self._first_attempt_budget(queue, begin, timeout))
        return await self.run_attempts(prepared, mode, _Attempts(self, prepared, info, 1 + self._retries(mode),
                                                                 begin, timeout))

    async def run_attempts(self, prepared: PreparedSend, mode: CommunicationMode,
                           attempts: _Attempts) -> SendResult | None:
        """The retry loop of ``send`` (and of a plain async send after its first attempt)."""
        while (step := attempts.next()) is not None:
            mq, remaining = step
            try:
                result = await self._send_kernel(prepared, mq, mode, remaining)
            except (RemotingError, ClientError, BrokerError) as e:
                attempts.failed(mq, e)  # raises when not to retry
                continue
            if attempts.answered(mq, result):
                return result
        return attempts.outcome()

    # --- sending on the caller's thread ---------------------------------------------------------------
    def send_blocking(self, prepared: PreparedSend, *, queue: MessageQueue | None = None,
                      selector: MessageQueueSelector | None = None, selector_msg: Message | None = None,
                      arg: object = None, timeout_ms: float | None = None) -> SendResult:
        """A SYNC ``send`` run on the calling thread over the remoting client's blocking
        sockets: the same queue choice, latency fault tolerance, retries and deadline as
        ``send``, but no hand-off to the loop thread and back per message. Only a topic
        whose route is not cached yet (or a broker with no known address) asks the loop
        for the route lookup. Any thread but the loop's."""
        begin = self.instance.clock()
        cfg = self.config
        timeout = cfg.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        info = self.publish_info.get(prepared.topic)
        if info is None or not info.ok:
            info = self._on_loop(self.find_publish_info(prepared.topic), begin, timeout)
        if queue is not None or selector is not None:
            queue = self._chosen_queue(prepared, info, queue, selector, selector_msg, arg)
            if queue is not None:
                return self._send_kernel_blocking(prepared, queue, self._first_attempt_budget(queue, begin, timeout),
                                                  begin, timeout)
        attempts = _Attempts(self, prepared, info, 1 + cfg.retry_times_when_send_failed, begin, timeout)
        return self._attempts_blocking(prepared, attempts, begin, timeout)

    def _attempts_blocking(self, prepared: PreparedSend, attempts: _Attempts, begin: int,
                           timeout: float) -> SendResult:
        while (step := attempts.next()) is not None:
            mq, remaining = step
            try:
                result = self._send_kernel_blocking(prepared, mq, remaining, begin, timeout)
            except (RemotingError, ClientError, BrokerError) as e:
                attempts.failed(mq, e)
                continue
            if attempts.answered(mq, result):
                return result
        final = attempts.outcome()
        assert final is not None  # a SYNC attempt always answers with a result or raises
        return final

    def send_plain_blocking(self, msg: Message, timeout_ms: float | None) -> SendResult | None:
        """``send_blocking(prepare(msg))`` in few steps for the usual message: a topic already
        checked and routed, a body under the compression threshold, no delay, transaction or
        retry properties, SEND_MESSAGE_V2. The first attempt is made here, in one kernel call
        (the queue's cached :class:`SendTemplate` writes the frame, exchanges it and builds the
        SendResult of the usual answer, reusing the queue's own ``MessageQueue``); a failed or
        not-stored first attempt continues in the general retry loop, with the same
        accounting as if it had started there. None, with nothing sent, when the message is
        not such a message (the caller takes the general path).

        The common case allocates nothing in Python beyond the UNIQ_KEY and what the kernel
        returns: the queue choice steps a counter, the template is looked up by the queue
        object's identity, the latency is recorded only when fault tolerance is on."""
        target = self.plain_target(msg)
        if target is None:
            return None
        info, mq, template, addr, uniq, begin = target
        timeout = self._send_timeout_ms if timeout_ms is None else timeout_ms
        instance = self.instance
        error: RemotingError | ClientError | BrokerError | None = None
        result: SendResult | None = None
        try:
            answer = self._blocking_pool.send_template(addr, template, _SEND_V2, begin, msg.flag, msg._properties,
                                                       msg.body, uniq, timeout)
            if type(answer) is SendResult:
                fault = self.fault_strategy
                if fault.enabled:
                    fault.update_fault_item(mq.broker_name, instance.clock() - begin, False)
                return answer
            if answer is None:
                return None  # declined before anything was sent
            result = instance.api.send_answer(addr, mq.broker_name, msg.topic, uniq, answer, mq)
        except (RemotingError, ClientError, BrokerError) as e:
            error = e
        outcome = self.after_plain_attempt(msg, info, mq, uniq, begin, timeout, _SYNC, error, result)
        if type(outcome) is SendResult:
            return outcome
        prepared, attempts = outcome  # type: ignore[misc]
        return self._attempts_blocking(prepared, attempts, begin, timeout)

    def plain_target(self, msg: Message) -> tuple[TopicPublishInfo, MessageQueue, SendTemplate, str, str, int] | None:
        """Where the first attempt of a plain message goes, for ``send_plain_blocking`` and the
        plain ``send_async``: ``(publish info, queue, its frame template, broker address,
        UNIQ_KEY, start time)``, the message stamped with its UNIQ_KEY. None, with nothing
        changed, when the message is not plain (a topic not yet checked and routed, a body to
        compress, delay, transaction or retry properties, SEND_MESSAGE_V2 off, TLS)."""
        topic, body, props = msg.topic, msg.body, msg._properties
        if not body or len(body) >= self._plain_body_limit or not _PLAIN_EXCLUDED.isdisjoint(props):
            return None
        if topic not in self._plain_topics:
            if topic not in self._checked_topics or topic.startswith("%"):  # %RETRY%/%DLQ%: their own headers
                return None
            if len(self._plain_topics) >= 10_000:
                self._plain_topics.clear()
            self._plain_topics.add(topic)
        info = self.publish_info.get(topic)
        if info is None or not info.message_queues:
            return None
        instance = self.instance
        begin = instance.clock()
        fault = self.fault_strategy
        mq = fault.select_one_message_queue(info, None) if fault.enabled else info.select_one_message_queue(None)
        template = self._templates.get(id(mq))
        if template is None or template.mq is not mq:  # a new queue object (route change) or a reused id
            template = self._send_template(mq)
            if template is None:
                return None
        addrs = instance.broker_addr_table.get(mq.broker_name)
        addr = addrs.get(MASTER_ID) if addrs else None
        if addr is None:
            return None
        uniq = props.get(_UNIQ_KEY)
        if not uniq:
            uniq = props[_UNIQ_KEY] = self._id_writer.next_id()  # the kernel's writer: 0.2 µs, not 0.5-1
        return info, mq, template, addr, uniq, begin

    def after_plain_attempt(self, msg: Message, info: TopicPublishInfo, mq: MessageQueue, uniq: str, begin: int,
                            timeout: float, mode: CommunicationMode, error: RemotingError | ClientError | BrokerError | None,
                            result: SendResult | None) -> SendResult | tuple[PreparedSend, _Attempts]:
        """A plain first attempt whose answer the kernel did not turn into a SendResult: the
        final result, or the prepared message and its attempts (the first one counted) for the
        general retry loop to go on with, with the same accounting as if it had started there.
        Raises what the retry policy does not retry."""
        if result is not None and result.status is SendStatus.SEND_OK:
            if self.fault_strategy.enabled:
                self.fault_strategy.update_fault_item(mq.broker_name, self.instance.clock() - begin, False)
            return result
        body = msg.body
        prepared = PreparedSend(msg.topic, body, 0, msg.flag, properties_to_string(msg._properties), uniq,
                                tags=msg.tags, original_size=len(body))
        attempts = _Attempts(self, prepared, info, 1 + self._retries(mode), begin, timeout)
        attempts.made(mq, begin)
        if error is not None:
            attempts.failed(mq, error)
        elif attempts.answered(mq, result):
            assert result is not None
            return result
        return prepared, attempts

    def start_plain_async(self, msg: Message, target: tuple[TopicPublishInfo, MessageQueue, SendTemplate, str, str, int],
                          timeout_ms: float | None, future: Any, submit: Callable[..., Any]) -> None:
        """Start the first attempt of a plain ``send_async`` (not auto-batched) to ``target``
        (what ``plain_target`` chose and stamped on the caller's thread): ``submit`` (the
        loop's burst submitter) hands it to the loop, which writes the queue's template frame
        with the connection's next opaque, in one write with the other sends of its burst;
        the answer's header is read by the ``decode_json_answer`` kernel and turned into the
        SendResult by the template (:meth:`Channel.invoke_flat`): no coroutine, task, command
        object or Python JSON per message. Anything else (a failure, a refusal, no open
        connection yet) goes on in the general path, with the same attempts and deadline."""
        timeout = self._send_timeout_ms if timeout_ms is None else timeout_ms
        submit(_PlainAsyncSend(self, future, msg, target, timeout).start, future=future)

    def _send_template(self, mq: MessageQueue) -> SendTemplate | None:
        """The frame template of ``mq`` for ``send_plain_blocking``, cached by the queue
        object's identity (the publish info's queues live until the route changes)."""
        cfg = self.config
        template = self.instance.api.send_template(self.group, cfg.create_topic_key, cfg.default_topic_queue_nums, mq)
        if template is not None:
            if len(self._templates) >= _MAX_TEMPLATES:  # queues of routes that changed: start over
                self._templates.clear()
            self._templates[id(mq)] = template
        return template

    def _on_loop(self, coro: Coroutine[Any, Any, T], begin: int, timeout: float) -> T:
        """Run a (rare) route lookup on the loop thread and wait for it, within the send's deadline."""
        left_ms = timeout - (self.instance.clock() - begin)
        return self.instance.loop_thread.run(coro, max(left_ms, 0) / 1000.0 + _LOOP_GUARD_S)

    def _send_kernel_blocking(self, prepared: PreparedSend, mq: MessageQueue, timeout_ms: float,
                              begin: int, timeout: float) -> SendResult:
        instance = self.instance
        addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            self._on_loop(self.find_publish_info(mq.topic), begin, timeout)
            addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise NoRouteError(f"broker {mq.broker_name} of topic {mq.topic} has no master address")
        cfg = self.config
        body = prepared.body
        if cfg.use_send_message_v2 and not prepared.batch and not prepared.reply and type(body) is bytes:
            # (a batch's body is a view; a reply has its own request code)
            # the fields of _header() in SendMessageRequestHeader.V2_KEYS order, written by a kernel
            values = (self.group, prepared.topic, cfg.create_topic_key, cfg.default_topic_queue_nums, mq.queue_id,
                      prepared.sys_flag, instance.clock(), prepared.flag, prepared.properties,
                      prepared.reconsume_times or 0, False, prepared.max_reconsume_times, False, mq.broker_name)
            result = instance.api.send_message_v2_blocking(addr, mq.broker_name, mq.topic, prepared.uniq_id, values,
                                                           body, timeout_ms)
            if result is not None:
                return result
        cmd = instance.api.build_send_request(self._header(prepared, mq), prepared.body, batch=prepared.batch,
                                              use_v2=cfg.use_send_message_v2, reply=prepared.reply)
        return instance.api.send_message_blocking(addr, mq.broker_name, mq.topic, prepared.uniq_id, cmd, timeout_ms)

    # --- shared by both paths -----------------------------------------------------------------------------
    def _retries(self, mode: CommunicationMode) -> int:
        if mode is CommunicationMode.SYNC:
            return self.config.retry_times_when_send_failed
        return self.config.retry_times_when_send_async_failed if mode is CommunicationMode.ASYNC else 0

    @staticmethod
    def _chosen_queue(prepared: PreparedSend, info: TopicPublishInfo, queue: MessageQueue | None,
                      selector: MessageQueueSelector | None, selector_msg: Message | None,
                      arg: object) -> MessageQueue | None:
        """The queue the caller pinned (explicitly or by selector), checked; None to let the
        producer choose (with retries)."""
        if selector is not None:
            queue = selector(list(info.message_queues), selector_msg or Message(prepared.topic, b"-"), arg)
            if not isinstance(queue, MessageQueue):
                raise IllegalArgumentError(f"the queue selector returned {queue!r}, not a MessageQueue")
        if queue is not None and queue.topic != prepared.topic:
            raise IllegalArgumentError(f"queue {queue} is not a queue of topic {prepared.topic!r}")
        return queue

    def _first_attempt_budget(self, queue: MessageQueue, begin: int, timeout: float) -> float:
        """A pinned queue gets one attempt, with what is left of the timeout."""
        remaining = timeout - (self.instance.clock() - begin)
        if remaining <= 0:
            raise SendTimeoutError(f"sending to {queue} timed out before the first attempt")
        return remaining

    def _header(self, prepared: PreparedSend, mq: MessageQueue) -> SendMessageRequestHeader:
        cfg = self.config
        return SendMessageRequestHeader(
            producer_group=self.group, topic=prepared.topic, default_topic=cfg.create_topic_key,
            default_topic_queue_nums=cfg.default_topic_queue_nums, queue_id=mq.queue_id,
            sys_flag=prepared.sys_flag, born_timestamp=self.instance.clock(), flag=prepared.flag,
            properties=prepared.properties, reconsume_times=prepared.reconsume_times or 0, unit_mode=False,
            max_reconsume_times=prepared.max_reconsume_times, batch=prepared.batch, broker_name=mq.broker_name)

    async def _send_kernel(self, prepared: PreparedSend, mq: MessageQueue, mode: CommunicationMode,
                           timeout_ms: float) -> SendResult | None:
        instance = self.instance
        addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await self.find_publish_info(mq.topic)
            addr = instance.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise NoRouteError(f"broker {mq.broker_name} of topic {mq.topic} has no master address")
        cmd = instance.api.build_send_request(self._header(prepared, mq), prepared.body, batch=prepared.batch,
                                              use_v2=self.config.use_send_message_v2, reply=prepared.reply)
        if mode is CommunicationMode.ONEWAY:
            await instance.api.send_message_oneway(addr, cmd, timeout_ms)
            return None
        return await instance.api.send_message(addr, mq.broker_name, mq.topic, prepared.uniq_id, cmd, timeout_ms)

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        return list((await self.find_publish_info(topic)).message_queues)

    # --- request-reply (loop thread) ---------------------------------------------------------------
    async def request(self, msg: Message, timeout_ms: float, *, queue: MessageQueue | None = None,
                      selector: MessageQueueSelector | None = None, arg: object = None) -> MessageExt:
        """Send ``msg`` as a request and wait for its reply (``DefaultMQProducerImpl.request``),
        all within ``timeout_ms``. A failed send raises its error; no reply in time raises
        RequestTimeoutError. The reply is expected before the request leaves: it can overtake
        the send's own answer."""
        instance = self.instance
        begin = instance.clock()
        correlation_id = stamp_request(msg, instance.client_id, timeout_ms)
        prepared = self.prepare(msg)
        info = await self.find_publish_info(msg.topic)
        await self._announce(info)
        reply = instance.replies.expect(correlation_id)
        try:
            await self.send(prepared, CommunicationMode.ASYNC, queue=queue, selector=selector, selector_msg=msg,
                            arg=arg, timeout_ms=timeout_ms - (instance.clock() - begin))
            left_ms = timeout_ms - (instance.clock() - begin)
            return await asyncio.wait_for(reply, max(left_ms, 0) / 1000.0)
        except asyncio.TimeoutError:
            raise RequestTimeoutError(f"send request message to <{msg.topic}> OK, but wait reply message timeout, "
                                      f"{int(timeout_ms)} ms.") from None
        finally:
            instance.replies.forget(correlation_id)

    async def _announce(self, info: TopicPublishInfo) -> None:
        """The broker pushes a reply to the connection of a client it knows as a producer: a
        heartbeat first, unless every broker of the topic has had one (Java sends it when the
        topic's route was not cached)."""
        instance = self.instance
        for mq in info.message_queues:
            addr = instance.find_broker_address_in_publish(mq.broker_name)
            if addr is not None and addr not in instance.broker_version_table:
                await instance.send_heartbeat_to_all_brokers()
                return


class _Attempts:
    """The retry policy of one send (``sendDefaultImpl``), apart from how an attempt is made
    (awaited on the loop, or blocking on the caller's thread) so both paths share it.

    ``next()`` picks the queue of the next attempt (avoiding the broker that just failed)
    with the time left, None when the attempts are used up; it raises SendTimeoutError when
    the deadline passed. ``failed(mq, error)`` records a network error or broker refusal and
    raises it unless it is retriable; ``answered(mq, result)`` records an answer and says
    whether it is final; ``outcome()`` is the last answer or raises the last error.
    """

    def __init__(self, impl: ProducerImpl, prepared: PreparedSend, info: TopicPublishInfo, attempts: int,
                 begin: int, timeout: float) -> None:
        self._impl = impl
        self._clock = impl.instance.clock
        self._prepared = prepared
        self._info = info
        self._left = attempts
        self._begin = begin
        self._timeout = timeout
        self._started = begin
        self._last_broker: str | None = None
        self._last_error: BaseException | None = None
        self._result: SendResult | None = None
        self.brokers_sent: list[str] = []

    def next(self) -> tuple[MessageQueue, float] | None:
        if self._left <= 0:
            return None
        self._left -= 1
        mq = self._impl.fault_strategy.select_one_message_queue(self._info, self._last_broker)
        self._last_broker = mq.broker_name
        now = self._clock()  # one reading: the attempt starts now, its budget is what is left
        elapsed = now - self._begin
        if elapsed >= self._timeout:
            raise SendTimeoutError(
                f"sending to {self._prepared.topic} used up send_msg_timeout_ms={self._timeout} after "
                f"{len(self.brokers_sent)} attempt(s) on {self.brokers_sent}") from self._last_error
        self.brokers_sent.append(mq.broker_name)
        self._started = now
        return mq, self._timeout - elapsed

    def made(self, mq: MessageQueue, started: int) -> None:
        """Count a first attempt made outside ``next()`` (``send_plain_blocking``) on ``mq``."""
        self._left -= 1
        self._last_broker = mq.broker_name
        self.brokers_sent.append(mq.broker_name)
        self._started = started

    def failed(self, mq: MessageQueue, error: RemotingError | ClientError | BrokerError) -> None:
        self._impl.fault_strategy.update_fault_item(mq.broker_name, self._clock() - self._started, True)
        self._last_error = error
        if isinstance(error, BrokerError):
            if error.retriable:
                log.info("send to %s refused with retriable code %d (%s); retrying", mq, error.code, error.remark)
                return
            prepared = self._prepared
            if error.code == ResponseCode.MESSAGE_ILLEGAL and prepared.sys_flag & L.SYSFLAG_COMPRESSED:
                # the broker measured the compressed body: say what the user sent
                raise BrokerError(error.code, f"{error.remark} (the message body is {prepared.original_size} "
                                  f"bytes, {len(prepared.body)} after compression)", error.addr) from error
            raise error
        log.info("send to %s failed (%s); %s", mq, error, "retrying" if error.retriable else "giving up")
        if not error.retriable:
            raise error

    def answered(self, mq: MessageQueue, result: SendResult | None) -> bool:
        self._impl.fault_strategy.update_fault_item(mq.broker_name, self._clock() - self._started, False)
        self._result = result
        if result is None or result.status is SendStatus.SEND_OK:
            return True
        return not self._impl.config.retry_another_broker_when_not_store_ok

    def outcome(self) -> SendResult | None:
        if self._result is not None:
            return self._result
        error = self._last_error
        assert error is not None
        error.add_note(f"send to {self._prepared.topic} failed after {len(self.brokers_sent)} attempt(s) "
                       f"on brokers {self.brokers_sent} in {self._clock() - self._begin} ms")
        raise error


class _PlainAsyncSend:
    """One plain ``send_async`` on its first attempt (``ProducerImpl.send_plain_async``).

    ``start`` runs on the loop (a ``BurstSubmitter`` starter) and hands the frame to the
    broker's connection; the connection then settles this object as it would an asyncio
    future (``done``, ``set_result`` with the answer's header tuple, ``set_exception``), and
    this object settles the caller's future: the SendResult the template builds from the
    usual answer, else the general retry loop's outcome.
    """

    __slots__ = ("impl", "future", "msg", "info", "mq", "template", "addr", "uniq", "begin", "timeout")

    def __init__(self, impl: ProducerImpl, future: Any, msg: Message,
                 target: tuple[TopicPublishInfo, MessageQueue, SendTemplate, str, str, int], timeout: float) -> None:
        self.impl = impl
        self.future = future
        self.msg = msg
        self.info, self.mq, self.template, self.addr, self.uniq, self.begin = target
        self.timeout = timeout

    def start(self, _future: Any) -> Any:
        impl = self.impl
        instance = impl.instance
        left = self.timeout - (instance.clock() - self.begin)
        channel = instance.api.remoting.connected(self.addr)
        if channel is not None and left > 0:
            if channel.invoke_flat(self._frame, left, self, _READ_ANSWER):
                return None
        elif left <= 0:
            raise SendTimeoutError(f"sending to {self.msg.topic} used up send_msg_timeout_ms={self.timeout} "
                                   "before the first attempt")
        # no open connection yet, or the template declined: every attempt in the general path
        return impl.send(impl.prepare(self.msg), _ASYNC, timeout_ms=left)

    def _frame(self, opaque: int) -> bytes | None:
        msg = self.msg
        return self.template.frame(opaque, self.begin, msg.flag, msg._properties, msg.body)

    # --- what the connection calls, as on an asyncio future ----------------------------------------
    def done(self) -> bool:
        return bool(self.future.done())  # cancelled by its caller: the answer is dropped

    def set_result(self, answer: tuple[int, int, int, str | None, dict[str, str]]) -> None:
        result = self.template.result(answer, self.uniq)
        if type(result) is SendResult:
            fault = self.impl.fault_strategy
            if fault.enabled:
                fault.update_fault_item(self.mq.broker_name, self.impl.instance.clock() - self.begin, False)
            _settle(self.future, result, None)
            return
        impl = self.impl
        try:
            result = impl.instance.api.send_answer(self.addr, self.mq.broker_name, self.msg.topic, self.uniq,
                                                   answer, self.mq)
        except (RemotingError, ClientError, BrokerError) as e:
            self._go_on(e, None)
        else:
            self._go_on(None, result)

    def set_exception(self, error: BaseException) -> None:
        if isinstance(error, (RemotingError, ClientError, BrokerError)):
            self._go_on(error, None)
        else:
            _settle(self.future, None, error)

    def cancel(self) -> bool:
        return bool(self.future.cancel())

    def _go_on(self, error: RemotingError | ClientError | BrokerError | None, result: SendResult | None) -> None:
        impl = self.impl
        try:
            outcome = impl.after_plain_attempt(self.msg, self.info, self.mq, self.uniq, self.begin, self.timeout,
                                               _ASYNC, error, result)
        except BaseException as e:  # not retried: the caller's error
            _settle(self.future, None, e)
            return
        if type(outcome) is SendResult:
            _settle(self.future, outcome, None)
            return
        prepared, attempts = outcome  # type: ignore[misc]
        task = asyncio.ensure_future(impl.run_attempts(prepared, _ASYNC, attempts))
        future = self.future
        task.add_done_callback(lambda t: copy_outcome(t, future))


def _settle(future: Any, result: Any, error: BaseException | None) -> None:
    if future.done():
        return  # cancelled by its caller
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:
        log.debug("future %r was cancelled before its outcome arrived", future)
