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

import dataclasses
import enum
import logging
from collections.abc import Iterable, Sequence

from mqcore.client.config import ProducerConfig
from mqcore.client.instance import ClientInstance
from mqcore.client.latency import MQFaultStrategy
from mqcore.client.message import (
    Message,
    SendResult,
    SendStatus,
    compress_body,
    encode_batch_body,
)
from mqcore.client.route import TopicPublishInfo, TopicRouteData, route_to_publish_info
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
from mqcore.format import layout as L
from mqcore.message import Prop, is_retry_topic, properties_to_string
from mqcore.remoting.bodies import MessageQueue
from mqcore.remoting.codes import ResponseCode
from mqcore.remoting.headers import SendMessageRequestHeader

log = logging.getLogger(__name__)

__all__ = ["CommunicationMode", "PreparedSend", "ProducerImpl"]


class CommunicationMode(enum.Enum):
    SYNC = "SYNC"
    ASYNC = "ASYNC"
    ONEWAY = "ONEWAY"


@dataclasses.dataclass(slots=True)
class PreparedSend:
    """A message (or explicit batch) ready for the wire."""

    topic: str
    body: bytes
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
            body, sys_flag = compress_body(body, cfg.compress_level)
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
                            original_size=len(msg.body))

    def prepare_batch(self, msgs: Sequence[Message], *, validated: bool = False) -> PreparedSend:
        """An explicit batch (SEND_BATCH_MESSAGE): each message gets its own UNIQ_KEY;
        bodies are not compressed (Java never compresses batches)."""
        msgs = list(msgs)
        if not validated:
            check_batch(msgs, self.config.max_message_size_bytes)
        ids = []
        for m in msgs:
            uniq = m.properties.get(Prop.UNIQ_KEY)
            if not uniq:
                uniq = m.properties[Prop.UNIQ_KEY] = self.instance.uniq_ids.next_id()
            ids.append(uniq)
        body = encode_batch_body(msgs)
        if len(body) > self.config.max_message_size_bytes:
            raise IllegalArgumentError(
                f"the batch encodes to {len(body)} bytes, over max_message_size_bytes={self.config.max_message_size_bytes}; "
                "split it into smaller batches")
        wait = "true" if msgs[0].wait_store_msg_ok else "false"
        return PreparedSend(msgs[0].topic, body, 0, 0, properties_to_string({Prop.WAIT: wait}), ",".join(ids),
                            batch=True, count=len(msgs))

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
        clock = self.instance.clock
        begin = clock()
        timeout = self.config.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        info = await self.find_publish_info(prepared.topic)
        if selector is not None:
            queue = selector(list(info.message_queues), selector_msg or Message(prepared.topic, b"-"), arg)
            if not isinstance(queue, MessageQueue):
                raise IllegalArgumentError(f"the queue selector returned {queue!r}, not a MessageQueue")
        if queue is not None:
            if queue.topic != prepared.topic:
                raise IllegalArgumentError(f"queue {queue} is not a queue of topic {prepared.topic!r}")
            remaining = timeout - (clock() - begin)
            if remaining <= 0:
                raise SendTimeoutError(f"sending to {queue} timed out before the first attempt")
            return await self._send_kernel(prepared, queue, mode, remaining)
        retries = {CommunicationMode.SYNC: self.config.retry_times_when_send_failed,
                   CommunicationMode.ASYNC: self.config.retry_times_when_send_async_failed}.get(mode, 0)
        return await self._send_with_retries(prepared, mode, info, 1 + retries, begin, timeout)

    async def _send_with_retries(self, prepared: PreparedSend, mode: CommunicationMode, info: TopicPublishInfo,
                                 attempts: int, begin: int, timeout: float) -> SendResult | None:
        clock = self.instance.clock
        last_broker: str | None = None
        last_error: BaseException | None = None
        result: SendResult | None = None
        brokers_sent: list[str] = []
        for _ in range(attempts):
            mq = self.fault_strategy.select_one_message_queue(info, last_broker)
            last_broker = mq.broker_name
            elapsed = clock() - begin
            if elapsed >= timeout:
                raise SendTimeoutError(
                    f"sending to {prepared.topic} used up send_msg_timeout_ms={timeout} after "
                    f"{len(brokers_sent)} attempt(s) on {brokers_sent}") from last_error
            brokers_sent.append(mq.broker_name)
            started = clock()
            try:
                result = await self._send_kernel(prepared, mq, mode, timeout - elapsed)
            except (RemotingError, ClientError) as e:
                self.fault_strategy.update_fault_item(mq.broker_name, clock() - started, True)
                log.info("send to %s failed (%s); %s", mq, e, "retrying" if e.retriable else "giving up")
                last_error = e
                if not e.retriable:
                    raise
                continue
            except BrokerError as e:
                self.fault_strategy.update_fault_item(mq.broker_name, clock() - started, True)
                last_error = e
                if e.retriable:
                    log.info("send to %s refused with retriable code %d (%s); retrying", mq, e.code, e.remark)
                    continue
                if e.code == ResponseCode.MESSAGE_ILLEGAL and prepared.sys_flag & L.SYSFLAG_COMPRESSED:
                    # the broker measured the compressed body: say what the user sent
                    raise BrokerError(e.code, f"{e.remark} (the message body is {prepared.original_size} bytes, "
                                      f"{len(prepared.body)} after compression)", e.addr) from e
                raise
            self.fault_strategy.update_fault_item(mq.broker_name, clock() - started, False)
            if result is None or result.status is SendStatus.SEND_OK:
                return result
            if not self.config.retry_another_broker_when_not_store_ok:
                return result
        if result is not None:
            return result
        assert last_error is not None
        last_error.add_note(f"send to {prepared.topic} failed after {len(brokers_sent)} attempt(s) "
                            f"on brokers {brokers_sent} in {clock() - begin} ms")
        raise last_error

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
                                              use_v2=self.config.use_send_message_v2)
        if mode is CommunicationMode.ONEWAY:
            await instance.api.send_message_oneway(addr, cmd, timeout_ms)
            return None
        return await instance.api.send_message(addr, mq.broker_name, mq.topic, prepared.uniq_id, cmd, timeout_ms)

    async def fetch_publish_queues(self, topic: str) -> list[MessageQueue]:
        return list((await self.find_publish_info(topic)).message_queues)
