"""RouteInfoManager: which brokers exist and which queues each has per topic.

Brokers register every 30 s with their topic table. A broker whose registering
connection closes is dropped at once with its queues (RocketMQ's ``onChannelDestroy``):
clients stop routing to a dead broker within a second instead of erroring for two
minutes. A broker silent for 120 s is dropped as a fallback (a connection that hangs
without closing). A route lookup merges all brokers that carry the topic.
Pure logic with an injected clock; the name server wraps it in the protocol.
Threads: the name server's event loop only.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, Callable, TypedDict

from mqcore.permissions import PERM_WRITE

log = logging.getLogger(__name__)


def same_version(stored: dict[str, Any], asked: Any) -> bool:
    """DataVersion equality (timestamp and counter), as RocketMQ's ``DataVersion.equals``."""
    if not isinstance(asked, dict) or not stored:
        return False
    try:
        return (int(stored.get("timestamp", 0)) == int(asked.get("timestamp", -1))
                and int(stored.get("counter", 0)) == int(asked.get("counter", -1)))
    except (TypeError, ValueError):
        return False


class BrokerAddrs(TypedDict):
    """One broker name's entry of ``brokerAddrTable``: its cluster and broker id -> address."""

    cluster: str
    brokerAddrs: dict[int, str]


@dataclasses.dataclass
class BrokerLive:
    """When a broker last registered, and over which channel."""

    last_update_ms: int
    data_version: dict[str, Any]
    channel: object = None
    ha_server_addr: str = ""


@dataclasses.dataclass
class QueueData:
    """A topic's queues on one broker: read and write counts, permission, sys flag."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_json(self) -> dict[str, str | int]:
        return {"brokerName": self.broker_name, "perm": self.perm, "readQueueNums": self.read_queue_nums,
                "topicSysFlag": self.topic_sys_flag, "writeQueueNums": self.write_queue_nums}


class RouteInfoManager:
    """Clusters, brokers and topic routes as brokers register them; drops silent brokers."""

    def __init__(self, clock: Callable[[], int], expiry_ms: int = 120_000) -> None:
        self.clock = clock
        self.expiry_ms = expiry_ms
        self.topic_queues: dict[str, dict[str, QueueData]] = {}  # topic -> broker name -> queues
        self.broker_addrs: dict[str, BrokerAddrs] = {}  # broker name -> {"cluster", "brokerAddrs": {id: addr}}
        self.cluster_brokers: dict[str, set[str]] = {}
        self.live: dict[str, BrokerLive] = {}  # addr -> liveness

    def register(self, cluster: str, addr: str, broker_name: str, broker_id: int, ha_addr: str,
                 topic_wrapper: dict[str, Any] | None, channel: object = None, *,
                 incremental: bool = False) -> None:
        """A broker's registration. ``incremental``: its topic table holds only the topics
        changed since its last registration (``INCREMENTAL_REGISTRATION``), so the broker's
        other topics stay; a whole table replaces them."""
        now = self.clock()
        self.cluster_brokers.setdefault(cluster, set()).add(broker_name)
        bd = self.broker_addrs.setdefault(broker_name, {"cluster": cluster, "brokerAddrs": {}})
        # one address per broker id; an address that moved ids is replaced
        for bid, a in list(bd["brokerAddrs"].items()):
            if a == addr and bid != broker_id:
                del bd["brokerAddrs"][bid]
        first = addr not in self.live
        bd["brokerAddrs"][broker_id] = addr
        dv = (topic_wrapper or {}).get("dataVersion") or {}
        prev = self.live.get(addr)
        # as RocketMQ: the queue data is replaced only when the broker's topic table changed (its
        # dataVersion), so a wipeWritePerm holds until the broker's topics change
        changed = first or not dv or prev is None or not same_version(prev.data_version, dv)
        if broker_id == 0 and topic_wrapper is not None and changed:
            table = topic_wrapper.get("topicConfigTable") or {}
            for topic in [] if incremental else [t for t, b in self.topic_queues.items()
                                                 if broker_name in b and t not in table]:
                self._remove_topic_of_broker(topic, broker_name)
            for name, tc in table.items():
                self.topic_queues.setdefault(str(name), {})[broker_name] = QueueData(
                    broker_name, int(tc.get("readQueueNums", 0)), int(tc.get("writeQueueNums", 0)),
                    int(tc.get("perm", 6)), int(tc.get("topicSysFlag", 0)))
        self.live[addr] = BrokerLive(now, dict(dv), channel, ha_addr)
        if first:
            log.info("broker %s (%s, id %d, cluster %s) registered", broker_name, addr, broker_id, cluster)

    def master_of(self, broker_name: str, broker_id: int) -> tuple[str, str]:
        """``(masterAddr, haServerAddr)`` a registering slave is told (RouteInfoManager): its
        broker name's live master and the HA address that master registered; empty for a
        master, or while no master is registered."""
        if broker_id == 0:
            return "", ""
        bd = self.broker_addrs.get(broker_name)
        master = bd["brokerAddrs"].get(0) if bd else None
        live = self.live.get(master) if master else None
        if master is None or live is None:
            return "", ""
        return master, live.ha_server_addr

    def touch(self, addr: str) -> None:
        """A registered broker showed it is alive without registering (QUERY_DATA_VERSION)."""
        live = self.live.get(addr)
        if live is not None:
            live.last_update_ms = self.clock()

    def change_write_perm(self, broker_name: str, writable: bool) -> int:
        """Take the write permission from (or give it back to) every queue of ``broker_name`` in
        the routes (wipeWritePerm / addWritePerm); returns how many topics it changed."""
        count = 0
        for brokers in self.topic_queues.values():
            qd = brokers.get(broker_name)
            if qd is not None:
                qd.perm = (qd.perm | PERM_WRITE) if writable else (qd.perm & ~PERM_WRITE)
                count += 1
        return count

    def unregister(self, cluster: str, addr: str, broker_name: str, broker_id: int) -> None:
        self.live.pop(addr, None)
        bd = self.broker_addrs.get(broker_name)
        if bd is not None:
            if bd["brokerAddrs"].get(broker_id) == addr:
                del bd["brokerAddrs"][broker_id]
            if not bd["brokerAddrs"]:
                del self.broker_addrs[broker_name]
                self.cluster_brokers.get(cluster, set()).discard(broker_name)
                for topic in [t for t, b in self.topic_queues.items() if broker_name in b]:
                    self._remove_topic_of_broker(topic, broker_name)
        log.info("broker %s (%s) unregistered", broker_name, addr)

    def _remove_topic_of_broker(self, topic: str, broker_name: str) -> None:
        brokers = self.topic_queues.get(topic, {})
        brokers.pop(broker_name, None)
        if not brokers:
            self.topic_queues.pop(topic, None)

    def scan_not_active(self) -> list[str]:
        """Drop brokers silent for longer than the expiry; returns their addresses."""
        limit = self.clock() - self.expiry_ms
        gone = [addr for addr, live in self.live.items() if live.last_update_ms < limit]
        for addr in gone:
            log.warning("broker %s silent for %d ms: removed from routes", addr, self.expiry_ms)
            self.remove_addr(addr)
        return gone

    def channel_closed(self, channel: object) -> list[str]:
        """A connection closed: drop the brokers that registered over it; returns their
        addresses. A broker that has since re-registered over another connection keeps its
        routes, because its liveness now names the newer channel."""
        gone = [addr for addr, live in self.live.items() if live.channel is channel]
        for addr in gone:
            log.warning("broker %s: its connection closed, removed from routes", addr)
            self.remove_addr(addr)
        return gone

    def remove_addr(self, addr: str) -> None:
        for name, bd in list(self.broker_addrs.items()):
            for bid, a in list(bd["brokerAddrs"].items()):
                if a == addr:
                    self.unregister(bd["cluster"], addr, name, bid)

    # --- lookups --------------------------------------------------------------------------------------
    def route(self, topic: str) -> dict[str, Any] | None:
        """TopicRouteData (standard JSON, quoted broker-id keys), or None."""
        brokers = self.topic_queues.get(topic)
        if not brokers:
            return None
        queue_datas = [qd.to_json() for _, qd in sorted(brokers.items())]
        broker_datas = []
        for name in sorted(brokers):
            bd = self.broker_addrs.get(name)
            if bd and bd["brokerAddrs"]:
                broker_datas.append({"brokerAddrs": {str(k): v for k, v in sorted(bd["brokerAddrs"].items())},
                                     "brokerName": name, "cluster": bd["cluster"]})
        if not broker_datas:
            return None
        return {"brokerDatas": broker_datas, "filterServerTable": {}, "queueDatas": queue_datas}

    def cluster_info(self) -> dict[str, Any]:
        return {"brokerAddrTable": {name: {"brokerAddrs": {str(k): v for k, v in bd["brokerAddrs"].items()},
                                           "brokerName": name, "cluster": bd["cluster"]}
                                    for name, bd in sorted(self.broker_addrs.items())},
                "clusterAddrTable": {c: sorted(b) for c, b in sorted(self.cluster_brokers.items())}}

    def topics_of_cluster(self, cluster: str) -> list[str]:
        """Topics with queues on any broker of ``cluster`` (GET_TOPICS_BY_CLUSTER)."""
        names = self.cluster_brokers.get(cluster, set())
        return sorted(t for t, brokers in self.topic_queues.items() if names & brokers.keys())

    def topic_list(self) -> list[str]:
        return sorted(self.topic_queues)

    def delete_topic(self, topic: str) -> None:
        self.topic_queues.pop(topic, None)

    def master_addrs(self) -> list[str]:
        return [bd["brokerAddrs"][0] for bd in self.broker_addrs.values() if 0 in bd["brokerAddrs"]]
