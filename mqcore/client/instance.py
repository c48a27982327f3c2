"""``ClientInstance``: the shared machinery behind producers and consumers
(RocketMQ's ``MQClientInstance``).

It owns the event-loop thread, the remoting connections, the route cache and the
broker address table, and runs the periodic services:

=========================  ==================================  ======================
service                    what                                interval (first run)
=========================  ==================================  ======================
route refresh              GET_ROUTEINFO_BY_TOPIC per topic     30 s (10 ms)
heartbeat                  HEART_BEAT to every broker           30 s (1 s)
offset persistence         consumers' ``persist_offsets()``     5 s (10 s)
rebalance                  consumers' ``do_rebalance()``        20 s, and at once on
                                                                NOTIFY_CONSUMER_IDS_CHANGED
=========================  ==================================  ======================

Producers and consumers register *impl* objects (duck-typed, see ``ProducerHook`` and
``ConsumerHook``); the instance calls them back on the loop thread when routes
change or a periodic service runs. Each public client creates its own instance, so
no state is shared between clients by accident (no module-level singletons).

Thread model: public blocking methods (``start``, ``shutdown``) from any thread but
the loop's; everything else runs on the loop thread.
"""
from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from mqcore.acl.signing import SessionCredentials
from mqcore.client.api import MQClientAPI
from mqcore.client.config import ClientConfig
from mqcore.client.loop import LoopThread
from mqcore.client.request import ReplyTable
from mqcore.client.message import decode_messages
from mqcore.client.route import MASTER_ID, TopicRouteData
from mqcore.uniq_id import UniqIdGenerator
from mqcore.clock import Clock, system_clock_ms
from mqcore.errors import BrokerError, ClosedError, ConsumerGroupNotFoundError, MQError, RemotingError
from mqcore.jsonutil import dumps_compact, loads_lenient
from mqcore.remoting.bodies import MessageQueue
from mqcore.remoting.channel import Channel
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.codes import RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand, create_response
from mqcore.remoting.headers import NotifyConsumerIdsChangedRequestHeader
from mqcore.remoting.tls import client_context

log = logging.getLogger(__name__)

__all__ = ["ClientInstance", "ProducerHook", "ConsumerHook", "local_ip"]


class ProducerHook(Protocol):
    group: str

    def publish_topics(self) -> Iterable[str]: ...

    def needs_route(self, topic: str) -> bool: ...

    def on_route_changed(self, topic: str, route: TopicRouteData) -> None: ...


class ConsumerHook(Protocol):
    group: str

    def subscribed_topics(self) -> Iterable[str]: ...

    def needs_route(self, topic: str) -> bool: ...

    def on_route_changed(self, topic: str, route: TopicRouteData) -> None: ...

    def consumer_data(self) -> dict[str, Any]: ...

    async def do_rebalance(self) -> None: ...

    async def persist_offsets(self) -> None: ...


def local_ip() -> str:
    """A non-loopback IPv4 address of this host if there is one (as ``RemotingUtil.getLocalAddress``)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))  # no packet is sent; picks the outgoing interface
            ip: str = s.getsockname()[0]
            if ip and not ip.startswith("0."):
                return ip
    except OSError:
        pass  # no route: fall back to the host name, then loopback
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class ClientInstance:
    """Event loop, connections, routes and periodic services of one client."""

    def __init__(self, config: ClientConfig, *, clock: Clock = system_clock_ms,
                 change_instance_name: bool = True, rebalance_interval_ms: int = 20_000) -> None:
        self.config = config
        self.clock = clock
        self.client_ip = config.client_ip or local_ip()
        instance_name = config.instance_name
        if change_instance_name and instance_name == "DEFAULT":
            instance_name = f"{os.getpid()}#{time.monotonic_ns()}"
        self.instance_name = instance_name
        self.client_id = f"{self.client_ip}@{instance_name}" + (f"@{config.unit_name}" if config.unit_name else "")
        self.uniq_ids = UniqIdGenerator(self.client_ip, clock=clock)
        self.loop_thread = LoopThread(name=f"mqcore-client[{self.client_id}]")
        signer = sign_fields = None
        if config.access_key is not None:  # plain ACL: sign every request (Java's AclClientRPCHook)
            credentials = SessionCredentials(config.access_key, config.secret_key or "", config.security_token)
            # (sign_fields: the same signature for the sends the blocking pool's kernel writes)
            signer, sign_fields = credentials.sign, credentials.sign_fields
        tls = client_context(trust_cert_path=config.tls_trust_cert_path, cert_path=config.tls_cert_path,
                             key_path=config.tls_key_path) if config.use_tls else None
        self.remoting = RemotingClient(name=f"client {self.client_id}", before_request=signer, tls=tls,
                                       sign_fields=sign_fields)
        self.api = MQClientAPI(self.remoting, language=config.language, version=config.version,
                               namesrv_addrs=config.namesrv_addrs, on_loop=self.loop_thread.run)
        if config.access_key is not None and config.security_token is None:
            self.api.template_keys = (config.access_key, config.secret_key or "")
        self.rebalance_interval_ms = rebalance_interval_ms
        #: request-reply: requests waiting for the reply the broker pushes (PUSH_REPLY_MESSAGE_TO_CLIENT)
        self.replies = ReplyTable(clock)
        self.route_table: dict[str, TopicRouteData] = {}
        self.broker_addr_table: dict[str, dict[int, str]] = {}
        self.broker_version_table: dict[str, int] = {}
        self.producers: dict[str, ProducerHook] = {}
        self.consumers: dict[str, ConsumerHook] = {}
        #: heartbeat a broker as soon as a route names it, not at the next 30 s round: what
        #: consumers need (below), and a transaction producer, so that a check-back of a
        #: transaction it just left open finds it registered
        self.heartbeat_new_brokers = False
        self._route_updates: dict[str, asyncio.Task[bool]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._rebalance_event: asyncio.Event | None = None
        self._started = False
        self._closed = False

    # --- lifecycle ----------------------------------------------------------------------------
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.loop_thread.loop

    def start(self) -> None:
        if self._closed:
            raise ClosedError(f"client {self.client_id} is shut down")
        if self._started:
            return
        self.loop_thread.start()
        self.loop_thread.run(self._start_async())
        self._started = True
        log.info("client instance %s started (name servers %s)", self.client_id, self.config.namesrv_addr)

    async def _start_async(self) -> None:
        self.remoting.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        self.remoting.register_processor(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset)
        self.remoting.register_processor(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, self.replies.on_push)
        self.remoting.register_processor(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info)
        self.remoting.register_processor(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._on_consume_directly)
        self._rebalance_event = asyncio.Event()
        cfg = self.config
        self._spawn("route-refresh", self._periodic(10, cfg.poll_name_server_interval_ms, self.update_all_routes))
        self._spawn("heartbeat", self._periodic(1000, cfg.heartbeat_broker_interval_ms, self._heartbeat_tick))
        self._spawn("persist-offsets", self._periodic(10_000, cfg.persist_consumer_offset_interval_ms,
                                                      self._persist_tick))
        self._spawn("rebalance", self._rebalance_service())

    def _spawn(self, name: str, coro: Awaitable[None]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))
        self._tasks[-1].set_name(f"{self.client_id} {name}")

    async def _periodic(self, first_ms: int, interval_ms: int, fn: Callable[[], Awaitable[Any]]) -> None:
        await asyncio.sleep(first_ms / 1000.0)
        while True:
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except MQError as e:
                log.warning("%s: periodic %s failed: %s", self.client_id, getattr(fn, "__name__", fn), e)
            except Exception:  # a bug in one service must not stop the others; log loudly
                log.exception("%s: periodic %s crashed", self.client_id, getattr(fn, "__name__", fn))
            await asyncio.sleep(interval_ms / 1000.0)

    def shutdown(self) -> None:
        """Stop services, close connections and the loop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            try:
                self.loop_thread.run(self._shutdown_async(), timeout_s=10)
            except MQError as e:
                log.warning("%s: shutdown incomplete: %s", self.client_id, e)
        self.loop_thread.stop()
        log.info("client instance %s shut down", self.client_id)

    async def _shutdown_async(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.remoting.shutdown()

    @property
    def closed(self) -> bool:
        return self._closed

    # --- registration ----------------------------------------------------------------------------
    def register_producer(self, hook: ProducerHook) -> None:
        self.producers[hook.group] = hook

    def register_consumer(self, hook: ConsumerHook) -> None:
        self.consumers[hook.group] = hook

    def unregister_consumer(self, group: str) -> None:
        self.consumers.pop(group, None)

    def unregister_producer(self, group: str) -> None:
        self.producers.pop(group, None)

    # --- routes ---------------------------------------------------------------------------------------
    async def update_topic_route(self, topic: str, *, default_topic: str | None = None,
                                 default_queue_nums: int = 4) -> bool:
        """Fetch ``topic``'s route (or ``default_topic``'s, capped, for a topic the name
        server does not know yet) and push changes to producers and consumers.
        Concurrent calls for one topic share a single request. True if a route exists."""
        key = f"{topic}\x00{default_topic or ''}"
        task = self._route_updates.get(key)
        if task is None:
            task = asyncio.ensure_future(self._update_topic_route(topic, default_topic, default_queue_nums))
            self._route_updates[key] = task
            task.add_done_callback(lambda t: self._route_update_done(key, t))
        return await asyncio.shield(task)

    def _route_update_done(self, key: str, task: asyncio.Future[bool]) -> None:
        self._route_updates.pop(key, None)
        # the shield keeps the request going when its caller is cancelled (a shutdown while a
        # refresh is in flight): its failure is then nobody's to see, and asyncio would print
        # "Task exception was never retrieved" at exit. Taken here; a caller still waiting gets it.
        if not task.cancelled() and task.exception() is not None:
            log.debug("route update %s failed: %s", key.replace("\x00", " / "), task.exception())

    async def _update_topic_route(self, topic: str, default_topic: str | None, default_queue_nums: int) -> bool:
        timeout = self.config.mq_client_api_timeout_ms
        if default_topic:
            route = await self.api.get_topic_route(default_topic, timeout)
            if route is not None:
                route = route.with_queue_nums_capped(default_queue_nums)
        else:
            route = await self.api.get_topic_route(topic, timeout)
        if route is None:
            log.debug("no route for topic %s (default %s)", topic, default_topic)
            return False
        old = self.route_table.get(topic)
        hooks: list[ProducerHook | ConsumerHook] = [*self.producers.values(), *self.consumers.values()]
        changed = old != route or any(hook.needs_route(topic) for hook in hooks)
        if changed:
            if old is not None:
                log.info("route of %s changed: %s -> %s", topic, old, route)
            known = {addr for addrs in self.broker_addr_table.values() for addr in addrs.values()}
            for bd in route.broker_datas:
                self.broker_addr_table[bd.broker_name] = dict(bd.broker_addrs)
            self.route_table[topic] = route
            for producer in list(self.producers.values()):
                producer.on_route_changed(topic, route)
            for consumer in list(self.consumers.values()):
                consumer.on_route_changed(topic, route)
            if self.consumers or self.heartbeat_new_brokers:
                # a broker this client has not talked to yet hears from it first, as the 5.x Java
                # client heartbeats a broker when it connects: a 5.x broker creates the client's
                # consumer groups from that heartbeat (autoCreateSubscriptionGroup) and refuses
                # offset commits for a group it does not know. (After the tables above are
                # complete: a route refresh meanwhile must see the broker in a route.)
                for addr in sorted({a for bd in route.broker_datas for a in bd.broker_addrs.values()} - known):
                    await self.send_heartbeat_to_broker(addr)
        return True

    async def update_all_routes(self) -> None:
        topics: set[str] = set()
        for producer in list(self.producers.values()):
            topics.update(producer.publish_topics())
        for consumer in list(self.consumers.values()):
            topics.update(consumer.subscribed_topics())
        for topic in sorted(topics):
            try:
                await self.update_topic_route(topic)
            except (RemotingError, BrokerError, MQError) as e:
                log.info("route refresh of %s failed: %s", topic, e)
        self._clean_offline_brokers()

    def _clean_offline_brokers(self) -> None:
        live = {(bd.broker_name, addr) for r in self.route_table.values() for bd in r.broker_datas
                for addr in bd.broker_addrs.values()}
        for name in list(self.broker_addr_table):
            addrs = {i: a for i, a in self.broker_addr_table[name].items() if (name, a) in live}
            if addrs:
                self.broker_addr_table[name] = addrs
            else:
                del self.broker_addr_table[name]

    def find_broker_address_in_publish(self, broker_name: str) -> str | None:
        addrs = self.broker_addr_table.get(broker_name)
        return addrs.get(MASTER_ID) if addrs else None

    def find_broker_address_in_subscribe(self, broker_name: str, broker_id: int = MASTER_ID,
                                         only_this_broker: bool = False) -> str | None:
        addrs = self.broker_addr_table.get(broker_name)
        if not addrs:
            return None
        addr = addrs.get(broker_id)
        if addr is None and not only_this_broker:
            addr = addrs.get(MASTER_ID) or next(iter(addrs.values()))
        return addr

    async def broker_addr_for(self, mq: MessageQueue) -> str:
        """Master address of ``mq``'s broker, refreshing the route once if unknown."""
        addr = self.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            await self.update_topic_route(mq.topic)
            addr = self.find_broker_address_in_publish(mq.broker_name)
        if addr is None:
            raise BrokerError(14, f"broker {mq.broker_name} of {mq.topic} is not in any known route")
        return addr

    async def find_consumer_id_list(self, topic: str, group: str) -> list[str]:
        route = self.route_table.get(topic)
        if route is None:
            await self.update_topic_route(topic)
            route = self.route_table.get(topic)
        if route is None or not route.broker_datas:
            return []
        bd = random.choice(route.broker_datas)
        addr = bd.any_addr()
        if addr is None:
            return []
        return await self.api.get_consumer_id_list(addr, group, self.config.mq_client_api_timeout_ms)

    # --- heartbeat ------------------------------------------------------------------------------
    def heartbeat_body(self) -> bytes:
        data = {
            "clientID": self.client_id,
            "consumerDataSet": [c.consumer_data() for c in self.consumers.values()],
            "producerDataSet": [{"groupName": g} for g in self.producers],
        }
        return dumps_compact(data)

    async def send_heartbeat_to_all_brokers(self) -> None:
        if not self.producers and not self.consumers:
            return
        body = self.heartbeat_body()
        consumers = bool(self.consumers)
        for name, addrs in list(self.broker_addr_table.items()):
            for broker_id, addr in list(addrs.items()):
                if not consumers and broker_id != MASTER_ID:
                    continue
                await self.send_heartbeat_to_broker(addr, body, name)

    async def send_heartbeat_to_broker(self, addr: str, body: bytes | None = None, name: str = "") -> bool:
        """One HEART_BEAT to ``addr``; False (logged) if it failed."""
        try:
            version = await self.api.heartbeat(addr, body if body is not None else self.heartbeat_body(),
                                               self.config.mq_client_api_timeout_ms)
        except (RemotingError, BrokerError) as e:
            log.info("heartbeat to %s (%s) failed: %s", name or "broker", addr, e)
            return False
        if self.broker_version_table.get(addr) != version:
            log.debug("broker %s at %s speaks version %d", name or "", addr, version)
        self.broker_version_table[addr] = version
        return True

    async def _heartbeat_tick(self) -> None:
        await self.send_heartbeat_to_all_brokers()

    async def unregister_client(self, producer_group: str | None, consumer_group: str | None) -> None:
        """UNREGISTER_CLIENT to every broker (clean shutdown)."""
        for name, addrs in list(self.broker_addr_table.items()):
            for addr in list(addrs.values()):
                try:
                    await self.api.unregister_client(addr, self.client_id, producer_group, consumer_group,
                                                     self.config.mq_client_api_timeout_ms)
                except (RemotingError, BrokerError) as e:
                    log.info("unregister from %s (%s) failed: %s", name, addr, e)

    # --- offsets (OffsetBrokerAccess) ---------------------------------------------------------------
    async def query_consumer_offset(self, group: str, mq: MessageQueue) -> int:
        addr = await self.broker_addr_for(mq)
        return await self.api.query_consumer_offset(addr, group, mq, self.config.mq_client_api_timeout_ms)

    async def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int, oneway: bool) -> None:
        """UPDATE_CONSUMER_OFFSET. A sync commit a broker refuses for not knowing ``group`` (5.x
        checks it) is sent once more after a heartbeat, which creates the group on a broker that
        creates groups; refused again, it raises ConsumerGroupNotFoundError naming the fix."""
        addr = await self.broker_addr_for(mq)
        timeout = self.config.mq_client_api_timeout_ms
        try:
            await self.api.update_consumer_offset(addr, group, mq, offset, timeout, oneway=oneway)
            return
        except BrokerError as e:
            if e.code != ConsumerGroupNotFoundError.CODE:
                raise
        await self.send_heartbeat_to_broker(addr, name=mq.broker_name)
        try:
            await self.api.update_consumer_offset(addr, group, mq, offset, timeout, oneway=False)
        except BrokerError as e:
            if e.code != ConsumerGroupNotFoundError.CODE:
                raise
            raise ConsumerGroupNotFoundError(group, e.remark, addr,
                                             f" ({mq.broker_name}; offset {offset} of {mq.topic}:{mq.queue_id} "
                                             f"not committed)") from None

    async def _persist_tick(self) -> None:
        for consumer in list(self.consumers.values()):
            await consumer.persist_offsets()

    # --- rebalance --------------------------------------------------------------------------------
    def rebalance_now(self) -> None:
        """Wake the rebalance service (thread-safe)."""
        if self._rebalance_event is not None and not self.loop_thread.closed:
            self.loop_thread.call_soon(self._rebalance_event.set)

    async def do_rebalance(self) -> None:
        for consumer in list(self.consumers.values()):
            try:
                await consumer.do_rebalance()
            except (RemotingError, BrokerError, MQError) as e:
                log.warning("rebalance of group %s failed: %s", consumer.group, e)

    async def _rebalance_service(self) -> None:
        event = self._rebalance_event
        assert event is not None
        while True:
            try:
                await asyncio.wait_for(event.wait(), self.rebalance_interval_ms / 1000.0)
            except asyncio.TimeoutError:
                pass  # the periodic run
            event.clear()
            try:
                await self.do_rebalance()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the service alive whatever one rebalance did
                log.exception("%s: rebalance crashed", self.client_id)

    async def _on_reset_offset(self, channel: Channel, request: RemotingCommand) -> None:
        """The broker relays an operator's offset reset (``ResetOffsetBody``: MessageQueue -> offset)."""
        group, topic = request.ext_fields.get("group", ""), request.ext_fields.get("topic", "")
        reset = getattr(self.consumers.get(group), "reset_offsets", None)
        if reset is None:
            log.info("broker %s reset offsets of group %s, which has no push consumer here", channel.remote_addr,
                     group)
            return None
        try:
            table = loads_lenient(bytes(request.body)).get("offsetTable") or {}
            offsets = {MessageQueue.from_json_obj(dict(k) if isinstance(k, tuple) else k): int(v)
                       for k, v in table.items()}
        except (MQError, AttributeError, TypeError, ValueError) as e:
            log.warning("broker %s sent an unreadable offset reset for group %s: %s", channel.remote_addr, group, e)
            return None
        await reset({mq: off for mq, off in offsets.items() if mq.topic == topic})
        if self._rebalance_event is not None:
            self._rebalance_event.set()
        return None

    # --- tools' requests the broker forwards (ClientRemotingProcessor) ---------------------------------
    def _forwarded_to(self, request: RemotingCommand, method: str) -> tuple[Any, RemotingCommand | None]:
        """The consumer of the request's group that can answer it, or the refusal to send."""
        group = request.ext_fields.get("consumerGroup", "")
        consumer = self.consumers.get(group)
        if getattr(consumer, method, None) is None:
            return None, create_response(request, ResponseCode.SYSTEM_ERROR,
                                         f"The Consumer Group <{group}> not exist in this consumer")
        return consumer, None

    async def _on_running_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """GET_CONSUMER_RUNNING_INFO (``mqadmin consumerStatus``, relayed by the broker)."""
        consumer, refusal = self._forwarded_to(request, "running_info")
        if refusal is not None:
            return refusal
        jstack = request.ext_fields.get("jstackEnable", "false").lower() == "true"
        return create_response(request, ResponseCode.SUCCESS, body=consumer.running_info(jstack))

    async def _on_consume_directly(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """CONSUME_MESSAGE_DIRECTLY: the broker sends one stored message to run the listener on."""
        consumer, refusal = self._forwarded_to(request, "consume_directly")
        if refusal is not None:
            return refusal
        broker_name = request.ext_fields.get("brokerName")
        try:
            msgs = decode_messages(bytes(request.body or b""), broker_name, 1)
        except MQError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"unreadable message: {e}")
        if not msgs:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "no message in the request")
        result = await consumer.consume_directly(msgs[0], broker_name)
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(result))

    async def _on_ids_changed(self, channel: Channel, request: RemotingCommand) -> None:
        try:
            group = NotifyConsumerIdsChangedRequestHeader.from_command(request).consumer_group
        except MQError:
            group = "?"
        log.info("broker %s says the consumers of group %s changed; rebalancing now", channel.remote_addr, group)
        if self._rebalance_event is not None:
            self._rebalance_event.set()
        return None
