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

Thread model: everything runs on the client's event loop. Sync callers wait on the
future ``add`` returns (through the loop thread), async callers get their callback
from it.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mqcore.client.message import Message, SendResult
from mqcore.message import Prop
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["ProduceAccumulator", "split_batch_result"]

#: per-message overhead of a batch item on the wire (TOTALSIZE..BODYLEN + PROPERTIESLENGTH)
BATCH_ITEM_OVERHEAD = 22

#: batches of one key awaiting their answer before the next one waits for an ack: two
#: keep the connection busy (one travels or is stored while the next is on its way)
MAX_INFLIGHT_BATCHES = 2

BatchKey = tuple[str, "MessageQueue | None", "str | None", bool]
SendBatch = Callable[[list[Message], "MessageQueue | None"], Awaitable[SendResult]]


def split_batch_result(batch: SendResult, index: int, uniq_id: str,
                       offset_ids: list[str] | None = None) -> SendResult:
    """The ``index``-th message's own result out of a batch result (pass the split
    ``offset_ids`` when calling this for every message of a batch)."""
    ids = batch.offset_msg_ids if offset_ids is None else offset_ids
    return SendResult(batch.status, uniq_id, batch.message_queue, batch.queue_offset + index,
                      ids[index] if index < len(ids) else batch.offset_msg_id, batch.transaction_id,
                      batch.region_id, batch.trace_on)


def item_size(msg: Message) -> int:
    """Bytes a message adds to a batch body (approximately: properties as UTF-8)."""
    props = msg.properties
    return BATCH_ITEM_OVERHEAD + len(msg.body) + sum(map(len, props)) + sum(map(len, props.values())) + 2 * len(props)


class _Accumulation:
    __slots__ = ("key", "messages", "futures", "size", "timer")
    timer: asyncio.Handle | None

    def __init__(self, key: BatchKey) -> None:
        self.key = key
        self.messages: list[Message] = []
        self.futures: list[Any] = []  # asyncio or concurrent futures
        self.size = 0
        self.timer = None  # the call that sends it: next loop turn, or the delay bound


class ProduceAccumulator:
    """Collects messages into batches and sends them with ``send_batch``."""

    def __init__(self, send_batch: SendBatch, *, batch_max_bytes: int, batch_max_delay_ms: int,
                 total_batch_max_bytes: int) -> None:
        self._send_batch = send_batch
        self.batch_max_bytes = batch_max_bytes
        self.batch_max_delay_ms = batch_max_delay_ms
        self.total_batch_max_bytes = total_batch_max_bytes
        self._pending: dict[BatchKey, _Accumulation] = {}
        self._held_bytes = 0
        self._inflight: set[asyncio.Task[None]] = set()
        self._inflight_per_key: dict[BatchKey, int] = {}
        self.batches_sent = 0
        self.messages_batched = 0

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    @staticmethod
    def key_of(msg: Message, queue: MessageQueue | None) -> BatchKey:
        return (msg.topic, queue, msg.properties.get(Prop.TAGS), msg.wait_store_msg_ok)

    @staticmethod
    def eligible(msg: Message) -> bool:
        """Batches cannot carry delayed, retry-topic or transactional messages."""
        props = msg.properties
        return not (props.get(Prop.DELAY) or msg.topic.startswith("%RETRY%") or props.get(Prop.TRAN_MSG))

    def add(self, msg: Message, queue: MessageQueue | None = None, *, size: int | None = None,
            future: Any = None) -> Any:
        """Queue ``msg`` (with its UNIQ_KEY already set) and return the future that will
        get its result: ``future`` if given (an asyncio or concurrent future; callers
        on other threads pass a ``concurrent.futures.Future`` so no loop callback is
        needed per message), else a new asyncio future. None = send it unbatched.
        ``size`` (from ``item_size``) may be computed beforehand on another thread."""
        if size is None:
            size = item_size(msg)
        if size >= self.batch_max_bytes or not self.eligible(msg):
            return None
        if self._held_bytes + size > self.total_batch_max_bytes:
            return None
        key = self.key_of(msg, queue)
        acc = self._pending.get(key)
        if acc is not None and acc.size + size > self.batch_max_bytes:
            self._flush(key)
            acc = None
        loop = asyncio.get_running_loop()
        if acc is None:
            acc = self._pending[key] = _Accumulation(key)
            if self._inflight_per_key.get(key, 0) < MAX_INFLIGHT_BATCHES:
                acc.timer = loop.call_soon(self._flush, key)
            else:  # leaves when an earlier batch is acknowledged, at the latest after the bound
                acc.timer = loop.call_later(self.batch_max_delay_ms / 1000.0, self._flush, key)
        if future is None:
            future = loop.create_future()
        acc.messages.append(msg)
        acc.futures.append(future)
        acc.size += size
        self._held_bytes += size
        if acc.size >= self.batch_max_bytes:
            self._flush(key)
        return future

    def _flush(self, key: BatchKey) -> None:
        acc = self._pending.pop(key, None)
        if acc is None:
            return
        if acc.timer is not None:
            acc.timer.cancel()
        self._inflight_per_key[key] = self._inflight_per_key.get(key, 0) + 1
        task = asyncio.ensure_future(self._send(acc))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _send(self, acc: _Accumulation) -> None:
        try:
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
            self._held_bytes -= acc.size
            self._acknowledged(acc.key)
        self.batches_sent += 1
        self.messages_batched += len(acc.messages)
        offset_ids = result.offset_msg_ids
        for i, (msg, f) in enumerate(zip(acc.messages, acc.futures, strict=True)):
            if not f.done():
                _settle(f, split_batch_result(result, i, msg.properties.get(Prop.UNIQ_KEY, ""), offset_ids), None)

    def _acknowledged(self, key: BatchKey) -> None:
        """A batch of ``key`` got its answer: the one filling behind it leaves now."""
        left = self._inflight_per_key.get(key, 1) - 1
        if left > 0:
            self._inflight_per_key[key] = left
        else:
            self._inflight_per_key.pop(key, None)
        if key in self._pending:
            self._flush(key)

    async def flush_all(self) -> None:
        """Send everything pending now and wait for the answers (shutdown)."""
        for key in list(self._pending):
            self._flush(key)
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
