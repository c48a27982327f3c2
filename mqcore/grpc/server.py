"""GrpcEndpoint: the 5.x endpoint's gRPC server and its background task, run on the broker's
event loop next to the 4.x remoting server.

    endpoint = GrpcEndpoint(broker.grpc_source(), GrpcConfig(port=8081))  # what it uses, not the broker
    await endpoint.start()     # after the store and managers are loaded
    ...
    await endpoint.shutdown()  # before the store is shut down

The background task sleeps until the next invisible duration runs out or the next timed
message is due (at most ``IDLE_CHECK_S``), then delivers what is due (the broker's pop service
revives expired messages: ``mqcore.pop.service``).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from mqcore.acl import PlainAccessValidator
from mqcore.errors import ConfigError, MQError
from mqcore.grpc.auth import GrpcAccessChecker
from mqcore.grpc.flow import OutboundBudget
from mqcore.grpc.protocol import load_protocol
from mqcore.grpc.source import GrpcSource
from mqcore.grpc.tls import PermissiveFront, TlsMode, load_or_make_certificate
from mqcore.remoting.budget import ConnectionBudget
from mqcore.netaddr import parse_host_port
from mqcore.remoting.ratelimit import RateLimitedLog
from mqcore.service import cancel_and_wait, wait_for_wake

if TYPE_CHECKING:  # imported when the endpoint starts: the gRPC modules load with it
    from mqcore.grpc.service import MessagingService
    from mqcore.message import MessageExt

log = logging.getLogger(__name__)

IDLE_CHECK_S = 0.5
#: 4.9's delay levels from level 3 on: the retry backoff a 5.x consumer is told about
RETRY_LEVEL_FIRST = 3
#: the RPCs served (the others, pull and lite topics, answer UNIMPLEMENTED)
SERVED = ("QueryRoute", "Heartbeat", "Telemetry", "SendMessage", "EndTransaction", "QueryAssignment",
          "ReceiveMessage", "AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue",
          "UpdateOffset", "GetOffset", "QueryOffset", "NotifyClientTermination", "RecallMessage")
#: room for a request's other fields next to the largest body (maxMessageSize) a SendMessage may carry
REQUEST_OVERHEAD_BYTES = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class GrpcConfig:
    host: str = "127.0.0.1"
    port: int = 8081
    #: smallest invisible duration a receive may ask for (RocketMQ's proxy: 10 s)
    min_invisible_ms: int = 10_000
    #: a push consumer's receive (auto renew): invisible this long, renewed while the client lives
    default_invisible_ms: int = 60_000
    #: how long the endpoint keeps renewing one message for a push consumer (the proxy's 3 h)
    renew_max_ms: int = 3 * 3600 * 1000
    max_long_polling_ms: int = 30_000
    #: farthest delivery time a 5.x producer may ask for (RocketMQ's timerMaxDelaySec: 3 days)
    max_delay_ms: int = 3 * 24 * 3600 * 1000
    #: the largest request grpc takes in; larger ones are refused by grpc (RESOURCE_EXHAUSTED)
    #: before any of it is parsed. The broker sets maxMessageSize + REQUEST_OVERHEAD_BYTES
    max_receive_message_bytes: int = 4 * 1024 * 1024 + REQUEST_OVERHEAD_BYTES
    #: what all ReceiveMessage streams may hold together, popped and not yet written (mqcore.grpc.flow)
    receive_buffer_bytes: int = 8 * 1024 * 1024
    #: TLS on the port (grpcServerTlsMode): permissive serves TLS and plaintext, as the proxy's default
    tls_mode: TlsMode = TlsMode.PERMISSIVE
    #: a real certificate chain and key (PEM); without them a self-signed pair kept in ``store_dir``
    tls_cert: str | None = None
    tls_key: str | None = None
    store_dir: str = "."
    #: open connections at once (grpcMaxConnections: grpcio's connection quota, and the permissive
    #: front's count); one more is closed at accept. 0: no cap of its own
    max_connections: int = 0
    #: seconds a connection has to finish its TLS and HTTP/2 handshake (httpHeaderTimeoutSeconds;
    #: grpcio's own default is 120 s, long enough for 1,000 silent connections to pile up)
    handshake_timeout_s: float = 10.0
    #: HTTP/2 streams one connection may have open at once (grpcMaxConcurrentStreams: grpcio's
    #: SETTINGS_MAX_CONCURRENT_STREAMS; a stream past it is refused with RST_STREAM). Through the
    #: permissive front too: it relays each client connection to one grpcio connection of its own
    max_concurrent_streams: int = 100
    #: seconds a call has, from its headers, to send its whole request message (a unary
    #: request, or a ReceiveMessage's); past it the call ends DEADLINE_EXCEEDED
    #: (httpHeaderTimeoutSeconds, the time every port gives a request to arrive)
    request_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"grpcServerPort {self.port} is not a TCP port (0-65535)")
        if not 0 <= self.min_invisible_ms <= 12 * 3600 * 1000:
            raise ConfigError(f"grpcMinInvisibleTimeMillis {self.min_invisible_ms} is not in 0..12 h")
        if not 0 < self.default_invisible_ms <= 12 * 3600 * 1000:
            raise ConfigError(f"grpcDefaultInvisibleTimeMillis {self.default_invisible_ms} is not in 1 ms..12 h")
        if not 0 < self.max_concurrent_streams < 2 ** 31:
            raise ConfigError(f"grpcMaxConcurrentStreams {self.max_concurrent_streams} is not in 1..2^31-1")
        if not 0 < self.max_receive_message_bytes < 2 ** 31:
            raise ConfigError(f"grpcMaxInboundMessageSize {self.max_receive_message_bytes} is not in 1..2^31-1")
        if self.receive_buffer_bytes <= 0:
            raise ConfigError(f"grpcReceiveBufferBytes {self.receive_buffer_bytes} is not positive")


@dataclasses.dataclass(frozen=True)
class KnownClient:
    """A 5.x client as the endpoint knows it (from its settings and heartbeats)."""

    client_id: str
    client_type: str  # the ClientType name (PRODUCER, PUSH_CONSUMER...)
    group: str | None
    language: str
    version: str
    last_seen_ms: int
    #: the topics a consumer subscribes to (from its settings)
    topics: tuple[str, ...] = ()


class GrpcEndpoint:
    def __init__(self, source: GrpcSource, config: GrpcConfig) -> None:
        # fails here, with the install hint, when the optional extra is missing
        self.definition, self.service_pb2, self.service_grpc = load_protocol()
        self.src = source
        self.cfg = config
        self.port = config.port
        self.min_invisible_ms = config.min_invisible_ms
        self.default_invisible_ms = config.default_invisible_ms
        self.renew_max_ms = config.renew_max_ms
        self.max_long_polling_ms = config.max_long_polling_ms
        self.max_delay_ms = config.max_delay_ms
        self.retry_delays_ms = list(source.store_config().delay_levels_ms[RETRY_LEVEL_FIRST - 1:])
        self.receive_budget = OutboundBudget(config.receive_buffer_bytes)
        #: one line per interval for requests that do not parse (a fuzzer sends thousands a second)
        self.bad_input = RateLimitedLog(log, 10.0)
        #: a grpc.aio.Server once started (grpcio ships no annotations)
        self.server: Any = None
        self.front: PermissiveFront | None = None
        #: the port's connection cap and handshake deadline, the budget type of every port
        self.connections = ConnectionBudget("gRPC endpoint", config.max_connections, config.handshake_timeout_s,
                                            key="grpcMaxConnections", logger=log)
        #: the 5.x ACL check (aclEnable), or None
        self.access: GrpcAccessChecker | None = None
        self.servicer: MessagingService | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None

    async def start(self, pool: concurrent.futures.Executor | None = None) -> int:
        """``pool``: the broker's store-put executor (SYNC_FLUSH), or None for inline puts."""
        import grpc

        from mqcore.grpc.service import MessagingService

        loop = asyncio.get_running_loop()
        self.servicer = svc = MessagingService(self.src, self, self.definition, self.service_pb2)
        svc.pool = pool
        self.src.pop.renewal = svc.renewal  # the broker's pop service revives; the endpoint renews
        if self.src.acl is not None:
            self.access = GrpcAccessChecker(PlainAccessValidator(self.src.acl),
                                            lambda resource: svc._name(resource, ""))
        elif self.src.auth is not None:  # ACL 2.0: the same signature, users and rules as remoting
            self.access = GrpcAccessChecker(self.src.auth, lambda resource: svc._name(resource, ""))
        # a fixed 1 MiB receive window per call instead of BDP probing, which grew it to many MiB:
        # what a refused (oversized or unsigned) request can make grpc buffer stays that small,
        # and 4 MiB sends were no slower on loopback (measured while building this, issue 36)
        # grpcio holds the connections itself: the port's budget is handed to it as options
        options: list[tuple[str, int]] = [
            ("grpc.max_receive_message_length", self.cfg.max_receive_message_bytes),
            ("grpc.so_reuseport", 0), ("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1 << 20),
            ("grpc.server_handshake_timeout_ms", int(self.connections.header_timeout_s * 1000)),
            ("grpc.max_concurrent_streams", self.cfg.max_concurrent_streams)]
        if self.connections.max_connections:
            options.append(("grpc.max_allowed_incoming_connections", self.connections.max_connections))
        self.server = grpc.aio.server(options=options)
        self.server.add_generic_rpc_handlers((self._handlers(grpc, svc),))
        await self._listen(grpc)
        self._wake = wake = asyncio.Event()
        self._task = loop.create_task(self._background(svc, wake))
        log.info("gRPC endpoint (RocketMQ 5.x) serving on %s:%d (TLS %s)", self.cfg.host, self.port,
                 self.cfg.tls_mode.value)
        return self.port

    async def _listen(self, grpc: ModuleType) -> None:
        cfg, public = self.cfg, f"{self.cfg.host}:{self.cfg.port}"
        creds = None
        if cfg.tls_mode is not TlsMode.DISABLED:
            cert, key = load_or_make_certificate(cfg.tls_cert, cfg.tls_key, cfg.store_dir)
            creds = grpc.ssl_server_credentials([(key, cert)])
        if cfg.tls_mode is TlsMode.PERMISSIVE:
            # grpcio serves one protocol per port: both listen on loopback, the front picks per connection
            plain = self.server.add_insecure_port("127.0.0.1:0")
            secure = self.server.add_secure_port("127.0.0.1:0", creds)
            if not plain or not secure:
                raise MQError("the gRPC endpoint cannot listen on 127.0.0.1")
            await self.server.start()
            self.front = PermissiveFront(plain, secure, self.connections)
            try:
                self.port = await self.front.start(cfg.host, cfg.port)
            except OSError as e:
                raise MQError(f"the gRPC endpoint cannot listen on {public}: {e}") from e
            return
        if creds is None:
            self.port = self.server.add_insecure_port(public)
        else:
            self.port = self.server.add_secure_port(public, creds)
        if self.port == 0:
            raise MQError(f"the gRPC endpoint cannot listen on {public}")
        await self.server.start()

    def _handlers(self, grpc: ModuleType, svc: MessagingService) -> Any:
        """The service's methods, each taking its request as bytes: the ACL signature is
        checked before anything is parsed, and a request that does not parse is refused with
        one short (rate-limited) line in the log. grpc itself refuses, with
        RESOURCE_EXHAUSTED and before any of this, a message over ``max_receive_message_bytes``.
        Methods not listed (pull, lite topics) answer UNIMPLEMENTED."""
        service = self.service_pb2.DESCRIPTOR.services_by_name["MessagingService"]
        handlers = {}
        for method in service.methods:
            if method.name not in SERVED:
                continue
            request_type = getattr(self.service_pb2, method.input_type.name)
            response_type = getattr(self.service_pb2, method.output_type.name)
            fn = self._guarded(grpc, method.name, getattr(svc, method.name), request_type, response_type)
            # every method as a request stream, also those whose client sends one message: grpcio
            # calls a unary handler only once the request is whole, and has no deadline of its
            # own for that, so a call whose message never ends would hold its stream for ever.
            # A stream handler runs once the headers are in and reads the message under one
            # (``_request``)
            make = grpc.stream_stream_rpc_method_handler if method.server_streaming or method.client_streaming \
                else grpc.stream_unary_rpc_method_handler
            handlers[method.name] = make(fn, request_deserializer=None,
                                         response_serializer=response_type.SerializeToString)
        return grpc.method_handlers_generic_handler(service.full_name, handlers)

    def _parse(self, grpc: ModuleType, name: str, request_type: Any, raw: bytes, context: Any) -> Any:
        """The request, or None after the call was refused (INVALID_ARGUMENT): bad bytes are
        the client's error, worth a short line, not a traceback."""
        from google.protobuf.message import DecodeError
        try:
            return request_type.FromString(raw)
        except (DecodeError, ValueError) as e:
            host = self.client_address(context)
            # one key for every RPC: a fuzzer going through them all still gets one line per interval
            self.bad_input.warning("malformed", "malformed gRPC %s from %s (%d bytes) refused: %s", name,
                                   f"{host[0]}:{host[1]}" if host else "?", len(raw), str(e)[:120])
            return None

    def _guarded(self, grpc: ModuleType, name: str, fn: Callable[..., Any], request_type: Any,
                 response_type: Any) -> Callable[..., Any]:
        """``fn`` behind the checks that come before any work: with ACL on, the signature
        (mqcore.grpc.auth), on the raw bytes; then the parse; then, with ACL on, the
        permissions on the resources the request names."""
        checker = self.access
        d = self.definition
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        request_timeout_s = self.cfg.request_timeout_s

        def host(context: Any) -> str:
            addr = self.client_address(context)
            return addr[0] if addr else ""

        def refusal(denied: tuple[bool, str]) -> Any:
            authenticated, why = denied
            return d.Status(code=d.FORBIDDEN if authenticated else d.UNAUTHORIZED, message=why)

        def unauthenticated(context: Any) -> tuple[bool, str] | None:
            # who signed, from the headers alone: a stranger's request is never parsed
            return checker.check_needs({}, context.invocation_metadata(), host(context)) if checker else None

        if name == "Telemetry":
            telemetry_response = self.service_pb2.TelemetryCommand

            async def telemetry(request_iterator: AsyncIterator[bytes], context: Any) -> AsyncIterator[Any]:
                denied = unauthenticated(context)
                if denied:
                    yield telemetry_response(status=refusal(denied))
                    return
                meta = context.invocation_metadata()

                async def checked() -> AsyncIterator[Any]:
                    async for raw in request_iterator:
                        command = self._parse(grpc, name, request_type, raw, context)
                        if command is None:
                            await context.abort(invalid, f"the {name} command does not parse")
                        if checker and command.WhichOneof("command") == "settings":
                            denied = checker.check_needs(checker.settings_needed(command.settings), meta,
                                                         host(context))
                            if denied:
                                await context.abort(grpc.StatusCode.PERMISSION_DENIED, denied[1])
                        yield command

                async for out in fn(checked(), context):
                    yield out
            return telemetry

        async def request_bytes(context: Any) -> bytes:
            """The call's one request message, read within ``request_timeout_s`` of its headers
            (the call is aborted, DEADLINE_EXCEEDED, when it is not whole by then)."""
            try:
                raw = await asyncio.wait_for(context.read(), request_timeout_s)
            except asyncio.TimeoutError:
                self.bad_input.warning("slow", "gRPC %s from %s: no whole request within %.0f s "
                                       "(httpHeaderTimeoutSeconds), call ended", name, host(context) or "?",
                                       request_timeout_s)
                await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                    f"the {name} request was not complete within {request_timeout_s:.0f} s")
            if raw is grpc.aio.EOF:
                await context.abort(invalid, f"the {name} call sent no request message")
            return cast(bytes, raw)

        async def parsed(context: Any) -> Any:
            """The request when it may go on; else the response refusing it, or None (aborted)."""
            # read whole first, as grpcio's unary path did: one over the size limit is refused
            # RESOURCE_EXHAUSTED by grpc whoever sent it; the signature still comes before the parse
            raw = await request_bytes(context)
            denied = unauthenticated(context)
            if denied:
                return response_type(status=refusal(denied))
            request = self._parse(grpc, name, request_type, raw, context)
            if request is None:
                await context.abort(invalid, f"the {name} request does not parse")
            if checker:
                denied = checker.check(name, request, context.invocation_metadata(), host(context))
                if denied:
                    return response_type(status=refusal(denied))
            return request

        if name == "ReceiveMessage":  # a response stream, written by the servicer (its flow control)
            async def stream(_requests: Any, context: Any) -> None:
                request = await parsed(context)
                if isinstance(request, response_type):
                    await context.write(request)
                    return
                await fn(request, context)
            return stream

        async def unary(_requests: Any, context: Any) -> Any:
            request = await parsed(context)
            if isinstance(request, response_type):
                return request
            return await fn(request, context)
        return unary

    def client_address(self, context: Any) -> tuple[str, int] | None:
        """The calling client's (host, port): through the permissive front, the client's own
        address rather than the front's loopback connection."""
        _, _, rest = (context.peer() or "").partition(":")  # ipv4:1.2.3.4:5 / ipv6:[::1]:5
        try:
            addr = parse_host_port(rest)
        except (ValueError, OSError):
            return None
        if self.front is not None:
            return self.front.client_of(addr[1]) or addr
        return addr

    def wake(self) -> None:
        """Something due earlier than the background task expects (a new timed message)."""
        if self._wake is not None:
            self._wake.set()

    async def _background(self, svc: MessagingService, wake: asyncio.Event) -> None:
        while True:
            await wait_for_wake(wake, svc.next_wakeup_ms(), self.src.clock(), IDLE_CHECK_S)
            try:
                svc.prune_clients(self.src.clock())
            except (MQError, OSError) as e:
                log.warning("gRPC endpoint background work failed: %s", e)

    def known_clients(self) -> list[KnownClient]:
        """The 5.x clients that sent a heartbeat or their settings (for the dashboard and
        the metrics): empty before the endpoint starts."""
        if self.servicer is None:
            return []
        names = self.definition.ClientType
        language = getattr(self.definition, "Language", None)
        out: list[KnownClient] = []
        for st in list(self.servicer.clients.values()):
            try:
                kind = names.Name(st.client_type)
            except ValueError:
                kind = str(st.client_type)
            ua = getattr(st.settings, "user_agent", None)
            lang = ""
            if ua is not None and language is not None:
                try:
                    lang = language.Name(ua.language)
                except ValueError:
                    lang = str(ua.language)
            subs = getattr(st.settings, "subscription", None)
            topics = tuple(e.topic.name for e in subs.subscriptions) if subs is not None else ()
            out.append(KnownClient(st.client_id, kind, st.group, lang, ua.version if ua is not None else "",
                                   st.last_seen_ms, topics))
        return out

    def recover_orphaned(self, half: MessageExt) -> bool:
        """The transaction check-back of a half message no 4.x producer can answer: asked of
        a live 5.x publisher of its topic; False when there is none (or not started yet)."""
        return self.servicer is not None and self.servicer.recover_orphaned(half)

    async def shutdown(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self.front is not None:
            await self.front.close()  # no new connections; relayed ones end with the server's
            self.front = None
        if self.server is not None:
            await self.server.stop(grace=1.0)
            self.server = None
        log.info("gRPC endpoint stopped")
