"""Concurrent consumption (``ConsumeMessageConcurrentlyService``).

Pulled messages are cut into batches of ``consume_message_batch_max_size`` and run on
the consume thread pool in any order. After the listener returns:

* success: the messages leave the process queue; the queue's commit offset becomes
  the lowest offset still held (never moving backwards);
* failure (``RECONSUME_LATER`` or an exception), clustering: each failed message is
  sent back (CONSUMER_SEND_MSG_BACK; the broker redelivers it later through
  ``%RETRY%<group>`` with a growing delay, and moves it to ``%DLQ%<group>`` after
  ``max_reconsume_times``). If even that fails (the consumer also tries to re-send a
  copy to ``%RETRY%<group>`` itself), the message stays in the process queue and is
  consumed again locally after ``local_retry_delay_ms``;
* failure, broadcasting: logged and dropped, as in Java.

``clean_expired_messages`` sends back messages stuck in a listener longer than
``consume_timeout_min`` (run periodically on a consume thread).

Thread model: ``submit`` from the event-loop thread; everything else on consume threads.
"""
from __future__ import annotations

import concurrent.futures
import logging
from typing import Any, Protocol

from mqcore.client.config import MessageModel, PushConsumerConfig
from mqcore.client.consumer.listener import (
    ConcurrentListener,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
)
from mqcore.client.consumer.offset_store import OffsetStore
from mqcore.client.consumer.process_queue import ProcessQueue
from mqcore.client.message import MessageExt
from mqcore.clock import Clock
from mqcore.message import Prop
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["ConsumerOps", "ConsumeMessageConcurrentlyService"]

#: at most this many stuck messages are sent back per queue per sweep (Java: 16)
CLEAN_EXPIRED_MAX_PER_QUEUE = 16


class ConsumerOps(Protocol):
    """What the consume services need from the push consumer."""

    config: PushConsumerConfig
    group: str
    clock: Clock
    offset_store: OffsetStore

    @property
    def message_model(self) -> MessageModel: ...

    @property
    def max_reconsume_times(self) -> int: ...

    def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> bool: ...

    def send_to_retry_topic(self, msg: MessageExt) -> bool: ...

    def schedule(self, delay_ms: float, fn: Any, *args: Any) -> None: ...

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None: ...

    def lock_queue(self, mq: MessageQueue) -> bool: ...


class ConsumeMessageConcurrentlyService:
    def __init__(self, consumer: ConsumerOps, listener: ConcurrentListener,
                 executor: concurrent.futures.ThreadPoolExecutor) -> None:
        self.consumer = consumer
        self.listener = listener
        self.executor = executor
        self.batch_size = consumer.config.consume_message_batch_max_size
        self.consumed_ok = 0
        self.consumed_failed = 0

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool = True) -> None:
        n = self.batch_size
        try:
            if len(msgs) <= n:
                self.executor.submit(self._consume, msgs, pq, mq)
                return
            for i in range(0, len(msgs), n):
                self.executor.submit(self._consume, msgs[i:i + n], pq, mq)
        except RuntimeError as e:  # executor shut down: the consumer is stopping
            log.debug("consume request for %s not accepted: %s", mq, e)

    def _submit_later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self.consumer.schedule(self.consumer.config.local_retry_delay_ms, self.submit, msgs, pq, mq, True)

    def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        consumer = self.consumer
        consumer.reset_retry_topic(msgs)
        context = ConsumeConcurrentlyContext(mq)
        now = str(consumer.clock())
        for msg in msgs:
            msg.stamp_property(Prop.CONSUME_START_TIME, now)  # leaves the properties unparsed
        try:
            status = self.listener(msgs, context)
        except Exception:  # the listener's failure means "retry later"
            log.warning("listener of group %s raised on %d message(s) of %s; they will be retried",
                        consumer.group, len(msgs), mq, exc_info=True)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if status is None:
            status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        elif not isinstance(status, ConsumeConcurrentlyStatus):
            log.warning("listener of group %s returned %r; treating it as RECONSUME_LATER", consumer.group, status)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if pq.dropped:
            log.info("queue %s was dropped while consuming; its %d message(s) may come again", mq, len(msgs))
            return
        self._process_result(status, context, msgs, pq, mq)

    def _process_result(self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext,
                        msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        consumer = self.consumer
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = min(context.ack_index, len(msgs) - 1)
            self.consumed_ok += ack_index + 1
            self.consumed_failed += len(msgs) - ack_index - 1
        else:
            ack_index = -1
            self.consumed_failed += len(msgs)
        done = msgs
        failed = msgs[ack_index + 1:]
        if failed and consumer.message_model is MessageModel.BROADCASTING:
            for msg in failed:
                log.warning("broadcasting consumer of group %s failed on %s; dropping it (no retry)",
                            consumer.group, msg.msg_id)
        elif failed:
            back_failed = []
            for msg in failed:
                if not consumer.send_message_back(msg, context.delay_level_when_next_consume, mq.broker_name):
                    msg.reconsume_times += 1
                    back_failed.append(msg)
            if back_failed:
                kept = {id(m) for m in back_failed}
                done = [m for m in msgs if id(m) not in kept]
                log.warning("%d message(s) of %s could not be sent back; consuming them again in %d ms",
                            len(back_failed), mq, consumer.config.local_retry_delay_ms)
                self._submit_later(back_failed, pq, mq)
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            consumer.offset_store.update_offset(mq, offset, increase_only=True)

    def clean_expired_messages(self, pq: ProcessQueue) -> int:
        """Send back messages whose listener has run longer than ``consume_timeout_min``."""
        timeout_ms = self.consumer.config.consume_timeout_min * 60_000
        sent = 0
        for _ in range(min(len(pq), CLEAN_EXPIRED_MAX_PER_QUEUE)):
            msg = pq.first_message()
            if msg is None:
                break
            raw = msg.properties.get(Prop.CONSUME_START_TIME)
            if not raw or not raw.isdigit() or self.consumer.clock() - int(raw) <= timeout_ms:
                break
            log.warning("message %s of %s has been consuming for more than %s min; sending it back",
                        msg.msg_id, msg.message_queue, self.consumer.config.consume_timeout_min)
            if not self.consumer.send_message_back(msg, 3, msg.broker_name):
                break
            pq.remove_if_first(msg)
            sent += 1
        return sent
