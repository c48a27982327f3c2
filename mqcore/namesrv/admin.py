"""The name server's operator requests: QUERY_DATA_VERSION (322), GET_TOPICS_BY_CLUSTER (224),
WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327) and GET_NAMESRV_CONFIG (319) /
UPDATE_NAMESRV_CONFIG (318), answered as RocketMQ 4.9's ``DefaultRequestProcessor`` does.

QUERY_DATA_VERSION is what keeps a Java broker with ``forceRegister=false`` registered: every
period it asks whether the name server's copy of its topic table is current, re-registers only
when told it changed, and otherwise counts on the question itself refreshing its liveness.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from mqcore.errors import ProtocolError
from mqcore.jsonutil import dumps_compact, loads_lenient
from mqcore.namesrv.config import NamesrvConfig
from mqcore.namesrv.routes import RouteInfoManager, same_version
from mqcore.remoting import ResponseCode, create_response
from mqcore.remoting.channel import Channel
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.headers import GetTopicsByClusterRequestHeader, WipeWritePermOfBrokerRequestHeader

log = logging.getLogger(__name__)

#: keys RocketMQ never lets UPDATE_NAMESRV_CONFIG change (``configBlackList``'s defaults)
BLACK_LIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"})
#: RocketMQ key -> (NamesrvConfig field, parser) of the keys a running name server takes
RUNTIME_KEYS: dict[str, tuple[str, Callable[[str], object]]] = {
    "orderMessageEnable": ("order_message_enable", lambda v: v.strip().lower() == "true"),
}


def _parse_properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ProtocolError(f"not a key=value line: {line!r}")
        out[key.strip()] = value.strip()
    return out


class NamesrvAdmin:
    """``config`` / ``set_config`` read and replace the server's live NamesrvConfig;
    ``bound_port`` is the port listened on. Runs on the name server's event loop."""

    def __init__(self, routes: RouteInfoManager, config: Callable[[], NamesrvConfig],
                 set_config: Callable[[NamesrvConfig], None], bound_port: Callable[[], int]):
        self.routes = routes
        self.config = config
        self.set_config = set_config
        self.bound_port = bound_port

    def query_data_version(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        addr = request.ext_fields.get("brokerAddr")
        if not addr:
            raise ProtocolError("QUERY_DATA_VERSION without brokerAddr")
        try:
            version = loads_lenient(bytes(request.body)) if request.body else None
        except ProtocolError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"malformed DataVersion body: {e}")
        live = self.routes.live.get(addr)
        changed = live is None or not same_version(live.data_version, version)
        if not changed:
            self.routes.touch(addr)  # asking counts as being alive, as RocketMQ counts it
        body = dumps_compact(live.data_version) if live is not None and live.data_version else b""
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"changed": str(changed).lower()}, body=body)

    def topics_by_cluster(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = GetTopicsByClusterRequestHeader.from_command(request)
        topics = self.routes.topics_of_cluster(h.cluster)
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact({"topicList": topics}))

    def wipe_write_perm(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_command(request)
        count = self.routes.change_write_perm(h.broker_name, False)
        log.info("wipe write perm of broker[%s], client: %s, %d", h.broker_name, channel.remote_addr, count)
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"wipeTopicCount": str(count)})

    def add_write_perm(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_command(request)
        count = self.routes.change_write_perm(h.broker_name, True)
        log.info("add write perm of broker[%s], client: %s, %d", h.broker_name, channel.remote_addr, count)
        return create_response(request, ResponseCode.SUCCESS, ext_fields={"addTopicCount": str(count)})

    def config_lines(self) -> dict[str, str]:
        """The configuration under RocketMQ's key names (mqcore's own keys in its own words)."""
        c = self.config()
        return {"listenPort": str(self.bound_port()), "orderMessageEnable": str(c.order_message_enable).lower(),
                "brokerExpiredMills": str(c.broker_channel_expired_ms),
                "scanNotActiveBrokerInterval": str(c.scan_not_active_broker_interval_ms),
                "aclEnable": str(c.acl_file is not None).lower(), "clusterTest": "false", "productEnvName": "center"}

    def get_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        text = "".join(f"{k}={v}\n" for k, v in sorted(self.config_lines().items()))
        return create_response(request, ResponseCode.SUCCESS, body=text.encode())

    def update_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        log.info("updateConfig called by %s", channel.remote_addr)
        if not request.body:
            return create_response(request, ResponseCode.SUCCESS)
        try:
            props = _parse_properties(bytes(request.body).decode("utf-8"))
        except (UnicodeDecodeError, ProtocolError) as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"string2Properties error: {e}")
        if BLACK_LIST & props.keys():
            return create_response(request, ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        unknown = sorted(k for k in props if k not in RUNTIME_KEYS)
        if unknown:
            return create_response(request, ResponseCode.SYSTEM_ERROR,
                                   f"not a name server key that changes at run time: {', '.join(unknown)} "
                                   f"(these do: {', '.join(sorted(RUNTIME_KEYS))})")
        changes: dict[str, Any] = {RUNTIME_KEYS[k][0]: RUNTIME_KEYS[k][1](v) for k, v in props.items()}
        self.set_config(dataclasses.replace(self.config(), **changes))
        log.info("name server configuration changed at run time: %s", props)
        return create_response(request, ResponseCode.SUCCESS)

