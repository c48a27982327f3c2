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

Thread model: ``add`` runs on the caller's thread (or on the loop): the pending
batches sit behind one lock, and the loop is woken once per batch, not per message.
Sending, the delay timers and settling the futures run on the client's event loop.
Sync callers wait on the future ``add`` returns, async callers get their callback
from it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from asyncio.events import _get_running_loop
from collections.abc import Awaitable, Callable
from typing import Any

from mqcore.client.loop import SiblingFuture, Slots, settle_siblings
from mqcore.client.message import Message, SendResult
from mqcore.message import Prop
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["ProduceAccumulator", "split_batch_results"]

#: per-message overhead of a batch item on the wire (TOTALSIZE..BODYLEN + PROPERTIESLENGTH)
BATCH_ITEM_OVERHEAD = 22

#: batches of one key awaiting their answer before the next one waits for an ack: two
#: keep the connection busy (one travels or is stored while the next is on its way)
MAX_INFLIGHT_BATCHES = 2

BatchKey = tuple[str, "MessageQueue | None", "str | None", bool]
#: ``send_batch(messages, queue)``, or ``send_batch(messages, queue, body=...)`` when every
#: message came with its encoded item (``add(..., item=...)``): the joined SEND_BATCH body
SendBatch = Callable[..., Awaitable[SendResult]]


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


class _Accumulation:
    __slots__ = ("key", "messages", "futures", "items", "size", "timer", "launched", "window_slots")
    timer: asyncio.Handle | None

    def __init__(self, key: BatchKey) -> None:
        self.key = key
        self.messages: list[Message] = []
        self.futures: list[Any] = []  # asyncio or concurrent futures
        #: each message's encoded SEND_BATCH item, while every message came with one
        self.items: list[bytes] | None = []
        self.size = 0
        self.timer = None  # the delay bound (loop thread only)
        self.launched = False  # handed to the send task (loop thread only)
        self.window_slots = 0  # async-window slots its messages hold, freed together when it is answered


class ProduceAccumulator:
    """Collects messages into batches and sends them with ``send_batch``.

    ``add`` may be called on the loop or on any other thread (``loop`` given): the
    pending batches sit behind one lock, so a caller's thread appends its message
    itself and the loop is woken once per *batch* (to send it, or to arm its delay
    bound), not once per message. Sending, timers and settling the futures stay on the
    loop."""

    def __init__(self, send_batch: SendBatch, *, batch_max_bytes: int, batch_max_delay_ms: int,
                 total_batch_max_bytes: int, loop: asyncio.AbstractEventLoop | None = None,
                 window: Slots | None = None) -> None:
        self._send_batch = send_batch
        self.batch_max_bytes = batch_max_bytes
        self.batch_max_delay_ms = batch_max_delay_ms
        self.total_batch_max_bytes = total_batch_max_bytes
        self._loop = loop
        #: the producer's async window: ``add(..., holds_slot=True)`` messages give theirs
        #: back together once their batch is answered, not one future callback each
        self._window = window
        self._lock = threading.Lock()  # guards _pending, _held_bytes, _inflight_per_key, _closed
        self._pending: dict[BatchKey, _Accumulation] = {}
        self._held_bytes = 0
        self._inflight: set[asyncio.Task[None]] = set()
        self._inflight_per_key: dict[BatchKey, int] = {}
        self._closed = False
        self.batches_sent = 0
        self.messages_batched = 0

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    @staticmethod
    def eligible(msg: Message) -> bool:
        """Batches cannot carry delayed, retry-topic or transactional messages."""
        props = msg.properties
        return not (props.get(Prop.DELAY) or msg.topic.startswith("%RETRY%") or props.get(Prop.TRAN_MSG))

    def add(self, msg: Message, queue: MessageQueue | None = None, *, size: int | None = None,
            future: Any = None, eligible: bool = False, holds_slot: bool = False,
            item: bytes | None = None) -> Any:
        """Queue ``msg`` (with its UNIQ_KEY already set) and return the future that will
        get its result: ``future`` if given (an asyncio or concurrent future; callers
        on other threads must pass a ``concurrent.futures.Future``), else a new asyncio
        future (on the loop only). None = send it unbatched.
        ``size`` (from ``item_size``) may be computed beforehand, and ``eligible`` says the
        caller has already checked :meth:`eligible`. ``holds_slot``: the message holds a slot
        of the ``window`` given at construction, released when its batch has been answered
        (settled, failed or cancelled); when ``add`` declines, the slot stays the caller's.
        ``item``: the message's encoded SEND_BATCH item (``encode_batch_message``, made by the
        sending thread while the message is in its cache); its length is then the size."""
        if holds_slot and self._window is None:
            raise ValueError("holds_slot needs the window given at construction")
        if item is not None:
            size = len(item)
        elif size is None:
            size = item_size(msg)
        if size >= self.batch_max_bytes or not (eligible or self.eligible(msg)):
            return None
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
        props = msg.properties  # the key: topic, queue, tag and wait-store-ok (Message.wait_store_msg_ok)
        key = (msg.topic, queue, props.get(Prop.TAGS), props.get(Prop.WAIT, "true") != "false")
        full: _Accumulation | None = None
        fresh: _Accumulation | None = None
        with self._lock:
            if self._closed or self._held_bytes + size > self.total_batch_max_bytes:
                return None
            acc = self._pending.get(key)
            if acc is not None and acc.size + size > self.batch_max_bytes:
                full = self._detach_locked(acc)  # leaves now; this message starts the next one
                acc = None
            if acc is None:
                acc = fresh = self._pending[key] = _Accumulation(key)
            acc.messages.append(msg)
            acc.futures.append(future)
            items = acc.items
            if items is not None:
                if item is None:
                    acc.items = None  # one message without: the batch is encoded when it leaves
                else:
                    items.append(item)
            acc.size += size
            if holds_slot:
                acc.window_slots += 1
            self._held_bytes += size
            if acc.size >= self.batch_max_bytes:  # (a lone message is always smaller: see above)
                full = self._detach_locked(acc)
                fresh = None
            room = fresh is not None and self._inflight_per_key.get(key, 0) < MAX_INFLIGHT_BATCHES
        if full is not None:
            self._schedule(loop, running, self._launch, full)
        if fresh is not None:
            # a new batch leaves on the loop's next turn when the key's pipeline has room
            # (everything added until then travels with it); otherwise it waits for an
            # earlier batch's answer, at the latest for the delay bound
            self._schedule(loop, running, self._leave_soon if room else self._arm_timer, fresh)
        return future

    @staticmethod
    def _schedule(loop: asyncio.AbstractEventLoop, running: Any, fn: Callable[..., Any], arg: Any) -> None:
        if running is loop:
            loop.call_soon(fn, arg)
        else:
            loop.call_soon_threadsafe(fn, arg)

    def _detach_locked(self, acc: _Accumulation) -> _Accumulation:
        """Take ``acc`` out of the pending table and count it in flight (lock held)."""
        if self._pending.get(acc.key) is acc:
            del self._pending[acc.key]
        self._inflight_per_key[acc.key] = self._inflight_per_key.get(acc.key, 0) + 1
        return acc

    # --- loop thread ---------------------------------------------------------------------------
    def _leave_soon(self, acc: _Accumulation) -> None:
        with self._lock:
            if self._pending.get(acc.key) is not acc:
                return  # already left (full, or flushed)
            self._detach_locked(acc)
        self._launch(acc)

    def _arm_timer(self, acc: _Accumulation) -> None:
        if acc.launched or acc.timer is not None:
            return
        loop = self._loop
        assert loop is not None
        acc.timer = loop.call_later(self.batch_max_delay_ms / 1000.0, self._leave_soon, acc)

    def _launch(self, acc: _Accumulation) -> None:
        """Start sending a detached batch."""
        if acc.launched:
            return
        acc.launched = True
        if acc.timer is not None:
            acc.timer.cancel()
            acc.timer = None
        task = asyncio.ensure_future(self._send(acc))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _send(self, acc: _Accumulation) -> None:
        try:
            await self._send_and_settle(acc)
        finally:
            if acc.window_slots:
                assert self._window is not None
                self._window.release_many(acc.window_slots)

    async def _send_and_settle(self, acc: _Accumulation) -> None:
        try:
            if acc.items:
                result = await self._send_batch(acc.messages, acc.key[1], body=b"".join(acc.items))
            else:
                result = await self._send_batch(acc.messages, acc.key[1])
        except asyncio.CancelledError:
            for f in acc.futures:
                if not f.done():
                    f.cancel()
            raise
        except Exception as e:  # every waiter must hear about the failure, whatever it is
            for f in acc.futures:
                if not f.done():
                    _settle(f, None, e)
            return
        finally:
            self._acknowledged(acc)
        self.batches_sent += 1
        self.messages_batched += len(acc.messages)
        results = split_batch_results(result, [msg.properties.get(Prop.UNIQ_KEY, "") for msg in acc.messages])
        futures = acc.futures
        if futures and all(type(f) is SiblingFuture for f in futures):
            settle_siblings(futures, results)  # one lock round and one wake-up for the batch
        else:
            for f, r in zip(futures, results, strict=True):
                if not f.done():
                    _settle(f, r, None)

    def _acknowledged(self, acc: _Accumulation) -> None:
        """A batch got its answer: the one filling behind it leaves now."""
        key = acc.key
        with self._lock:
            self._held_bytes -= acc.size
            left = self._inflight_per_key.get(key, 1) - 1
            if left > 0:
                self._inflight_per_key[key] = left
            else:
                self._inflight_per_key.pop(key, None)
            waiting = self._pending.get(key)
            if waiting is not None:
                self._detach_locked(waiting)
        if waiting is not None:
            self._launch(waiting)

    async def flush_all(self, *, close: bool = False) -> None:
        """Send everything pending now and wait for the answers (shutdown: ``close``
        also refuses later ``add`` calls, which then send unbatched)."""
        with self._lock:
            self._closed = self._closed or close
            leaving = [self._detach_locked(acc) for acc in list(self._pending.values())]
        for acc in leaving:
            self._launch(acc)
        if self._inflight:
            await asyncio.gather(*list(self._inflight), return_exceptions=True)


def _settle(future: Any, result: SendResult | None, error: BaseException | None) -> None:
    """Complete an asyncio or concurrent future; a caller may have cancelled it."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except (asyncio.InvalidStateError, concurrent.futures.InvalidStateError):
        log.debug("a batched send's future was cancelled before its result arrived")
