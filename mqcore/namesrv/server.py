"""NameServer: the route registry on the remoting protocol (port 9876 by default).

Serves REGISTER_BROKER / UNREGISTER_BROKER from brokers and GET_ROUTEINFO_BY_TOPIC,
GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER, DELETE_TOPIC_IN_NAMESRV,
the KV config calls and the operator calls of ``namesrv.admin`` (QUERY_DATA_VERSION,
GET_TOPICS_BY_CLUSTER, WIPE/ADD_WRITE_PERM_OF_BROKER, GET/UPDATE_NAMESRV_CONFIG). An unknown topic is TOPIC_NOT_EXIST, as
in RocketMQ: only a send creates a topic. A broker is dropped from the routes as soon
as the connection it registered over closes. Runs on one asyncio loop.
"""
from __future__ import annotations

import asyncio
import logging
import zlib

from mqcore.acl import AclFile, NamesrvAclHook, PlainAccessValidator
from mqcore.clock import Clock
from mqcore.errors import BrokerError
from mqcore.jsonutil import dumps_compact, loads_lenient
from mqcore.namesrv.admin import NamesrvAdmin
from mqcore.namesrv.config import NamesrvConfig
from mqcore.namesrv.routes import RouteInfoManager
from mqcore.remoting import RemotingServer, RequestCode, ResponseCode, create_response
from mqcore.remoting.bodies import INCREMENTAL_REGISTRATION
from mqcore.remoting.channel import Channel
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.framing import FrameBudget
from mqcore.remoting.headers import (
    DeleteTopicRequestHeader,
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    UnregisterBrokerRequestHeader,
)

log = logging.getLogger(__name__)


class NameServer:
    """The name server: serves routes to clients and registrations from brokers."""

    def __init__(self, config: NamesrvConfig, clock: Clock, *, acl: AclFile | None = None,
                 frame_budget: FrameBudget | None = None) -> None:
        """``acl``: an ACL file owned (loaded, watched) by the caller, e.g. the broker that
        embeds this name server; otherwise ``config.acl_file`` is loaded and watched here.
        ``frame_budget``: the large-frame budget of the embedding broker's remoting port, which
        this port then shares (one bound on the process's partial frames), else its own."""
        self.cfg = config
        self.clock = clock
        self.routes = RouteInfoManager(clock, config.broker_channel_expired_ms)
        #: plain ACL (mqcore's addition: Apache's 4.9 name server has none)
        #: the ACL file this server loads and watches itself (None: the caller's, or no ACL)
        self._owned_acl = AclFile(config.acl_file, clock=clock) if acl is None and config.acl_file else None
        self.acl = acl if acl is not None else self._owned_acl
        hook = None
        if self.acl is not None:
            acl_file = self.acl
            hook = NamesrvAclHook(PlainAccessValidator(lambda: acl_file.current))
        self.server = RemotingServer(max_frame_bytes=config.max_frame_bytes, name="namesrv", before_request=hook,
                                     idle_timeout_s=config.server_channel_max_idle_time_seconds,
                                     min_frame_bytes_per_s=config.server_frame_min_bytes_per_s,
                                     max_connections=config.server_max_connections,
                                     frame_budget_bytes=config.server_frame_budget_bytes,
                                     frame_budget=frame_budget, reserve_fds=True)
        self.kv: dict[str, dict[str, str]] = {}
        self._scanner: asyncio.Task[None] | None = None
        s = self.server
        s.register_processor(RequestCode.REGISTER_BROKER, self._register)
        s.register_processor(RequestCode.UNREGISTER_BROKER, self._unregister)
        s.register_processor(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route)
        s.register_processor(RequestCode.GET_BROKER_CLUSTER_INFO, self._cluster_info)
        s.register_processor(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self._topic_list)
        s.register_processor(RequestCode.DELETE_TOPIC_IN_NAMESRV, self._delete_topic)
        s.register_processor(RequestCode.PUT_KV_CONFIG, self._put_kv)
        s.register_processor(RequestCode.GET_KV_CONFIG, self._get_kv)
        s.register_processor(RequestCode.DELETE_KV_CONFIG, self._delete_kv)
        self.port = config.listen_port
        admin = NamesrvAdmin(self.routes, lambda: self.cfg, self._set_config, lambda: self.port)
        s.register_processor(RequestCode.QUERY_DATA_VERSION, admin.query_data_version)
        s.register_processor(RequestCode.GET_TOPICS_BY_CLUSTER, admin.topics_by_cluster)
        s.register_processor(RequestCode.WIPE_WRITE_PERM_OF_BROKER, admin.wipe_write_perm)
        s.register_processor(RequestCode.ADD_WRITE_PERM_OF_BROKER, admin.add_write_perm)
        s.register_processor(RequestCode.GET_NAMESRV_CONFIG, admin.get_config)
        s.register_processor(RequestCode.UPDATE_NAMESRV_CONFIG, admin.update_config)
        s.add_close_listener(self.routes.channel_closed)

    def _set_config(self, config: NamesrvConfig) -> None:
        self.cfg = config

    async def start(self) -> int:
        if self._owned_acl is not None:
            self._owned_acl.load()  # a bad file stops the start
        port = self.port = await self.server.start(self.cfg.listen_host, self.cfg.listen_port)
        if self._owned_acl is not None:
            self._owned_acl.start()
        self._scanner = asyncio.get_running_loop().create_task(self._scan_loop(), name="namesrv-scan")
        log.info("name server listening on %s:%d", self.cfg.listen_host, port)
        return port

    async def shutdown(self) -> None:
        if self._scanner:
            self._scanner.cancel()
        await self.server.shutdown()
        if self._owned_acl is not None:
            self._owned_acl.shutdown()

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.scan_not_active_broker_interval_ms / 1000)
            self.routes.scan_not_active()

    # --- brokers ---------------------------------------------------------------------------------
    def _register(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_command(request)
        body = bytes(request.body)
        if h.body_crc32 and (zlib.crc32(body) & 0x7FFFFFFF) != h.body_crc32:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "register body CRC mismatch")
        if h.compressed:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   "compressed REGISTER_BROKER bodies are not supported; set compressedRegister=false")
        wrapper = None
        incremental = False
        if body:
            data = loads_lenient(body)
            if isinstance(data, dict):
                wrapper = data.get("topicConfigSerializeWrapper")
                incremental = data.get(INCREMENTAL_REGISTRATION) is True
        self.routes.register(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id, h.ha_server_addr,
                             wrapper, channel, incremental=incremental)
        master_addr, ha_addr = self.routes.master_of(h.broker_name, h.broker_id)
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"haServerAddr": ha_addr,
                                                                          "masterAddr": master_addr},
                               body=dumps_compact({"table": self.kv.get("ORDER_TOPIC_CONFIG", {})}))

    def _unregister(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = UnregisterBrokerRequestHeader.from_command(request)
        self.routes.unregister(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        return create_response(request, ResponseCode.SUCCESS)

    # --- clients -----------------------------------------------------------------------------------
    def _route(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_command(request)
        # a lookup never creates the topic (as in RocketMQ): producers fall back to TBW102's
        # route and the broker creates the topic on the first send; consumers get TOPIC_NOT_EXIST
        route = self.routes.route(h.topic)
        if route is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST,
                                   f"No topic route info in name server for the topic: {h.topic}")
        order = self.kv.get("ORDER_TOPIC_CONFIG", {}).get(h.topic) if self.cfg.order_message_enable else None
        if order:
            route["orderTopicConf"] = order
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(route))

    def _cluster_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(self.routes.cluster_info()))

    def _topic_list(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact({"topicList": self.routes.topic_list()}))

    def _delete_topic(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        self.routes.delete_topic(DeleteTopicRequestHeader.from_command(request).topic)
        return create_response(request, ResponseCode.SUCCESS)

    def _kv_args(self, request: RemotingCommand, *names: str) -> list[str]:
        try:
            return [request.ext_fields[n] for n in names]
        except KeyError as e:
            raise BrokerError(ResponseCode.SYSTEM_ERROR, f"missing header field {e.args[0]}") from e

    def _put_kv(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        ns, key, value = self._kv_args(request, "namespace", "key", "value")
        self.kv.setdefault(ns, {})[key] = value
        return create_response(request, ResponseCode.SUCCESS)

    def _get_kv(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        ns, key = self._kv_args(request, "namespace", "key")
        value = self.kv.get(ns, {}).get(key)
        if value is None:
            return create_response(request, ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"value": value})

    def _delete_kv(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        ns, key = self._kv_args(request, "namespace", "key")
        self.kv.get(ns, {}).pop(key, None)
        return create_response(request, ResponseCode.SUCCESS)
