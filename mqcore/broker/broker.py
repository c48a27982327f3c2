"""Broker: the composition root. It builds the store, the managers, the processors and
the remoting server, registers with the name server(s), and runs the periodic tasks.

    broker = Broker(BrokerConfig(...), StoreConfig(...))
    await broker.start()          # recovery, listen, register
    ...
    await broker.shutdown()       # unregister, stop serving, persist, flush, remove abort

Threads: everything runs on one asyncio loop; store puts run inline (ASYNC_FLUSH) or
in a thread pool (SYNC_FLUSH, where a put waits for its fsync).
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import json
import logging
import os
import zlib
from typing import TYPE_CHECKING, Any

from mqcore._compat import default_pipeline_kernels
from mqcore.acl import AclFile, BrokerAclHook, PlainAccessValidator, SessionCredentials
from mqcore.acl.fast import SendAclDecisions
from mqcore.acl.v2.admin import AuthAdmin, initial_users
from mqcore.acl.v2.check import AuthChecker, BrokerAuthHook
from mqcore.acl.v2.store import FILE_NAME as AUTH_FILE_NAME
from mqcore.acl.v2.store import AuthStore, dashboard_accounts
from mqcore.acl.validator import EXCEPTION_NAME as ACL_EXCEPTION_NAME
from mqcore.broker.clients import ClientManager, RebalanceLockManager
from mqcore.broker.conf import BROKER_KEYS, STORE_KEYS, update_runtime_config, write_back
from mqcore.broker.config import BrokerConfig
from mqcore.broker.filtering import check_client_config
from mqcore.broker.ha_slave import SLAVE_REFUSAL, Slave
from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
from mqcore.broker.long_polling import PullRequestHoldService
from mqcore.broker.metadata import DelayOffsetTable, TopicConfig
from mqcore.broker.request_mode import MessageRequestModeTable
from mqcore.broker.processors.admin import AdminProcessor
from mqcore.broker.processors.client_calls import ClientCallProcessor
from mqcore.broker.processors.clients import ClientProcessor
from mqcore.broker.processors.inspection import InspectionProcessor
from mqcore.broker.processors.config_queries import ConfigQueryProcessor
from mqcore.broker.processors.operations import OperationsProcessor
from mqcore.broker.processors.assignment import AssignmentProcessor
from mqcore.broker.processors.pop import PopProcessor
from mqcore.broker.processors.pull import PullProcessor
from mqcore.broker.processors.reply import ReplyProcessor
from mqcore.broker.processors.send import SendProcessor
from mqcore.broker.processors.pipelines import RequestPipelines
from mqcore.broker.processors.pull_pipeline import PullPipeline
from mqcore.broker.processors.send_pipeline import SendPipeline
from mqcore.broker.processors.transaction import EndTransactionProcessor
from mqcore.broker.metrics import MetricsServer
from mqcore.broker.runtime_info import BROKER_VERSION_DESC, RuntimeInfo
from mqcore.broker.schedule import ScheduleMessageService
from mqcore.store.timer.service import TimerMessageStore
from mqcore.broker.processors.recall import RecallProcessor
from mqcore.broker.stats import BrokerStats
from mqcore.remoting.bodies import INCREMENTAL_REGISTRATION
from mqcore.broker.topics import TopicConfigManager
from mqcore.broker.transaction import TransactionService
from mqcore.broker.validate import guarded, send_refusal
from mqcore.clock import system_clock_ms
from mqcore.config import FlushDiskType, StoreConfig
from mqcore.errors import AclConfigError, ConfigError, MQError, ProtocolError
from mqcore.message import pack_host
from mqcore.namesrv.config import NamesrvConfig
from mqcore.namesrv.server import NameServer
from mqcore.permissions import PERM_READ, PERM_WRITE
from mqcore.pop.service import PopService, PopSource
from mqcore.remoting import RemotingClient, RemotingServer, RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand, create_request
from mqcore.remoting.headers import (
    NotifyConsumerIdsChangedRequestHeader,
    RegisterBrokerRequestHeader,
    UnregisterBrokerRequestHeader,
)
from mqcore.remoting.tls import (ClientAuth, TlsMode, TlsServerConfig, client_context,
                                 load_or_make_certificate, server_context)
from mqcore.store.cleanup import CleanupPolicy, CleanupService
from mqcore.store.message_store import MessageStore

if TYPE_CHECKING:
    from mqcore.grpc.source import GrpcSource

log = logging.getLogger(__name__)

RC = RequestCode


class _LocalChannel:
    """The connection a dashboard request stands on when it goes to a processor: the browser's
    address (a send's born host, the log lines) and the per-connection attributes a processor
    may cache there. Nothing is ever written back: the answer is the processor's return value."""

    def __init__(self, remote_addr: str) -> None:
        self.remote_addr = remote_addr
        self.attributes: dict[str, object] = {}

class Broker:
    """The broker's composition root: builds the store, managers and processors, serves and registers."""

    def __init__(self, config: BrokerConfig, store_config: StoreConfig, *, clock=system_clock_ms,
                 recovery_progress=None, config_file: str | None = None):
        self.cfg = config
        #: the broker.conf it started with (``-c``): updateBrokerConfig saves its changes there
        self.config_file = config_file
        #: why the last run-time configuration change was not saved to it (None: saved)
        self.unsaved: str | None = None
        self.store_config = store_config
        self.clock = clock
        self.store = MessageStore(store_config, clock=clock, recovery_progress=recovery_progress)
        cdir = store_config.config_dir
        self.topics = TopicConfigManager(config, cdir, clock)
        self.groups = SubscriptionGroupManager(cdir, clock, config.auto_create_subscription_group)
        #: each group's PULL/POP mode per topic (SET_MESSAGE_REQUEST_MODE, QUERY_ASSIGNMENT)
        self.request_modes = MessageRequestModeTable.in_dir(cdir)
        self.offsets = ConsumerOffsetManager.in_dir(cdir)
        self.delay_offsets = DelayOffsetTable.in_dir(cdir)
        # liveness (heartbeats, rebalance locks) is measured on the wall clock: a test's virtual
        # clock (mqcore.testing) skips hours that the clients would have heartbeated through
        liveness = getattr(clock, "wall", clock)
        self.clients = ClientManager(liveness, config.channel_expired_timeout_ms, self._group_changed)
        self.locks = RebalanceLockManager(liveness)
        #: set (on the broker's loop) whenever a virtual clock moves; None on a real clock
        self._clock_moved: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: plain ACL (aclEnable): the file, reloaded when it changes, and the check before
        #: every request; without it nothing is wrapped
        self.acl: AclFile | None = None
        hook = None
        if config.acl_enable:
            acl_file = self.acl = AclFile(config.acl_file, clock=clock)
            hook = BrokerAclHook(PlainAccessValidator(lambda: acl_file.current))
        #: ACL 2.0's users and rules (config/auth.json): the AUTH_* admin requests keep them
        #: whether or not it is on; with authenticationEnabled/authorizationEnabled every request
        #: passes its check (the same single hook as ACL 1.0, which excludes it)
        auth = self.auth = AuthStore(os.path.join(cdir, AUTH_FILE_NAME), clock=clock)
        self.auth_enabled = config.authentication_enabled or config.authorization_enabled
        self._dashboard_accounts: tuple[Any, Any] = (None, None)  # (the users file version, its logins)
        self.auth_checker: AuthChecker | None = None  # remoting and gRPC share it
        if self.auth_enabled:
            self.auth_checker = AuthChecker(
                lambda: auth.current, authentication=config.authentication_enabled,
                authorization=config.authorization_enabled, cluster=config.broker_cluster_name,
                authentication_whitelist=config.authentication_whitelist,
                authorization_whitelist=config.authorization_whitelist)
            hook = BrokerAuthHook(self.auth_checker)
        self.server = RemotingServer(max_frame_bytes=config.max_frame_bytes, name="broker",
                                     idle_timeout_s=config.server_channel_max_idle_time_seconds,
                                     min_frame_bytes_per_s=config.server_frame_min_bytes_per_s,
                                     max_connections=config.server_max_connections,
                                     frame_budget_bytes=config.server_frame_budget_bytes,
                                     before_request=hook, reserve_fds=True)
        self.namesrv: NameServer | None = None
        self.stats = BrokerStats()
        self.metrics: MetricsServer | None = None
        self.dashboard = None  # the web dashboard (mqcore.dashboard), built at start when dashboardPort is set
        self.namesrv_addrs: list[str] = []
        self.hold: PullRequestHoldService | None = None
        self._send: SendProcessor | None = None  # built at start, once the pool and hold service exist
        self._pull: PullProcessor | None = None
        self._ops: OperationsProcessor | None = None
        self._calls: ClientCallProcessor | None = None  # 307/309 to consumers; its timeout is 10 s
        self.port = config.listen_port
        self.store_host = b""
        self._client: RemotingClient | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task] = []
        self._register_pending = False
        #: registrations go one at a time (``register_all``)
        self._register_lock = asyncio.Lock()
        self._services_started: list = []
        self._services: list = []  # extra services (delay levels, cleanup) with start()/shutdown()
        self.schedule = ScheduleMessageService(self.store, self.delay_offsets, clock=clock,
                                               persist_interval_ms=config.flush_delay_offset_interval_ms)
        self.cleanup = CleanupService(self.store, clock=clock, committed_offsets=self.offsets.committed_by_group)
        self.add_service(self.schedule)
        #: timer messages (RocketMQ 5 TimerMessageStore) for every protocol; off: refused at put
        self.timer = TimerMessageStore(self.store, clock=clock) if store_config.timer_wheel_enable else None
        if self.timer is not None:
            self.add_service(self.timer)
        self.add_service(self.cleanup)
        if self.acl is not None:
            self.add_service(self.acl)
        if self.auth_enabled:
            self.add_service(self.auth)  # hand edits of auth.json apply without a restart
        #: GET_BROKER_RUNTIME_INFO's table and VIEW_BROKER_STATS_DATA's windows, sampled once a second
        self.runtime = RuntimeInfo(store=self.store, stats=self.stats, delay_offsets=self.delay_offsets,
                                   configs=lambda: (self.cfg, self.store_config), disk_ratio=self.disk_ratio,
                                   clock=clock)
        #: half messages, END_TRANSACTION and the check-back (the one service 4.x and 5.x share)
        self.transactions = TransactionService(
            store=self.store, offsets=self.offsets, topics=self.topics, store_host=lambda: self.store_host,
            configs=lambda: self.cfg, clock=clock, file_reserved_hours=lambda: self.store_config.file_reserved_time_hours)
        #: brokerRole=SLAVE: the replication from the master (``ha_slave``), built at start
        self.slave: Slave | None = None
        self.grpc = None  # the RocketMQ 5.x endpoint (mqcore.grpc), built at start when enabled
        #: POP consumption, one service behind the remoting POP_MESSAGE family and the 5.x endpoint
        self.pop = PopService(PopSource(clock=clock, store=self.store, topics=self.topics, groups=self.groups,
                                        offsets=self.offsets, stats=self.stats, store_host=lambda: self.store_host,
                                        schedule_register=self.schedule_register),
                              clock, broker_name=lambda: self.cfg.broker_name, cluster=config.broker_cluster_name)

    # --- lifecycle ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Recover, listen, register. A start that fails (port in use, lock held...)
        undoes what it did, so it leaves no ``abort`` file: the next start is not a
        needless crash recovery."""
        try:
            await self._start()
        except BaseException:
            await self._undo_start()
            raise

    def remoting_tls(self) -> TlsServerConfig | None:
        """TLS for the remoting port and the embedded name server's (tls.server.*), None when
        disabled. The certificate is the configured one or the store's self-signed pair."""
        mode = TlsMode.parse(self.cfg.tls_server_mode)
        if mode is TlsMode.DISABLED:
            return None
        cert, key = load_or_make_certificate(self.cfg.tls_server_cert_path, self.cfg.tls_server_key_path,
                                             self.store_config.store_path,
                                             keys="tls.server.certPath and tls.server.keyPath")
        context = server_context(cert, key, client_auth=ClientAuth.parse(self.cfg.tls_server_need_client_auth),
                                 trust_cert_path=self.cfg.tls_server_trust_cert_path)
        return TlsServerConfig(mode, context, handshake_timeout_s=self.cfg.tls_handshake_timeout_s)

    async def _undo_start(self) -> None:
        for t in self._tasks:
            t.cancel()
        if self.slave is not None:
            await self.slave.stop()
        if self.metrics is not None:
            await self.metrics.shutdown()
        if self.dashboard is not None:
            await self.dashboard.shutdown()
        for step in (self.server.shutdown, self._client.shutdown if self._client else None,
                     self.namesrv.shutdown if self.namesrv else None):
            if step is not None:
                try:
                    await step()
                except (MQError, OSError) as e:
                    log.warning("undoing a failed start: %s", e)
        for svc in reversed(self._services_started):
            svc.shutdown()
        self.store.shutdown()  # removes the abort marker it wrote, releases the lock

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        if hasattr(self.clock, "subscribe"):  # a virtual clock: periodic tasks wait on its time
            self._clock_moved = asyncio.Event()
            self.clock.subscribe(self.clock_advanced)
        if self.cfg.grpc_server_enable:  # first: without mqcore[grpc] this stops with the install hint
            from mqcore.grpc.server import REQUEST_OVERHEAD_BYTES as GRPC_REQUEST_OVERHEAD
            from mqcore.grpc.server import GrpcConfig, GrpcEndpoint
            from mqcore.grpc.tls import TlsMode as GrpcTlsMode
            self.grpc = GrpcEndpoint(self.grpc_source(), GrpcConfig(host=self.cfg.listen_host, port=self.cfg.grpc_server_port,
                                                      min_invisible_ms=self.cfg.grpc_min_invisible_time_ms,
                                                      default_invisible_ms=self.cfg.grpc_default_invisible_time_ms,
                                                      tls_mode=GrpcTlsMode.parse(self.cfg.grpc_server_tls_mode),
                                                      tls_cert=self.cfg.grpc_server_tls_cert,
                                                      tls_key=self.cfg.grpc_server_tls_key,
                                                      store_dir=self.store_config.store_path,
                                                      max_delay_ms=self.store_config.timer_max_delay_sec * 1000,
                                                      max_receive_message_bytes=self.cfg.grpc_max_inbound_message_size
                                                      or self.store_config.max_message_size_bytes
                                                      + GRPC_REQUEST_OVERHEAD,
                                                      receive_buffer_bytes=self.cfg.grpc_receive_buffer_bytes,
                                                      max_connections=self.cfg.grpc_max_connections,
                                                      max_concurrent_streams=self.cfg.grpc_max_concurrent_streams,
                                                      handshake_timeout_s=self.cfg.http_header_timeout_seconds,
                                                      request_timeout_s=self.cfg.http_header_timeout_seconds))
        self.runtime.started()
        if self.acl is not None:
            self.acl.load()  # a bad plain_acl.yml stops the start here, before anything is served
        try:
            self.auth.load()  # ACL 2.0 on: a bad auth.json stops the start, as a bad plain_acl.yml does
        except AclConfigError:
            if self.auth_enabled:
                raise
            log.exception("ACL 2.0 is off; %s is not read", self.auth.path)
        if self.cfg.init_authentication_user or self.cfg.inner_client_authentication_credentials:
            self.auth.change(lambda data: initial_users(data, self.cfg.init_authentication_user,
                                                        self.cfg.inner_client_authentication_credentials))
        report = self.store.load()
        self.store.start()
        if self.is_slave:
            self.store.refuse_puts(SLAVE_REFUSAL)  # as Apache's store refuses puts on a slave
        self.topics.load()
        self.groups.load()
        self.request_modes.load()
        self.offsets.load()
        self.delay_offsets.load()
        self.hold = PullRequestHoldService(loop, self.store.get_max_offset_in_queue)
        self.store.add_arrival_listener(self.hold.arrivals)
        self.pop.load()  # the pop journal: what was invisible (or acked) before the restart still is
        if self.store_config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._executor = concurrent.futures.ThreadPoolExecutor(16, thread_name_prefix="mqcore-put")
        from mqcore.broker.ha import HAServer, commitlog_reader
        cl = self.store.commitlog
        # made before the processors: a SYNC_MASTER's send processor waits on it from the first send
        self.ha = HAServer(commitlog_reader(cl), lambda: cl.max_offset, cl.file_size,
                           batch=self.cfg.ha_transfer_batch_size,
                           heartbeat_s=self.cfg.ha_send_heartbeat_interval_ms / 1000,
                           min_offset=lambda: cl.min_offset)
        self.runtime.ha_lag = self.ha.lag
        self._register_processors()
        self.server.add_close_listener(self.clients.channel_closed)
        tls = self.remoting_tls()
        self.server.set_tls(tls)
        if self.cfg.embedded_namesrv and not self.cfg.namesrv_addr:
            # the broker port's limits, and one frame budget for both ports
            cfg = self.cfg
            self.namesrv = NameServer(NamesrvConfig(
                listen_host=cfg.listen_host, listen_port=cfg.namesrv_listen_port, max_frame_bytes=cfg.max_frame_bytes,
                server_channel_max_idle_time_seconds=cfg.server_channel_max_idle_time_seconds,
                server_frame_min_bytes_per_s=cfg.server_frame_min_bytes_per_s,
                server_max_connections=cfg.server_max_connections),
                self.clock, acl=self.acl, frame_budget=self.server.frame_budget)  # one ACL file, watched once
            self.namesrv.server.set_tls(tls)
            ns_port = await self.namesrv.start()
            # register where the embedded name server really listens; the registration still
            # advertises brokerIP1 to clients, which may differ from the listening address
            self.namesrv_addrs = [f"{self.local_host}:{ns_port}"]
        elif self.cfg.namesrv_addr:
            self.namesrv_addrs = [a.strip() for a in self.cfg.namesrv_addr.split(";") if a.strip()]
        self.port = await self.server.start(self.cfg.listen_host, self.cfg.listen_port)
        self.store_host = pack_host(self.cfg.broker_ip1, self.port)
        await self._start_vip()
        # Apache's default is listenPort + 1; a broker on a random port (listenPort=0) gets a random one
        ha_port = self.cfg.ha_listen_port or (self.port + 1 if self.cfg.listen_port else 0)
        try:
            self.ha_port = await self.ha.start(self.cfg.listen_host, ha_port)
        except OSError as e:
            if self.cfg.ha_listen_port:
                raise  # the port the operator chose: say so at start
            # listenPort + 1 is only a default: taken (another broker, another test), take any
            log.warning("HA port %d (listenPort + 1) is not free (%s): listening on a free port; set "
                        "haListenPort to choose one", ha_port, e)
            self.ha_port = await self.ha.start(self.cfg.listen_host, 0)
        ha = self.ha

        def wake_ha(*_args: object) -> None:
            loop.call_soon_threadsafe(ha.notify)  # arrivals may be reported off the loop's thread

        # behind a gate counting the connected slaves: with none (a single node, the usual case)
        # the compiled put reads a count and calls nothing (a Python call per arrival is one per
        # request when thousands of queues are written in turn: each request ends a run)
        ha.arrival_gate = default_pipeline_kernels().ArrivalGate(wake_ha)
        self.store.add_arrival_listener(ha.arrival_gate)
        for svc in self._services:
            if self.is_slave and svc in (self.schedule, self.timer):
                continue  # a slave delivers no delayed message: its master does, and the slave copies that
            svc.start()
            self._services_started.append(svc)
        if self.cfg.metrics_port:
            self.metrics = MetricsServer(self, self.cfg.listen_host, self.cfg.metrics_port,
                                         max_connections=self.cfg.http_max_connections,
                                         header_timeout_s=self.cfg.http_header_timeout_seconds)
            await self.metrics.start()
        self.pop.start(loop, self._put_async)
        if self.grpc is not None:
            await self.grpc.start(pool=self._executor)
        if self.cfg.dashboard_port:
            from mqcore.dashboard.server import DashboardServer  # aiohttp and Jinja2 load only when asked for
            self.dashboard = DashboardServer(self.dashboard_source(), self.cfg.listen_host, self.cfg.dashboard_port,
                                             clock=self.clock,
                                             allowed_hosts=self.cfg.dashboard_allowed_hosts.split(","),
                                             max_connections=self.cfg.http_max_connections,
                                             header_timeout_s=self.cfg.http_header_timeout_seconds)
            await self.dashboard.start()
        credentials = None
        if self.cfg.broker_access_key is not None:  # sign what this broker sends (registrations)
            credentials = SessionCredentials(self.cfg.broker_access_key, self.cfg.broker_secret_key)
        elif self.cfg.inner_client_authentication_credentials:  # ACL 2.0's name for the same account
            inner = json.loads(self.cfg.inner_client_authentication_credentials)
            credentials = SessionCredentials(inner["accessKey"], inner["secretKey"])
        # TLS to the name servers: asked for (tls.enable, the 4.x client's switch), or the
        # embedded one accepts nothing else
        to_namesrv_tls = self.cfg.tls_enable or (self.namesrv is not None and tls is not None
                                                 and tls.mode is TlsMode.ENFORCING)
        self._client = RemotingClient(before_request=credentials.sign if credentials else None,
                                      tls=client_context(trust_cert_path=self.cfg.tls_client_trust_cert_path)
                                      if to_namesrv_tls else None)
        if self.is_slave:
            self.slave = Slave(self.store, self._client, ha_master_address=self.cfg.ha_master_address,
                               topics=self.topics, offsets=self.offsets, delay_offsets=self.delay_offsets,
                               groups=self.groups, after_topics=self.schedule_register)
        await self.register_all(refusal_is_fatal=True)
        if self.slave is not None:
            self.slave.start()
        self._tasks = [loop.create_task(self._every(self.cfg.register_name_server_period_ms, self.register_all)),
                       loop.create_task(self._every(self.cfg.flush_consumer_offset_interval_ms, self._persist_offsets)),
                       loop.create_task(self._every(10_000, self._scan_channels)),
                       loop.create_task(self._every(1_000, self.runtime.sample)),
                       loop.create_task(self._every(self.cfg.transaction_check_interval_ms, self.check_transactions))]
        if self.is_slave:
            self._tasks.pop()  # transaction check-backs are the master's
        log.info("broker %s serving on %s (store %s); %s", self.cfg.broker_name, self.addr,
                 self.store_config.store_path, report.summary().splitlines()[0])

    async def _start_vip(self) -> None:
        """Apache 4.9's VIP channel (its "fast" remoting server): the remoting protocol on
        listenPort - 2 too, where an Apache slave's SlaveSynchronize asks for the topic configs
        and clients with vipChannelEnabled send. Not taken: a warning, the broker serves on
        (the port is derived, never configured). None for a random listenPort (listenPort=0:
        port - 2 of a random port is some other process's) or with TLS (one TLS listener)."""
        self.vip_port = 0
        vip = self.cfg.listen_port - 2
        if not self.cfg.listen_port or vip <= 0:
            return
        try:
            self.vip_port = await self.server.listen_also(self.cfg.listen_host, vip)
        except ConfigError as e:
            log.info("no VIP port (listenPort - 2 = %d): %s", vip, e)
        except OSError as e:
            log.warning("VIP port %d (listenPort - 2) is not free (%s): an Apache slave of this broker will "
                        "not sync topic configs, and clients with vipChannelEnabled cannot send", vip, e)

    async def shutdown(self) -> None:
        if hasattr(self.clock, "unsubscribe"):
            self.clock.unsubscribe(self.clock_advanced)
        for t in self._tasks:
            t.cancel()
        if self.hold is not None:
            self.hold.wake_all()
        if self.slave is not None:
            await self.slave.stop()
        await self.unregister_all()
        if self.metrics is not None:
            await self.metrics.shutdown()
        if self.dashboard is not None:
            await self.dashboard.shutdown()
        await self.server.shutdown()
        if self.grpc is not None:
            await self.grpc.shutdown()
        await self.pop.shutdown()
        if self._client is not None:
            await self._client.shutdown()
        if self.namesrv is not None:
            await self.namesrv.shutdown()
        if getattr(self, "ha", None) is not None:
            await self.ha.stop()
        for svc in reversed(self._services):
            svc.shutdown()
        for table in (self.offsets, self.delay_offsets, self.topics, self.groups):
            try:
                table.persist()
            except MQError as e:  # e.g. a full disk: still stop the store cleanly below
                log.error("at shutdown: %s", e)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        self.store.shutdown()
        log.info("broker %s stopped", self.cfg.broker_name)

    @property
    def is_slave(self) -> bool:
        return self.cfg.broker_role == "SLAVE"

    @property
    def addr(self) -> str:
        """The address advertised to clients (brokerIP1), as registered with the name servers."""
        return f"{self.cfg.broker_ip1}:{self.port}"

    @property
    def local_host(self) -> str:
        """A host this process listens on: ``listenHost``, or loopback for a wildcard."""
        return "127.0.0.1" if self.cfg.listen_host in ("0.0.0.0", "", "::") else self.cfg.listen_host

    @property
    def listen_addr(self) -> str:
        """An address where this broker accepts connections (``addr`` may not be one)."""
        return f"{self.local_host}:{self.port}"

    def _register_processors(self) -> None:
        send = SendProcessor(cfg=self.cfg, topics=self.topics, groups=self.groups, store=self.store,
                             pool=self._executor, schedule_register=self.schedule_register,
                             register_now=self.register_all,
                             store_host=lambda: self.store_host, stats=self.stats, transactions=self.transactions,
                             replica=self.ha if self.cfg.broker_role == "SYNC_MASTER" else None)
        end_tx = EndTransactionProcessor(transactions=self.transactions)
        reply = ReplyProcessor(send=send, clients=self.clients, store_host_text=lambda: self.addr, clock=self.clock)
        pull = PullProcessor(store=self.store, topics=self.topics, groups=self.groups, offsets=self.offsets,
                             clients=self.clients, hold=self.hold, long_polling_enable=self.cfg.long_polling_enable,
                             short_polling_time_mills=self.cfg.short_polling_time_mills, stats=self.stats,
                             enable_property_filter=self.cfg.enable_property_filter)
        managers = dict(store=self.store, topics=self.topics, groups=self.groups, offsets=self.offsets,
                        clients=self.clients)
        cli = ClientProcessor(locks=self.locks, register_now=self.register_all, **managers)
        hold = self.hold
        adm = AdminProcessor(broker_name=self.cfg.broker_name, schedule_register=self.schedule_register,
                             delay_offsets_json=self.delay_offsets_json, holding_count=lambda: hold.waiting_count,
                             runtime_figures=self.runtime_figures, **managers)
        ops = OperationsProcessor(broker_name=self.cfg.broker_name, configs=lambda: (self.cfg, self.store_config),
                                  bound_port=lambda: self.port, update_config=self.update_config,
                                  unsaved=lambda: self.unsaved, **managers)
        insp = InspectionProcessor(broker_name=self.cfg.broker_name, windows=self.runtime.windows,
                                   broker_addr=lambda: self.addr, clean_logic_files=self.cleanup.clean_now,
                                   now_ms=self.clock, **managers)
        adm.consume_tps = insp.group_tps
        calls = self._calls = ClientCallProcessor(broker_name=self.cfg.broker_name, store=self.store,
                                                  clients=self.clients)
        pop = PopProcessor(pop=self.pop, store=self.store, topics=self.topics, groups=self.groups, stats=self.stats,
                           clock=self.clock, broker_name=lambda: self.cfg.broker_name,
                           broker_permission=lambda: self.cfg.broker_permission,
                           enable_property_filter=lambda: self.cfg.enable_property_filter)
        queries = ConfigQueryProcessor(topics=self.topics, groups=self.groups)
        assignments = AssignmentProcessor(modes=self.request_modes, topics=self.topics, groups=self.groups,
                                          clients=self.clients,
                                          cfg=lambda: self.cfg)
        self._send, self._pull = send, pull  # apply_runtime_config hands them a new config
        self._ops = ops  # the dashboard's offset reset is the operations processor's
        table = {
            RC.SEND_MESSAGE: send.send, RC.SEND_BATCH_MESSAGE: send.send,
            RC.CONSUMER_SEND_MSG_BACK: send.send_back, RC.PULL_MESSAGE: pull.pull,
            RC.LITE_PULL_MESSAGE: pull.pull,  # 5.x lite pull consumers: the same pull (PullMessageProcessor)
            RC.QUERY_MESSAGE: adm.query_message, RC.VIEW_MESSAGE_BY_ID: adm.view_message,
            RC.HEART_BEAT: cli.heartbeat, RC.UNREGISTER_CLIENT: cli.unregister,
            RC.GET_CONSUMER_LIST_BY_GROUP: cli.consumer_list, RC.LOCK_BATCH_MQ: cli.lock_batch,
            RC.UNLOCK_BATCH_MQ: cli.unlock_batch, RC.QUERY_CONSUMER_OFFSET: cli.query_offset,
            RC.UPDATE_CONSUMER_OFFSET: cli.update_offset, RC.SEARCH_OFFSET_BY_TIMESTAMP: cli.search_offset,
            RC.GET_MAX_OFFSET: cli.max_offset, RC.GET_MIN_OFFSET: cli.min_offset,
            RC.GET_EARLIEST_MSG_STORETIME: cli.earliest_time,
            RC.UPDATE_AND_CREATE_TOPIC: self._registered(adm.create_topic), RC.DELETE_TOPIC_IN_BROKER: adm.delete_topic,
            RC.GET_ALL_TOPIC_CONFIG: adm.all_topic_config, RC.GET_TOPIC_STATS_INFO: adm.topic_stats,
            RC.GET_CONSUME_STATS: adm.consume_stats, RC.GET_CONSUMER_CONNECTION_LIST: adm.consumer_connections,
            RC.GET_ALL_CONSUMER_OFFSET: adm.all_consumer_offsets, RC.GET_ALL_DELAY_OFFSET: adm.all_delay_offsets,
            RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: adm.update_group,
            RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: adm.all_groups, RC.GET_BROKER_RUNTIME_INFO: adm.runtime_info,
            RC.CHECK_CLIENT_CONFIG: functools.partial(check_client_config, lambda: self.cfg.enable_property_filter),
            RC.UPDATE_BROKER_CONFIG: ops.update_broker_config, RC.GET_BROKER_CONFIG: ops.get_broker_config,
            RC.GET_PRODUCER_CONNECTION_LIST: ops.producer_connections,
            RC.DELETE_SUBSCRIPTIONGROUP: ops.delete_group, RC.INVOKE_BROKER_TO_RESET_OFFSET: ops.reset_offset,
            RC.QUERY_TOPIC_CONSUME_BY_WHO: ops.topic_consumed_by,
            RC.QUERY_CONSUME_TIME_SPAN: insp.consume_time_span, RC.CLEAN_EXPIRED_CONSUMEQUEUE: insp.clean_expired_consume_queue,
            RC.CLONE_GROUP_OFFSET: insp.clone_group_offset, RC.VIEW_BROKER_STATS_DATA: insp.broker_stats_data,
            RC.GET_BROKER_CONSUME_STATS: insp.broker_consume_stats, RC.QUERY_CONSUME_QUEUE: insp.query_consume_queue,
            RC.GET_CONSUMER_RUNNING_INFO: calls.consumer_running_info,
            RC.CONSUME_MESSAGE_DIRECTLY: calls.consume_message_directly,
            RC.END_TRANSACTION: end_tx.end,
            RC.SEND_REPLY_MESSAGE: reply.reply, RC.SEND_REPLY_MESSAGE_V2: reply.reply,
            RC.POP_MESSAGE: pop.pop_message, RC.ACK_MESSAGE: pop.ack_message,
            RC.BATCH_ACK_MESSAGE: pop.batch_ack_message, RC.CHANGE_MESSAGE_INVISIBLETIME: pop.change_invisible_time,
            RC.PEEK_MESSAGE: pop.peek_message, RC.NOTIFICATION: pop.notification, RC.POLLING_INFO: pop.polling_info,
            RC.QUERY_ASSIGNMENT: assignments.query_assignment,
            RC.SET_MESSAGE_REQUEST_MODE: assignments.set_message_request_mode,
            RC.GET_TOPIC_CONFIG: queries.topic_config, RC.GET_SUBSCRIPTIONGROUP_CONFIG: queries.group_config,
            RC.RECALL_MESSAGE: RecallProcessor(cfg=lambda: self.cfg, topics=self.topics, store=self.store,
                                               store_host=lambda: self.store_host, clock=self.clock).recall,
        }
        #: code -> the processor behind its name checks, as served: the dashboard's changes and
        #: queries go through these (``dashboard_source().admin_request``), not through copies
        self._processors = {code: guarded(code, fn, self.groups.consume_enabled) for code, fn in table.items()}
        for code, fn in self._processors.items():
            self.server.register_processor(code, fn)  # names first
        for code, fn in AuthAdmin(self.auth).processors().items():  # AUTH_CREATE_USER (3001) ... 3010
            self.server.register_processor(code, fn)
        self.server.register_processor(RC.SEND_MESSAGE_V2, guarded(RC.SEND_MESSAGE_V2, send.send,
                                                                    self.groups.consume_enabled))
        # the SEND pipeline's common case, straight from each connection's received bytes
        # and the PULL pipeline's, offered the frames the send pipeline does not take; with the
        # compiled kernels the connections are the send pipeline's C-based channel class
        if self.acl is None and not self.auth_enabled:  # no hook before requests
            send_pipeline = SendPipeline(send, max_frame_bytes=self.server.max_frame_bytes)
            self.server.register_frames_processor(RequestPipelines(
                send_pipeline,
                PullPipeline(pull, consume_enabled=self.groups.consume_enabled,
                             max_frame_bytes=self.server.max_frame_bytes)),
                send_pipeline.channel_class)
        elif not self.auth_enabled:
            # plain ACL: the compiled send core checks each signed send as the hook would
            # (mqcore/acl/fast.py) and leaves every other frame to the hook; the pull pipeline
            # does not check, so it is not installed. ACL 2.0 (and the twin kernels): none.
            acl_file = self.acl
            assert acl_file is not None
            send_pipeline = SendPipeline(send, max_frame_bytes=self.server.max_frame_bytes,
                                         acl=SendAclDecisions(lambda: acl_file.current))
            if send_pipeline.core is not None:
                self.server.register_frames_processor(RequestPipelines(send_pipeline), send_pipeline.channel_class,
                                                      checks_before_request=True)

    def _registered(self, processor):
        """``processor``, answering its success only once the name servers know the change,
        as the Java broker registers a created topic before it answers (RocketMQ 5's proxy
        creates its system topics and looks for their routes at once)."""
        async def answer_after(response):
            await self.register_all(incremental=True)
            return response

        def run(channel, request):
            response = processor(channel, request)
            if isinstance(response, RemotingCommand) and response.code == ResponseCode.SUCCESS:
                return answer_after(response)
            return response
        return run

    async def _put_async(self, msg):
        """A store put from the event loop (the pop service's revived copies): through the put
        pool under SYNC_FLUSH, where a put may wait for its fsync."""
        if self._executor is None:
            return self.store.put_message(msg)
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.store.put_message, msg)

    def grpc_source(self) -> GrpcSource:
        """The managers and facts the 5.x endpoint uses (``mqcore.grpc.source``), as the
        remoting processors are given theirs: the endpoint never holds the broker."""
        from mqcore.grpc.source import GrpcSource

        acl_file = self.acl
        return GrpcSource(
            clock=self.clock, store=self.store, topics=self.topics, groups=self.groups, offsets=self.offsets,
            stats=self.stats, transactions=self.transactions, settings=lambda: self.cfg,
            store_config=lambda: self.store_config, store_host=lambda: self.store_host,
            schedule_register=self.schedule_register, send_refusal=send_refusal, pop=self.pop,
            acl=(lambda: acl_file.current) if acl_file is not None else None, auth=self.auth_checker)

    def _dashboard_acl(self):
        """Who may log in to the dashboard: ACL 1.0's admin accounts, ACL 2.0's Super users, or
        None (no ACL: open, as the broker's port is)."""
        if self.acl is not None:
            return self.acl.current
        if self.auth_enabled:
            data = self.auth.current
            if self._dashboard_accounts[0] is not data:  # built once per version of the users file
                self._dashboard_accounts = (data, dashboard_accounts(data))
            return self._dashboard_accounts[1]
        return None

    def dashboard_source(self):
        """The managers and facts the web dashboard uses (``mqcore.dashboard.source``)."""
        from mqcore.dashboard.source import DashboardSource, GrpcClient

        def grpc_clients() -> list[GrpcClient]:
            if self.grpc is None:
                return []
            return [GrpcClient(c.client_id, c.client_type, c.group, c.language, c.version, c.last_seen_ms, c.topics)
                    for c in self.grpc.known_clients()]

        async def reset_offset(group: str, topic: str, timestamp: int) -> tuple[bool, str]:
            code, text = await self._ops.reset_group_offsets(group, topic, timestamp, True, offline_too=True)
            return code == ResponseCode.SUCCESS, "offsets reset" if code == ResponseCode.SUCCESS else text

        def create_topic(name: str, read_queues: int, write_queues: int, perm: int) -> TopicConfig:
            tc = TopicConfig(name, read_queues, write_queues, perm)  # as UPDATE_AND_CREATE_TOPIC does
            self.topics.update(tc)
            return tc

        async def admin_request(code: int, fields: dict[str, str], body: bytes | None,
                                remote_addr: str) -> RemotingCommand:
            # the request as a remoting client's reaches its processor (after the ACL hook,
            # which the dashboard's own admin login stands for)
            processor = self._processors.get(code)
            if processor is None:
                raise ProtocolError(f"the broker serves no request code {code}")
            answer = processor(_LocalChannel(remote_addr), create_request(code, fields, body))
            return await answer if inspect.isawaitable(answer) else answer

        cfg, scfg = self.cfg, self.store_config
        return DashboardSource(
            cluster_name=cfg.broker_cluster_name, broker_name=cfg.broker_name, version=BROKER_VERSION_DESC,
            listen_addr=lambda: self.listen_addr, store=self.store, topics=self.topics, groups=self.groups,
            offsets=self.offsets, clients=self.clients, stats=self.stats, runtime_figures=self.runtime_figures,
            disk_paths=lambda: {"commitlog": self.store_config.commitlog_dir,
                                "consume queues": self.store_config.consume_queue_dir},
            grpc_clients=grpc_clients, acl=self._dashboard_acl,
            schedule_register=self.schedule_register, store_host=lambda: self.store_host, reset_offset=reset_offset,
            create_topic=create_topic, disk_ratio=self.disk_ratio, admin_request=admin_request,
            settings=lambda: {"listenPort": self.port, "name server": ";".join(self.namesrv_addrs),
                              "flushDiskType": self.store_config.flush_disk_type.value,
                              "brokerPermission": self.cfg.broker_permission,
                              "autoCreateTopicEnable": self.cfg.auto_create_topic_enable,
                              "aclEnable": self.cfg.acl_enable, "metricsPort": self.cfg.metrics_port or "off",
                              "gRPC (5.x) endpoint": self.grpc.port if self.grpc is not None else "off",
                              "storePathRootDir": self.store_config.store_path})

    # --- store access -------------------------------------------------------------------------------
    def apply_runtime_config(self, new_cfg: BrokerConfig) -> None:
        """updateBrokerConfig: every reader of these keys looks at ``self.cfg`` per request."""
        old, self.cfg = self.cfg, new_cfg
        self.topics.cfg = new_cfg
        if self._send is not None and self._pull is not None:  # processors hold only what they use
            self._send.cfg = new_cfg
            self._pull.long_polling_enable = new_cfg.long_polling_enable
            self._pull.enable_property_filter = new_cfg.enable_property_filter
        self.groups.auto_create = new_cfg.auto_create_subscription_group
        if old.broker_permission != new_cfg.broker_permission:
            # a new topic-table version, as RocketMQ bumps it: a name server replaces a broker's
            # queue data only when that version moved
            self.topics.table.data_version.next(self.clock())
            self.schedule_register()

    # --- configuration at run time ---------------------------------------------------------------------
    def update_config(self, props: dict[str, str]) -> list[str]:
        """Apply RocketMQ-named settings to the running broker (``updateBrokerConfig``).

        Only ``mqcore.broker.conf.RUNTIME_KEYS`` can change; anything else, or a value out
        of range, raises ``ConfigError`` naming the key, and nothing is applied. Returns
        the keys whose value changed. With a ``config_file`` (``mqbroker -c``) the keys are
        saved there, as RocketMQ saves them, so they outlive a restart. A file that cannot be
        written (a read-only mount) does not stop the change, as on RocketMQ: it is applied,
        and ``self.unsaved`` says why it was not saved (None when it was)."""
        old_b, old_s = self.cfg, self.store_config
        new_b, new_s = update_runtime_config(old_b, old_s, props)
        self.unsaved = None
        if self.config_file is None:
            self.unsaved = "the broker was started without -c broker.conf: the change lasts until it stops"
        elif props:
            try:
                write_back(self.config_file, props)
            except ConfigError as e:
                self.unsaved = f"{e}: the change lasts until the broker stops"
        if self.unsaved and props:
            log.warning("configuration changed at run time is not saved: %s", self.unsaved)
        self.apply_runtime_config(new_b)  # the broker keys, to every reader (processors included)
        self.store_config = new_s
        self.store.update_config(new_s)
        self.cleanup.cfg = new_s
        self.cleanup.policy = CleanupPolicy(new_s)
        changed = [k for k in props if _value_of(k, old_b, old_s) != _value_of(k, new_b, new_s)]
        if changed:
            log.info("configuration changed at run time: %s",
                     ", ".join(f"{k}={_value_of(k, new_b, new_s)}" for k in changed))
        return changed

    def delay_offsets_json(self) -> bytes:
        return self.delay_offsets.to_json().encode()

    def add_service(self, service) -> None:
        """Register a service with ``start()``/``shutdown()`` (delay delivery, disk cleanup)."""
        self._services.append(service)

    # --- name server registration ------------------------------------------------------------------
    def _register_body(self, wrapper: dict, incremental: bool = False) -> bytes:
        perm = self.cfg.broker_permission
        if (perm & (PERM_READ | PERM_WRITE)) != (PERM_READ | PERM_WRITE):
            # a broker made read-only or write-only (updateBrokerConfig brokerPermission) announces
            # its topics that way, so clients stop sending to (or pulling from) it, as RocketMQ does
            for tc in wrapper["topicConfigTable"].values():
                tc["perm"] = tc["perm"] & perm
        body = {"filterServerList": [], "topicConfigSerializeWrapper": wrapper}
        if incremental:
            # not a RocketMQ field (a Java name server ignores it): tells ours that the
            # topics missing from this table were not deleted
            body[INCREMENTAL_REGISTRATION] = True
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    async def register_all(self, refusal_is_fatal: bool = False, incremental: bool = False) -> None:
        """Register with every name server. ``refusal_is_fatal`` (the start): a name server
        that refuses the registration for ACL reasons raises ``ConfigError``. ``incremental``
        (a topic created): only the topics changed since the last registration
        (``TopicConfigManager.registration``), unless a whole-table registration is pending.
        Registrations go one at a time, so each name server sees them in the order built."""
        async with self._register_lock:
            if incremental and self._register_pending:
                incremental = False  # the scheduled whole table goes now, this change with it
            if not incremental:
                self._register_pending = False
            wrapper, incremental = self.topics.registration(incremental)
            if wrapper is None:
                return  # sent by the registration that held the lock before this one
            await self._register_locked(self._register_body(wrapper, incremental), refusal_is_fatal)

    async def _register_locked(self, body: bytes, refusal_is_fatal: bool) -> None:
        header = RegisterBrokerRequestHeader(broker_name=self.cfg.broker_name, broker_addr=self.addr,
                                             cluster_name=self.cfg.broker_cluster_name,
                                             ha_server_addr=f"{self.cfg.broker_ip1}:{self.ha_port}",
                                             broker_id=self.cfg.broker_id, compressed=False,
                                             body_crc32=zlib.crc32(body) & 0x7FFFFFFF)
        for addr in self.namesrv_addrs:
            try:
                resp = await self._client.invoke(addr, create_request(RC.REGISTER_BROKER, header.to_ext(), body), 3000)
            except MQError as e:
                log.warning("registering with name server %s failed: %s", addr, e)
                continue
            if resp.code == ResponseCode.SUCCESS:
                if self.slave is not None:
                    self.slave.registered(resp.ext_fields or {})  # the master's addresses
                continue
            if (resp.remark or "").startswith(ACL_EXCEPTION_NAME):
                why = (f"name server {addr} refused this broker's registration because of its access control "
                       f"({resp.remark}); set brokerAccessKey/brokerSecretKey to an admin account of the name "
                       "server's plain_acl.yml")
                if refusal_is_fatal:
                    # a wrong key is a configuration error no retry fixes: serving without a route
                    # would look READY to the operator while no client can find this broker
                    raise ConfigError(why)
                log.error("%s", why)
            else:
                log.warning("name server %s refused the registration: %s", addr, resp.remark)

    async def unregister_all(self) -> None:
        if self._client is None:
            return
        header = UnregisterBrokerRequestHeader(broker_name=self.cfg.broker_name, broker_addr=self.addr,
                                               cluster_name=self.cfg.broker_cluster_name, broker_id=self.cfg.broker_id)
        for addr in self.namesrv_addrs:
            try:
                await self._client.invoke(addr, create_request(RC.UNREGISTER_BROKER, header.to_ext()), 3000)
            except MQError as e:
                log.warning("unregistering from name server %s failed: %s", addr, e)

    def schedule_register(self) -> None:
        """A topic changed: tell the name servers soon (coalesces bursts of changes)."""
        if self._register_pending or self._client is None:
            return
        self._register_pending = True
        asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(self.register_all()))

    # --- periodic work --------------------------------------------------------------------------------
    def clock_advanced(self) -> None:
        """A virtual clock moved (``VirtualClock.subscribe``; any thread): what waits for a
        time looks again now, not at its next wake-up."""
        for service in self._services:
            wakeup = getattr(service, "wakeup", None)
            if wakeup is not None:
                wakeup()
        loop, moved = self._loop, self._clock_moved
        if loop is not None and moved is not None and not loop.is_closed():
            loop.call_soon_threadsafe(moved.set)
            loop.call_soon_threadsafe(self.pop.wake)  # POP invisibility deadlines

    async def _sleep_ms(self, interval_ms: int) -> None:
        """Sleep ``interval_ms`` of the broker's clock (on a virtual one, until it has moved so far)."""
        moved = self._clock_moved
        if moved is None:
            await asyncio.sleep(interval_ms / 1000)
            return
        due = self.clock() + interval_ms
        while (left := due - self.clock()) > 0:
            moved.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(moved.wait(), left / 1000)

    async def _every(self, interval_ms: int, fn) -> None:
        while True:
            await self._sleep_ms(interval_ms)
            try:
                result = fn()
                if asyncio.iscoroutine(result):
                    await result
            except (MQError, OSError) as e:
                log.warning("periodic task %s failed: %s", getattr(fn, "__name__", fn), e)

    async def _persist_offsets(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self.offsets.persist)

    def _scan_channels(self) -> None:
        for channel in self.clients.scan_expired():
            log.info("closing channel %s: no heartbeat for %d ms", channel.remote_addr,
                     self.cfg.channel_expired_timeout_ms)
            self.clients.channel_closed(channel)
            channel.close("heartbeat expired")

    def _group_changed(self, group: str, channels: list) -> None:
        if not self.cfg.notify_consumer_ids_changed_enable:
            return
        ext = NotifyConsumerIdsChangedRequestHeader(consumer_group=group).to_ext()
        for ch in channels:
            cmd = create_request(RC.NOTIFY_CONSUMER_IDS_CHANGED, ext, oneway=True)
            asyncio.ensure_future(self._notify(ch, cmd))

    def check_transactions(self) -> None:
        """One check-back round (every transactionCheckInterval): CHECK_TRANSACTION_STATE to a
        live producer of each unresolved half message's group. On the loop, where the
        producer table and the channels live; a round is bounded (MAX_HALF_PER_ROUND)."""
        rnd = self.transactions.check(producer_channel=self.clients.producer_channel)
        for check in rnd.checks:
            if check.channel is not None:
                asyncio.ensure_future(self._notify(check.channel, check.command))
            elif self.grpc is None or not self.grpc.recover_orphaned(check.half):
                log.warning("half message %s of producer group %s: no live producer to ask; asked again next round",
                            check.half.properties.get("UNIQ_KEY"), check.group)
        if rnd.checks or rnd.discarded:
            log.info("transaction check: %d half messages checked, %d discarded, %d pending",
                     len(rnd.checks), rnd.discarded, rnd.pending)

    async def _notify(self, channel, cmd) -> None:
        try:
            await channel.send_request_oneway(cmd)
        except MQError as e:
            log.info("notify %s failed: %s", channel.remote_addr, e)

    # --- runtime figures (GET_BROKER_RUNTIME_INFO) --------------------------------------------------
    def disk_ratio(self, path: str) -> float:
        """Used fraction of the partition holding ``path``, measured as the disk cleanup measures
        it (one computation for brokerStatus, clusterList, the metrics and the cleanup)."""
        if not os.path.isdir(path):
            path = self.store_config.store_path
        return float(self.cleanup.disk_usage(path)) / 100

    def runtime_figures(self) -> dict[str, str]:
        """The runtime-info keys operators' tools read (clusterList's columns among them)."""
        return self.runtime.table()


def _value_of(key: str, broker: BrokerConfig, store: StoreConfig):
    if key in BROKER_KEYS:
        return getattr(broker, BROKER_KEYS[key][0])
    return getattr(store, STORE_KEYS[key][0])
