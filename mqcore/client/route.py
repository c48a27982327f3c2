"""Topic routes from the name server and the per-topic views built from them.

``TopicRouteData`` is the GET_ROUTEINFO_BY_TOPIC (105) body (remoting §6): which
brokers (``BrokerData``: name -> {brokerId: "ip:port"}) hold how many queues
(``QueueData``) of a topic. Broker-id keys arrive quoted (standard JSON, what a 4.9.4+
name server sends) or unquoted (fastjson default); both parse.

From a route the client derives
* ``TopicPublishInfo`` (producer): the writable queues of brokers that have a master,
  with the round-robin queue choice of ``TopicPublishInfo.java``;
* the subscribe set (consumer): every readable queue.

Route objects are immutable values; ``TopicPublishInfo`` has one mutable counter and
is used from the client's event-loop thread only.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Any

from mqcore.errors import ProtocolError
from mqcore.jsonutil import loads_lenient
from mqcore.permissions import PERM_INHERIT, PERM_PRIORITY, PERM_READ, PERM_WRITE
from mqcore.remoting.bodies import MessageQueue

__all__ = [
    "PERM_PRIORITY",
    "PERM_READ",
    "PERM_WRITE",
    "PERM_INHERIT",
    "MASTER_ID",
    "QueueData",
    "BrokerData",
    "TopicRouteData",
    "TopicPublishInfo",
    "route_to_publish_info",
    "route_to_subscribe_info",
]

MASTER_ID = 0


def _int(obj: dict[str, Any], key: str, default: int = 0) -> int:
    value = obj.get(key, default)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"route field {key!r} is not an integer: {value!r}")
    return value


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class QueueData:
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ | PERM_WRITE
    topic_sys_flag: int = 0

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    @classmethod
    def from_json_obj(cls, obj: Any) -> QueueData:
        if not isinstance(obj, dict) or not isinstance(obj.get("brokerName"), str):
            raise ProtocolError(f"QueueData without brokerName: {obj!r}")
        return cls(obj["brokerName"], _int(obj, "readQueueNums"), _int(obj, "writeQueueNums"),
                   _int(obj, "perm", PERM_READ | PERM_WRITE),
                   _int(obj, "topicSysFlag", _int(obj, "topicSynFlag", 0)))


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerData:
    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.broker_addrs.get(MASTER_ID)

    def any_addr(self) -> str | None:
        """The master if present, else any slave (``BrokerData.selectBrokerAddr``)."""
        master = self.master_addr
        if master is not None:
            return master
        addrs = list(self.broker_addrs.values())
        return random.choice(addrs) if addrs else None

    @classmethod
    def from_json_obj(cls, obj: Any) -> BrokerData:
        if not isinstance(obj, dict) or not isinstance(obj.get("brokerName"), str):
            raise ProtocolError(f"BrokerData without brokerName: {obj!r}")
        raw = obj.get("brokerAddrs") or {}
        if not isinstance(raw, dict):
            raise ProtocolError(f"BrokerData.brokerAddrs is not an object: {raw!r}")
        addrs: dict[int, str] = {}
        for key, addr in raw.items():
            try:
                addrs[int(key)] = str(addr)
            except (TypeError, ValueError) as e:
                raise ProtocolError(f"broker id {key!r} is not an integer") from e
        return cls(str(obj.get("cluster") or ""), obj["brokerName"], addrs)


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRouteData:
    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    @classmethod
    def decode(cls, body: bytes | str) -> TopicRouteData:
        obj = loads_lenient(body)
        if not isinstance(obj, dict):
            raise ProtocolError("TopicRouteData body is not a JSON object")
        qds = obj.get("queueDatas") or []
        bds = obj.get("brokerDatas") or []
        if not isinstance(qds, list) or not isinstance(bds, list):
            raise ProtocolError("TopicRouteData queueDatas/brokerDatas are not arrays")
        conf = obj.get("orderTopicConf")
        return cls(tuple(sorted(QueueData.from_json_obj(q) for q in qds)),
                   tuple(sorted((BrokerData.from_json_obj(b) for b in bds), key=lambda b: b.broker_name)),
                   conf if isinstance(conf, str) and conf else None)

    def broker(self, broker_name: str) -> BrokerData | None:
        for bd in self.broker_datas:
            if bd.broker_name == broker_name:
                return bd
        return None

    def with_queue_nums_capped(self, limit: int) -> TopicRouteData:
        """The TBW102 route reused for a topic that does not exist yet: every broker
        offers ``min(limit, readQueueNums)`` queues (``updateTopicRouteInfoFromNameServer``)."""
        qds = tuple(dataclasses.replace(q, read_queue_nums=min(limit, q.read_queue_nums),
                                        write_queue_nums=min(limit, q.read_queue_nums))
                    for q in self.queue_datas)
        return dataclasses.replace(self, queue_datas=qds)


class TopicPublishInfo:
    """Writable queues of a topic with the producer's round-robin counter.

    ``select_one_message_queue(last_broker_name)`` is Java's: step the counter, and
    when retrying skip queues of the broker that just failed unless no other exists.
    """

    __slots__ = ("topic", "order_topic", "message_queues", "route", "_counter", "have_route")

    def __init__(self, topic: str, message_queues: list[MessageQueue], route: TopicRouteData | None,
                 *, order_topic: bool = False, rng: random.Random | None = None) -> None:
        self.topic = topic
        self.message_queues = message_queues
        self.route = route
        self.order_topic = order_topic
        self.have_route = route is not None
        self._counter = (rng or random).randrange(0, 1 << 16)  # Java: random start per thread

    @property
    def ok(self) -> bool:
        return bool(self.message_queues)

    def next_index(self) -> int:
        self._counter += 1
        return self._counter

    def select_one_message_queue(self, last_broker_name: str | None = None) -> MessageQueue:
        queues = self.message_queues
        if last_broker_name is None:  # every send's first attempt: the counter stepped in place
            self._counter += 1
            return queues[self._counter % len(queues)]
        n = len(queues)
        for _ in range(n):
            mq = queues[self.next_index() % n]
            if mq.broker_name != last_broker_name:
                return mq
        return queues[self.next_index() % n]

    def write_queue_nums(self, broker_name: str) -> int:
        """Write queues of ``broker_name`` in the route, -1 if absent (``getQueueIdByBroker``)."""
        if self.route is None:
            return -1
        for qd in self.route.queue_datas:
            if qd.broker_name == broker_name:
                return qd.write_queue_nums
        return -1

    def __repr__(self) -> str:
        return f"TopicPublishInfo({self.topic!r}, queues={len(self.message_queues)}, order={self.order_topic})"


def route_to_publish_info(topic: str, route: TopicRouteData, rng: random.Random | None = None) -> TopicPublishInfo:
    """``topicRouteData2TopicPublishInfo``."""
    queues: list[MessageQueue] = []
    if route.order_topic_conf:
        for item in route.order_topic_conf.split(";"):
            name, _, nums = item.partition(":")
            if name and nums.strip().isdigit():
                queues.extend(MessageQueue(topic, name, i) for i in range(int(nums)))
        return TopicPublishInfo(topic, queues, route, order_topic=True, rng=rng)
    for qd in route.queue_datas:
        if not qd.writable:
            continue
        bd = route.broker(qd.broker_name)
        if bd is None or bd.master_addr is None:
            continue
        queues.extend(MessageQueue(topic, qd.broker_name, i) for i in range(qd.write_queue_nums))
    return TopicPublishInfo(topic, queues, route, rng=rng)


def route_to_subscribe_info(topic: str, route: TopicRouteData) -> set[MessageQueue]:
    """``topicRouteData2TopicSubscribeInfo``: every readable queue."""
    return {MessageQueue(topic, qd.broker_name, i)
            for qd in route.queue_datas if qd.readable for i in range(qd.read_queue_nums)}
