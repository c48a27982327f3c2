"""``PushConsumer``: messages delivered to a listener (``DefaultMQPushConsumer``).

::

    consumer = PushConsumer("order-consumers", namesrv_addr="127.0.0.1:9876")
    consumer.subscribe("Orders", "created || paid")

    @consumer.listener                      # or consumer.register_listener(fn, orderly=True)
    def handle(messages, context):
        for m in messages:
            process(m)                      # raise -> retried later; return None -> done

    with consumer:                          # start() ... shutdown()
        ...

Clustering consumers of one group share the queues (rebalanced every 20 s and when
the group changes); broadcasting ones each get everything. Failed messages come back
through ``%RETRY%<group>`` with growing delays and end in ``%DLQ%<group>`` after
``max_reconsume_times`` (16). Orderly listeners (``orderly=True``) see each queue's
messages one batch at a time, in order, while this consumer holds the queue's lock.

Thread model: configure (``subscribe``, ``register_listener``) before ``start``; the
listener runs on the consume thread pool (``consume_thread_max`` threads); any
thread may call ``shutdown``, ``suspend``, ``resume``.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar, Unpack, cast

from mqcore.client.config import MessageModel, PushConsumerConfig, build
from mqcore.client.consumer.push_impl import PushConsumerImpl
from mqcore.client.instance import ClientInstance
from mqcore.client.namespace import Namespace
from mqcore.client.validators import check_topic
from mqcore.client.settings import PushConsumerSettings
from mqcore.client.producer import untraced_producer
from mqcore.client.trace import TraceDispatcher
from mqcore.clock import Clock, system_clock_ms
from mqcore.errors import ClosedError, IllegalStateError, MQError
from mqcore.message import retry_topic
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["PushConsumer"]

F = TypeVar("F", bound=Callable[..., Any])


class _State(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    SHUTDOWN = "shutdown"


class PushConsumer:
    """See the module docstring. Settings are ``PushConsumerConfig`` fields given as
    keyword arguments (``message_model="BROADCASTING"``, ``consume_from_where="first"``)."""

    def __init__(self, consumer_group: str | None = None, *, config: PushConsumerConfig | None = None,
                 clock: Clock = system_clock_ms, **settings: Unpack[PushConsumerSettings]) -> None:
        if consumer_group is not None:
            cast("dict[str, object]", settings)["consumer_group"] = consumer_group  # the config's field: the TypedDict leaves the group out (it is the first parameter)
        self.config: PushConsumerConfig = build(PushConsumerConfig, config, settings)
        #: the client's namespace (None without one): the group and the topics it subscribes live
        #: under it on the broker; the listener sees topics without it (mqcore.client.namespace)
        self._ns: Namespace | None = None
        if self.config.namespace:
            self._ns = Namespace(self.config.namespace)
            self.config = dataclasses.replace(self.config, consumer_group=self._ns.wrap(self.config.consumer_group))
        self._clock = clock
        self._subscriptions: dict[str, tuple[str, str]] = {}
        self._listener: Callable[..., Any] | None = None
        self._orderly = False
        self._impl: PushConsumerImpl | None = None
        self._instance: ClientInstance | None = None
        self._state = _State.CREATED
        self._lock = threading.Lock()
        self._tracer: TraceDispatcher | None = None

    # --- configuration ------------------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str = "*", *, expression_type: str = "TAG") -> None:
        """Subscribe ``topic`` with a tag expression (``"A || B"``, ``"*"``) or, with
        ``expression_type="SQL92"``, a broker-side SQL filter."""
        check_topic(topic)
        if self._ns is not None:
            topic = self._ns.wrap(topic)
        self._subscriptions[topic] = (expression, expression_type)
        if self._impl is not None and self._state is _State.RUNNING:
            self._impl.subscribe(topic, expression, expression_type)
            self._instance_run(self._on_subscription_changed(topic))

    def unsubscribe(self, topic: str) -> None:
        if self._ns is not None:
            topic = self._ns.wrap(topic)
        self._subscriptions.pop(topic, None)
        if self._impl is not None and self._state is _State.RUNNING:
            self._impl.unsubscribe(topic)
            self._instance_run(self._on_subscription_changed(None))

    async def _on_subscription_changed(self, topic: str | None) -> None:
        assert self._instance is not None
        if topic is not None:
            await self._instance.update_topic_route(topic)
        await self._instance.send_heartbeat_to_all_brokers()
        self._instance.rebalance_now()

    def register_listener(self, listener: F, *, orderly: bool = False) -> F:
        """Set the listener (``listener(messages, context)``); returns it, so it also
        works as a decorator. ``orderly=True`` selects orderly consumption."""
        if self._state is not _State.CREATED:
            raise IllegalStateError("register the listener before start()")
        if not callable(listener):
            raise IllegalStateError(f"the listener must be callable, got {listener!r}")
        self._listener = listener
        self._orderly = orderly
        return listener

    def listener(self, fn: F) -> F:
        """Decorator form of ``register_listener(fn)`` (concurrent consumption)."""
        return self.register_listener(fn)

    def orderly_listener(self, fn: F) -> F:
        """Decorator form of ``register_listener(fn, orderly=True)``."""
        return self.register_listener(fn, orderly=True)

    # --- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> PushConsumer:
        with self._lock:
            if self._state is _State.RUNNING:
                return self
            if self._state is _State.SHUTDOWN:
                raise ClosedError("this consumer was shut down; create a new one")
            if self._listener is None:
                raise IllegalStateError("register a listener (consumer.register_listener(fn)) before start()")
            if not self._subscriptions:
                raise IllegalStateError("subscribe to at least one topic before start()")
            broadcasting = self.config.message_model is MessageModel.BROADCASTING
            instance = ClientInstance(self.config, clock=self._clock, change_instance_name=not broadcasting,
                                      rebalance_interval_ms=self.config.rebalance_interval_ms)
            listener = self._listener
            if self._ns is not None:
                listener = _named_for_the_user(self._ns, listener)
            if self.config.enable_msg_trace:
                self._tracer = TraceDispatcher(self.config.namesrv_addr, self.config.trace_topic,
                                               self.config.consumer_group, untraced_producer)
                self._tracer.start()
                listener = self._tracer.traced_listener(listener)
            impl = PushConsumerImpl(self.config, instance, listener, orderly=self._orderly)
            for topic, (expression, kind) in self._subscriptions.items():
                impl.subscribe(topic, expression, kind)
            if not broadcasting:
                impl.subscribe(retry_topic(self.config.consumer_group), "*")
            instance.register_consumer(impl)
            instance.register_producer(impl.inner_producer)
            instance.start()
            self._instance, self._impl = instance, impl
            try:
                instance.loop_thread.run(impl.start_async(), timeout_s=60)
            except MQError:
                instance.shutdown()
                raise
            self._state = _State.RUNNING
        log.info("push consumer %s started as %s (%s, %s)", self.config.consumer_group, instance.client_id,
                 self.config.message_model.value, "orderly" if self._orderly else "concurrently")
        return self

    def shutdown(self) -> None:
        """Stop pulling, let running listeners finish (up to
        ``await_termination_ms_when_shutdown``), persist offsets, release orderly
        locks, unregister from the brokers. Idempotent."""
        with self._lock:
            if self._state is not _State.RUNNING:
                self._state = _State.SHUTDOWN
                return
            self._state = _State.SHUTDOWN
        impl, instance = self._impl, self._instance
        assert impl is not None and instance is not None
        try:
            instance.loop_thread.run(impl.stop_pulling_async(), timeout_s=30)
            impl.consume_service.stop()  # batches not started are not consumed (nor committed)
            _drain_executor(impl.executor, self.config.await_termination_ms_when_shutdown)
            instance.loop_thread.run(impl.finish_async(), timeout_s=30)
        except MQError as e:
            log.warning("consumer %s: clean shutdown failed: %s", self.config.consumer_group, e)
        finally:
            instance.shutdown()
            if self._tracer is not None:
                self._tracer.shutdown()
        log.info("push consumer %s shut down", self.config.consumer_group)

    def __enter__(self) -> PushConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def suspend(self) -> None:
        """Pause pulling (messages already pulled are still consumed)."""
        if self._impl is not None:
            self._impl.paused = True

    def resume(self) -> None:
        if self._impl is not None:
            self._impl.paused = False

    # --- introspection ------------------------------------------------------------------------------------
    @property
    def client_id(self) -> str | None:
        return self._instance.client_id if self._instance is not None else None

    def assigned_queues(self, topic: str | None = None) -> list[MessageQueue]:
        """The queues this consumer currently owns (for tests and tools)."""
        if self._impl is None or self._instance is None or self._state is not _State.RUNNING:
            return []
        owned = self._instance.loop_thread.run(_owned(self._impl), timeout_s=10)
        if topic is not None and self._ns is not None:
            topic = self._ns.wrap(topic)
        return sorted(mq for mq in owned if topic is None or mq.topic == topic)

    def committed_offsets(self, topic: str | None = None) -> dict[MessageQueue, int]:
        """In-memory offsets (what the next persist will send)."""
        if topic is not None and self._ns is not None:
            topic = self._ns.wrap(topic)
        return self._impl.offset_store.snapshot(topic) if self._impl is not None else {}

    def rebalance_now(self) -> None:
        if self._instance is not None:
            self._instance.rebalance_now()

    def _instance_run(self, coro: Any) -> Any:
        assert self._instance is not None
        return self._instance.loop_thread.run(coro, timeout_s=30)

    def __repr__(self) -> str:
        return (f"PushConsumer(group={self.config.consumer_group!r}, topics={sorted(self._subscriptions)}, "
                f"{self.config.message_model.value}, {self._state.value})")


async def _owned(impl: PushConsumerImpl) -> set[MessageQueue]:
    return impl.rebalance.owned_queues()


def _drain_executor(executor: Any, wait_ms: int) -> None:
    """Cancel queued consume requests; wait up to ``wait_ms`` for running ones."""
    executor.shutdown(wait=False, cancel_futures=True)
    waiter = threading.Thread(target=executor.shutdown, kwargs={"wait": True}, daemon=True)
    waiter.start()
    waiter.join(max(wait_ms, 0) / 1000.0)
    if waiter.is_alive():
        log.warning("some listeners are still running after %d ms; shutting down anyway", wait_ms)


def _named_for_the_user(ns: Namespace, listener: Callable[..., Any]) -> Callable[..., Any]:
    """``listener`` seeing its messages' topics without the namespace (Java's
    ``resetRetryAndNamespace``); they are named as the broker knows them again when it
    returns, for what follows (a failed message sent back for retry names its topic)."""

    def named(msgs: list[Any], context: Any) -> Any:
        ns.to_user(msgs)
        try:
            return listener(msgs, context)
        finally:
            ns.to_broker(msgs)
    return named
