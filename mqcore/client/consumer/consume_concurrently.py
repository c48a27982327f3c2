"""Concurrent consumption (``ConsumeMessageConcurrentlyService``).

The messages of one pull answer become one *run* (``ConsumeRun``); the listener is still
called with batches of ``consume_message_batch_max_size`` messages (RocketMQ's default:
one message per call, ``listener([msg], context)``, its status for that message alone).
The runs wait in one queue drained by as few pool threads as keep up: a thread takes
batch after batch of the oldest run in one kernel call (``ListenerRunner.run``: claim,
stamp, call, check, collect, with no thread hand-off, future, lock or Python loop per
batch; with a listener batch of one message those were most of a message's cost). While
batches wait, a listener call slower than ``SLOW_LISTENER_S`` (e.g. one waiting on I/O)
starts another drainer, up to ``consume_thread_max``, which takes the next batches of the
same run, so slow listeners still run in parallel: its drainer does so when the call
returns, and a watchdog thread (awake only while drainers run) when the call is still
running. What a user can observe: with a fast listener, the messages of a pull answer are
consumed one after the other on one pool thread (Java hands each batch to the pool, so
consecutive messages usually run on different threads); with a slow one, up to
``consume_thread_max`` threads share them, as in Java. Batches are still not consumed in
queue order across threads (use an orderly consumer for that). After the listener returns:

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
listener has not finished (the lowest message still held by the process queue, consumed
or not, bounds the committed offset). Only outcomes other than a plain success
(``RECONSUME_LATER``, an exception, a partial ``ack_index``, a dropped queue) leave the
kernel, one call at a time, and are handled here as before.

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

from mqcore._compat import default_wire_client_kernels
from mqcore.client.config import MessageModel, PushConsumerConfig
from mqcore.client.consumer.listener import (
    ConcurrentListener,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
)
from mqcore.client.consumer.offset_store import OffsetStore
from mqcore.client.consumer.process_queue import ProcessQueue
from mqcore.client.consumer.stats import ConsumerStats
from mqcore.client.message import MessageExt
from mqcore.clock import Clock, system_clock_ms
from mqcore.format.layout import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR
from mqcore.kernel_api import WireClientKernels
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

    @property
    def stats(self) -> ConsumerStats: ...


class ConsumeMessageConcurrentlyService:
    def __init__(self, consumer: ConsumerOps, listener: ConcurrentListener,
                 executor: concurrent.futures.ThreadPoolExecutor, *, kernels: WireClientKernels | None = None) -> None:
        self.consumer = consumer
        self.listener = listener
        self.executor = executor
        self.kernels = k = kernels or default_wire_client_kernels()
        self.batch_size = consumer.config.consume_message_batch_max_size
        self.max_drainers = max(1, consumer.config.consume_thread_max)
        self.consumed_failed = 0
        self._consumed_ok_here = 0  # partial successes (_process_result); the runner counts the rest
        #: runs of messages waiting for (or being taken by) drainers, oldest first
        self._pending: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._drainers = 0
        self._stopped = False
        #: drainer id -> its DrainerState (its unsettled messages and its running call)
        self._states: dict[int, Any] = {}
        self._watch = threading.Condition(self._lock)
        self._watchdog: threading.Thread | None = None
        self._retry_topic = retry_topic(consumer.group)
        self._runner = k.ListenerRunner(
            listener, ConsumeConcurrentlyContext, _SUCCESS, self.batch_size, self._retry_topic,
            consumer.reset_retry_topic, consumer.clock, consumer.clock is system_clock_ms,
            Prop.CONSUME_START_TIME, Prop.CONSUME_START_TIME.encode() + NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR,
            SLOW_LISTENER_S, SETTLE_EVERY)

    @property
    def consumed_ok(self) -> int:
        return int(self._runner.consumed_ok) + self._consumed_ok_here

    def submit(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue, dispatch: bool = True) -> None:
        """One pull answer's messages become one run (the listener still gets batches of
        ``consume_message_batch_max_size``); its drainers are started as needed."""
        if msgs:
            self._pending.append(self.kernels.ConsumeRun(msgs, pq, mq))
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
            self._runner.stopped = True
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
                slow = [state for state in self._states.values()
                        if state.began and now - state.began > SLOW_LISTENER_S]
                more = bool(slow) and any(run.remaining for run in self._pending)
            for state in slow:  # what a stuck drainer consumed before its slow call is settled now
                done, pq, mq = state.take_done()
                if done:
                    self._settle(done, pq, mq)
            if more:
                self._start_drainer(only_if_idle=False)

    def _submit_later(self, msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        self.consumer.schedule(self.consumer.config.local_retry_delay_ms, self.submit, msgs, pq, mq, True)

    def _next_run(self) -> Any:
        """The oldest run with batches left (used-up ones leave the queue), or None: then this
        drainer stops (counted out under the lock, so a run submitted meanwhile starts another)."""
        pending = self._pending
        with self._lock:
            while pending and not self._stopped:
                run = pending[0]
                if run.remaining:
                    return run
                pending.popleft()
            self._drainers -= 1
            return None

    def _drain(self) -> None:
        """Consume waiting runs until none is left; see the module docstring."""
        runner, kernels = self._runner, self.kernels
        me = threading.get_ident()
        state = kernels.DrainerState()
        self._states[me] = state
        counted_out = False
        try:
            while True:
                run = self._next_run()
                if run is None:
                    counted_out = True  # by _next_run, under the lock
                    break
                pq, mq = run.pq, run.mq
                if pq is not state.pq:
                    done, old_pq, old_mq = state.take_done()
                    if done:
                        self._settle(done, old_pq, old_mq)
                    state.set_queue(pq, mq)
                code = runner.run(run, state)
                if code == kernels.RUN_OUTCOME:
                    batch, status, context, exc = state.outcome
                    state.outcome = None
                    ok = self._finish(batch, status, context, exc, pq, mq)
                    if ok:
                        state.add_done(ok)
                elif code == kernels.RUN_SETTLE:
                    done, pq, mq = state.take_done()
                    self._settle(done, pq, mq)
                elif code == kernels.RUN_SLOW:
                    if any(r.remaining for r in self._pending):
                        self._start_drainer(only_if_idle=False)
        except Exception:  # the pool would keep it in a future nobody reads
            log.exception("a consume thread of group %s failed", self.consumer.group)
            raise
        finally:
            if not counted_out:  # a bug below the listener (which cannot raise here): keep the count right
                with self._lock:
                    self._drainers -= 1
            self._states.pop(me, None)
            done, pq, mq = state.take_done()
            if done:
                self._settle(done, pq, mq)

    def _settle(self, done: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> None:
        """Consumed messages leave their process queue; its commit offset moves."""
        offset = pq.remove_messages(done)
        if offset >= 0 and not pq.dropped:
            self.consumer.offset_store.update_offset(mq, offset, increase_only=True)
        # listener time of the run: from its first message's start stamp to now
        began = done[0].properties.get(Prop.CONSUME_START_TIME, "")
        rt_ms = max(0, self.consumer.clock() - int(began)) if began.isdigit() else 0
        self.consumer.stats.on_settled(mq.topic, len(done), rt_ms)

    def _finish(self, msgs: list[MessageExt], status: Any, context: ConsumeConcurrentlyContext,
                exc: BaseException | None, pq: ProcessQueue, mq: MessageQueue) -> list[MessageExt] | None:
        """A listener call the runner did not settle itself (anything but a plain success):
        the messages to give back as consumed (None: none)."""
        consumer = self.consumer
        if exc is not None:  # the listener's failure means "retry later"
            log.warning("listener of group %s raised on %d message(s) of %s; they will be retried",
                        consumer.group, len(msgs), mq, exc_info=exc)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if status is None:
            status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
        elif not isinstance(status, ConsumeConcurrentlyStatus):
            log.warning("listener of group %s returned %r; treating it as RECONSUME_LATER", consumer.group, status)
            status = ConsumeConcurrentlyStatus.RECONSUME_LATER
        if pq.dropped:
            log.info("queue %s was dropped while consuming; its %d message(s) may come again", mq, len(msgs))
            return None
        return self._process_result(status, context, msgs, pq, mq)

    def _process_result(self, status: ConsumeConcurrentlyStatus, context: ConsumeConcurrentlyContext,
                        msgs: list[MessageExt], pq: ProcessQueue, mq: MessageQueue) -> list[MessageExt]:
        """Count the outcome, send failed messages back; the messages now done (the caller
        settles them with the process queue)."""
        consumer = self.consumer
        if status is ConsumeConcurrentlyStatus.CONSUME_SUCCESS:
            ack_index = min(context.ack_index, len(msgs) - 1)
            self._consumed_ok_here += ack_index + 1
            self.consumed_failed += len(msgs) - ack_index - 1
        else:
            ack_index = -1
            self.consumed_failed += len(msgs)
        done = msgs
        failed = msgs[ack_index + 1:]
        if failed and consumer.message_model is MessageModel.BROADCASTING:
            consumer.stats.on_failed(mq.topic, len(failed), len(failed))
            for msg in failed:
                log.warning("broadcasting consumer of group %s failed on %s; dropping it (no retry)",
                            consumer.group, msg.msg_id)
        elif failed:
            back_failed = []
            for msg in failed:
                if not consumer.send_message_back(msg, context.delay_level_when_next_consume, mq.broker_name):
                    msg.reconsume_times += 1
                    back_failed.append(msg)
            consumer.stats.on_failed(mq.topic, len(failed), len(failed) - len(back_failed))
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
