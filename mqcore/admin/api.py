"""A small admin API over the RocketMQ 4.x remoting protocol (``DefaultMQAdminExt``'s core).

It speaks to the name server and the brokers directly, so it works against mqbroker and
an Apache RocketMQ 4.x cluster alike::

    from mqcore.admin import MQAdmin

    with MQAdmin("127.0.0.1:9876") as admin:
        for broker in admin.cluster_info().brokers():
            print(broker.cluster, broker.broker_name, broker.master_addr)
        print(admin.topic_list())

Every call blocks for at most ``timeout_ms`` per request. Failures raise one of the
:mod:`mqcore.errors` classes with a message that names what was wrong:
:class:`~mqcore.errors.NoRouteError` (the name server has no route for a topic),
:class:`~mqcore.errors.IllegalArgumentError` (unknown broker or cluster, bad argument),
:class:`~mqcore.errors.BrokerError` (the broker refused: code and remark),
:class:`~mqcore.errors.RemotingConnectError` / :class:`~mqcore.errors.RemotingTimeoutError`.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from mqcore.acl.signing import SessionCredentials
from mqcore.client.message import MessageExt, SendResult, decode_messages
from mqcore.client.route import TopicRouteData
from mqcore.errors import BrokerError, IllegalArgumentError, NoRouteError, RemotingError
from mqcore.message import Prop, decode_offset_msg_id
from mqcore.permissions import topic_perm_problem
from mqcore.remoting.bodies import MessageQueue
from mqcore.remoting.client import SyncRemotingClient
from mqcore.remoting.codes import PullSysFlag, RequestCode, ResponseCode
from mqcore.remoting.command import RemotingCommand, create_request
from mqcore.remoting.tls import client_context
from mqcore.jsonutil import dumps_compact, loads_lenient

__all__ = ["MQAdmin", "ClusterInfo", "BrokerAddrs", "TopicOffset", "ConsumeRow", "ConsumeStats",
           "Connection", "ConsumerConnection", "ResetRow", "MASTER_ID", "RETRY_GROUP_TOPIC_PREFIX",
           "DLQ_GROUP_TOPIC_PREFIX", "TOOLS_CONSUMER_GROUP"]

MASTER_ID = 0
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
#: the group RocketMQ's tools pull with (MixAll.TOOLS_CONSUMER_GROUP)
TOOLS_CONSUMER_GROUP = "TOOLS_CONSUMER"
#: RocketMQ's queue-count default for updateTopic
DEFAULT_QUEUE_NUMS = 8

# MQVersion ordinal -> "V4_9_8" style names, for the few versions clients report.
_VERSION_NAMES = {26: "V3_0_6_SNAPSHOT", 121: "V3_4_9", 213: "V4_0_0", 293: "V4_4_0", 317: "V4_5_2",
                  393: "V4_9_0", 399: "V4_9_3", 401: "V4_9_4", 407: "V4_9_7", 409: "V4_9_8", 413: "V5_0_0"}


def version_desc(version: int) -> str:
    """``MQVersion.getVersionDesc``: the release name of a version ordinal."""
    return _VERSION_NAMES.get(version, f"V{version}")


# --- results ----------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class BrokerAddrs:
    cluster: str
    broker_name: str
    addrs: dict[int, str]

    @property
    def master_addr(self) -> str | None:
        return self.addrs.get(MASTER_ID)


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """``ClusterInfo``: broker name -> addresses, cluster name -> broker names."""
    broker_addr_table: dict[str, BrokerAddrs]
    cluster_addr_table: dict[str, list[str]]

    def brokers(self, cluster: str | None = None) -> list[BrokerAddrs]:
        names = sorted(self.broker_addr_table) if cluster is None else sorted(self.cluster_addr_table.get(cluster, []))
        return [self.broker_addr_table[n] for n in names if n in self.broker_addr_table]

    def master_addrs(self, cluster: str) -> list[str]:
        if cluster not in self.cluster_addr_table:
            known = ", ".join(sorted(self.cluster_addr_table)) or "none"
            raise IllegalArgumentError(f"unknown cluster {cluster!r} (the name server knows: {known})")
        return [b.master_addr for b in self.brokers(cluster) if b.master_addr]

    def broker_name_of(self, addr: str) -> str | None:
        for b in self.broker_addr_table.values():
            if addr in b.addrs.values():
                return b.broker_name
        return None

    def cluster_of(self, broker_name: str) -> str | None:
        for cluster, names in self.cluster_addr_table.items():
            if broker_name in names:
                return cluster
        return None


@dataclasses.dataclass(frozen=True)
class TopicOffset:
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_timestamp: int


@dataclasses.dataclass(frozen=True)
class ConsumeRow:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int
    last_timestamp: int

    @property
    def diff(self) -> int:
        return self.broker_offset - self.consumer_offset


@dataclasses.dataclass(frozen=True)
class ConsumeStats:
    rows: list[ConsumeRow]
    consume_tps: float

    @property
    def diff_total(self) -> int:
        return sum(r.diff for r in self.rows)


@dataclasses.dataclass(frozen=True)
class Connection:
    client_id: str
    client_addr: str
    language: str
    version: int


@dataclasses.dataclass(frozen=True)
class ConsumerConnection:
    connections: list[Connection]
    subscriptions: dict[str, str]  # topic -> subscription expression
    consume_type: str
    message_model: str
    consume_from_where: str
    #: topic -> the tags the subscription names (the broker's ``tagsSet``; empty: every tag)
    tags: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)


#: Java's examineConsumeStats, for a group whose brokers answer no queue (its words, which the
#: message track quotes)
NO_CONSUME_STATS = ("Not found the consumer group consume stats, because return offset table is empty, "
                    "maybe the consumer not consume any message")

#: ``TrackType``: what a message's track says of one consumer group
TRACK_TYPES = ("CONSUMED", "CONSUMED_BUT_FILTERED", "PULL", "NOT_CONSUME_YET", "NOT_ONLINE", "UNKNOWN")


@dataclasses.dataclass(frozen=True)
class MessageTrack:
    """One consumer group of a message's topic and whether it consumed the message (Java's
    ``MessageTrack``, what ``queryMsgById`` prints under the message)."""
    consumer_group: str
    track_type: str  # one of TRACK_TYPES
    exception_desc: str | None = None

    def __str__(self) -> str:
        return (f"MessageTrack [consumerGroup={self.consumer_group}, trackType={self.track_type}, "
                f"exceptionDesc={'null' if self.exception_desc is None else self.exception_desc}]")


@dataclasses.dataclass(frozen=True)
class ResetRow:
    """One queue of a reset: where it was, what the timestamp maps to, where it is now."""
    broker_name: str
    queue_id: int
    topic: str
    offset: int
    broker_offset: int | None = None
    consumer_offset: int | None = None
    timestamp_offset: int | None = None


def _mq(obj: Any) -> MessageQueue:
    # fastjson writes Map<MessageQueue, X> with object keys; the lenient reader makes them pairs
    return MessageQueue.from_json_obj(dict(obj) if isinstance(obj, tuple) else obj)


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def parse_properties(text: str) -> dict[str, str]:
    """A Java ``Properties`` text (``key=value`` lines) as a dict, in order."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip()
    return out


class MQAdmin:
    """Blocking admin client: one pooled connection per name server and broker."""

    def __init__(self, namesrv_addr: str, *, timeout_ms: float = 5000, access_key: str | None = None,
                 secret_key: str | None = None, use_tls: bool = False, tls_trust_cert_path: str | None = None) -> None:
        """``access_key``/``secret_key``: a plain ACL account (admin commands need an admin one).
        ``use_tls``: connect over TLS (the server's certificate checked against
        ``tls_trust_cert_path`` when given, else accepted as RocketMQ's test mode does)."""
        self.namesrv_addrs = [a.strip() for a in namesrv_addr.replace(",", ";").split(";") if a.strip()]
        if not self.namesrv_addrs:
            raise IllegalArgumentError("no name server address: give it as host:port (-n)")
        self.timeout_ms = timeout_ms
        if (access_key is None) != (secret_key is None):
            raise IllegalArgumentError("access_key and secret_key go together")
        signer = SessionCredentials(access_key, secret_key).sign if access_key and secret_key else None
        tls = client_context(trust_cert_path=tls_trust_cert_path) if use_tls else None
        self._remoting = SyncRemotingClient(name="mqadmin", before_request=signer, tls=tls)

    def close(self) -> None:
        self._remoting.close()

    def __enter__(self) -> MQAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -----------------------------------------------------------------------------
    def _invoke(self, addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
                ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        cmd = create_request(code, {k: str(v) for k, v in (ext or {}).items() if v is not None}, body)
        resp = self._remoting.invoke(addr, cmd, self.timeout_ms)
        if resp.code not in ok:
            raise BrokerError(resp.code, resp.remark, addr)
        return resp

    def _invoke_namesrv(self, code: int, ext: dict[str, Any] | None = None,
                        ok: Iterable[int] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        last: RemotingError | None = None
        for addr in self.namesrv_addrs:
            try:
                return self._invoke(addr, code, ext, ok=ok)
            except RemotingError as e:
                last = e
        assert last is not None
        raise last

    @staticmethod
    def _json(resp: RemotingCommand) -> Any:
        return loads_lenient(bytes(resp.body)) if resp.body else {}

    # --- name server --------------------------------------------------------------------------
    def cluster_info(self) -> ClusterInfo:
        obj = self._json(self._invoke_namesrv(RequestCode.GET_BROKER_CLUSTER_INFO))
        brokers = {}
        for name, bd in (obj.get("brokerAddrTable") or {}).items():
            addrs = {int(k): str(v) for k, v in (bd.get("brokerAddrs") or {}).items()}
            brokers[name] = BrokerAddrs(str(bd.get("cluster") or ""), name, addrs)
        clusters = {c: sorted(names) for c, names in (obj.get("clusterAddrTable") or {}).items()}
        return ClusterInfo(brokers, clusters)

    def topic_list(self) -> list[str]:
        obj = self._json(self._invoke_namesrv(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER))
        return sorted(obj.get("topicList") or [])

    def topic_route(self, topic: str) -> TopicRouteData:
        resp = self._invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                                    ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST or not resp.body:
            raise NoRouteError(f"no route for topic {topic!r}: the name server does not know it")
        return TopicRouteData.decode(bytes(resp.body))

    def topic_route_json(self, topic: str) -> dict[str, Any]:
        """The route as the name server sent it (queueDatas, brokerDatas, ...)."""
        resp = self._invoke_namesrv(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic},
                                    ok=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST or not resp.body:
            raise NoRouteError(f"no route for topic {topic!r}: the name server does not know it")
        route: dict[str, Any] = self._json(resp)
        return route

    def _topic_brokers(self, topic: str) -> list[tuple[str, str]]:
        """(broker name, address) of every broker serving ``topic``."""
        route = self.topic_route(topic)
        out = [(b.broker_name, b.any_addr()) for b in route.broker_datas]
        return [(n, a) for n, a in out if a]

    def broker_addr(self, broker_name: str) -> str:
        """The master address of a broker named ``broker_name``."""
        info = self.cluster_info()
        b = info.broker_addr_table.get(broker_name)
        if b is None or b.master_addr is None:
            known = ", ".join(sorted(info.broker_addr_table)) or "none"
            raise IllegalArgumentError(f"unknown broker {broker_name!r} (the name server knows: {known})")
        return b.master_addr

    # --- broker state --------------------------------------------------------------------------
    def broker_runtime_stats(self, addr: str) -> dict[str, str]:
        obj = self._json(self._invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO))
        return {str(k): str(v) for k, v in (obj.get("table") or {}).items()}

    def broker_config(self, addr: str) -> dict[str, str]:
        resp = self._invoke(addr, RequestCode.GET_BROKER_CONFIG)
        return parse_properties(bytes(resp.body).decode("utf-8", "replace"))

    def update_broker_config(self, addr: str, properties: dict[str, str]) -> str | None:
        """Apply ``properties`` on the broker at ``addr``. Returns the broker's warning when
        the change was applied but not saved for its next start (mqbroker), else None."""
        body = "".join(f"{k}={v}\n" for k, v in properties.items()).encode()
        resp = self._invoke(addr, RequestCode.UPDATE_BROKER_CONFIG, body=body)
        return resp.remark if resp.remark and resp.remark.startswith("not saved") else None

    # --- topics ----------------------------------------------------------------------------------
    def create_topic(self, addr: str, topic: str, *, read_queue_nums: int = DEFAULT_QUEUE_NUMS,
                     write_queue_nums: int = DEFAULT_QUEUE_NUMS, perm: int = 6, order: bool = False) -> None:
        if not 1 <= read_queue_nums <= 1024 or not 1 <= write_queue_nums <= 1024:
            raise IllegalArgumentError("queue numbers must be 1..1024")
        problem = topic_perm_problem(perm)
        if problem is not None:
            raise IllegalArgumentError(problem)
        ext = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": read_queue_nums,
               "writeQueueNums": write_queue_nums, "perm": perm, "topicFilterType": "SINGLE_TAG",
               "topicSysFlag": 0, "order": str(order).lower()}
        self._invoke(addr, RequestCode.UPDATE_AND_CREATE_TOPIC, ext)

    def put_order_conf(self, topic: str, order_conf: str) -> None:
        """Mark ``topic`` ordered on the name servers (``brokerName:queues;...``), as updateTopic -o does."""
        for ns in self.namesrv_addrs:
            self._invoke(ns, RequestCode.PUT_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": topic,
                                                         "value": order_conf})

    def order_conf(self, topic: str) -> str | None:
        """The order configuration the name server keeps for ``topic`` (None: not ordered)."""
        resp = self._invoke_namesrv(RequestCode.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": topic},
                                    ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
        return resp.ext_fields.get("value") if resp.code == ResponseCode.SUCCESS else None

    def delete_topic(self, cluster: str, topic: str) -> list[str]:
        """Delete ``topic`` on every master of ``cluster`` and on the name servers; returns the masters."""
        masters = self.cluster_info().master_addrs(cluster)
        for addr in masters:
            self._invoke(addr, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": topic})
        for ns in self.namesrv_addrs:
            self._invoke(ns, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": topic, "clusterName": cluster})
        return masters

    def topic_stats(self, topic: str) -> list[TopicOffset]:
        rows = []
        for _name, addr in self._topic_brokers(topic):
            obj = self._json(self._invoke(addr, RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic}))
            for mq_obj, off in (obj.get("offsetTable") or {}).items():
                mq = _mq(mq_obj)
                rows.append(TopicOffset(mq.broker_name, mq.queue_id, _int(off.get("minOffset")),
                                        _int(off.get("maxOffset")), _int(off.get("lastUpdateTimestamp"))))
        if not rows:
            raise NoRouteError(f"no stats for topic {topic!r}: no broker serves it")
        return sorted(rows, key=lambda r: (r.broker_name, r.queue_id))

    def topic_consumed_by(self, topic: str) -> list[str]:
        groups: set[str] = set()
        for _name, addr in self._topic_brokers(topic):
            obj = self._json(self._invoke(addr, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic}))
            groups.update(obj.get("groupList") or [])
        return sorted(groups)

    # --- groups ------------------------------------------------------------------------------------
    def create_group(self, addr: str, group: str, *, consume_enable: bool = True,
                     consume_from_min_enable: bool = False, consume_broadcast_enable: bool = False,
                     retry_queue_nums: int = 1, retry_max_times: int = 16, broker_id: int = 0,
                     which_broker_when_consume_slowly: int = 1,
                     notify_consumer_ids_changed_enable: bool = True, consume_message_orderly: bool = False) -> dict[str, Any]:
        cfg: dict[str, Any] = {"groupName": group, "consumeEnable": consume_enable, "consumeFromMinEnable": consume_from_min_enable,
               "consumeBroadcastEnable": consume_broadcast_enable, "retryQueueNums": retry_queue_nums,
               "retryMaxTimes": retry_max_times, "brokerId": broker_id,
               "whichBrokerWhenConsumeSlowly": which_broker_when_consume_slowly,
               "notifyConsumerIdsChangedEnable": notify_consumer_ids_changed_enable}
        if consume_message_orderly:  # a RocketMQ 5 key (FIFO group for 5.x clients); 4.9 brokers ignore it
            cfg["consumeMessageOrderly"] = True
        self._invoke(addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=dumps_compact(cfg))
        return cfg

    def delete_group(self, addr: str, group: str, *, remove_offset: bool = False) -> None:
        self._invoke(addr, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                     {"groupName": group, "removeOffset": str(remove_offset).lower()})

    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        rows: list[ConsumeRow] = []
        tps = 0.0
        for _name, addr in self._topic_brokers(RETRY_GROUP_TOPIC_PREFIX + group):
            obj = self._json(self._invoke(addr, RequestCode.GET_CONSUME_STATS,
                                          {"consumerGroup": group, "topic": topic}))
            tps += float(obj.get("consumeTps") or 0)
            for mq_obj, w in (obj.get("offsetTable") or {}).items():
                mq = _mq(mq_obj)
                rows.append(ConsumeRow(mq.topic, mq.broker_name, mq.queue_id, _int(w.get("brokerOffset")),
                                       _int(w.get("consumerOffset")), _int(w.get("lastTimestamp"))))
        return ConsumeStats(sorted(rows, key=lambda r: (r.topic, r.broker_name, r.queue_id)), tps)

    def consumer_connection(self, group: str, addr: str | None = None) -> ConsumerConnection:
        addrs = [addr] if addr else [a for _n, a in self._topic_brokers(RETRY_GROUP_TOPIC_PREFIX + group)]
        refusal: tuple[str, str] | None = None
        for a in addrs:
            resp = self._invoke(a, RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group},
                                ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE))
            if resp.code != ResponseCode.SUCCESS:
                if resp.remark and refusal is None:
                    refusal = (a, resp.remark)
                continue
            obj = self._json(resp)
            conns = [Connection(str(c.get("clientId")), str(c.get("clientAddr")), str(c.get("language")),
                                _int(c.get("version"))) for c in obj.get("connectionSet") or []]
            if not conns:
                continue
            table = obj.get("subscriptionTable") or {}
            subs = {str(t): str(s.get("subString")) for t, s in table.items()}
            tags = {str(t): frozenset(str(x) for x in s.get("tagsSet") or ()) for t, s in table.items()}
            return ConsumerConnection(sorted(conns, key=lambda c: c.client_id), subs,
                                      str(obj.get("consumeType")), str(obj.get("messageModel")),
                                      str(obj.get("consumeFromWhere")), tags)
        if refusal is not None:  # the broker's own words ("the consumer group[g] not online")
            raise BrokerError(ResponseCode.CONSUMER_NOT_ONLINE, refusal[1], refusal[0])
        raise BrokerError(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group {group!r} is not online",
                          addrs[0] if addrs else None)

    def message_track(self, m: MessageExt) -> list[MessageTrack]:
        """``messageTrackDetail``: for each group that consumes ``m``'s topic, whether it has
        consumed ``m``: online, pushed to, and its committed offset on ``m``'s queue of the
        broker that stored ``m`` past ``m``'s offset (a subscription whose tags leave ``m``'s
        out: consumed but filtered). A group the answers fail for gets the reason, as Java's
        ``CODE:c DESC:remark``."""
        tracks: list[MessageTrack] = []
        masters: dict[str, str | None] | None = None
        for group in self.topic_consumed_by(m.topic):
            try:
                cc = self.consumer_connection(group)
                if cc.consume_type == "CONSUME_ACTIVELY":
                    tracks.append(MessageTrack(group, "PULL"))
                    continue
                if cc.consume_type != "CONSUME_PASSIVELY":
                    tracks.append(MessageTrack(group, "UNKNOWN"))
                    continue
                stats = self.consume_stats(group)
                if masters is None:
                    masters = {b.broker_name: b.master_addr for b in self.cluster_info().brokers()}
            except BrokerError as e:
                kind = "NOT_ONLINE" if e.code == ResponseCode.CONSUMER_NOT_ONLINE else "UNKNOWN"
                tracks.append(MessageTrack(group, kind, f"CODE:{e.code} DESC:{e.remark}"))
                continue
            except RemotingError as e:
                tracks.append(MessageTrack(group, "UNKNOWN", str(e)))
                continue
            if not stats.rows:
                # Java's examineConsumeStats refuses an empty offset table (a group online that
                # never committed an offset), and the track reports that refusal
                tracks.append(MessageTrack(group, "NOT_ONLINE", f"CODE:{int(ResponseCode.CONSUMER_NOT_ONLINE)} DESC:"
                                           f"{NO_CONSUME_STATS}"))
                continue
            consumed = any(r.topic == m.topic and r.queue_id == m.queue_id and r.consumer_offset > m.queue_offset
                           and masters.get(r.broker_name) == m.store_host for r in stats.rows)
            tags = cc.tags.get(m.topic)
            if not consumed:
                kind = "NOT_CONSUME_YET"
            elif tags and "*" not in tags and m.tags not in tags:
                kind = "CONSUMED_BUT_FILTERED"
            else:
                kind = "CONSUMED"
            tracks.append(MessageTrack(group, kind))
        return tracks

    def producer_connection(self, group: str, topic: str) -> list[Connection]:
        for _name, addr in self._topic_brokers(topic):
            obj = self._json(self._invoke(addr, RequestCode.GET_PRODUCER_CONNECTION_LIST,
                                          {"producerGroup": group}))
            conns = [Connection(str(c.get("clientId")), str(c.get("clientAddr")), str(c.get("language")),
                                _int(c.get("version"))) for c in obj.get("connectionSet") or []]
            if conns:
                return sorted(conns, key=lambda c: c.client_id)
        raise BrokerError(ResponseCode.SYSTEM_ERROR, f"the producer group {group!r} is not online")

    # --- messages ------------------------------------------------------------------------------------
    def query_msg_by_key(self, topic: str, key: str, *, max_num: int = 64, begin_ms: int = 0,
                         end_ms: int = 2**63 - 1, unique_key: bool = False, sort: bool = True) -> list[MessageExt]:
        """Messages of ``topic`` carrying ``key``, by store time (``sort=False``: in the order the
        brokers answered, broker by broker, as Java's ``MQAdminImpl.queryMessage`` lists them)."""
        out: list[MessageExt] = []
        for name, addr in self._topic_brokers(topic):
            ext = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": begin_ms,
                   "endTimestamp": end_ms}
            if unique_key:
                ext["_UNIQUE_KEY_QUERY"] = "true"
            resp = self._invoke(addr, RequestCode.QUERY_MESSAGE, ext,
                                ok=(ResponseCode.SUCCESS, ResponseCode.QUERY_NOT_FOUND))
            if resp.code == ResponseCode.SUCCESS:
                for m in decode_messages(bytes(resp.body), name):
                    # the index is a hash: keep the messages that really carry the key
                    if (m.msg_id == key) if unique_key else (key in m.keys):
                        out.append(m)
        if not sort:
            return out
        return sorted(out, key=lambda m: (m.store_timestamp, m.broker_name or "", m.queue_id, m.queue_offset))

    def view_message(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """By offset message id (the broker's ``offsetMsgId``: store host + commitlog offset);
        with ``topic``, the client's message id (UNIQ_KEY) is looked up in that topic first."""
        if topic is not None:
            found = self.query_msg_by_key(topic, msg_id, max_num=32, unique_key=True)
            if found:
                return found[0]
        try:
            ip, port, phy = decode_offset_msg_id(msg_id)
        except IllegalArgumentError:
            if topic is None:
                raise
            raise BrokerError(ResponseCode.QUERY_NOT_FOUND, f"no message {msg_id} in topic {topic}") from None
        if not 0 < port < 65536 or phy < 0:
            where = f" and no message with that client id in topic {topic}" if topic else \
                "; give the topic (-t) to look it up as a client message id"
            raise IllegalArgumentError(f"{msg_id!r} is not an offset message id (it names port {port}){where}")
        addr = f"{ip}:{port}"
        resp = self._invoke(addr, RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phy})
        msgs = decode_messages(bytes(resp.body), self._broker_name_or_none(addr), 1)
        if not msgs:
            raise BrokerError(ResponseCode.QUERY_NOT_FOUND, f"no message at {msg_id}", addr)
        return msgs[0]

    def _broker_name_or_none(self, addr: str) -> str | None:
        try:
            return self.cluster_info().broker_name_of(addr)
        except (BrokerError, RemotingError):
            return None

    def pull(self, mq: MessageQueue, offset: int, max_nums: int = 32,
             group: str = TOOLS_CONSUMER_GROUP) -> tuple[int, int, list[MessageExt]]:
        """(status code, next offset, messages) of one non-committing pull of ``mq``."""
        addr = self.broker_addr(mq.broker_name)
        sys_flag = int(PullSysFlag.SUBSCRIPTION)
        ext = {"consumerGroup": group, "topic": mq.topic, "queueId": mq.queue_id, "queueOffset": offset,
               "maxMsgNums": max_nums, "sysFlag": sys_flag, "commitOffset": 0, "suspendTimeoutMillis": 0,
               "subscription": "*", "subVersion": 0, "expressionType": "TAG"}
        resp = self._invoke(addr, RequestCode.PULL_MESSAGE, ext,
                            ok=(ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND,
                                ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED))
        next_offset = _int(resp.ext_fields.get("nextBeginOffset"), offset)
        msgs = decode_messages(bytes(resp.body), mq.broker_name) if resp.code == ResponseCode.SUCCESS else []
        for m in msgs:  # the queue's bounds at the pull, as the Java client stamps every pulled message
            m.stamp_property(Prop.MIN_OFFSET, str(_int(resp.ext_fields.get("minOffset"))))
            m.stamp_property(Prop.MAX_OFFSET, str(_int(resp.ext_fields.get("maxOffset"))))
        return resp.code, next_offset, msgs

    def message_by_offset(self, topic: str, broker_name: str, queue_id: int, offset: int) -> MessageExt:
        code, _next, msgs = self.pull(MessageQueue(topic, broker_name, queue_id), offset, 1)
        if not msgs or msgs[0].queue_offset != offset:
            raise BrokerError(code if code else ResponseCode.PULL_NOT_FOUND,
                              f"no message at offset {offset} of {topic}:{broker_name}:{queue_id}")
        return msgs[0]

    def queue_offsets(self, mq: MessageQueue) -> tuple[int, int]:
        """(min, max) offset of a queue."""
        addr = self.broker_addr(mq.broker_name)
        ext = {"topic": mq.topic, "queueId": mq.queue_id}
        lo = _int(self._invoke(addr, RequestCode.GET_MIN_OFFSET, ext).ext_fields.get("offset"))
        hi = _int(self._invoke(addr, RequestCode.GET_MAX_OFFSET, ext).ext_fields.get("offset"))
        return lo, hi

    def search_offset(self, mq: MessageQueue, timestamp_ms: int, addr: str | None = None) -> int:
        addr = addr or self.broker_addr(mq.broker_name)
        ext = {"topic": mq.topic, "queueId": mq.queue_id, "timestamp": timestamp_ms}
        return _int(self._invoke(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, ext).ext_fields.get("offset"))

    def consume(self, topic: str, *, broker_name: str | None = None, queue_id: int | None = None,
                offset: int | None = None, count: int = 128) -> list[MessageExt]:
        """Read up to ``count`` messages without committing anything (``consumeMessage``)."""
        if count <= 0:
            raise IllegalArgumentError("the message count must be positive")
        if broker_name is not None and queue_id is not None:
            queues = [MessageQueue(topic, broker_name, queue_id)]
        else:
            route = self.topic_route(topic)
            queues = [MessageQueue(topic, q.broker_name, i) for q in route.queue_datas
                      if broker_name in (None, q.broker_name) for i in range(q.read_queue_nums)]
        out: list[MessageExt] = []
        for mq in queues:
            lo, hi = self.queue_offsets(mq)
            pos = max(lo, offset or 0)
            while pos < hi and len(out) < count:
                code, nxt, msgs = self.pull(mq, pos, min(32, count - len(out)))
                out.extend(msgs[: count - len(out)])
                if code != ResponseCode.SUCCESS or nxt <= pos:
                    break
                pos = nxt
            if len(out) >= count:
                break
        return out

    def send_message(self, topic: str, body: bytes, *, keys: str | None = None, tags: str | None = None,
                     broker_name: str | None = None, queue_id: int | None = None) -> SendResult:
        """Send one message with the mqcore client; returns its ``SendResult``."""
        from mqcore.client import Message, Producer  # the producer brings its own event loop
        msg = Message(topic, body, tags=tags, keys=keys)
        producer = Producer(f"mqadmin-{int(time.time() * 1000)}", namesrv_addr=";".join(self.namesrv_addrs),
                            send_msg_timeout_ms=int(self.timeout_ms))
        producer.start()
        try:
            if broker_name is not None and queue_id is not None:
                return producer.send(msg, queue=MessageQueue(topic, broker_name, queue_id))
            return producer.send(msg)
        finally:
            producer.shutdown()

    # --- offsets -------------------------------------------------------------------------------------
    def reset_offset_by_time(self, group: str, topic: str, timestamp_ms: int, *,
                             force: bool = True) -> tuple[bool, list[ResetRow]]:
        """Move ``group``'s offsets on ``topic`` to the first message at or after ``timestamp_ms``
        (-1: the end). Online consumers are told by the broker; with none online the committed
        offsets are rewritten directly (RocketMQ's fallback). Returns (consumers online, rows)."""
        rows: list[ResetRow] = []
        offline = False
        brokers = self._topic_brokers(topic)
        for name, addr in brokers:
            ext = {"topic": topic, "group": group, "timestamp": timestamp_ms, "isForce": str(force).lower()}
            resp = self._invoke(addr, RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, ext,
                                ok=(ResponseCode.SUCCESS, ResponseCode.CONSUMER_NOT_ONLINE))
            if resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
                offline = True
                break
            for mq_obj, off in ((self._json(resp).get("offsetTable")) or {}).items():
                mq = _mq(mq_obj)
                rows.append(ResetRow(mq.broker_name, mq.queue_id, mq.topic, _int(off)))
        if not offline:
            return True, sorted(rows, key=lambda r: (r.broker_name, r.queue_id))
        return False, self._reset_offline(group, topic, timestamp_ms, force)

    def _reset_offline(self, group: str, topic: str, timestamp_ms: int, force: bool) -> list[ResetRow]:
        rows = []
        stats = self.consume_stats(group, topic)
        if not stats.rows:
            raise BrokerError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                              f"the consumer group {group!r} has no offsets on topic {topic!r}")
        names = {n: a for n, a in self._topic_brokers(topic)}
        for r in stats.rows:
            addr = names.get(r.broker_name)
            if addr is None:
                continue
            mq = MessageQueue(r.topic, r.broker_name, r.queue_id)
            ts_offset = r.broker_offset if timestamp_ms == -1 else self.search_offset(mq, timestamp_ms, addr)
            new = ts_offset if (force or ts_offset < r.consumer_offset) else r.consumer_offset
            ext = {"consumerGroup": group, "topic": topic, "queueId": r.queue_id, "commitOffset": new}
            self._invoke(addr, RequestCode.UPDATE_CONSUMER_OFFSET, ext)
            rows.append(ResetRow(r.broker_name, r.queue_id, r.topic, new, r.broker_offset, r.consumer_offset,
                                 ts_offset))
        return rows
