"""Auto-batching (seed 002, RocketMQ 5's ``ProduceAccumulator``), opt-in.

Single-message sends are collected per *aggregation key* and sent as one
SEND_BATCH_MESSAGE as soon as the key's pipeline has room: with fewer than
``MAX_INFLIGHT_BATCHES`` batches of that key awaiting their answer, a new batch leaves
on the loop's next turn (so everything submitted in one burst travels together);
otherwise it fills while the broker works and leaves the moment an earlier batch is
acknowledged. It leaves at once when it reaches ``batch_max_bytes``, and never waits
longer than ``batch_max_delay_ms`` (a bound, no longer the usual trigger: a fixed
10 ms timer stalled every window of a fast producer). The key is (topic, tags, wait-store-ok) — or
(topic, queue, tags, ...) when the caller chose a queue — because a batch has one
topic and queue, and only messages with the same tag may share a batch (seed 002's
compatibility rule). Every message keeps its own ``UNIQ_KEY``; the batch answer's
comma-joined offset ids and first queue offset are split back so each caller gets a
``SendResult`` of its own, exactly as if it had sent alone.

If accepting a message would push the bytes held by all pending batches over
``total_batch_max_bytes``, ``add`` returns ``None`` and the caller sends it unbatched:
memory stays bounded and nothing blocks.

Thread model: ``add`` (the wire kernels' ``AutoBatcher.add``) runs on the caller's
thread (or on the loop): the pending batches sit behind one lock, and the loop is woken
once per batch, not per message. Sending, the delay timers and settling the futures
(once per batch) run on the client's event loop. Sync callers wait on the future ``add``
returns, async callers get their callback from it.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from asyncio.events import _get_running_loop
from collections.abc import Awaitable, Callable, Container
from typing import Any

from mqcore._compat import default_wire_client_kernels
from mqcore.client.loop import BatchFuture, settle_batch
from mqcore.client.message import Message, SendResult
from mqcore.clock import system_clock_ms
from mqcore.kernel_api import PendingBatchApi, WindowSlotsApi, WireClientKernels
from mqcore.message import Prop
from mqcore.remoting.bodies import MessageQueue
from mqcore.uniq_id import UniqIdGenerator

log = logging.getLogger(__name__)

__all__ = ["ProduceAccumulator", "split_batch_results"]

#: per-message overhead of a batch item on the wire (TOTALSIZE..BODYLEN + PROPERTIESLENGTH)
BATCH_ITEM_OVERHEAD = 22

#: batches of one key awaiting their answer before the next one waits for an ack: two
#: keep the connection busy (one travels or is stored while the next is on its way)
MAX_INFLIGHT_BATCHES = 2

PendingBatch = PendingBatchApi
#: ``send_batch(batch)``: sends a ``PendingBatch`` (its joined items, topic, queue, UNIQ_KEYs)
SendBatch = Callable[[PendingBatch], Awaitable[SendResult]]


def split_batch_results(batch: SendResult, uniq_ids: list[str]) -> list[SendResult]:
    """Every message's own result out of a batch result, in order: the ``i``-th gets its own
    UNIQ_KEY, queue offset ``batch.queue_offset + i`` and the ``i``-th broker id (the batch's
    id where the broker listed fewer)."""
    ids = batch.offset_msg_ids
    if len(ids) < len(uniq_ids):  # a broker that listed fewer ids: the rest get the batch's
        ids = ids + [batch.offset_msg_id] * (len(uniq_ids) - len(ids))
    status, mq, base, tx, region, trace = (batch.status, batch.message_queue, batch.queue_offset,
                                           batch.transaction_id, batch.region_id, batch.trace_on)
    return [SendResult(status, uniq, mq, base + i, oid, tx, region, trace)
            for i, (uniq, oid) in enumerate(zip(uniq_ids, ids))]


def item_size(msg: Message) -> int:
    """Bytes a message adds to a batch body (approximately: properties as UTF-8)."""
    props = msg.properties
    return BATCH_ITEM_OVERHEAD + len(msg.body) + sum(map(len, props)) + sum(map(len, props.values())) + 2 * len(props)


class ProduceAccumulator:
    """Collects messages into batches and sends them with ``send_batch(batch)``.

    The per-message step is the wire kernels' ``AutoBatcher.add`` (stamp, encode the item
    straight into the pending batch's body, window slot, future, in one call), on the
    caller's thread or on the loop: the pending batches sit behind one lock, and the loop
    is woken once per *batch* (to send it, or to arm its delay bound), not once per
    message. Sending, timers and settling the futures (one write per batch:
    ``settle_batch``) stay on the loop.

    ``send_batch(batch)`` gets the ``PendingBatch`` (``topic``, ``queue``, ``wait``,
    ``body``: the joined SEND_BATCH items, ``uniq_ids``) and returns the batch's
    ``SendResult``. ``ids`` stamps UNIQ_KEYs (a ``UniqIdGenerator``; a fresh one when
    None), ``checked_topics`` are the topic names that passed ``check_message`` (``add``
    takes no others), ``max_message_bytes`` bounds a body.
    """

    def __init__(self, send_batch: SendBatch, *, batch_max_bytes: int, batch_max_delay_ms: int,
                 total_batch_max_bytes: int, loop: asyncio.AbstractEventLoop | None = None,
                 window: WindowSlotsApi | None = None, ids: UniqIdGenerator | None = None,
                 checked_topics: Container[str] | None = None, max_message_bytes: int = 4 * 1024 * 1024,
                 kernels: WireClientKernels | None = None) -> None:
        self._send_batch = send_batch
        self.batch_max_bytes = batch_max_bytes
        self.batch_max_delay_ms = batch_max_delay_ms
        self.total_batch_max_bytes = total_batch_max_bytes
        self._loop = loop
        #: the producer's async window: ``add(..., holds_slot=True)`` messages give theirs
        #: back together once their batch is answered, not one future callback each
        self._window = window
        kernels = kernels or default_wire_client_kernels()
        ids = ids or UniqIdGenerator("127.0.0.1")
        self._lock = threading.Lock()  # guards the batcher's pending table, held bytes, in-flight counts, closed
        self._inflight: set[asyncio.Task[None]] = set()
        self.batches_sent = 0
        self.messages_batched = 0
        self.batcher = kernels.AutoBatcher(
            lock=self._lock, batch_max_bytes=batch_max_bytes, total_batch_max_bytes=total_batch_max_bytes,
            max_inflight_batches=MAX_INFLIGHT_BATCHES, max_message_bytes=max_message_bytes,
            checked_topics=_Everything() if checked_topics is None else checked_topics, ids=ids,
            system_clock=ids.clock is system_clock_ms, future_type=BatchFuture, condition=threading.Condition(),
            result_type=SendResult, on_batch=self._on_batch, window=window)
        self._actions = {kernels.BATCH_LAUNCH: self._launch, kernels.BATCH_LEAVE_SOON: self._leave_soon,
                         kernels.BATCH_ARM_TIMER: self._arm_timer}
        self.JOIN_CHECK = kernels.JOIN_CHECK
        self.JOIN_WAIT = kernels.JOIN_WAIT

    @property
    def held_bytes(self) -> int:
        return self.batcher.held_bytes

    @staticmethod
    def eligible(msg: Message) -> bool:
        """Batches cannot carry delayed, retry-topic, transactional or reply messages."""
        props = msg.properties
        return not (props.get(Prop.DELAY) or msg.topic.startswith("%RETRY%") or props.get(Prop.TRAN_MSG)
                    or Prop.MSG_TYPE in props)

    def add(self, msg: Message, queue: MessageQueue | None = None, *, future: Any = None,
            holds_slot: bool = False) -> Any:
        """Queue ``msg`` (a checked message) and return the future that will get its result:
        ``future`` if given (an asyncio or concurrent future; callers on other threads must
        pass a ``concurrent.futures.Future``), else a new asyncio future (on the loop only).
        None = send it unbatched. ``holds_slot``: the message holds a slot of the ``window``
        given at construction, released when its batch has been answered (settled, failed or
        cancelled); when ``add`` declines, the slot stays the caller's."""
        if holds_slot and self._window is None:
            raise ValueError("holds_slot needs the window given at construction")
        loop = self._loop
        running = _get_running_loop()
        if loop is None:
            if running is None:
                raise RuntimeError("ProduceAccumulator.add outside its event loop needs the loop at construction")
            loop = self._loop = running
        if future is None:
            if running is not loop:
                raise RuntimeError("ProduceAccumulator.add from another thread needs a concurrent future")
            future = loop.create_future()
        added = self.batcher.add(msg, queue, future, 2 if holds_slot else 0, True)
        return added if added is not None and added is not self.JOIN_CHECK else None

    def _on_batch(self, action: int, batch: PendingBatch) -> None:
        """The batcher asks for ``action`` on ``batch``: on the loop's next turn."""
        loop = self._loop
        assert loop is not None
        if _get_running_loop() is loop:
            loop.call_soon(self._actions[action], batch)
        else:
            loop.call_soon_threadsafe(self._actions[action], batch)

    # --- loop thread ---------------------------------------------------------------------------
    def _leave_soon(self, batch: PendingBatch) -> None:
        with self._lock:
            if not batch.open:
                return  # already left (full, or flushed)
            self.batcher.detach(batch)
        self._launch(batch)

    def _arm_timer(self, batch: PendingBatch) -> None:
        if batch.launched or batch.timer is not None:
            return
        loop = self._loop
        assert loop is not None
        batch.timer = loop.call_later(self.batch_max_delay_ms / 1000.0, self._leave_soon, batch)

    def _launch(self, batch: PendingBatch) -> None:
        """Start sending a detached batch."""
        if batch.launched:
            return
        batch.launched = True
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
        task = asyncio.ensure_future(self._send(batch))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _send(self, batch: PendingBatch) -> None:
        try:
            await self._send_and_settle(batch)
        finally:
            if batch.window_slots:
                assert self._window is not None
                self._window.release_many(batch.window_slots)

    async def _send_and_settle(self, batch: PendingBatch) -> None:
        try:
            result = await self._send_batch(batch)
        except asyncio.CancelledError:
            settle_batch(batch, cancelled=True)
            raise
        except Exception as e:  # every waiter must hear about the failure, whatever it is
            settle_batch(batch, error=e)
            return
        finally:
            self._acknowledged(batch)
            batch.drop_body()  # its futures may live long: they keep the ids, not the bytes
        self.batches_sent += 1
        self.messages_batched += batch.count
        settle_batch(batch, result)  # one lock round and one wake-up for the batch

    def _acknowledged(self, batch: PendingBatch) -> None:
        """A batch got its answer: the one filling behind it leaves now."""
        key = batch.key
        batcher = self.batcher
        with self._lock:
            batcher.held_bytes -= batch.size
            inflight = batcher.inflight_per_key
            left = inflight.get(key, 1) - 1
            if left > 0:
                inflight[key] = left
            else:
                inflight.pop(key, None)
            waiting = batcher.pending.get(key)
            if waiting is not None:
                batcher.detach(waiting)
        if waiting is not None:
            self._launch(waiting)

    async def flush_all(self, *, close: bool = False) -> None:
        """Send everything pending now and wait for the answers (shutdown: ``close``
        also refuses later ``add`` calls, which then send unbatched)."""
        batcher = self.batcher
        with self._lock:
            batcher.closed = batcher.closed or close
            leaving = [batcher.detach(b) for b in list(batcher.pending.values())]
        for batch in leaving:
            self._launch(batch)
        if self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)


class _Everything:
    """``checked_topics`` of an accumulator whose caller checks every message itself."""

    def __contains__(self, _item: object) -> bool:
        return True
