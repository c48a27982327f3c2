"""The operator calls beyond topics and groups, on an :class:`MQAdmin`'s connections: a
consumer's running info and direct consumption (the broker forwards both to the consumer), the
name servers' configuration and write permission, broker-wide consume stats, group offset
cloning and the brokers' stats windows. Same requests and answers as Apache's
``DefaultMQAdminExt``.

    with MQAdmin("127.0.0.1:9876") as admin:
        tools = AdminTools(admin)
        info = tools.running_info("order-workers", client_id)
"""
from __future__ import annotations

from typing import Any

from mqcore.admin.api import RETRY_GROUP_TOPIC_PREFIX, MQAdmin, parse_properties
from mqcore.errors import BrokerError, IllegalArgumentError
from mqcore.message import decode_offset_msg_id
from mqcore.remoting.codes import RequestCode, ResponseCode


#: NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG
ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


def parse_order_conf(text: str) -> dict[str, int]:
    """``brokerName:queueNums;...`` as broker name -> queue count; ValueError naming the bad
    entry (clients read the value into routes: a bad one would break their route parsing)."""
    out: dict[str, int] = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        name, sep, num = item.partition(":")
        if not sep or not name.strip() or not num.strip().isdigit() or int(num) <= 0 or ":" in num:
            raise ValueError(f"order conf entry {item!r} is not brokerName:queueNums (e.g. broker-a:4)")
        out[name.strip()] = int(num)
    if not out:
        raise ValueError(f"order conf {text!r} names no broker (brokerName:queueNums;...)")
    return out


class AdminTools:
    """Blocking; uses the admin's connections and timeout."""

    def __init__(self, admin: MQAdmin):
        self.admin = admin

    # --- a consumer, through its broker -----------------------------------------------------------
    def _consumer_broker(self, group: str) -> str:
        brokers = self.admin._topic_brokers(RETRY_GROUP_TOPIC_PREFIX + group)
        if not brokers:
            raise BrokerError(ResponseCode.CONSUMER_NOT_ONLINE, f"no broker knows the consumer group {group!r}")
        return brokers[0][1]

    def running_info(self, group: str, client_id: str, *, jstack: bool = False) -> dict[str, Any]:
        """``ConsumerRunningInfo`` of one consumer (GET_CONSUMER_RUNNING_INFO, answered by it)."""
        resp = self.admin._invoke(self._consumer_broker(group), RequestCode.GET_CONSUMER_RUNNING_INFO,
                                  {"consumerGroup": group, "clientId": client_id, "jstackEnable": str(jstack).lower()})
        info: dict[str, Any] = self.admin._json(resp)
        return info

    def consume_directly(self, group: str, client_id: str, offset_msg_id: str) -> dict[str, Any]:
        """Have one consumer run its listener on a stored message (CONSUME_MESSAGE_DIRECTLY):
        ``ConsumeMessageDirectlyResult`` (consumeResult CR_SUCCESS, CR_LATER, ...)."""
        try:
            ip, port, _ = decode_offset_msg_id(offset_msg_id)
        except IllegalArgumentError:
            raise IllegalArgumentError(f"{offset_msg_id!r} is not an offset message id (its broker is named "
                                       "in it; give the offsetMsgId a send returns)") from None
        resp = self.admin._invoke(f"{ip}:{port}", RequestCode.CONSUME_MESSAGE_DIRECTLY,
                                  {"consumerGroup": group, "clientId": client_id, "msgId": offset_msg_id})
        result: dict[str, Any] = self.admin._json(resp)
        return result

    # --- name servers ------------------------------------------------------------------------------
    def namesrv_config(self) -> dict[str, dict[str, str]]:
        """Each name server's configuration (GET_NAMESRV_CONFIG)."""
        out = {}
        for addr in self.admin.namesrv_addrs:
            resp = self.admin._invoke(addr, RequestCode.GET_NAMESRV_CONFIG)
            out[addr] = parse_properties(bytes(resp.body or b"").decode("utf-8", "replace"))
        return out

    def update_namesrv_config(self, properties: dict[str, str]) -> None:
        body = "".join(f"{k}={v}\n" for k, v in properties.items()).encode()
        for addr in self.admin.namesrv_addrs:
            self.admin._invoke(addr, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)

    def change_write_perm(self, broker_name: str, writable: bool) -> dict[str, int]:
        """Wipe (or add back) ``broker_name``'s write permission in every name server's routes:
        name server -> number of topics changed."""
        code = RequestCode.ADD_WRITE_PERM_OF_BROKER if writable else RequestCode.WIPE_WRITE_PERM_OF_BROKER
        key = "addTopicCount" if writable else "wipeTopicCount"
        out = {}
        for addr in self.admin.namesrv_addrs:
            resp = self.admin._invoke(addr, code, {"brokerName": broker_name})
            out[addr] = int(resp.ext_fields.get(key, "0"))
        return out

    # --- order configuration (the name servers' ORDER_TOPIC_CONFIG namespace) ----------------------
    def order_conf(self, topic: str) -> str:
        """A topic's order configuration (GET_KV_CONFIG); BrokerError QUERY_NOT_FOUND when it has none."""
        resp = self.admin._invoke_namesrv(RequestCode.GET_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": topic})
        return str(resp.ext_fields.get("value", ""))

    def put_order_conf(self, topic: str, order_conf: str) -> None:
        """Set the topic's order configuration on every name server (PUT_KV_CONFIG), replacing
        what was there, as Apache's ``updateOrderConf -m put`` does."""
        parse_order_conf(order_conf)
        self.admin.put_order_conf(topic, order_conf)

    def delete_order_conf(self, topic: str) -> None:
        """Remove the topic's order configuration from every name server (DELETE_KV_CONFIG)."""
        for addr in self.admin.namesrv_addrs:
            self.admin._invoke(addr, RequestCode.DELETE_KV_CONFIG, {"namespace": ORDER_TOPIC_CONFIG, "key": topic})

    # --- brokers ------------------------------------------------------------------------------------
    def broker_consume_stats(self, addr: str, *, order: bool = False) -> dict[str, Any]:
        """Every group's consume stats on one broker (GET_BROKER_CONSUME_STATS)."""
        resp = self.admin._invoke(addr, RequestCode.GET_BROKER_CONSUME_STATS, {"isOrder": str(order).lower()})
        stats: dict[str, Any] = self.admin._json(resp)
        return stats

    def clone_group_offset(self, src_group: str, dest_group: str, topic: str, *, offline: bool = False) -> list[str]:
        """Copy ``src_group``'s committed offsets of ``topic`` to ``dest_group`` on every broker of
        the topic; returns the brokers' addresses."""
        addrs = [a for _n, a in self.admin._topic_brokers(topic)]
        for addr in addrs:
            self.admin._invoke(addr, RequestCode.CLONE_GROUP_OFFSET, {"srcGroup": src_group, "destGroup": dest_group,
                                                                       "topic": topic, "offline": str(offline).lower()})
        return addrs

    def stats_data(self, addr: str, stats_name: str, stats_key: str) -> dict[str, Any] | None:
        """A stats key's minute, hour and day windows (VIEW_BROKER_STATS_DATA); None when the
        broker has never counted it."""
        resp = self.admin._invoke(addr, RequestCode.VIEW_BROKER_STATS_DATA,
                                  {"statsName": stats_name, "statsKey": stats_key},
                                  ok=(ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR))
        if resp.code != ResponseCode.SUCCESS:
            if "not exist" in (resp.remark or ""):
                return None
            raise BrokerError(resp.code, resp.remark, addr)
        data: dict[str, Any] = self.admin._json(resp)
        return data
