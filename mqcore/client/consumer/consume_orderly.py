"""Orderly consumption (``ConsumeMessageOrderlyService``).

One queue is consumed by one thread at a time, in offset order, and (clustering)
only while this consumer holds the queue's lock on the broker. A consume request
loops: take the lowest ``consume_message_batch_max_size`` messages, run the listener
under the queue's ``consume_lock``, then

* ``SUCCESS``: commit the batch (the queue offset moves past it);
* ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` or an exception: put the batch back and try the
  same messages again after ``suspend_current_queue_time_ms`` — later messages of the
  queue wait, which is what keeps the order. A message that failed
  ``max_reconsume_times`` times (default: unlimited) is sent to the DLQ instead.

A request yields after 60 s of continuous consumption so other queues get threads.
If the lock is missing or expired, the queue is re-locked and consumption retried.

Thread model: ``submit`` from the event-loop thread, the rest on consume threads.
"""
from __future__ import annotations

import concurrent.futures
import logging
import threading
import time

from mqcore.client.config import MessageModel
from mqcore.client.consumer.consume_concurrently import ConsumerOps
from mqcore.client.consumer.listener import ConsumeOrderlyContext, ConsumeOrderlyStatus, OrderlyListener
from mqcore.client.consumer.process_queue import ProcessQueue
from mqcore.client.message import MessageExt
from mqcore.message import Prop
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["ConsumeMessageOrderlyService", "MAX_TIME_CONSUME_CONTINUOUSLY_MS"]

MAX_TIME_CONSUME_CONTINUOUSLY_MS = 60_000


class ConsumeMessageOrderlyService:
    def __init__(self, consumer: ConsumerOps, listener: OrderlyListener,
                 executor: concurrent.futures.ThreadPoolExecutor) -> None:
        self.consumer = consumer
        self.listener = listener
        self.executor = executor
        self.batch_size = consumer.config.consume_message_batch_max_size
        self._mq_locks: dict[MessageQueue, threading.Lock] = {}
        self._mq_locks_guard = threading.Lock()
        self.consumed_ok = 0
        self.consumed_failed = 0

    def _mq_lock(self, mq: MessageQueue) -> threading.Lock:
        with self._mq_locks_guard:
            lock = self._mq_locks.get(mq)
            if lock is None:
                lock = self._mq_locks[mq] = threading.Lock()
            return lock

    def stop(self) -> None:
        """Shutting down: nothing to drop (each queue's requests are the pool's own)."""

    def submit(self, msgs: list[MessageExt] | None, pq: ProcessQueue, mq: MessageQueue, dispatch: bool) -> None:
        if not dispatch:
            return
        try:
            self.executor.submit(self._consume, pq, mq)
        except RuntimeError as e:  # executor shut down
            log.debug("orderly consume request for %s not accepted: %s", mq, e)

    def _submit_later(self, pq: ProcessQueue, mq: MessageQueue, delay_ms: float) -> None:
        self.consumer.schedule(max(delay_ms, 10), self.submit, None, pq, mq, True)

    def _try_lock_later_and_reconsume(self, pq: ProcessQueue, mq: MessageQueue, delay_ms: float) -> None:
        self.consumer.schedule(delay_ms, self._relock_and_reconsume, pq, mq)

    def _relock_and_reconsume(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        # runs on the loop thread: hand the (blocking) lock request to a consume thread
        try:
            self.executor.submit(self._relock_blocking, pq, mq)
        except RuntimeError as e:
            log.debug("re-lock of %s not accepted: %s", mq, e)

    def _relock_blocking(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        locked = self.consumer.lock_queue(mq)
        self._submit_later(pq, mq, 10 if locked else 3000)

    def _consume(self, pq: ProcessQueue, mq: MessageQueue) -> None:
        if pq.dropped:
            return
        clustering = self.consumer.message_model is MessageModel.CLUSTERING
        with self._mq_lock(mq):
            if clustering and (not pq.locked or pq.is_lock_expired()):
                if not pq.dropped:
                    self._try_lock_later_and_reconsume(pq, mq, 100)
                return
            begin = time.monotonic()
            while not pq.dropped:
                if clustering and (not pq.locked or pq.is_lock_expired()):
                    self._try_lock_later_and_reconsume(pq, mq, 10)
                    return
                if (time.monotonic() - begin) * 1000 > MAX_TIME_CONSUME_CONTINUOUSLY_MS:
                    self._submit_later(pq, mq, 10)
                    return
                msgs = pq.take_messages(self.batch_size)
                if not msgs:
                    return
                if not self._consume_batch(msgs, pq, mq):
                    return

    def _consume_batch(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> bool:
        """Run the listener on one batch; True to go on with the next batch."""
        consumer = self.consumer
        consumer.reset_retry_topic(msgs)
        context = ConsumeOrderlyContext(mq)
        status: object = None
        failed = False
        with pq.consume_lock:
            if pq.dropped:
                log.info("queue %s was dropped; stop consuming it", mq)
                return False
            began = time.monotonic()
            try:
                status = self.listener(msgs, context)
            except Exception:  # failure of an orderly listener: suspend and retry these messages
                log.warning("orderly listener of group %s raised on %s; retrying in a moment", consumer.group, mq,
                            exc_info=True)
                failed = True
        if failed or (status is not None and status is not ConsumeOrderlyStatus.SUCCESS):
            if not failed and not isinstance(status, ConsumeOrderlyStatus):
                log.warning("orderly listener returned %r; treating it as SUSPEND_CURRENT_QUEUE_A_MOMENT", status)
            status = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        else:
            status = ConsumeOrderlyStatus.SUCCESS
        stats = consumer.stats
        if status is ConsumeOrderlyStatus.SUCCESS:
            stats.on_settled(mq.topic, len(msgs), (time.monotonic() - began) * 1000)
        else:
            stats.on_failed(mq.topic, len(msgs), 0)
        return self._process_result(msgs, status, context, pq, mq)

    def _process_result(self, msgs: list[MessageExt], status: ConsumeOrderlyStatus,
                        context: ConsumeOrderlyContext, pq: ProcessQueue, mq: MessageQueue) -> bool:
        go_on = True
        if status is ConsumeOrderlyStatus.SUCCESS:
            self.consumed_ok += len(msgs)
            commit_offset = pq.commit()
        else:
            self.consumed_failed += len(msgs)
            if self._check_reconsume_times(msgs):
                pq.make_messages_to_consume_again(msgs)
                delay = context.suspend_current_queue_time_ms
                if delay < 0:
                    delay = self.consumer.config.suspend_current_queue_time_ms
                self._submit_later(pq, mq, delay)
                go_on = False
                commit_offset = -1
            else:
                commit_offset = pq.commit()
        if commit_offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, commit_offset, increase_only=False)
        return go_on

    def _check_reconsume_times(self, msgs: list[MessageExt]) -> bool:
        """True to suspend and retry; messages past the limit go to the DLQ instead."""
        suspend = False
        limit = self.consumer.max_reconsume_times
        for msg in msgs:
            if msg.reconsume_times >= limit:
                msg.properties[Prop.RECONSUME_TIME] = str(msg.reconsume_times)
                if not self.consumer.send_to_retry_topic(msg):
                    suspend = True
                    msg.reconsume_times += 1
            else:
                suspend = True
                msg.reconsume_times += 1
        return suspend
