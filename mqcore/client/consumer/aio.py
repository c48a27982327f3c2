"""asyncio consumers: ``AsyncPushConsumer`` and ``AsyncLitePullConsumer``.

Both drive the threaded consumers (``PushConsumer``, ``LitePullConsumer``) underneath, so
rebalancing, pull thresholds (back-pressure), orderly queue locks, retries and offset
commits are the same code. The client's own event loop runs on its thread; the user's
loop is another one, and batches cross between them with ``run_coroutine_threadsafe``
/ ``call_soon_threadsafe``.

At-least-once rule:

* async listener: a batch counts as consumed when the listener's coroutine returns
  success (``None``, ``CONSUME_SUCCESS`` / ``SUCCESS``); raising, or being cancelled,
  counts as failure (retried later, as with the threaded consumer).
* ``async for msg in consumer``: a yielded message counts as consumed when the loop asks
  for the next one (or ``await consumer.ack()`` is called). Leaving the loop, or the
  task being cancelled, leaves the yielded-but-unacknowledged batch uncommitted: it is
  redelivered.

Back-pressure: a consume thread waits until the user's loop finished its batch, so at
most ``consume_thread_max`` batches are in flight, and the pull thresholds stop pulling
when the process queues fill up.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any, Unpack

from mqcore.client.config import LitePullConsumerConfig, PushConsumerConfig
from mqcore.client.consumer.lite_pull import LitePullConsumer
from mqcore.client.consumer.listener import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus
from mqcore.client.consumer.push import PushConsumer
from mqcore.client.message import MessageExt
from mqcore.client.settings import LitePullConsumerSettings, PushConsumerSettings
from mqcore.errors import IllegalStateError
from mqcore.remoting.bodies import MessageQueue

__all__ = ["AsyncPushConsumer", "AsyncLitePullConsumer"]

#: ``consume_message_batch_max_size`` unless given (the threaded default is 1): each batch
#: crosses from a consume thread into the user's loop and back once, so the crossing must be
#: paid by many messages (bench_async_consumer, 50,000 x 100 B: 32 gave 0.42x the threaded
#: consumer, 512 about 1.0x). A failed listener call retries its whole batch, as in Java.
ASYNC_BATCH_DEFAULT = 512

AsyncListener = Callable[[list[MessageExt], Any], Coroutine[Any, Any, Any]]


class _Cancelled(Exception):
    """The batch was not consumed (consumer closed / loop gone): redeliver it."""


class AsyncPushConsumer:
    """``async with AsyncPushConsumer(group, namesrv_addr=...) as c:``; either register an
    ``async def`` listener (``@c.listener`` / ``@c.orderly_listener``) or iterate
    ``async for msg in c``. Settings are ``PushConsumerConfig`` fields."""

    def __init__(self, consumer_group: str | None = None, *, config: PushConsumerConfig | None = None,
                 **settings: Unpack[PushConsumerSettings]) -> None:
        if config is None and "consume_message_batch_max_size" not in settings:
            # crossing into the user's loop costs a thread hand-off per listener call: move
            # batches, not single messages (async for still yields one message at a time)
            settings["consume_message_batch_max_size"] = ASYNC_BATCH_DEFAULT
        self._sync = PushConsumer(consumer_group, config=config, **settings)
        self.config = self._sync.config
        self._listener: AsyncListener | None = None
        self._orderly = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[list[MessageExt], concurrent.futures.Future[bool]]] | None = None
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._pending_lock = threading.Lock()
        self._closing = False
        self._current: tuple[list[MessageExt], concurrent.futures.Future[bool]] | None = None
        self._index = 0

    # --- configuration ----------------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*", *, expression_type: str = "TAG") -> None:
        self._sync.subscribe(topic, expression, expression_type=expression_type)

    def unsubscribe(self, topic: str) -> None:
        self._sync.unsubscribe(topic)

    def register_listener(self, listener: AsyncListener, *, orderly: bool = False) -> AsyncListener:
        """``async def listener(messages, context)``; same results as the threaded listener."""
        if not asyncio.iscoroutinefunction(listener):
            raise IllegalStateError("AsyncPushConsumer listeners are `async def` functions")
        self._listener, self._orderly = listener, orderly
        return listener

    def listener(self, fn: AsyncListener) -> AsyncListener:
        return self.register_listener(fn)

    def orderly_listener(self, fn: AsyncListener) -> AsyncListener:
        return self.register_listener(fn, orderly=True)

    def set_orderly(self, orderly: bool = True) -> None:
        """Orderly consumption for ``async for`` iteration (per-queue order, queue locks)."""
        self._orderly = orderly

    # --- lifecycle ----------------------------------------------------------------------------------------
    async def start(self) -> AsyncPushConsumer:
        self._loop = asyncio.get_running_loop()
        if self._listener is None:
            # bounded by the consume threads, which each wait for their batch's ack
            self._queue = asyncio.Queue()
        self._sync.register_listener(self._bridge, orderly=self._orderly)
        await asyncio.to_thread(self._sync.start)
        return self

    async def close(self) -> None:
        """Stop; batches not acknowledged (or whose listener did not finish) are redelivered."""
        self._closing = True
        self._fail_pending()
        await asyncio.to_thread(self._sync.shutdown)

    async def __aenter__(self) -> AsyncPushConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _fail_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = set(self._pending), set()
        for f in pending:
            if not f.done():
                f.cancel()

    def _failure(self) -> Any:
        return (ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT if self._orderly
                else ConsumeConcurrentlyStatus.RECONSUME_LATER)

    # --- the consume thread side ------------------------------------------------------------------------------
    def _bridge(self, msgs: list[MessageExt], context: Any) -> Any:
        """Runs on a consume thread: hand the batch to the user's loop and wait for the verdict."""
        loop = self._loop
        if self._closing or loop is None or loop.is_closed():
            return self._failure()
        fut: concurrent.futures.Future[Any]
        if self._listener is not None:
            fut = asyncio.run_coroutine_threadsafe(self._listener(msgs, context), loop)
        else:
            fut = concurrent.futures.Future()
            queue = self._queue
            assert queue is not None
            try:
                loop.call_soon_threadsafe(queue.put_nowait, (msgs, fut))
            except RuntimeError:  # the loop closed meanwhile
                return self._failure()
        with self._pending_lock:
            self._pending.add(fut)
        try:
            result = fut.result()
        except (concurrent.futures.CancelledError, _Cancelled):
            return self._failure()
        finally:
            with self._pending_lock:
                self._pending.discard(fut)
        if self._listener is None:
            return None if result else self._failure()
        return result  # exceptions propagate: the threaded consumer treats them as failure

    # --- iteration ------------------------------------------------------------------------------------
    def __aiter__(self) -> AsyncIterator[MessageExt]:
        return self

    async def ack(self) -> None:
        """Mark the batch of the last yielded message consumed (done implicitly by the next ``__anext__``)."""
        cur, self._current = self._current, None
        if cur is not None and not cur[1].done():
            cur[1].set_result(True)

    async def __anext__(self) -> MessageExt:
        if self._queue is None:
            raise IllegalStateError("iterate a started consumer without a listener")
        cur = self._current
        if cur is not None and self._index < len(cur[0]):
            msg = cur[0][self._index]
            self._index += 1
            return msg
        await self.ack()
        while True:
            msgs, fut = await self._queue.get()
            if fut.done() or not msgs:  # failed by close(): redelivered
                continue
            self._current, self._index = (msgs, fut), 1
            return msgs[0]

    # --- introspection --------------------------------------------------------------------------------------
    @property
    def client_id(self) -> str | None:
        return self._sync.client_id

    def assigned_queues(self, topic: str | None = None) -> list[MessageQueue]:
        return self._sync.assigned_queues(topic)

    def committed_offsets(self, topic: str | None = None) -> dict[MessageQueue, int]:
        return self._sync.committed_offsets(topic)

    def suspend(self) -> None:
        self._sync.suspend()

    def resume(self) -> None:
        self._sync.resume()


class AsyncLitePullConsumer:
    """``await poll()`` over ``LitePullConsumer``: same commit semantics (auto-commit of what
    ``poll`` returned, or ``await commit_sync()``). A ``poll`` cancelled while the pull is
    under way keeps its batch for the next ``poll`` so nothing is skipped."""

    def __init__(self, consumer_group: str | None = None, *, config: LitePullConsumerConfig | None = None,
                 **settings: Unpack[LitePullConsumerSettings]) -> None:
        self._sync = LitePullConsumer(consumer_group, config=config, **settings)
        self.config = self._sync.config
        self._inflight: asyncio.Future[list[MessageExt]] | None = None

    def subscribe(self, topic: str, expression: str = "*") -> None:
        self._sync.subscribe(topic, expression)

    def assign(self, message_queues: Iterable[MessageQueue]) -> None:
        self._sync.assign(message_queues)

    async def start(self) -> AsyncLitePullConsumer:
        await asyncio.to_thread(self._sync.start)
        return self

    async def close(self) -> None:
        await asyncio.to_thread(self._sync.shutdown)

    async def __aenter__(self) -> AsyncLitePullConsumer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def poll(self, timeout_ms: float | None = None) -> list[MessageExt]:
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(asyncio.to_thread(self._sync.poll, timeout_ms))
        # shield: a cancelled poll leaves the batch in _inflight for the next call
        msgs = await asyncio.shield(self._inflight)
        self._inflight = None
        return msgs

    async def commit_sync(self, offsets: dict[MessageQueue, int] | None = None) -> None:
        await asyncio.to_thread(self._sync.commit_sync, offsets)

    async def committed(self, mq: MessageQueue) -> int:
        return await asyncio.to_thread(self._sync.committed, mq)

    async def seek(self, mq: MessageQueue, offset: int) -> None:
        await asyncio.to_thread(self._sync.seek, mq, offset)

    def pause(self, mqs: Iterable[MessageQueue]) -> None:
        self._sync.pause(mqs)

    def resume(self, mqs: Iterable[MessageQueue]) -> None:
        self._sync.resume(mqs)

    def assignment(self) -> set[MessageQueue]:
        return self._sync.assignment()

    @property
    def client_id(self) -> str | None:
        return self._sync.client_id
