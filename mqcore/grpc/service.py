"""``apache.rocketmq.v2.MessagingService`` over the broker's store, topics, groups and offsets.

Each RPC answers as RocketMQ 5's proxy does: the gRPC call itself succeeds and the outcome
is the ``Status`` in the response (``Code.OK``, ``Code.TOPIC_NOT_FOUND``, ...); a request
that cannot even be decoded is refused by gRPC. Unknown RPCs (pull, recall, lite topics)
answer gRPC ``UNIMPLEMENTED``. Names are wrapped with the resource namespace as the proxy
does (``namespace%name``), so a wrong namespace names a topic that does not exist.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any, Protocol

from mqcore.errors import FilterExpressionError, IllegalArgumentError, MQError
from mqcore.filter.sql92 import Sql92Filter, compile_sql92
from mqcore.format.properties import has_separator
from mqcore.grpc.convert import (PROP_SHARDING_KEY, PROP_TRACE_CONTEXT, SYSTEM_PROPERTY_KEYS, duration_ms, timestamp_ms,
                                 to_pb)
from mqcore.grpc.flow import STREAM_CHUNK_BYTES, WRITE_STALL_S, OutboundBudget
from mqcore.grpc.source import GrpcSource, TopicView
from mqcore.format.timer import PROP_TIMER_DELIVER_MS
from mqcore.store.timer.recall import build_recall_handle, check_recall, recall_marker
from mqcore.grpc import transaction as tx
from mqcore.message import (DEFAULT_TOPIC, MessageExt, MessageExtBrokerInner, Prop, pack_host,
                            validate_group, validate_topic)
from mqcore.permissions import PERM_READ, PERM_WRITE
from mqcore.pop.arrivals import Arrivals
from mqcore.pop.handle import POP_ORDER_REVIVE_QUEUE, PopHandle, pop_retry_topic, topic_type
from mqcore.pop.service import AckStatus, Inflight, PopService, Popped, pick_queue
from mqcore.store.results import PutMessageResult, PutMessageStatus

# Requests, responses and their fields are protobuf messages generated at run time (and the
# call context is grpcio's): neither protobuf nor grpcio ships annotations, so they are Any here.
#: a store put: MessageStore.put_message, or the transaction service's put of a half message
Put = Callable[[MessageExtBrokerInner], PutMessageResult]

log = logging.getLogger(__name__)

CLIENT_ID_HEADER = "x-mq-client-id"
MAX_BATCH_SIZE = 32
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_MESSAGE_GROUP_LENGTH = 64
DEFAULT_LONG_POLLING_MS = 30_000
#: a receive answers this long before the client's deadline so the answer still arrives
DEADLINE_MARGIN_MS = 1_000
#: a stored record's bytes beyond its body at most (header, topic, properties: 32 KiB at most)
RECORD_OVERHEAD_BYTES = 64 * 1024
_TAG_FORBIDDEN = re.compile(r"[|\x00-\x1f]")


class Refused(MQError):
    """A request refused for a reason the proxy also names: becomes the response's Status
    (code, message); never leaves the service."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclasses.dataclass
class ClientState:
    client_id: str
    client_type: int = 0
    group: str | None = None
    settings: object | None = None
    last_seen_ms: int = 0


class _Delivery:
    """The messages of one ReceiveMessage stream not yet delivered: ``held`` (popped, not
    handed to grpc: counted in the receive buffer), ``current`` (being written) and
    ``unwritten`` (handed to grpc, its call ended first)."""

    def __init__(self, svc: MessagingService, group: str, held: list[Popped]) -> None:
        self.svc = svc
        self.group = group
        self.held = held
        self.current: Popped | None = None
        self.unwritten: list[Popped] = []
        #: the peer stopped reading: what was not delivered went back, the stream writes no more
        self.abandoned = False

    def stall(self) -> None:
        """A write pending too long: ``held`` and ``current`` are visible again now (the
        current one's bytes stay counted until its write ends)."""
        if self.abandoned:
            return
        self.abandoned = True
        back = self.held + ([self.current] if self.current is not None else [])
        self.svc.ep.receive_budget.release(sum(p.message.store_size for p in self.held))
        self.held = []
        self.svc._release(self.group, back)

    def give_back(self) -> None:
        """The stream ended: what it did not deliver is visible again."""
        if self.abandoned:
            return
        self.abandoned = True
        if self.held:
            self.svc.ep.receive_budget.release(sum(p.message.store_size for p in self.held))
        if self.held or self.unwritten:
            self.svc._release(self.group, self.unwritten + self.held)
        self.held = []


class Endpoint(Protocol):
    """What the servicer reads of ``mqcore.grpc.server.GrpcEndpoint``, which builds it when it
    starts (typed here by shape: importing the server module back would be a cycle)."""

    port: int
    min_invisible_ms: int
    default_invisible_ms: int
    renew_max_ms: int
    max_long_polling_ms: int
    max_delay_ms: int
    retry_delays_ms: list[int]
    #: what all ReceiveMessage streams may hold, popped and not yet written (mqcore.grpc.flow)
    receive_budget: OutboundBudget

    def client_address(self, context: Any) -> tuple[str, int] | None: ...
    def wake(self) -> None: ...


class MessagingService:
    """The servicer; ``endpoint`` is the ``GrpcEndpoint`` (address, options, protocol)."""

    def __init__(self, source: GrpcSource, endpoint: Endpoint, definition: ModuleType, service: ModuleType) -> None:
        self.src = source
        self.ep = endpoint
        self.d = definition
        self.s = service
        self.clock = source.clock
        #: the broker's one pop service (remoting POP_MESSAGE shares it)
        self.pop: PopService = source.pop
        self.arrivals: Arrivals | None = source.pop.arrivals
        self.clients: dict[str, ClientState] = {}
        #: commands the broker sends down Telemetry streams (orphaned transactions)
        self.outboxes = tx.Outboxes()
        #: the broker's put pool under SYNC_FLUSH (a put may wait for its fsync); None: puts run inline
        self.pool: concurrent.futures.Executor | None = None

    async def _put(self, msg: MessageExtBrokerInner, put: Put | None = None) -> PutMessageResult:
        put = put or self.src.store.put_message
        if self.pool is None:
            return put(msg)
        return await asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(put, msg))

    async def _put_counted(self, msg: MessageExtBrokerInner, topic: str, put: Put | None = None) -> PutMessageResult:
        """A client's send, counted in the broker's stats as a 4.x send is: under the topic
        the client named (a timed message sits in the store's timer topic until due, as a 4.x delayed
        one sits in the schedule topic), with its bytes, put latency and failures."""
        t0 = time.perf_counter()
        result = await self._put(msg, put)
        self.src.stats.put_latency.observe(time.perf_counter() - t0)
        self.src.stats.on_put(topic, result)
        return result

    # --- helpers ------------------------------------------------------------------------------------
    def status(self, code: int | None = None, message: str = "OK") -> Any:
        return self.d.Status(code=self.d.OK if code is None else code, message=message)

    def _name(self, resource: Any, kind: str) -> str:
        ns = resource.resource_namespace
        name: str = f"{ns}%{resource.name}" if ns else resource.name
        return name

    def _topic_name(self, resource: Any) -> str:
        name = self._name(resource, "topic")
        try:
            validate_topic(name)
        except IllegalArgumentError as e:
            raise Refused(self.d.ILLEGAL_TOPIC, str(e)) from None
        return name

    def _group_name(self, resource: Any) -> str:
        name = self._name(resource, "group")
        try:
            validate_group(name)
        except IllegalArgumentError as e:
            raise Refused(self.d.ILLEGAL_CONSUMER_GROUP, str(e)) from None
        if not self.src.groups.ensure(name):
            raise Refused(self.d.CONSUMER_GROUP_NOT_FOUND, f"consumer group {name} does not exist")
        return name

    def _topic(self, resource: Any, *, create: bool = False) -> TopicView:
        name = self._topic_name(resource)
        tc: TopicView | None = self.src.topics.get(name)
        if tc is None and create:
            # as a 4.x send does: from TBW102, which exists only while autoCreateTopicEnable
            tc = self.src.topics.create_in_send(name, DEFAULT_TOPIC, 4)
            if tc is not None:
                self.src.schedule_register()
        if tc is None:
            raise Refused(self.d.TOPIC_NOT_FOUND, f"topic {name} does not exist")
        return tc

    @staticmethod
    def _client_id(context: Any) -> str | None:
        for key, value in context.invocation_metadata() or ():
            if key == CLIENT_ID_HEADER:
                return str(value)  # a text header (not -bin): already a str
        return None

    def _require_client(self, context: Any) -> str:
        cid = self._client_id(context)
        if not cid:
            raise Refused(self.d.CLIENT_ID_REQUIRED, f"the {CLIENT_ID_HEADER} header is required")
        return cid

    def _endpoints(self, request_endpoints: Any = None) -> Any:
        e = self.d.Endpoints()
        if request_endpoints is not None and len(request_endpoints.addresses):
            e.CopyFrom(request_endpoints)  # the address the client reached us on, as the proxy answers
            return e
        e.scheme = self.d.IPv4
        e.addresses.add(host=self.src.settings().broker_ip1, port=self.ep.port)
        return e

    def _broker(self, request_endpoints: Any = None) -> Any:
        return self.d.Broker(name=self.src.settings().broker_name, id=0, endpoints=self._endpoints(request_endpoints))

    def _permission(self, perm: int) -> int:
        r, w = bool(perm & PERM_READ), bool(perm & PERM_WRITE)
        return int(self.d.READ_WRITE if r and w else self.d.READ if r else self.d.WRITE if w else self.d.NONE)

    def _born_host(self, context: Any) -> bytes:
        addr = self.ep.client_address(context)  # the client's own, also behind the TLS front
        try:
            return pack_host(*addr) if addr else pack_host("127.0.0.1", 0)
        except (ValueError, OSError):
            return pack_host("127.0.0.1", 0)

    # --- route, heartbeat, telemetry ------------------------------------------------------------------
    async def QueryRoute(self, request: Any, context: Any) -> Any:
        try:
            tc = self._topic(request.topic, create=True)
        except Refused as r:
            return self.s.QueryRouteResponse(status=self.status(r.code, r.message))
        broker = self._broker(request.endpoints)
        accept = self._accepted_types()
        queues = [self.d.MessageQueue(topic=request.topic, id=qid, permission=self._permission(tc.perm),
                                      broker=broker, accept_message_types=accept)
                  for qid in range(max(tc.read_queue_nums, tc.write_queue_nums))]
        return self.s.QueryRouteResponse(status=self.status(), message_queues=queues)

    def _accepted_types(self) -> list[int]:
        d = self.d
        return [d.NORMAL, d.FIFO, d.DELAY] + ([] if self.src.settings().reject_transaction_message else [d.TRANSACTION])

    async def Heartbeat(self, request: Any, context: Any) -> Any:
        try:
            cid = self._require_client(context)
            group = self._group_name(request.group) if request.HasField("group") and request.group.name else None
        except Refused as r:
            return self.s.HeartbeatResponse(status=self.status(r.code, r.message))
        state = self.clients.setdefault(cid, ClientState(cid))
        state.client_type, state.group = request.client_type, group or state.group
        state.last_seen_ms = self.clock()
        return self.s.HeartbeatResponse(status=self.status())

    async def Telemetry(self, request_iterator: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        cid = self._client_id(context)
        if not cid:
            yield self.s.TelemetryCommand(status=self.status(self.d.CLIENT_ID_REQUIRED,
                                                             f"the {CLIENT_ID_HEADER} header is required"))
            return
        # the client's commands are read by a task; what goes down the stream (answers to them,
        # and commands the broker starts: orphaned transactions) comes out of one queue
        outbox = self.outboxes.open(cid)
        reader = asyncio.ensure_future(self._telemetry_reader(cid, request_iterator, outbox))
        try:
            while True:
                command = await outbox.get()
                if command is None:
                    return
                yield command
        finally:
            reader.cancel()
            self.outboxes.close(cid, outbox)

    async def _telemetry_reader(self, cid: str, request_iterator: AsyncIterator[Any],
                                outbox: asyncio.Queue[Any]) -> None:
        try:
            async for command in request_iterator:
                if command.WhichOneof("command") != "settings":
                    continue  # thread stack traces, verify results, transaction checks answered by RPC
                state = self.clients.setdefault(cid, ClientState(cid))
                state.last_seen_ms = self.clock()
                try:
                    settings = self._settings(command.settings)
                except Refused as r:
                    outbox.put_nowait(self.s.TelemetryCommand(status=self.status(r.code, r.message)))
                    continue
                state.settings, state.client_type = settings, command.settings.client_type
                if settings.HasField("subscription"):
                    state.group = self._name(settings.subscription.group, "group")
                outbox.put_nowait(self.s.TelemetryCommand(status=self.status(), settings=settings))
        finally:
            outbox.put_nowait(None)

    def recover_orphaned(self, half: MessageExt) -> bool:
        """The check-back of a 5.x half message: a RecoverOrphanedTransactionCommand to a live
        client publishing its topic; False when there is none (asked again next round)."""
        topic = half.properties.get(Prop.REAL_TOPIC, "")
        now = self.clock()
        return self.outboxes.send_to_publisher(self.clients, topic, tx.recovery_command(self.d, self.s, half),
                                               lambda cid: self._alive(cid, now))

    def _settings(self, theirs: Any) -> Any:
        """The settings a client gets back: its own, completed with the broker's policy."""
        d = self.d
        out = d.Settings()
        out.CopyFrom(theirs)
        kind = theirs.WhichOneof("pub_sub")
        if kind == "publishing":
            out.publishing.max_body_size = self.src.store_config().max_message_size_bytes
            out.publishing.validate_message_type = False
            policy = out.backoff_policy
            policy.Clear()
            policy.max_attempts = 3
            policy.exponential_backoff.initial.FromMilliseconds(100)
            policy.exponential_backoff.max.FromMilliseconds(1000)
            policy.exponential_backoff.multiplier = 2.0
        elif kind == "subscription":
            group = self._group_name(theirs.subscription.group)
            sub = out.subscription
            sub.fifo = self.src.groups.consume_orderly(group)
            sub.receive_batch_size = MAX_BATCH_SIZE
            if not theirs.subscription.HasField("long_polling_timeout"):
                sub.long_polling_timeout.FromMilliseconds(DEFAULT_LONG_POLLING_MS)
            policy = out.backoff_policy
            policy.Clear()
            policy.max_attempts = self.src.groups.retry_max_times(group) + 1
            # the 4.x retry delays from delay level 3 on (10s, 30s, 1m, ...), as the proxy derives them
            for ms in self.ep.retry_delays_ms:
                policy.customized_backoff.next.add().FromMilliseconds(ms)
        return out

    async def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        cid = self._client_id(context)
        state = self.clients.pop(cid, None) if cid else None
        if state is not None:  # a client never seen (or seen off already) is not worth a line each time
            log.info("5.x client %s (%s) terminated", cid, state.group or "-")
        return self.s.NotifyClientTerminationResponse(status=self.status())

    # --- send ------------------------------------------------------------------------------------------
    async def SendMessage(self, request: Any, context: Any) -> Any:
        if not request.messages:
            return self.s.SendMessageResponse(status=self.status(self.d.BAD_REQUEST, "no message to send"))
        entries = []
        born = self._born_host(context)
        for m in request.messages:
            try:
                entries.append(await self._send_one(m, born))
            except Refused as r:
                entries.append(self.s.SendResultEntry(status=self.status(r.code, r.message)))
        codes = {e.status.code for e in entries}
        if codes == {self.d.OK}:
            status = self.status()
        elif len(entries) == 1:
            status = entries[0].status
        else:
            status = self.status(self.d.MULTIPLE_RESULTS, "some messages were not sent; see each entry")
        return self.s.SendMessageResponse(status=status, entries=entries)

    async def _send_one(self, m: Any, born: bytes) -> Any:
        d = self.d
        if not self.src.settings().broker_permission & PERM_WRITE:
            raise Refused(d.FORBIDDEN, f"the broker {self.src.settings().broker_name} is not writable")
        refusal = self.src.send_refusal(self._topic_name(m.topic))  # before _topic, which would create it
        if refusal:
            raise Refused(d.FORBIDDEN, refusal)
        tc = self._topic(m.topic, create=True)
        if not tc.perm & PERM_WRITE:
            raise Refused(d.FORBIDDEN, f"the topic {tc.topic_name} is not writable")
        sp = m.system_properties
        if not sp.message_id:
            raise Refused(d.ILLEGAL_MESSAGE_ID, "the message has no message id")
        if not m.body:
            raise Refused(d.MESSAGE_BODY_EMPTY, "the message body is empty")
        if len(m.body) > self.src.store_config().max_message_size_bytes:
            raise Refused(d.MESSAGE_BODY_TOO_LARGE, f"the message body is {len(m.body)} bytes, more than "
                                                    f"{self.src.store_config().max_message_size_bytes}")
        half = sp.message_type == d.TRANSACTION
        if half and self.src.settings().reject_transaction_message:
            raise Refused(d.FORBIDDEN, f"the broker {self.src.settings().broker_name} refuses transactional messages "
                                       "(rejectTransactionMessage)")
        props: dict[str, str] = {}
        for k, v in m.user_properties.items():
            if not k or k in SYSTEM_PROPERTY_KEYS or has_separator(k + v):
                raise Refused(d.ILLEGAL_MESSAGE_PROPERTY_KEY, f"the user property {k!r} is reserved or malformed")
            props[k] = v
        if sp.HasField("tag"):
            if not sp.tag.strip() or _TAG_FORBIDDEN.search(sp.tag):
                raise Refused(d.ILLEGAL_MESSAGE_TAG, f"the tag {sp.tag!r} is blank or has '|' or control characters")
            props[Prop.TAGS] = sp.tag
        if sp.keys:
            for k in sp.keys:
                if not k.strip() or " " in k or has_separator(k):
                    raise Refused(d.ILLEGAL_MESSAGE_KEY, f"the key {k!r} is blank or has a space")
            props[Prop.KEYS] = " ".join(sp.keys)
        props[Prop.UNIQ_KEY] = sp.message_id
        group = sp.message_group if sp.HasField("message_group") else ""
        if group:
            if len(group) > MAX_MESSAGE_GROUP_LENGTH or _TAG_FORBIDDEN.search(group):
                raise Refused(d.ILLEGAL_MESSAGE_GROUP, f"the message group {group[:80]!r} is too long or malformed")
            props[PROP_SHARDING_KEY] = group
        if sp.HasField("trace_context") and sp.trace_context:
            props[PROP_TRACE_CONTEXT] = sp.trace_context
        if half:
            problem = tx.half_properties(d, sp, tc.topic_name, props)
            if problem:
                raise Refused(d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, problem)
        queue_id = pick_queue(tc.write_queue_nums, group)
        topic = tc.topic_name
        deliver_ms = timestamp_ms(sp.delivery_timestamp) if sp.HasField("delivery_timestamp") else 0
        now = self.clock()
        if deliver_ms:
            if group:
                raise Refused(d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "a message has a message group or a delivery time, not both")
            if deliver_ms - now > self.ep.max_delay_ms:
                raise Refused(d.ILLEGAL_DELIVERY_TIME, f"the delivery time is more than {self.ep.max_delay_ms} ms away")
        if deliver_ms:  # the store's timer holds it until due (kept when already due: a DELAY message)
            props[PROP_TIMER_DELIVER_MS] = str(deliver_ms)
        born_ms = timestamp_ms(sp.born_timestamp) if sp.HasField("born_timestamp") else now
        msg = MessageExtBrokerInner(topic=topic, body=bytes(m.body), queue_id=queue_id, properties=props,
                                    born_timestamp=born_ms or now, born_host=born, store_host=self.src.store_host())
        result = await self._put_counted(msg, tc.topic_name, self.src.transactions.put_half if half else None)
        if not result.status.stored:
            code = {PutMessageStatus.MESSAGE_ILLEGAL: d.MESSAGE_CORRUPTED,
                    PutMessageStatus.WHEEL_TIMER_MSG_ILLEGAL: d.ILLEGAL_DELIVERY_TIME,
                    PutMessageStatus.WHEEL_TIMER_NOT_ENABLE: d.ILLEGAL_DELIVERY_TIME,
                    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: d.MESSAGE_PROPERTIES_TOO_LARGE,
                    PutMessageStatus.SERVICE_NOT_AVAILABLE: d.INTERNAL_SERVER_ERROR}.get(result.status,
                                                                                            d.INTERNAL_SERVER_ERROR)
            raise Refused(code, f"the store refused the message: {result.status.value} {result.remark}".strip())
        if result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT:
            raise Refused(d.MASTER_PERSISTENCE_TIMEOUT, "stored, but the flush to disk timed out")
        entry = self.s.SendResultEntry(status=self.status(), message_id=sp.message_id, offset=result.queue_offset)
        if result.timer_out_ms:  # a held timer: the handle RecallMessage takes
            entry.recall_handle = build_recall_handle(tc.topic_name, self.src.settings().broker_name,
                                                      result.timer_out_ms + 1, sp.message_id)
        if half:
            entry.transaction_id = tx.transaction_id(result.phy_offset, result.queue_offset)
        return entry

    async def RecallMessage(self, request: Any, context: Any) -> Any:
        """Recall a timer message by the handle its send gave (the 4.x RECALL_MESSAGE's checks,
        ``mqcore.store.timer.recall``); off unless ``recallMessageEnable=true``."""
        d = self.d
        try:
            topic = self._topic_name(request.topic)
        except Refused as r:
            return self.s.RecallMessageResponse(status=self.status(r.code, r.message))
        if not self.src.settings().recall_message_enable:
            return self.s.RecallMessageResponse(status=self.status(d.FORBIDDEN, "recall failed, operation is forbidden"))
        if self.src.topics.get(topic) is None:
            return self.s.RecallMessageResponse(status=self.status(
                d.TOPIC_NOT_FOUND, f"recall failed, the topic[{topic}] not exist"))
        now = self.clock()
        check = check_recall(request.recall_handle, topic, self.src.settings().broker_name, now,
                             self.src.store_config().timer_max_delay_sec)
        if check.handle is None:
            return self.s.RecallMessageResponse(status=self.status(d.BAD_REQUEST, check.remark))
        result = await self._put(recall_marker(check.handle, None, now, self._born_host(context), self.src.store_host()))
        if not result.status.stored:
            return self.s.RecallMessageResponse(status=self.status(d.INTERNAL_SERVER_ERROR, "recall failed, execute error"))
        return self.s.RecallMessageResponse(status=self.status(), message_id=check.handle.message_id)

    async def EndTransaction(self, request: Any, context: Any) -> Any:
        d = self.d
        try:
            topic = self._topic_name(request.topic)
        except Refused as r:
            return self.s.EndTransactionResponse(status=self.status(r.code, r.message))
        h = tx.end_header(d, topic, request) if request.transaction_id else None
        if h is None:
            return self.s.EndTransactionResponse(status=self.status(
                d.INVALID_TRANSACTION_ID, f"{request.transaction_id!r} is not a transaction id this broker gave"))
        code, message = tx.end_status(d, self.src.transactions.end(h))
        return self.s.EndTransactionResponse(status=self.status(code, message))

    # --- consume -----------------------------------------------------------------------------------------
    async def QueryAssignment(self, request: Any, context: Any) -> Any:
        try:
            tc = self._topic(request.topic)
            self._group_name(request.group)
        except Refused as r:
            return self.s.QueryAssignmentResponse(status=self.status(r.code, r.message))
        if not tc.perm & PERM_READ:
            return self.s.QueryAssignmentResponse(status=self.status(self.d.FORBIDDEN,
                                                                     f"the topic {tc.topic_name} is not readable"))
        # one assignment per broker; receives on it pop from every queue of the topic (queue id -1)
        mq = self.d.MessageQueue(topic=request.topic, id=-1, permission=self._permission(tc.perm),
                                 broker=self._broker(request.endpoints),
                                 accept_message_types=self._accepted_types())
        return self.s.QueryAssignmentResponse(status=self.status(), assignments=[self.d.Assignment(message_queue=mq)])

    def _receive_args(self, request: Any, context: Any) -> tuple[str, TopicView, int, Sql92Filter | str, int]:
        d = self.d
        self._require_client(context)
        group = self._group_name(request.group)
        tc = self._topic(request.message_queue.topic)
        if not tc.perm & PERM_READ:
            raise Refused(d.FORBIDDEN, f"the topic {tc.topic_name} is not readable")
        if request.batch_size <= 0 or request.batch_size > MAX_BATCH_SIZE:
            raise Refused(d.BAD_REQUEST, f"batch size {request.batch_size} is not in 1..{MAX_BATCH_SIZE}")
        if request.HasField("invisible_duration"):
            invisible = duration_ms(request.invisible_duration)
        elif request.auto_renew:
            invisible = self.ep.default_invisible_ms  # renewed while the client lives (revive_due)
        else:
            raise Refused(d.ILLEGAL_INVISIBLE_TIME, "a simple consumer must give an invisible duration")
        if not self.ep.min_invisible_ms <= invisible <= MAX_INVISIBLE_MS:
            raise Refused(d.ILLEGAL_INVISIBLE_TIME, f"the invisible duration {invisible} ms is not in "
                                                    f"{self.ep.min_invisible_ms}..{MAX_INVISIBLE_MS} ms")
        fe = request.filter_expression
        expression: Sql92Filter | str
        if fe.type == d.SQL:
            # as a 4.x SQL92 subscription: served when the broker has enablePropertyFilter=true
            if not self.src.settings().enable_property_filter:
                raise Refused(d.UNSUPPORTED, "SQL92 filtering is off on this broker (enablePropertyFilter=false)")
            try:
                expression = compile_sql92(fe.expression)
            except FilterExpressionError as e:
                raise Refused(d.ILLEGAL_FILTER_EXPRESSION, str(e)) from None
        else:
            expression = fe.expression or "*"
            if "\x00" in expression:
                raise Refused(d.ILLEGAL_FILTER_EXPRESSION, f"the filter expression {expression!r} is malformed")
        if request.HasField("long_polling_timeout"):
            polling = duration_ms(request.long_polling_timeout)
            if polling < 0 or polling > self.ep.max_long_polling_ms:
                raise Refused(d.ILLEGAL_POLLING_TIME, f"the long polling timeout {polling} ms is not in "
                                                      f"0..{self.ep.max_long_polling_ms} ms")
        else:
            polling = DEFAULT_LONG_POLLING_MS
        remaining = context.time_remaining()
        if remaining is not None:
            polling = max(0, min(polling, int(remaining * 1000) - DEADLINE_MARGIN_MS))
        return group, tc, invisible, expression, polling

    async def ReceiveMessage(self, request: Any, context: Any) -> None:
        """Written with ``context.write`` rather than yielded: each write is watched for a
        peer that stopped reading (``mqcore.grpc.flow``), and what is not written is made
        visible again."""
        d = self.d
        try:
            group, tc, invisible, expression, polling = self._receive_args(request, context)
        except Refused as r:
            await self._write(context, self.s.ReceiveMessageResponse(status=self.status(r.code, r.message)))
            return
        topic = tc.topic_name
        retry = pop_retry_topic(group, topic)
        deadline = self.clock() + polling
        first = request.message_queue.id if request.message_queue.id >= 0 else 0
        fifo = self.src.groups.consume_orderly(group)
        arrivals = self.arrivals
        assert arrivals is not None  # set by GrpcEndpoint.start before the server serves
        batch = request.batch_size

        async def chunk(count: int, wait_s: float) -> list[Popped] | None:
            popped = await self._pop_chunk(context, group, tc, first, count, expression, invisible, fifo, wait_s)
            if popped and context.done():  # the call ended while waiting for room: nothing for it
                self.ep.receive_budget.release(sum(p.message.store_size for p in popped))
                self._release(group, popped)
                return []
            return popped

        while True:
            since = arrivals.generation([topic, retry])
            popped = await chunk(batch, max(0, deadline - self.clock()) / 1000)
            if popped is None:  # no room in the receive buffer within the polling time
                await self._write(context, self.s.ReceiveMessageResponse(status=self.status(
                    d.TOO_MANY_REQUESTS, "the broker's receive buffer (grpcReceiveBufferBytes) is full, "
                                         "held by streams whose consumers do not read: try again")))
                return
            left = deadline - self.clock()
            if popped or left <= 0:
                break
            await arrivals.wait([topic, retry], left / 1000, since)
        if not popped:
            await self._write(context, self.s.ReceiveMessageResponse(status=self.status(d.MESSAGE_NOT_FOUND,
                                                                                        "no new message")))
            return
        renew_cid = self._client_id(context) if request.auto_renew else None
        ns = request.message_queue.topic.resource_namespace
        shown = request.message_queue.topic.name
        revive_qid = POP_ORDER_REVIVE_QUEUE if fifo else 0
        broker_name = self.src.settings().broker_name
        budget = self.ep.receive_budget
        delivered = delivered_bytes = 0
        st = _Delivery(self, group, popped)
        try:
            await self._watched_write(context, self.s.ReceiveMessageResponse(status=self.status()), st)
            while st.held and not st.abandoned:
                if renew_cid is not None:
                    # a push consumer: its listener may run longer than the invisible duration; the
                    # endpoint renews these while the client is alive, as the proxy does
                    until = self.clock() + self.ep.renew_max_ms
                    for p in st.held:
                        p.flight.renew_client, p.flight.renew_until_ms = renew_cid, until
                while st.held and not st.abandoned:
                    p = st.held.pop(0)
                    f = p.flight
                    handle = PopHandle(f.ck_offset, f.pop_time_ms, invisible, revive_qid, topic_type(p.store_topic),
                                       broker_name, p.queue_id, f.queue_offset, f.commitlog_offset).encode()
                    response = self.s.ReceiveMessageResponse(message=to_pb(
                        d, p.message, topic=shown, namespace=ns, receipt_handle=handle, invisible_ms=invisible,
                        attempt=f.attempt))
                    size = p.message.store_size
                    try:
                        await self._watched_write(context, response, st, p)
                    except BaseException:
                        st.unwritten.append(p)  # the call ended: not delivered
                        raise
                    finally:
                        budget.release(size)  # grpc is done with it, written or not
                    if st.abandoned:
                        break  # it was given back while pending (the peer may still read it: a duplicate)
                    delivered += 1
                    delivered_bytes += size
                # the peer took all it was given: the next chunk, if the batch wants more and room is there now
                if delivered < batch and not st.abandoned:
                    st.held = await chunk(batch - delivered, 0) or []
            if not st.abandoned:
                ts = self.s.ReceiveMessageResponse()
                ts.delivery_timestamp.FromMilliseconds(self.clock())
                await self._write(context, ts)
        finally:
            st.give_back()
            if delivered:
                self.src.stats.on_delivered(group, topic, delivered, delivered_bytes)

    async def _pop_chunk(self, context: Any, group: str, tc: TopicView, first: int, count: int,
                         expression: Sql92Filter | str, invisible: int, fifo: bool, wait_s: float) -> list[Popped] | None:
        """Up to ``count`` messages, at most ``STREAM_CHUNK_BYTES`` of them (a larger one alone),
        counted in the receive buffer; None when the buffer has no room within ``wait_s``."""
        budget = self.ep.receive_budget
        # a pop may return one record as large as the largest message: room for that first
        reserve = self.src.store_config().max_message_size_bytes + RECORD_OVERHEAD_BYTES
        if not await budget.reserve(reserve, wait_s):
            return None
        if context.done():  # the call ended while it waited (grpc cancels the handler only later)
            budget.release(min(reserve, budget.limit))
            return []
        topic = tc.topic_name
        while True:
            n = tc.read_queue_nums
            popped = self.pop.pop_topic(group, topic, [(first + i) % n for i in range(n)], count, expression,
                                        invisible, fifo, max_bytes=STREAM_CHUNK_BYTES)
            if fifo and popped:
                popped, forwarded = await self._fifo_dead_letters(group, topic, popped)
                if forwarded and not popped:
                    continue  # those were done with: the queue may have more
            break
        size = sum(p.message.store_size for p in popped)
        if size > min(reserve, budget.limit):
            budget.take(size - min(reserve, budget.limit))
        else:
            budget.release(min(reserve, budget.limit) - size)
        return popped

    async def _write(self, context: Any, response: Any) -> None:
        """A response that holds no message (a status, the closing timestamp)."""
        await context.write(response)

    async def _watched_write(self, context: Any, response: Any, st: _Delivery, current: Popped | None = None) -> None:
        """Write while a timer watches: pending after ``WRITE_STALL_S`` (the peer does not read),
        the stream gives its messages back (``_Delivery.stall``). The write itself is left to
        finish (the peer reads, or the call ends), since until then grpc holds the message."""
        st.current = current
        timer = asyncio.get_running_loop().call_later(WRITE_STALL_S, st.stall)
        try:
            await context.write(response)
        finally:
            timer.cancel()
            st.current = None

    def _release(self, group: str, held: list[Popped]) -> None:
        """Messages popped for a stream that ended before writing them: visible again now
        (a copy in the retry queue, or in place in a FIFO queue), as the proxy nacks the
        messages of a write that failed."""
        for p in held:
            self.pop.give_back(group, p.store_topic, p.queue_id, p.flight.queue_offset)
        log.debug("%d message(s) popped for %s not written: visible again", len(held), group)

    async def _fifo_dead_letters(self, group: str, topic: str,
                                 popped: list[Popped]) -> tuple[list[Popped], int]:
        """A FIFO group's message handed out in place more often than the group allows
        (``retryMaxTimes`` + 1 deliveries) goes to ``%DLQ%<group>`` instead of to the
        consumer, as the proxy does, and counts as done. Returns (the rest, how many went)."""
        max_attempts = self.src.groups.retry_max_times(group) + 1
        keep: list[Popped] = []
        forwarded = 0
        for p in popped:
            if p.flight.attempt <= max_attempts:
                keep.append(p)
                continue
            store_topic, qid = p.store_topic, p.queue_id
            # the copy's reconsume count is the deliveries made (this one is not made)
            p.message.reconsume_times = p.flight.attempt - 2
            copy = self.pop.revive_copy(group, topic, p.message, max_attempts=0)
            result = await self._put(copy)
            self.src.stats.on_send_back(group, copy.topic, result)
            if not result.status.stored:
                # stays in flight: handed out again when its invisible duration runs out
                log.warning("FIFO %s:%d@%d for %s not moved to the DLQ (%s)", store_topic, qid,
                            p.flight.queue_offset, group, result.status.value)
                continue
            log.info("%s:%d@%d for %s moved to %s after %d deliveries", store_topic, qid, p.flight.queue_offset,
                     group, copy.topic, p.flight.attempt - 1)
            self.src.schedule_register()
            self.pop.ack(group, store_topic, qid, p.flight.queue_offset)
            forwarded += 1
        return keep, forwarded

    def _handle(self, text: str, group: str, topic: str) -> tuple[PopHandle, str]:
        """(receipt handle, the store topic its message was read from)."""
        try:
            h = PopHandle.decode(text)
        except IllegalArgumentError as e:
            raise Refused(self.d.INVALID_RECEIPT_HANDLE, str(e)) from None
        if h.broker_name != self.src.settings().broker_name:
            raise Refused(self.d.INVALID_RECEIPT_HANDLE, f"the receipt handle is from broker {h.broker_name}")
        return h, h.store_topic(group, topic)

    async def AckMessage(self, request: Any, context: Any) -> Any:
        d = self.d
        try:
            group = self._group_name(request.group)
            topic = self._topic(request.topic).topic_name
        except Refused as r:
            return self.s.AckMessageResponse(status=self.status(r.code, r.message))
        results = []
        for e in request.entries:
            try:
                h, store_topic = self._handle(e.receipt_handle, group, topic)
                if self.pop.ack(group, store_topic, h.queue_id, h.queue_offset) is AckStatus.NOT_FOUND:
                    raise Refused(d.INVALID_RECEIPT_HANDLE, "the receipt handle names no message of this queue")
                st = self.status()
            except Refused as r:
                st = self.status(r.code, r.message)
            results.append(self.s.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle,
                                                        status=st))
        if not results:
            return self.s.AckMessageResponse(status=self.status(d.BAD_REQUEST, "no entry to ack"))
        codes = {r.status.code for r in results}
        status = self.status() if codes == {d.OK} else results[0].status if len(results) == 1 else \
            self.status(d.MULTIPLE_RESULTS, "some entries were not acked; see each entry")
        return self.s.AckMessageResponse(status=status, entries=results)

    async def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        d = self.d
        try:
            group = self._group_name(request.group)
            topic = self._topic(request.topic).topic_name
            h, store_topic = self._handle(request.receipt_handle, group, topic)
            invisible = duration_ms(request.invisible_duration)
            if not 0 <= invisible <= MAX_INVISIBLE_MS:
                raise Refused(d.ILLEGAL_INVISIBLE_TIME, f"the invisible duration {invisible} ms is not in "
                                                        f"0..{MAX_INVISIBLE_MS} ms")
            flight = self.pop.change_invisible(group, store_topic, h.queue_id, h.queue_offset, invisible)
            if flight is not None:
                # the client chose the deadline (a push consumer's nack sets its backoff): the
                # endpoint no longer renews it, as the proxy drops the handle from its renew manager
                flight.renew_client = None
            else:
                # handed out before a restart and not handed out again: it is in flight again
                flight = self.pop.adopt(group, store_topic, h.queue_id, h.queue_offset, h.commitlog_offset,
                                        invisible)
            if flight is None:
                raise Refused(d.INVALID_RECEIPT_HANDLE, "the message of this receipt handle is no longer in "
                                                        "flight (acked, or its invisible duration ran out)")
        except Refused as r:
            return self.s.ChangeInvisibleDurationResponse(status=self.status(r.code, r.message))
        new = dataclasses.replace(h, ck_offset=flight.ck_offset, pop_time_ms=flight.pop_time_ms,
                                  invisible_ms=invisible).encode()
        return self.s.ChangeInvisibleDurationResponse(status=self.status(), receipt_handle=new)

    async def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        d = self.d
        try:
            group = self._group_name(request.group)
            topic = self._topic(request.topic).topic_name
            h, store_topic = self._handle(request.receipt_handle, group, topic)
            msg = self.src.store.look_message_by_offset(h.commitlog_offset)
            if msg is None or msg.topic != store_topic or msg.queue_offset != h.queue_offset:
                raise Refused(d.INVALID_RECEIPT_HANDLE, "the receipt handle names no stored message")
            copy = self.pop.revive_copy(group, topic, msg, max_attempts=0)  # 0: straight to the DLQ
            result = await self._put(copy)
            self.src.stats.on_send_back(group, copy.topic, result)  # as a 4.x consumer's send-back to the DLQ
            if not result.status.stored:
                raise Refused(d.INTERNAL_SERVER_ERROR, f"the DLQ copy was not stored: {result.status.value}")
            self.src.schedule_register()
            self.pop.ack(group, store_topic, h.queue_id, h.queue_offset)
        except Refused as r:
            return self.s.ForwardMessageToDeadLetterQueueResponse(status=self.status(r.code, r.message))
        return self.s.ForwardMessageToDeadLetterQueueResponse(status=self.status())

    # --- offsets ------------------------------------------------------------------------------------------
    def _queue(self, mq: Any) -> tuple[str, int]:
        tc = self._topic(mq.topic)
        if not 0 <= mq.id < tc.read_queue_nums:
            raise Refused(self.d.BAD_REQUEST, f"queue {mq.id} is not a queue of topic {tc.topic_name}")
        return tc.topic_name, mq.id

    async def UpdateOffset(self, request: Any, context: Any) -> Any:
        try:
            group = self._group_name(request.group)
            topic, qid = self._queue(request.message_queue)
            if request.offset < 0:
                raise Refused(self.d.ILLEGAL_OFFSET, f"offset {request.offset} is negative")
        except Refused as r:
            return self.s.UpdateOffsetResponse(status=self.status(r.code, r.message))
        self.src.offsets.commit(group, topic, qid, request.offset)
        self.pop.forget_group(group)  # the pop state restarts from the offset just set
        return self.s.UpdateOffsetResponse(status=self.status())

    async def GetOffset(self, request: Any, context: Any) -> Any:
        try:
            group = self._group_name(request.group)
            topic, qid = self._queue(request.message_queue)
        except Refused as r:
            return self.s.GetOffsetResponse(status=self.status(r.code, r.message))
        offset = self.src.offsets.query(group, topic, qid)
        if offset is None:
            return self.s.GetOffsetResponse(status=self.status(self.d.OFFSET_NOT_FOUND,
                                                               f"group {group} has no offset for {topic}:{qid}"))
        return self.s.GetOffsetResponse(status=self.status(), offset=offset)

    async def QueryOffset(self, request: Any, context: Any) -> Any:
        d = self.d
        try:
            topic, qid = self._queue(request.message_queue)
        except Refused as r:
            return self.s.QueryOffsetResponse(status=self.status(r.code, r.message))
        policy = request.query_offset_policy
        if policy == d.BEGINNING:
            offset = self.src.store.get_min_offset_in_queue(topic, qid)
        elif policy == d.END:
            offset = self.src.store.get_max_offset_in_queue(topic, qid)
        else:
            offset = self.src.store.get_offset_in_queue_by_time(topic, qid, timestamp_ms(request.timestamp))
        return self.s.QueryOffsetResponse(status=self.status(), offset=offset)

    # --- background work: renew push consumers' messages, deliver timed ones --------------------------
    def renewal(self, flight: Inflight, now: int) -> int | None:
        """The pop service's renewal hook: a push consumer still at work on a message (alive,
        within ``renew_max_ms`` of its receive) keeps it invisible for another while."""
        renew = flight.renew_client
        if renew is not None and now < flight.renew_until_ms and self._alive(renew, now):
            return self.ep.default_invisible_ms
        return None

    def _alive(self, client_id: str, now: int) -> bool:
        """The client sent a heartbeat or its settings within the broker's channel expiry and
        did not say it terminated (its messages are then not renewed: they come back)."""
        st = self.clients.get(client_id)
        return st is not None and now - st.last_seen_ms <= self.src.settings().channel_expired_timeout_ms

    def prune_clients(self, now: int) -> int:
        """Forget clients silent for longer than the broker's channel expiry (no heartbeat,
        no settings) that never sent NotifyClientTermination."""
        expiry = self.src.settings().channel_expired_timeout_ms
        gone = [cid for cid, st in self.clients.items() if now - st.last_seen_ms > expiry]
        for cid in gone:
            del self.clients[cid]
        return len(gone)

    def next_wakeup_ms(self) -> int | None:
        # timed messages are the store's (mqcore.store.timer), revives the broker's pop service:
        # the background task only prunes clients
        return None

