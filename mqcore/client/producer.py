"""``Producer``: the public producer (RocketMQ's ``DefaultMQProducer``).

::

    with Producer("order-producer", namesrv_addr="127.0.0.1:9876") as producer:
        result = producer.send(Message("Orders", b"...", tags="created", keys=["o-1"]))
        future = producer.send_async(Message("Orders", b"..."), callback=on_done)
        producer.send(msg, selector=select_by_hash, arg=order_id)   # ordered per order id
        producer.send_batch([Message("Orders", b"1"), Message("Orders", b"2")])
        reply = producer.request(Message("Prices", b"EURUSD"), timeout_ms=3000)  # request-reply

``send`` runs on the caller's thread over a blocking socket of its own (only a route
lookup goes through the client's event-loop thread); the other blocking methods run
on that loop thread and wait. All work from any thread (scripts, web workers,
consumer listeners). ``send_async``
returns a ``concurrent.futures.Future``; its ``callback(result, error)`` runs on a
dedicated callback thread, in completion order. ``asend`` is the asyncio variant.

Invalid messages (bad topic, empty or oversized body, bad delay level) raise
:class:`~mqcore.errors.IllegalArgumentError` before anything is sent; network
failures raise :class:`~mqcore.errors.RemotingError` subclasses and broker refusals
:class:`~mqcore.errors.BrokerError` - both tell ``retriable``.

Thread model: every public method may be called from any thread except the client's
event-loop thread (where callbacks of futures added with ``add_done_callback``
run: use the ``callback`` argument instead).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import enum
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Unpack, cast

from mqcore._compat import default_kernels, default_wire_client_kernels
from mqcore.client.accumulator import PendingBatch, ProduceAccumulator
from mqcore.client.config import ProducerConfig, build
from mqcore.client.instance import ClientInstance
from mqcore.client.loop import BatchFuture, BurstSubmitter, CallbackThread, SiblingFuture
from mqcore.client.message import Message, MessageExt, SendResult
from mqcore.client.namespace import Namespace
from mqcore.client.producer_impl import CommunicationMode, ProducerImpl
from mqcore.client.request import create_reply_message
from mqcore.client.selector import MessageQueueSelector
from mqcore.client.settings import ProducerSettings
from mqcore.client.trace import TraceDispatcher
from mqcore.clock import Clock, system_clock_ms
from mqcore.errors import ClosedError, IllegalArgumentError, IllegalStateError, MQError, RemotingTimeoutError
from mqcore.kernel_api import WindowSlotsApi
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["Producer", "RequestCallback", "SendCallback"]

SendCallback = Callable[["SendResult | None", "BaseException | None"], Any]
RequestCallback = Callable[["MessageExt | None", "BaseException | None"], Any]

_SYNC, _ASYNC, _ONEWAY = CommunicationMode.SYNC, CommunicationMode.ASYNC, CommunicationMode.ONEWAY
_LOOP_GUARD_S = 5.0  # extra wait beyond the send timeout before suspecting a stuck loop


class _State(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    SHUTDOWN = "shutdown"


#: ``_State.RUNNING`` read once: an enum member read through its class costs ~80 ns (Python
#: 3.11), paid by every ``send``
_SEND_RUNNING = _State.RUNNING


class Producer:
    """Sends messages; see the module docstring. Settings are ``ProducerConfig``
    fields given as keyword arguments (``send_msg_timeout_ms=5000``) or as ``config``."""

    def __init__(self, producer_group: str | None = None, *, config: ProducerConfig | None = None,
                 clock: Clock = system_clock_ms, **settings: Unpack[ProducerSettings]) -> None:
        if producer_group is not None:
            cast("dict[str, object]", settings)["producer_group"] = producer_group  # the config's field: the TypedDict leaves the group out (it is the first parameter)
        self.config: ProducerConfig = build(ProducerConfig, config, settings)
        #: the client's namespace (None without one): every entry point below names topics,
        #: queues and the group under it, and results without it (mqcore.client.namespace)
        self._ns: Namespace | None = None
        if self.config.namespace:
            self._ns = Namespace(self.config.namespace)
            self.config = dataclasses.replace(self.config, producer_group=self._ns.wrap(self.config.producer_group))
        self._instance = ClientInstance(self.config, clock=clock)
        self._impl = ProducerImpl(self.config, self._instance)
        # the kernels' window: the auto-batching kernel takes its slots in C (same family as
        # the accumulator's batcher, default_wire_client_kernels())
        self._async_slots = default_wire_client_kernels().WindowSlots(self.config.max_async_inflight)
        self._kernels = default_kernels()
        self._accumulator: ProduceAccumulator | None = None
        self._batcher: Any = None  # the accumulator's kernel: send_async's per-message step
        if self.config.auto_batch:
            self._accumulator = ProduceAccumulator(
                # a batch is one message to the broker: never larger than the producer lets one be
                self._send_accumulated,
                batch_max_bytes=min(self.config.batch_max_bytes, self.config.max_message_size_bytes),
                batch_max_delay_ms=self.config.batch_max_delay_ms,
                total_batch_max_bytes=self.config.total_batch_max_bytes, loop=self._instance.loop_thread.loop,
                window=self._async_slots, ids=self._instance.uniq_ids, checked_topics=self._impl.checked_topics,
                max_message_bytes=self.config.max_message_size_bytes)
            self._batcher = self._accumulator.batcher
        self._callbacks: CallbackThread | None = None
        self._submitter = BurstSubmitter(self._instance.loop_thread)
        self._state = _State.CREATED
        self._tracer: TraceDispatcher | None = None
        if self.config.enable_msg_trace:
            self._tracer = TraceDispatcher(self.config.namesrv_addr, self.config.trace_topic,
                                           self.config.producer_group, untraced_producer, self._store_host,
                                           self.config.max_async_inflight)

    # --- lifecycle --------------------------------------------------------------------------------
    def start(self) -> Producer:
        if self._state is _State.RUNNING:
            return self
        if self._state is _State.SHUTDOWN:
            raise ClosedError("this producer was shut down; create a new one")
        self._instance.register_producer(self._impl)
        self._instance.start()
        self._callbacks = CallbackThread("mqcore-send-callback")
        if self._tracer is not None:
            self._tracer.start()
        self._state = _State.RUNNING
        log.info("producer %s started as %s", self.config.producer_group, self.client_id)
        return self

    def shutdown(self) -> None:
        """Send what auto-batching still holds, unregister from the brokers, close."""
        if self._state is not _State.RUNNING:
            self._state = _State.SHUTDOWN
            return
        self._state = _State.SHUTDOWN
        try:
            self._instance.loop_thread.run(self._shutdown_async(), timeout_s=30)
        except MQError as e:
            log.warning("producer %s: clean shutdown failed: %s", self.config.producer_group, e)
        self._instance.shutdown()
        if self._callbacks is not None:
            self._callbacks.shutdown()
        if self._tracer is not None:
            self._tracer.shutdown()
        log.info("producer %s shut down", self.config.producer_group)

    async def _shutdown_async(self) -> None:
        if self._accumulator is not None:
            await self._accumulator.flush_all(close=True)
        self._instance.unregister_producer(self._impl.group)
        await self._instance.unregister_client(self._impl.group, None)

    def __enter__(self) -> Producer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @property
    def client_id(self) -> str:
        return self._instance.client_id

    @property
    def instance(self) -> ClientInstance:
        return self._instance

    def _check_running(self) -> None:
        if self._state is not _State.RUNNING:
            raise IllegalStateError(
                f"producer {self.config.producer_group} is {self._state.value}; call start() "
                "(or use 'with Producer(...) as p:') before sending")

    def _loop_timeout(self, timeout_ms: float | None) -> float:
        return (timeout_ms or self.config.send_msg_timeout_ms) / 1000.0 + _LOOP_GUARD_S

    def _check_blocking_allowed(self) -> None:
        """Blocking on the loop thread would deadlock: refuse before sending anything."""
        if self._instance.loop_thread.in_loop_thread():
            raise IllegalStateError(
                "a blocking send was called on the client's event-loop thread (e.g. from a future's "
                "done-callback); use send_async/asend or the callback argument instead")

    def _wait(self, future: concurrent.futures.Future[Any], timeout_ms: float | None) -> Any:
        """Block on a submitted send."""
        try:
            return future.result(self._loop_timeout(timeout_ms))
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RemotingTimeoutError("the client's event loop did not complete the send in time") from None

    # --- sending -------------------------------------------------------------------------------------
    def send(self, msg: Message, *, queue: MessageQueue | None = None, selector: MessageQueueSelector | None = None,
             arg: Any = None, timeout_ms: float | None = None) -> SendResult:
        """Send and wait for the broker's answer (retrying on another broker when
        allowed). ``queue`` or ``selector(queues, msg, arg)`` pins the queue."""
        ns = self._ns
        if ns is not None:
            msg.topic = ns.wrap(msg.topic)  # as Java's send does, on the caller's message
            queue = ns.queue(queue)
            if self._tracer is not None:
                return ns.result(self._send_traced(msg, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms))
            return ns.result(self._send(msg, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms))
        if self._tracer is not None:
            return self._send_traced(msg, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms)
        return self._send(msg, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms)

    def _send_traced(self, msg: Message, **kw: Any) -> SendResult:
        tracer = self._tracer
        assert tracer is not None
        acc = self._accumulator
        if acc is not None and kw.get("selector") is None and acc.eligible(msg):
            return self._send(msg, **kw)  # it joins a batch (as _send decides): traced with its batch
        begin = int(time.time() * 1000)
        try:
            result = self._send(msg, **kw)
        except Exception as e:
            tracer.trace_send(msg, None, begin, e)
            raise
        tracer.trace_send(msg, result, begin, None)
        return result

    def _store_host(self, broker_name: str) -> str:
        """The master address a send went to (the Pub record's storeHost)."""
        return self._instance.broker_addr_table.get(broker_name, {}).get(0, "")

    def _send(self, msg: Message, *, queue: MessageQueue | None, selector: MessageQueueSelector | None,
              arg: Any, timeout_ms: float | None) -> SendResult:
        if (queue is None and selector is None and self._accumulator is None and self._state is _SEND_RUNNING
                and type(msg) is Message and not self._instance.loop_thread.in_loop_thread()):
            # the usual message in few steps (validated topic, cached route): see send_plain_blocking
            result = self._impl.send_plain_blocking(msg, timeout_ms)
            if result is not None:
                return result
        self._check_running()
        self._check_blocking_allowed()
        acc = self._accumulator
        if acc is not None and selector is None and acc.eligible(msg):  # joins a batch
            sent: SendResult | None = self._wait(self._submit(msg, _SYNC, queue, None, None, timeout_ms, None),
                                                 timeout_ms)
            assert sent is not None
            return sent
        # on this thread over a blocking socket: no hand-off to the loop thread and back
        return self._impl.send_blocking(self._impl.prepare(msg), queue=queue, selector=selector, selector_msg=msg,
                                        arg=arg, timeout_ms=timeout_ms)

    def send_async(self, msg: Message, callback: SendCallback | None = None, *, queue: MessageQueue | None = None,
                   selector: MessageQueueSelector | None = None, arg: Any = None,
                   timeout_ms: float | None = None) -> concurrent.futures.Future[SendResult]:
        """Send without waiting. ``callback(result, None)`` or ``callback(None, error)``
        runs on the callback thread; the returned future completes first. Blocks while
        ``max_async_inflight`` async sends are unanswered (back-pressure)."""
        ns = self._ns
        if ns is not None:
            msg.topic = ns.wrap(msg.topic)
            inner = self._send_async_entry(msg, None, queue=ns.queue(queue), selector=selector, arg=arg,
                                           timeout_ms=timeout_ms)
            return self._user_future(ns, inner, callback)
        return self._send_async_entry(msg, callback, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms)

    def _user_future(self, ns: Namespace, inner: concurrent.futures.Future[SendResult],
                     callback: SendCallback | None) -> concurrent.futures.Future[SendResult]:
        """The future a namespaced ``send_async`` returns: ``inner``'s outcome with the result's
        queue named as the user knows it; ``callback`` runs on the callback thread after it."""
        outer: concurrent.futures.Future[SendResult] = self._submitter.new_future()

        def relay(f: concurrent.futures.Future[SendResult]) -> None:
            if outer.done():  # cancelled by its caller: nothing to hand over
                return
            if f.cancelled():
                outer.cancel()
            elif f.exception() is not None:
                outer.set_exception(f.exception())
            else:
                outer.set_result(ns.result(f.result()))
            if callback is not None:
                runner = self._callbacks
                assert runner is not None
                runner.submit(_run_callback, callback, outer)
        inner.add_done_callback(relay)
        return outer

    def _send_async_entry(self, msg: Message, callback: SendCallback | None, *, queue: MessageQueue | None,
                          selector: MessageQueueSelector | None, arg: Any,
                          timeout_ms: float | None) -> concurrent.futures.Future[SendResult]:
        if self._tracer is not None:
            # traced with its batch (_send_accumulated) when it joins one; else by its completion hook
            return self._send_async(msg, callback, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms,
                                    trace_begin_ms=int(time.time() * 1000))
        return self._send_async(msg, callback, queue=queue, selector=selector, arg=arg, timeout_ms=timeout_ms)

    def _send_async(self, msg: Message, callback: SendCallback | None, *, queue: MessageQueue | None,
                    selector: MessageQueueSelector | None, arg: Any, timeout_ms: float | None,
                    trace_begin_ms: int | None = None) -> concurrent.futures.Future[SendResult]:
        batcher = self._batcher
        if (callback is None and selector is None and batcher is not None and type(msg) is Message
                and self._state is _SEND_RUNNING):
            # auto-batched: the kernel checks, stamps and encodes the message into its batch,
            # takes its window slot and makes its future, in one call (an int: see _join_batch)
            future = batcher.add(msg, queue, None, 1)
            if type(future) is BatchFuture:
                return future
            if future is not None:
                future = self._join_batch(batcher, msg, queue, timeout_ms, future)
                if future is not None:
                    return future
        if self._state is not _State.RUNNING:
            self._check_running()
        # one completion hook per send: frees the slot, then queues the callback
        hook = self._release_async_slot if callback is None else functools.partial(self._async_done, callback)
        impl = self._impl
        target = (impl.plain_target(msg) if queue is None and selector is None and batcher is None
                  and type(msg) is Message else None)
        if target is None:
            return self._submit(msg, _ASYNC, queue, selector, arg, timeout_ms, hook, self._async_slots,
                                trace_begin_ms)
        # the usual message, one request each (auto_batch off): see ProducerImpl.start_plain_async
        slots = self._async_slots
        if not slots.acquire(False):
            self._wait_for_async_slot(timeout_ms)
        try:
            future = self._submitter.new_future(hook)
            if trace_begin_ms is not None:
                self._trace_pending(msg, future, trace_begin_ms)
            impl.start_plain_async(msg, target, timeout_ms, future, self._submitter.submit)
        except BaseException:
            slots.release()
            raise
        return future

    def _join_batch(self, batcher: Any, msg: Message, queue: MessageQueue | None, timeout_ms: float | None,
                    answer: int) -> BatchFuture | None:
        """What ``AutoBatcher.add`` asked for: ``JOIN_CHECK``, the message is checked
        (``check_message`` raises for a bad one) before it joins; ``JOIN_WAIT``, the window is
        full, so this thread waits for a slot (not the loop thread). None, with nothing
        taken, when the message cannot join a batch: the general path handles it."""
        acc = self._accumulator
        assert acc is not None
        if answer == acc.JOIN_CHECK:
            self._impl.check(msg)
            joined = batcher.add(msg, queue, None, 1, True)  # a future, None, or an answer as above
            if joined is None or type(joined) is BatchFuture:
                return joined
            answer = joined
        if answer != acc.JOIN_WAIT:
            raise AssertionError(f"AutoBatcher.add answered {answer!r}")
        self._wait_for_async_slot(timeout_ms)
        try:
            future = batcher.add(msg, queue, None, 2, True)
        except BaseException:
            self._async_slots.release()
            raise
        if future is None:
            self._async_slots.release()  # declined (over the memory budget, closing): the general path
        return future  # type: ignore[no-any-return]

    def _wait_for_async_slot(self, timeout_ms: float | None) -> None:
        if self._instance.loop_thread.in_loop_thread():  # never block the loop itself
            raise IllegalStateError("max_async_inflight async sends are unanswered; cannot wait for a slot "
                                    "on the client's event-loop thread")
        if not self._async_slots.acquire(timeout=self._loop_timeout(timeout_ms)):
            raise RemotingTimeoutError(f"{self.config.max_async_inflight} async sends are still unanswered; "
                                       "the broker is not keeping up (max_async_inflight)")

    def _trace_pending(self, msg: Message, future: SiblingFuture, begin_ms: int) -> None:
        """Mark an async send about to start as traced: its completion hook writes its Pub
        record. No per-send callback object: one made per send (a partial, a closure) was the
        largest part of tracing's cost for a pipelining producer (bench/bench_trace.py)."""
        future.traced = (msg, begin_ms)

    def _release_async_slot(self, future: SiblingFuture) -> None:
        self._async_slots.release()
        traced = future.traced
        if traced is not None:
            tracer = self._tracer
            if tracer is not None:
                try:
                    tracer.trace_settled(traced[0], future, traced[1])
                except Exception:  # noqa: BLE001 - a trace never fails the traced send
                    log.exception("trace record of an async send not written")

    def _async_done(self, callback: SendCallback, future: SiblingFuture) -> None:
        self._release_async_slot(future)
        runner = self._callbacks
        assert runner is not None
        runner.submit(_run_callback, callback, future)

    async def asend(self, msg: Message, **kwargs: Any) -> SendResult:
        """``await producer.asend(msg)`` from any asyncio loop (runs on the client's loop);
        under back-pressure it waits without blocking the caller's loop."""
        ns = self._ns
        if ns is not None:  # the namespaced send_async's future carries the user's names
            return await asyncio.wrap_future(self.send_async(msg, **kwargs))
        batcher = self._batcher
        if (batcher is not None and type(msg) is Message and self._state is _SEND_RUNNING
                and not kwargs.keys() - {"queue"}):
            future = await self._join_batch_async(batcher, msg, kwargs.get("queue"))
            if future is not None:
                return await future
        if not self._async_slots.acquire(blocking=False):
            await asyncio.get_running_loop().run_in_executor(None, self._wait_for_slot)
        else:
            self._async_slots.release()
        return await asyncio.wrap_future(self.send_async(msg, **kwargs))

    async def _join_batch_async(self, batcher: Any, msg: Message,
                                queue: MessageQueue | None) -> asyncio.Future[SendResult] | None:
        """``asend``'s auto-batched step: the same kernel call as ``send_async`` with an
        asyncio future of the caller's loop, which the batch settles with one wake-up of that
        loop per batch (``settle_batch``); a full window is waited for on an executor thread.
        None, with nothing taken, when the message cannot join a batch."""
        acc = self._accumulator
        assert acc is not None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[SendResult] = loop.create_future()
        answer = batcher.add(msg, queue, future, 1)
        if answer == acc.JOIN_CHECK:
            self._impl.check(msg)
            answer = batcher.add(msg, queue, future, 1, True)
        if answer == acc.JOIN_WAIT:
            await loop.run_in_executor(None, self._wait_for_async_slot, None)
            try:
                answer = batcher.add(msg, queue, future, 2, True)
            except BaseException:
                self._async_slots.release()
                raise
            if answer is None:
                self._async_slots.release()
        return future if answer is future else None

    def _wait_for_slot(self) -> None:
        if self._async_slots.acquire(timeout=self._loop_timeout(None)):
            self._async_slots.release()

    def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None,
                    selector: MessageQueueSelector | None = None, arg: Any = None) -> None:
        """Fire and forget: returns once the request is written; no answer, no retry."""
        if self._ns is not None:
            msg.topic = self._ns.wrap(msg.topic)
            queue = self._ns.queue(queue)
        self._check_running()
        self._check_blocking_allowed()
        self._wait(self._submit(msg, _ONEWAY, queue, selector, arg, None, None), None)

    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None,
                   timeout_ms: float | None = None) -> SendResult:
        """One SEND_BATCH_MESSAGE for messages of one topic. ``result.msg_ids`` /
        ``result.offset_msg_ids`` list each message's ids in order."""
        self._check_running()
        ns = self._ns
        if ns is not None:
            for m in messages:
                m.topic = ns.wrap(m.topic)
            queue = ns.queue(queue)
        prepared = self._impl.prepare_batch(messages)
        coro = self._impl.send(prepared, _SYNC, queue=queue, timeout_ms=timeout_ms)
        result = self._instance.loop_thread.run(coro, self._loop_timeout(timeout_ms))
        assert result is not None
        return result if ns is None else ns.result(result)

    # --- request-reply ---------------------------------------------------------------------------
    def request(self, msg: Message, timeout_ms: float | None = None, *, queue: MessageQueue | None = None,
                selector: MessageQueueSelector | None = None, arg: Any = None) -> MessageExt:
        """Send ``msg`` as a request and wait for the reply a consumer sends with
        :meth:`send_reply` (or any RocketMQ client's reply), within ``timeout_ms`` (default
        ``send_msg_timeout_ms``) for both. Returns the reply; raises
        :class:`~mqcore.client.request.RequestTimeoutError` when none came in time, the send's
        error when the request could not be sent (Java's ``DefaultMQProducer.request``).
        ``queue`` or ``selector(queues, msg, arg)`` pins the request's queue, as for ``send``."""
        self._check_running()
        self._check_blocking_allowed()
        if self._ns is not None:
            msg.topic = self._ns.wrap(msg.topic)
            queue = self._ns.queue(queue)
        timeout = self._request_timeout(timeout_ms)
        coro = self._impl.request(msg, timeout, queue=queue, selector=selector, arg=arg)
        return self._instance.loop_thread.run(coro, self._loop_timeout(timeout))

    async def arequest(self, msg: Message, timeout_ms: float | None = None, **kwargs: Any) -> MessageExt:
        """``await producer.arequest(msg, timeout_ms)``: :meth:`request` from any asyncio loop."""
        return await asyncio.wrap_future(self.request_async(msg, timeout_ms=timeout_ms, **kwargs))

    def request_async(self, msg: Message, callback: RequestCallback | None = None, *, timeout_ms: float | None = None,
                      queue: MessageQueue | None = None, selector: MessageQueueSelector | None = None,
                      arg: Any = None) -> concurrent.futures.Future[MessageExt]:
        """:meth:`request` without waiting (Java's ``request(msg, RequestCallback, timeout)``):
        a future of the reply; ``callback(reply, None)`` or ``callback(None, error)`` runs on
        the callback thread once it is settled."""
        self._check_running()
        if self._ns is not None:
            msg.topic = self._ns.wrap(msg.topic)
            queue = self._ns.queue(queue)
        timeout = self._request_timeout(timeout_ms)
        future = self._instance.loop_thread.submit(
            self._impl.request(msg, timeout, queue=queue, selector=selector, arg=arg))
        if callback is not None:
            runner = self._callbacks
            assert runner is not None
            future.add_done_callback(lambda f: runner.submit(_run_request_callback, callback, f))
        return future

    def send_reply(self, request: Message, body: bytes | bytearray | memoryview | str, *,
                   timeout_ms: float | None = None) -> SendResult:
        """Answer a received request (a consumed message with ``REPLY_TO_CLIENT``): sends
        :func:`~mqcore.client.request.create_reply_message` ``(request, body)``; the broker
        pushes it to the requester. Raises BrokerError when the requester is gone or did not
        take it (SYSTEM_ERROR, as from a Java broker)."""
        return self.send(create_reply_message(request, body), timeout_ms=timeout_ms)

    async def asend_reply(self, request: Message, body: bytes | bytearray | memoryview | str) -> SendResult:
        """:meth:`send_reply` from any asyncio loop."""
        return await self.asend(create_reply_message(request, body))

    def _request_timeout(self, timeout_ms: float | None) -> float:
        timeout = self.config.send_msg_timeout_ms if timeout_ms is None else timeout_ms
        if not timeout > 0:
            raise IllegalArgumentError(f"a request's timeout_ms must be positive, got {timeout_ms!r}")
        return timeout

    def fetch_publish_message_queues(self, topic: str) -> list[MessageQueue]:
        """The writable queues of ``topic`` (for choosing a queue yourself; with a namespace,
        named as the broker knows them, as Java's)."""
        self._check_running()
        if self._ns is not None:
            topic = self._ns.wrap(topic)
        return self._instance.loop_thread.run(self._impl.fetch_publish_queues(topic), self._loop_timeout(None))

    # --- internals -----------------------------------------------------------------------------------
    def _submit(self, msg: Message, mode: CommunicationMode, queue: MessageQueue | None,
                selector: MessageQueueSelector | None, arg: Any, timeout_ms: float | None,
                hook: Callable[[Any], Any] | None, slots: WindowSlotsApi | None = None,
                trace_begin_ms: int | None = None) -> concurrent.futures.Future[Any]:
        """Validate and prepare ``msg`` on the caller's thread, take a window slot
        (``slots``), and start the send: an auto-batched message joins its batch right
        here (the loop is woken once per batch, not per message); any other send is
        handed to the loop. ``hook`` runs first when the returned future completes."""
        acc = self._accumulator
        batched = acc is not None and selector is None and mode is not _ONEWAY and acc.eligible(msg)
        if batched:
            self._impl.check(msg)  # traced with its batch (_send_accumulated)
        else:
            prepared = self._impl.prepare(msg)
        if slots is not None and not slots.acquire(False):  # the window is full: wait (not on the loop thread)
            self._wait_for_async_slot(timeout_ms)
        try:
            future = self._submitter.new_future(hook)
            if batched:
                assert acc is not None
                if acc.add(msg, queue, future=future) is not None:
                    return future
                # declined (over the memory budget): alone, through the loop
                prepared = self._impl.prepare(msg)
            if trace_begin_ms is not None:
                self._trace_pending(msg, future, trace_begin_ms)
            self._submitter.submit(lambda _future: self._impl.send(
                prepared, mode, queue=queue, selector=selector, selector_msg=msg, arg=arg, timeout_ms=timeout_ms),
                future=future)
        except BaseException:
            if slots is not None:
                slots.release()
            raise
        return future

    async def _send_accumulated(self, batch: PendingBatch) -> SendResult:
        prepared = self._impl.prepare_joined(batch)
        tracer = self._tracer
        begin = int(time.time() * 1000) if tracer is not None else 0
        result = await self._impl.send(prepared, _SYNC, queue=batch.queue)
        assert result is not None
        if tracer is not None:  # one Pub record per message of the batch, built by the dispatcher
            tracer.trace_batch(batch.topic, batch.tags, list(batch.uniq_ids), result, begin)
        return result

    def __repr__(self) -> str:
        return f"Producer(group={self.config.producer_group!r}, client_id={self.client_id!r}, {self._state.value})"


def _run_callback(callback: SendCallback, future: Any) -> None:
    try:
        result, error = future.settled_outcome()  # done before the callback was queued
        callback(None, error) if error is not None else callback(result, None)
    except Exception:  # user code: report, keep the callback thread alive
        log.exception("send callback %r raised", callback)


def _run_request_callback(callback: RequestCallback, future: concurrent.futures.Future[MessageExt]) -> None:
    try:
        error = None if future.cancelled() else future.exception()
        if future.cancelled():
            callback(None, concurrent.futures.CancelledError())
        elif error is not None:
            callback(None, error)
        else:
            callback(future.result(), None)
    except Exception:  # user code: report, keep the callback thread alive
        log.exception("request callback %r raised", callback)


#: trace messages a dispatcher keeps unanswered at most (each holds up to 100 records)
TRACE_IN_FLIGHT = 64


def untraced_producer(group: str, namesrv_addr: str) -> Producer:
    """The producer a trace dispatcher sends its records with. Its bodies (100 records, ~16
    KiB) are compressed at zlib level 1: 30 us a body where level 5 (the default, and
    Apache's trace producer's) takes 400 us, ~4 us of every traced send, for 9 % more bytes;
    readers see the same compressed flag either way."""
    return Producer(group, namesrv_addr=namesrv_addr, compress_level=1, max_async_inflight=TRACE_IN_FLIGHT)
