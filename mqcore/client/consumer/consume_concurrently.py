"""Concurrent consumption (``ConsumeMessageConcurrentlyService``).

Pulled messages are cut into batches of ``consume_message_batch_max_size`` and run on
the consume thread pool in any order. The batches wait in one queue drained by as few
pool threads as keep up: one thread takes batch after batch (no thread hand-off, future
or wake-up per batch: with RocketMQ's listener batch of one message those were most of
a message's cost). While batches wait, a listener call slower than ``SLOW_LISTENER_S``
(e.g. one waiting on I/O) starts another drainer, up to ``consume_thread_max``, so slow
listeners still run in parallel: its drainer does so when the call returns, and a
watchdog thread (awake only while drainers run) when the call is still running. After
the listener returns:

* success: the messages leave the process queue; the queue's commit offset becomes
  the lowest offset still held (never moving backwards);
* failure (``RECONSUME_LATER`` or an exception), clustering: each failed message is
  sent back (CONSUMER_SEND_MSG_BACK; the broker redelivers it later through
  ``%RETRY%<group>`` with a growing delay, and moves it to ``%DLQ%<group>`` after
  ``max_reconsume_times``). If even that fails (the consumer also tries to re-send a
  copy to ``%RETRY%<group>`` itself), the message stays in the process queue and is
  consumed again locally after ``local_retry_delay_ms``;
* failure, broadcasting: logged and dropped, as in Java.

A drainer gives back the successful batches of one queue together (one process-queue
round and one offset update per run of batches, at most ``SETTLE_EVERY`` messages),
always after their listener calls returned: an offset never passes a message whose
listener has not finished.

``clean_expired_messages`` sends back messages stuck in a listener longer than
``consume_timeout_min`` (run periodically on a consume thread).

Thread model: ``submit`` from the event-loop thread; everything else on consume threads.
"""
from __future__ import annotations

import collections
import concurrent.futures
import logging
import threading
import time
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
from mqcore.format.layout import PROPERTY_SEPARATOR
from mqcore.format.properties import format_pair
from mqcore.message import Prop, retry_topic
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["ConsumerOps", "ConsumeMessageConcurrentlyService"]

#: at most this many stuck messages are sent back per queue per sweep (Java: 16)
CLEAN_EXPIRED_MAX_PER_QUEUE = 16
#: a listener call that took longer makes its drainer start another one (when batches wait)
SLOW_LISTENER_S = 0.0005
#: a drainer gives its consumed messages back to their process queue at least this often
SETTLE_EVERY = 256
_SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS


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
        self.max_drainers = max(1, consumer.config.consume_thread_max)
        self.consumed_ok = 0
        self.consumed_failed = 0
        #: listener batches waiting for a drainer: (messages, process queue, queue)
        self._pending: collections.deque[tuple[list[MessageExt], ProcessQueue, MessageQueue]] = collections.deque()
        self._lock = threading.Lock()
        self._drainers = 0
        self._stopped = False
        #: drainer id -> when its running listener call began (0.0: not in a call)
        self._calls: dict[int, float] = {}
        #: drainer id -> its consumed messages not yet settled (see _drain)
        self._unsettled: dict[int, list[Any]] = {}
        self._watch = threading.Condition(self._lock)
        self._watchdog: threading.Thread | None = None
        self._stamp: tuple[int, str, bytes, bytes] = (-1, "", b"", b"")
        self._retry_topic = retry_topic(consumer.group)

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool = True) -> None:
        n = self.batch_size
        pending = self._pending
        if len(msgs) <= n:
            pending.append((msgs, pq, mq))
        elif n == 1:  # RocketMQ's default listener batch: one list per message, no slicing
            pending.extend([([msg], pq, mq) for msg in msgs])
        else:
            pending.extend([(msgs[i:i + n], pq, mq) for i in range(0, len(msgs), n)])
        self._start_drainer(only_if_idle=True)

    def _start_drainer(self, *, only_if_idle: bool) -> None:
        with self._lock:
            if self._stopped or self._drainers >= self.max_drainers or (only_if_idle and self._drainers):
                return
            self._drainers += 1
            if self._watchdog is None:
                self._watchdog = threading.Thread(target=self._watch_slow_calls, daemon=True,
                                                  name=f"mqcore-consume-watch-{self.consumer.group}")
                self._watchdog.start()
            elif self._drainers == 1:
                self._watch.notify()
        try:
            self.executor.submit(self._drain)
        except RuntimeError as e:  # executor shut down: the consumer is stopping
            with self._lock:
                self._drainers -= 1
            log.debug("consume request not accepted: %s", e)

    def stop(self) -> None:
        """Shutting down: batches not started yet are dropped (their offsets are not committed,
        so they come again), running listeners finish."""
        with self._lock:
            self._stopped = True
            self._pending.clear()
            self._watch.notify()

    def _watch_slow_calls(self) -> None:
        """While drainers run: every few ms, a listener call running longer than
        ``SLOW_LISTENER_S`` while batches wait starts another drainer."""
        while True:
            with self._lock:
                while not self._drainers and not self._stopped:
                    self._watch.wait()
                if self._stopped:
                    return
                self._watch.wait(SLOW_LISTENER_S * 4)
                if self._stopped:
                    return
                now = time.perf_counter()
                slow = [me for me, began in self._calls.items() if began and now - began > SLOW_LISTENER_S]
                flush = []
                for me in slow:  # what a stuck drainer consumed before its slow call is settled now
                    state = self._unsettled.get(me)
                    if state is not None and state[0]:
                        flush.append((state[0], state[1], state[2]))
                        state[0] = []
                more = bool(slow) and bool(self._pending)
            for done, pq, mq in flush:
                self._settle(done, pq, mq)
            if more:
                self._start_drainer(only_if_idle=False)

    def _submit_later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self.consumer.schedule(self.consumer.config.local_retry_delay_ms, self.submit, msgs, pq, mq, True)

    def _drain(self) -> None:
        """Consume waiting batches until none is left; see the module docstring."""
        pending, clock, calls, lock = self._pending, time.perf_counter, self._calls, self._lock
        me = threading.get_ident()
        # [consumed messages not yet settled, their process queue, their queue]; the watchdog may
        # settle them (under the lock) while this drainer is in a slow listener call
        state: list[Any] = [[], None, None]
        self._unsettled[me] = state
        try:
            while not self._stopped:
                try:
                    msgs, pq, mq = pending.popleft()
                except IndexError:
                    with lock:  # nothing left: stop, unless a batch arrived meanwhile
                        if not pending or self._stopped:
                            self._drainers -= 1
                            break
                    continue
                done = state[0]
                if done and (pq is not state[1] or len(done) >= SETTLE_EVERY):
                    state[0] = []
                    self._settle(done, state[1], state[2])
                calls[me] = began = clock()
                ok = self._consume(msgs, pq, mq)
                with lock:
                    calls[me] = 0.0
                    if ok:
                        if state[0] and pq is not state[1]:
                            flush = (state[0], state[1], state[2])
                            state[0] = []
                        else:
                            flush = None
                        state[0].extend(ok)
                        state[1], state[2] = pq, mq
                if ok and flush is not None:
                    self._settle(*flush)
                if clock() - began > SLOW_LISTENER_S and pending:
                    self._start_drainer(only_if_idle=False)
            else:
                with lock:
                    self._drainers -= 1
        finally:
            with lock:
                calls.pop(me, None)
                self._unsettled.pop(me, None)
                done, state[0] = state[0], []
            if done:
                self._settle(done, state[1], state[2])

    def _settle(self, done: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """Consumed messages leave their process queue; its commit offset moves."""
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, offset, increase_only=True)

    def _consume(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> list[MessageExt] | None:
        """Run the listener on one batch; the messages to give back as consumed (None: none)."""
        if pq.dropped:
            return None
        consumer = self.consumer
        retry = self._retry_topic
        for msg in msgs:
            if msg.topic == retry:
                consumer.reset_retry_topic(msgs)
                break
        context = ConsumeConcurrentlyContext(mq)
        ms = consumer.clock()
        stamp = self._stamp  # one (ms, text, encoded pairs) tuple, replaced whole: drainers share it
        if stamp[0] != ms:  # made once per millisecond, not per batch
            pair = format_pair(Prop.CONSUME_START_TIME, ms).encode()
            stamp = self._stamp = (ms, str(ms), pair, PROPERTY_SEPARATOR + pair)
        _, now, pair, joined = stamp
        for msg in msgs:
            # msg.stamp_property(CONSUME_START_TIME, now), inlined with the pair encoded once:
            # the properties stay unparsed
            props = msg._properties
            if props is None:
                raw = msg._props_raw
                msg._props_raw = raw + joined if raw else pair
            else:
                props[Prop.CONSUME_START_TIME] = now
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
            return None
        if status is _SUCCESS and context.ack_index >= len(msgs) - 1:  # all consumed: _process_result's first case
            self.consumed_ok += len(msgs)
            return msgs
        return self._process_result(status, context, msgs, pq, mq)

    def _process_result(self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext,
                        msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> list[MessageExt]:
        """Count the outcome, send failed messages back; the messages now done (the caller
        settles them with the process queue)."""
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
        return done

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
