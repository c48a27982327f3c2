"""NameServer: the route registry on the remoting protocol (port 9876 by default).

Serves REGISTER_BROKER / UNREGISTER_BROKER from brokers and GET_ROUTEINFO_BY_TOPIC,
GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER, DELETE_TOPIC_IN_NAMESRV
and the KV config calls from clients and tools. With ``auto_create_topic_at_route``
an unknown topic is created on every live master that allows auto-creation, so
clients that do not fall back to TBW102 still work. Runs on one asyncio loop.
"""
from __future__ import annotations

import asyncio
import logging
import zlib

from mqcore.errors import BrokerError, MQError
from mqcore.jsonutil import dumps_compact, loads_lenient
from mqcore.message import DEFAULT_TOPIC
from mqcore.namesrv.config import NamesrvConfig
from mqcore.namesrv.routes import RouteInfoManager
from mqcore.permissions import PERM_INHERIT
from mqcore.remoting import (
    RemotingClient,
    RemotingServer,
    RequestCode,
    ResponseCode,
    create_response,
)
from mqcore.remoting.command import create_request
from mqcore.remoting.headers import (
    CreateTopicRequestHeader,
    DeleteTopicRequestHeader,
    GetRouteInfoRequestHeader,
    RegisterBrokerRequestHeader,
    UnregisterBrokerRequestHeader,
)

log = logging.getLogger(__name__)


class NameServer:
    """The name server: serves routes to clients and registrations from brokers."""

    def __init__(self, config: NamesrvConfig, clock):
        self.cfg = config
        self.clock = clock
        self.routes = RouteInfoManager(clock, config.broker_channel_expired_ms)
        self.server = RemotingServer(max_frame_bytes=config.max_frame_bytes, name="namesrv")
        self.kv: dict[str, dict[str, str]] = {}
        self._scanner: asyncio.Task | None = None
        self._creating: dict[str, asyncio.Future] = {}
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
        self._broker_client = None

    async def start(self) -> int:
        self._broker_client = RemotingClient()
        port = await self.server.start(self.cfg.listen_host, self.cfg.listen_port)
        self._scanner = asyncio.get_running_loop().create_task(self._scan_loop(), name="namesrv-scan")
        log.info("name server listening on %s:%d", self.cfg.listen_host, port)
        return port

    async def shutdown(self) -> None:
        if self._scanner:
            self._scanner.cancel()
        await self.server.shutdown()
        if self._broker_client is not None:
            await self._broker_client.shutdown()

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.scan_not_active_broker_interval_ms / 1000)
            self.routes.scan_not_active()

    # --- brokers ---------------------------------------------------------------------------------
    def _register(self, channel, request):
        h = RegisterBrokerRequestHeader.from_command(request)
        body = bytes(request.body)
        if h.body_crc32 and (zlib.crc32(body) & 0x7FFFFFFF) != h.body_crc32:
            return create_response(request, ResponseCode.SYSTEM_ERROR, "register body CRC mismatch")
        if h.compressed:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   "compressed REGISTER_BROKER bodies are not supported; set compressedRegister=false")
        wrapper = None
        if body:
            data = loads_lenient(body)
            wrapper = data.get("topicConfigSerializeWrapper") if isinstance(data, dict) else None
        self.routes.register(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id, h.ha_server_addr,
                             wrapper, channel)
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"haServerAddr": "", "masterAddr": ""},
                               body=dumps_compact({"table": self.kv.get("ORDER_TOPIC_CONFIG", {})}))

    def _unregister(self, channel, request):
        h = UnregisterBrokerRequestHeader.from_command(request)
        self.routes.unregister(h.cluster_name, h.broker_addr, h.broker_name, h.broker_id)
        return create_response(request, ResponseCode.SUCCESS)

    # --- clients -----------------------------------------------------------------------------------
    async def _route(self, channel, request):
        h = GetRouteInfoRequestHeader.from_command(request)
        route = self.routes.route(h.topic)
        if route is None and self.cfg.auto_create_topic_at_route:
            route = await self._auto_create(h.topic)
        if route is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST,
                                   f"No topic route info in name server for the topic: {h.topic}")
        order = self.kv.get("ORDER_TOPIC_CONFIG", {}).get(h.topic)
        if order:
            route["orderTopicConf"] = order
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(route))

    async def _auto_create(self, topic: str) -> dict | None:
        """Ask every live master that carries an inheritable TBW102 to create ``topic``."""
        base = self.routes.topic_queues.get(DEFAULT_TOPIC, {})
        targets = [(name, qd) for name, qd in base.items() if qd.perm & PERM_INHERIT]
        if not targets or self._broker_client is None:
            return None
        for name, qd in targets:
            addr = self.routes.broker_addrs.get(name, {}).get("brokerAddrs", {}).get(0)
            if not addr:
                continue
            n = min(4, qd.write_queue_nums)
            header = CreateTopicRequestHeader(topic=topic, default_topic=DEFAULT_TOPIC, read_queue_nums=n,
                                              write_queue_nums=n, perm=qd.perm & ~PERM_INHERIT,
                                              topic_filter_type="SINGLE_TAG", topic_sys_flag=0, order=False)
            ext = dict(header.to_ext(), mqcoreAutoCreate="true")
            try:
                resp = await self._broker_client.invoke(addr, create_request(RequestCode.UPDATE_AND_CREATE_TOPIC,
                                                                             ext), 3000)
            except MQError as e:
                log.warning("auto-creating topic %s on %s failed: %s", topic, addr, e)
                continue
            if resp.code == ResponseCode.SUCCESS:
                got = resp.ext_fields
                self.routes.topic_queues.setdefault(topic, {})[name] = type(qd)(
                    name, int(got.get("readQueueNums", n)), int(got.get("writeQueueNums", n)),
                    int(got.get("perm", qd.perm & ~PERM_INHERIT)))
        return self.routes.route(topic)

    def _cluster_info(self, channel, request):
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(self.routes.cluster_info()))

    def _topic_list(self, channel, request):
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact({"topicList": self.routes.topic_list()}))

    def _delete_topic(self, channel, request):
        self.routes.delete_topic(DeleteTopicRequestHeader.from_command(request).topic)
        return create_response(request, ResponseCode.SUCCESS)

    def _kv_args(self, request, *names):
        try:
            return [request.ext_fields[n] for n in names]
        except KeyError as e:
            raise BrokerError(ResponseCode.SYSTEM_ERROR, f"missing header field {e.args[0]}") from e

    def _put_kv(self, channel, request):
        ns, key, value = self._kv_args(request, "namespace", "key", "value")
        self.kv.setdefault(ns, {})[key] = value
        return create_response(request, ResponseCode.SUCCESS)

    def _get_kv(self, channel, request):
        ns, key = self._kv_args(request, "namespace", "key")
        value = self.kv.get(ns, {}).get(key)
        if value is None:
            return create_response(request, ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"value": value})

    def _delete_kv(self, channel, request):
        ns, key = self._kv_args(request, "namespace", "key")
        self.kv.get(ns, {}).pop(key, None)
        return create_response(request, ResponseCode.SUCCESS)
