"""``mqadmin``: RocketMQ's admin commands, same names, flags and tables, on :class:`MQAdmin`.

    mqadmin clusterList -n 127.0.0.1:9876
    mqadmin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t Orders -r 4 -w 4
    mqadmin consumerProgress -n 127.0.0.1:9876 -g order-workers --json

``--json`` prints one JSON document instead of the table. Errors print one line naming what
was wrong on stderr and exit 1 (2 for bad usage); never a traceback.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from mqcore.admin import cli_auth, cli_tools
from mqcore.admin.api import (DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, MessageTrack, MQAdmin,
                              version_desc)
from mqcore.admin.java_text import hash_set_order, message_ext_text, mq_text
from mqcore.client.message import MessageExt, MessageQueue
from mqcore.errors import BrokerError, MQError, NoRouteError, RemotingConnectError, RemotingTimeoutError
from mqcore.permissions import TOPIC_PERMS, perm_to_string
from mqcore.remoting.codes import ResponseCode

DEFAULT_NAMESRV = "127.0.0.1:9876"


UsageError = cli_tools.UsageError  # a flag combination the command cannot run with (exit status 2)


# --- formatting helpers (RocketMQ's date formats, in local time like the Java tool) ---------------
def human_ms(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString2``: 2024-05-01 12:00:00,123."""
    t = dt.datetime.fromtimestamp(ms / 1000)
    return t.strftime("%Y-%m-%d %H:%M:%S") + f",{ms % 1000:03d}"


def date_s(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def parse_timestamp(text: str) -> int:
    """Milliseconds, ``now`` (-1: the end of the queue), or ``yyyy-MM-dd#HH:mm:ss:SSS``."""
    text = text.strip()
    if text == "now":
        return -1
    try:
        return int(text)
    except ValueError:
        pass
    try:
        t = dt.datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise UsageError(f"timestamp {text!r} is not milliseconds, 'now' or yyyy-MM-dd#HH:mm:ss:SSS") from None
    return int(t.timestamp() * 1000)


def _bool(text: str) -> bool:
    s = text.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def _msg_json(m: MessageExt) -> dict[str, Any]:
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic, "tags": m.tags,
            "keys": " ".join(m.keys) or None, "brokerName": m.broker_name, "queueId": m.queue_id,
            "queueOffset": m.queue_offset, "commitLogOffset": m.commitlog_offset,
            "reconsumeTimes": m.reconsume_times, "bornTimestamp": m.born_timestamp,
            "storeTimestamp": m.store_timestamp, "bornHost": m.born_host, "storeHost": m.store_host,
            "sysFlag": m.sys_flag, "properties": dict(m.properties),
            "body": m.body.decode("utf-8", "replace")}


def _java_map(d: Mapping[str, object]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in d.items()) + "}"


def _print_msg(admin: MQAdmin, m: MessageExt, out: TextIO) -> None:
    """QueryMsgByIdSubCommand.printMsg's layout; the body goes to a file as the Java tool does."""
    body_dir = os.path.join(os.environ.get("TMPDIR", "/tmp"), "rocketmq", "msgbodys")
    os.makedirs(body_dir, exist_ok=True)
    body_path = os.path.join(body_dir, m.msg_id)
    with open(body_path, "wb") as f:
        f.write(m.body)
    rows = [("OffsetID:", m.offset_msg_id), ("Topic:", m.topic), ("Tags:", f"[{m.tags}]"),
            ("Keys:", f"[{' '.join(m.keys) if m.keys else 'null'}]"), ("Queue ID:", m.queue_id),
            ("Queue Offset:", m.queue_offset), ("CommitLog Offset:", m.commitlog_offset),
            ("Reconsume Times:", m.reconsume_times), ("Born Timestamp:", human_ms(m.born_timestamp)),
            ("Store Timestamp:", human_ms(m.store_timestamp)), ("Born Host:", m.born_host),
            ("Store Host:", m.store_host), ("System Flag:", m.sys_flag),
            ("Properties:", _java_map(m.properties)), ("Message Body Path:", body_path)]
    for k, v in rows:
        print(f"{k:<20} {v}", file=out)


def _tracks(admin: MQAdmin, a: argparse.Namespace, m: MessageExt) -> list[MessageTrack] | None:
    """The message's track (None: the question failed, noted for stderr and exit status 1)."""
    try:
        return admin.message_track(m)
    except MQError as e:
        _note_failure(a, f"the message track of {m.msg_id}", e)
        return None


def _print_tracks(tracks: list[MessageTrack] | None, out: TextIO) -> None:
    """What QueryMsgByIdSubCommand prints under the message: one line a group (the Java tool
    runs them together on one line), or that no group consumes the topic."""
    if tracks is None:
        return
    print("", file=out)
    if not tracks:
        print("WARN: No Consumer", file=out)
    for t in tracks:
        print(t, file=out)


def _track_json(tracks: list[MessageTrack] | None) -> list[dict[str, Any]] | None:
    if tracks is None:
        return None
    return [{"consumerGroup": t.consumer_group, "trackType": t.track_type, "exceptionDesc": t.exception_desc}
            for t in tracks]


# --- commands ----------------------------------------------------------------------------------
# Each takes (admin, args, out) and returns the JSON value for --json (None: the table was printed).
Command = Callable[[MQAdmin, argparse.Namespace, TextIO], object]

# A command that asks many brokers goes on past one that refuses or cannot be reached (the
# others' rows are still worth printing), notes it here, and mqadmin ends with the notes on
# stderr and exit status 1: a refusal is never printed as a row of zeros.
def _note_failure(a: argparse.Namespace, what: str, e: MQError) -> None:
    whats = a.failures.setdefault(_describe(e), [])  # one line per distinct answer
    if what not in whats:
        whats.append(what)


#: answers that mean "nothing there" (a group no consumer uses, a topic without a route), not a failure
_ABSENT_CODES = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                           ResponseCode.CONSUMER_NOT_ONLINE, ResponseCode.QUERY_NOT_FOUND})


def _absent(e: MQError) -> bool:
    return isinstance(e, NoRouteError) or (isinstance(e, BrokerError) and e.code in _ABSENT_CODES)


def cmd_cluster_list(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    info = admin.cluster_info()
    rows = []
    errors: dict[str, str] = {}
    for cluster in sorted(info.cluster_addr_table):
        for b in info.brokers(cluster):
            for bid, addr in sorted(b.addrs.items()):
                kv: dict[str, str] | None
                try:
                    kv = admin.broker_runtime_stats(addr)
                except MQError as e:
                    _note_failure(a, f"broker {b.broker_name}", e)
                    kv = None
                    errors[addr] = _describe(e)
                rows.append((cluster, b.broker_name, bid, addr, kv))
    if a.json:
        return [{"cluster": c, "brokerName": n, "brokerId": i, "addr": ad, "runtime": kv,
                 **({"error": errors[ad]} if kv is None else {})} for c, n, i, ad, kv in rows]
    fmt = "{:<16}  {:<22}  {:<4}  {:<22} {:<16} {:>19} {:>19} {:>10} {:>5} {:>6}"
    print(fmt.format("#Cluster Name", "#Broker Name", "#BID", "#Addr", "#Version", "#InTPS(LOAD)",
                     "#OutTPS(LOAD)", "#PCWait(ms)", "#Hour", "#SPACE"), file=out)
    now = time.time() * 1000
    for cluster, name, bid, addr, kv in rows:
        if kv is None:  # no figures to show: the reason is on stderr
            print(fmt.format(cluster, name, bid, addr, "-", "-", "-", "-", "-", "-"), file=out)
            continue
        def first(key: str) -> float:
            try:
                return float((kv.get(key) or "0").split()[0])
            except (ValueError, IndexError):
                return 0.0
        earliest = int(kv.get("earliestMessageTimeStamp") or 0)
        hours = (now - earliest) / 3_600_000 if earliest else 0.0
        print(fmt.format(cluster, name, bid, addr, kv.get("brokerVersionDesc", ""),
                         f"{first('putTps'):9.2f}({kv.get('sendThreadPoolQueueSize')},"
                         f"{kv.get('sendThreadPoolQueueHeadWaitTimeMills')}ms)",
                         f"{first('getTransferedTps'):9.2f}({kv.get('pullThreadPoolQueueSize')},"
                         f"{kv.get('pullThreadPoolQueueHeadWaitTimeMills')}ms)",
                         kv.get("pageCacheLockTimeMills", ""), f"{hours:2.2f}",
                         f"{float(kv.get('commitLogDiskRatio') or 0):.4f}"), file=out)
    return None


def _broker_targets(admin: MQAdmin, a: argparse.Namespace) -> list[str]:
    if getattr(a, "brokerAddr", None):
        return [a.brokerAddr]
    if getattr(a, "clusterName", None):
        return admin.cluster_info().master_addrs(a.clusterName)
    raise UsageError("give a broker address (-b host:port) or a cluster name (-c)")


def cmd_broker_status(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    addrs = _broker_targets(admin, a)
    tables = {addr: admin.broker_runtime_stats(addr) for addr in addrs}
    if a.json:
        return tables if len(addrs) > 1 or not a.brokerAddr else tables[addrs[0]]
    for addr, kv in tables.items():
        for k in sorted(kv):
            if a.brokerAddr:
                print(f"{k:<32}: {kv[k]}", file=out)
            else:
                print(f"{addr:<24} {k:<32}: {kv[k]}", file=out)
    return None


def cmd_topic_list(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    topics = admin.topic_list()
    if not a.clusterModel:
        if a.json:
            return topics
        for t in topics:
            print(t, file=out)
        return None
    info = admin.cluster_info()
    rows = []
    for t in topics:
        if t.startswith(RETRY_GROUP_TOPIC_PREFIX) or t.startswith(DLQ_GROUP_TOPIC_PREFIX):
            continue
        cluster, groups = "", []
        try:
            route = admin.topic_route(t)
            cluster = info.cluster_of(route.broker_datas[0].broker_name) or "" if route.broker_datas else ""
            groups = admin.topic_consumed_by(t)
        except MQError as e:
            if not _absent(e):  # a topic without a live route still gets listed, as the Java tool does
                _note_failure(a, f"topic {t}", e)
        for g in groups or [""]:
            rows.append((cluster, t, g))
    if a.json:
        return [{"cluster": c, "topic": t, "consumerGroup": g} for c, t, g in rows]
    print(f"{'#Cluster Name':<20}  {'#Topic':<48}  {'#Consumer Group':<48}", file=out)
    for c, t, g in rows:
        print(f"{c:<20}  {t:<64}  {g:<64}", file=out)
    return None


def cmd_topic_route(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    route = admin.topic_route_json(a.topic)
    if a.json:
        return route
    if not a.list:
        print(json.dumps(route, indent="\t", sort_keys=True), file=out)
        return None
    fmt = "{:<45} {:<32} {:<50} {:<10} {:<11} {:<5}"
    qd = {q["brokerName"]: q for q in route.get("queueDatas") or []}
    print(fmt.format("#ClusterName", "#BrokerName", "#BrokerAddrs", "#ReadQueue", "#WriteQueue", "#Perm"), file=out)
    r = w = 0
    for b in sorted(route.get("brokerDatas") or [], key=lambda b: b["brokerName"]):
        q = qd.get(b["brokerName"], {})
        r += int(q.get("readQueueNums", 0))
        w += int(q.get("writeQueueNums", 0))
        print(fmt.format(b.get("cluster", ""), b["brokerName"], _java_map(b.get("brokerAddrs") or {}),
                         q.get("readQueueNums", ""), q.get("writeQueueNums", ""), q.get("perm", "")), file=out)
    print("-" * 158, file=out)
    print(fmt.format("Total:", len(qd), "", r, w, ""), file=out)
    return None


def cmd_topic_cluster_list(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    """The clusters the topic's brokers belong to. RocketMQ's tool looks at the route's first
    broker only; a topic on brokers of two clusters is in both, so every broker counts here."""
    route = admin.topic_route(a.topic)
    info = admin.cluster_info()
    clusters = sorted({c for b in route.broker_datas if (c := info.cluster_of(b.broker_name))})
    if a.json:
        return clusters
    for c in clusters:
        print(c, file=out)
    return None


def cmd_topic_status(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    rows = admin.topic_stats(a.topic)
    if a.json:
        return [{"brokerName": r.broker_name, "queueId": r.queue_id, "minOffset": r.min_offset,
                 "maxOffset": r.max_offset, "lastUpdateTimestamp": r.last_update_timestamp} for r in rows]
    print(f"{'#Broker Name':<32}  {'#QID':<4}  {'#Min Offset':<20}  {'#Max Offset':<20}    #Last Updated", file=out)
    for r in rows:
        last = human_ms(r.last_update_timestamp) if r.last_update_timestamp > 0 else ""
        print(f"{r.broker_name:<32}  {r.queue_id:<4}  {r.min_offset:<20}  {r.max_offset:<20}    {last}", file=out)
    return None


def cmd_update_topic(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    addrs = _broker_targets(admin, a)
    for addr in addrs:
        admin.create_topic(addr, a.topic, read_queue_nums=a.readQueueNums, write_queue_nums=a.writeQueueNums,
                           perm=a.perm, order=a.order)
    cfg = {"topicName": a.topic, "readQueueNums": a.readQueueNums, "writeQueueNums": a.writeQueueNums,
           "perm": a.perm, "order": a.order}
    order_conf = None
    if a.order:  # ordered topics are also announced by the name servers (the route's orderTopicConf)
        info = admin.cluster_info()
        names = [b.broker_name for b in info.brokers(a.clusterName)] if a.clusterName \
            else [info.broker_name_of(a.brokerAddr) or a.brokerAddr]
        order_conf = ";".join(f"{n}:{a.writeQueueNums}" for n in names)
        admin.put_order_conf(a.topic, order_conf)
    if a.json:
        return {"brokers": addrs, "topicConfig": cfg, "orderConf": order_conf}
    for addr in addrs:
        print(f"create topic to {addr} success.", file=out)
    if order_conf:  # Apache's tool ends this line with no newline: the TopicConfig follows on it
        print(f"set {'cluster' if a.clusterName else 'broker'} orderConf. isOrder=true, orderConf=[{order_conf}]",
              file=out, end="")
    print(f"TopicConfig [topicName={a.topic}, readQueueNums={a.readQueueNums}, writeQueueNums={a.writeQueueNums}, "
          f"perm={perm_to_string(a.perm)}, topicFilterType=SINGLE_TAG, topicSysFlag=0, "
          f"order={str(a.order).lower()}]", file=out)
    return None


def cmd_delete_topic(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    masters = admin.delete_topic(a.clusterName, a.topic)
    if a.json:
        return {"topic": a.topic, "cluster": a.clusterName, "brokers": masters}
    print(f"delete topic [{a.topic}] from cluster [{a.clusterName}] success.", file=out)
    print(f"delete topic [{a.topic}] from NameServer success.", file=out)
    return None


def cmd_update_sub_group(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    addrs = _broker_targets(admin, a)
    cfg = {}
    for addr in addrs:
        cfg = admin.create_group(addr, a.groupName, consume_enable=a.consumeEnable,
                                 consume_from_min_enable=a.consumeFromMinEnable,
                                 consume_broadcast_enable=a.consumeBroadcastEnable,
                                 retry_queue_nums=a.retryQueueNums, retry_max_times=a.retryMaxTimes,
                                 broker_id=a.brokerId, which_broker_when_consume_slowly=a.whichBrokerWhenConsumeSlowly,
                                 notify_consumer_ids_changed_enable=a.notifyConsumerIdsChanged,
                                 consume_message_orderly=a.consumeOrderly)
    if a.json:
        return {"brokers": addrs, "subscriptionGroupConfig": cfg}
    for addr in addrs:
        print(f"create subscription group to {addr} success.", file=out)
    print("SubscriptionGroupConfig [" + ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                                                  for k, v in cfg.items()) + "]", file=out)
    return None


def cmd_delete_sub_group(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    addrs = _broker_targets(admin, a)
    for addr in addrs:
        admin.delete_group(addr, a.groupName, remove_offset=a.removeOffset)
    deleted_topics = []
    if a.clusterName:
        # for a whole cluster the group's retry and dead-letter topics go too, asked of the
        # brokers and name servers whether or not they exist (as Apache's tool does)
        for topic in (RETRY_GROUP_TOPIC_PREFIX + a.groupName, DLQ_GROUP_TOPIC_PREFIX + a.groupName):
            admin.delete_topic(a.clusterName, topic)
            deleted_topics.append(topic)
    if a.json:
        return {"group": a.groupName, "brokers": addrs, "removeOffset": a.removeOffset,
                "deletedTopics": deleted_topics}
    for addr in addrs:
        where = f" in cluster [{a.clusterName}]" if a.clusterName else ""
        print(f"delete subscription group [{a.groupName}] from broker [{addr}]{where} success.", file=out)
    for topic in deleted_topics:
        print(f"delete topic [{topic}] from cluster [{a.clusterName}] success.", file=out)
        print(f"delete topic [{topic}] from NameServer success.", file=out)
    return None


def cmd_consumer_progress(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    if a.groupName:
        stats = admin.consume_stats(a.groupName)
        if not stats.rows:
            raise BrokerError(26, f"the consumer group {a.groupName!r} has no consume progress on any broker")
        if a.json:
            return {"group": a.groupName, "consumeTps": stats.consume_tps, "diffTotal": stats.diff_total,
                    "queues": [{"topic": r.topic, "brokerName": r.broker_name, "queueId": r.queue_id,
                                "brokerOffset": r.broker_offset, "consumerOffset": r.consumer_offset,
                                "diff": r.diff, "lastTimestamp": r.last_timestamp} for r in stats.rows]}
        print(f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Broker Offset':<20}  "
              f"{'#Consumer Offset':<20}  {'#Diff':<20}  #LastTime", file=out)
        for r in stats.rows:
            last = date_s(r.last_timestamp) if r.last_timestamp else "N/A"
            print(f"{r.topic:<64}  {r.broker_name:<32}  {r.queue_id:<4}  {r.broker_offset:<20}  "
                  f"{r.consumer_offset:<20}  {r.diff:<20}  {last}", file=out)
        print("", file=out)
        print(f"Consume TPS: {stats.consume_tps:.2f}", file=out)
        print(f"Diff Total: {stats.diff_total}", file=out)
        return None
    rows = []
    for t in admin.topic_list():
        if not t.startswith(RETRY_GROUP_TOPIC_PREFIX):
            continue
        group = t[len(RETRY_GROUP_TOPIC_PREFIX):]
        tps: int | str
        diff: int | str
        try:
            stats = admin.consume_stats(group)
            tps, diff = int(stats.consume_tps), stats.diff_total
        except MQError as e:
            tps, diff = 0, 0
            if not _absent(e):
                _note_failure(a, f"group {group}", e)
                tps, diff = "-", "-"
        try:
            cc = admin.consumer_connection(group)
        except MQError as e:
            cc = None
            if not _absent(e):
                _note_failure(a, f"group {group}", e)
        count = len(cc.connections) if cc else 0
        version, kind, model = "OFFLINE", "", ""
        if cc and count:
            version = version_desc(min(c.version for c in cc.connections))
            kind = "PULL" if cc.consume_type == "CONSUME_ACTIVELY" else "PUSH"
            model = cc.message_model if cc.consume_type == "CONSUME_PASSIVELY" else ""
        rows.append({"group": group, "count": count, "version": version, "type": kind, "model": model,
                     "tps": tps, "diffTotal": diff})
    if a.json:
        return rows
    print(f"{'#Group':<64}  {'#Count':<6}  {'#Version':<24} {'#Type':<5}  {'#Model':<14}  {'#TPS':<7}  #Diff Total",
          file=out)
    for row in rows:
        print(f"{row['group']:<64}  {row['count']:<6}  {row['version']:<24} {row['type']:<5}  {row['model']:<14}  "
              f"{row['tps']:<7}  {row['diffTotal']}", file=out)
    return None


def cmd_consumer_connection(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    cc = admin.consumer_connection(a.consumerGroup, a.brokerAddr)
    if a.json:
        return {"connections": [{"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language,
                                 "version": version_desc(c.version)} for c in cc.connections],
                "subscriptions": cc.subscriptions, "consumeType": cc.consume_type,
                "messageModel": cc.message_model, "consumeFromWhere": cc.consume_from_where}
    print(f"{'#ClientId':<36} {'#ClientAddr':<22} {'#Language':<10} #Version", file=out)
    for c in cc.connections:
        print(f"{c.client_id:<36} {c.client_addr:<22} {c.language:<10} {version_desc(c.version)}", file=out)
    print("\nBelow is subscription:", file=out)
    print(f"{'#Topic':<20} #SubExpression", file=out)
    for t, s in sorted(cc.subscriptions.items()):
        print(f"{t:<20} {s}", file=out)
    print("", file=out)
    print(f"ConsumeType: {cc.consume_type}", file=out)
    print(f"MessageModel: {cc.message_model}", file=out)
    print(f"ConsumeFromWhere: {cc.consume_from_where}", file=out)
    return None


def cmd_producer_connection(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    conns = admin.producer_connection(a.producerGroup, a.topic)
    if a.json:
        return [{"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language,
                 "version": version_desc(c.version)} for c in conns]
    for i, c in enumerate(conns, 1):
        print(f"{i:04d}  {c.client_id:<32} {c.client_addr:<22} {c.language:<8} {version_desc(c.version)}", file=out)
    return None


def cmd_query_msg_by_key(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    msgs = admin.query_msg_by_key(a.topic, a.msgKey)
    if a.json:
        return [_msg_json(m) for m in msgs]
    print(f"{'#Message ID':<50} {'#QID':>4} {'#Offset':>40}", file=out)
    for m in msgs:
        print(f"{m.msg_id:<50} {m.queue_id:>4} {m.queue_offset:>40}", file=out)
    return None


def cmd_query_msg_by_id(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    if (a.consumerGroup is None) != (a.clientId is None):
        raise UsageError("-g and -d go together: the consumer group and client id of the consumer to run it")
    if a.consumerGroup is not None:
        return cli_tools.consume_directly(admin, a, out)
    msgs = [admin.view_message(i.strip(), a.topic) for i in a.msgId.split(",") if i.strip()]
    shown = [(m, _tracks(admin, a, m)) for m in msgs]
    if a.json:
        docs = [{**_msg_json(m), "messageTracks": _track_json(t)} for m, t in shown]
        return docs if len(docs) > 1 else docs[0]
    for m, t in shown:
        _print_msg(admin, m, out)
        _print_tracks(t, out)
    return None


def cmd_query_msg_by_offset(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    m = admin.message_by_offset(a.topic, a.brokerName, a.queueId, a.offset)
    tracks = _tracks(admin, a, m)
    if a.json:
        return {**_msg_json(m), "messageTracks": _track_json(tracks)}
    _print_msg(admin, m, out)
    _print_tracks(tracks, out)
    return None


def cmd_reset_offset_by_time(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    ts = parse_timestamp(a.timestamp)
    online, rows = admin.reset_offset_by_time(a.group, a.topic, ts, force=a.force)
    if a.json:
        return {"group": a.group, "topic": a.topic, "timestamp": ts, "force": a.force, "consumersOnline": online,
                "queues": [{"brokerName": r.broker_name, "queueId": r.queue_id, "offset": r.offset,
                            "brokerOffset": r.broker_offset, "consumerOffset": r.consumer_offset,
                            "timestampOffset": r.timestamp_offset} for r in rows]}
    if online:
        print(f"rollback consumer offset by specified group[{a.group}], topic[{a.topic}], "
              f"force[{str(a.force).lower()}], timestamp(string)[{a.timestamp}], timestamp(long)[{ts}]", file=out)
        print(f"{'#brokerName':<40}  {'#queueId':<40}  {'#offset':<40}", file=out)
        for r in rows:
            print(f"{r.broker_name:<40}  {r.queue_id:<40}  {r.offset:<40}", file=out)
        return None
    print(f"rollback consumer offset by specified consumerGroup[{a.group}], topic[{a.topic}], "
          f"force[{str(a.force).lower()}], timestamp(string)[{a.timestamp}], timestamp(long)[{ts}]", file=out)
    print(f"{'#brokerName':<20}  {'#queueId':<20}  {'#brokerOffset':<20}  {'#consumerOffset':<20}  "
          f"{'#timestampOffset':<20}  {'#rollbackOffset':<20}", file=out)
    for r in rows:
        print(f"{r.broker_name:<20}  {r.queue_id:<20}  {r.broker_offset:<20}  {r.consumer_offset:<20}  "
              f"{r.timestamp_offset:<20}  {r.offset:<20}", file=out)
    return None


def cmd_send_message(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    if a.qid is not None and a.broker is None:
        raise UsageError("give the broker name (-b) when choosing a queue (-i)")
    r = admin.send_message(a.topic, a.body.encode(), keys=a.key, tags=a.tags, broker_name=a.broker, queue_id=a.qid)
    if a.json:
        return {"brokerName": r.message_queue.broker_name, "queueId": r.message_queue.queue_id,
                "sendStatus": r.status.name, "msgId": r.msg_id, "offsetMsgId": r.offset_msg_id,
                "queueOffset": r.queue_offset}
    print(f"{'#Broker Name':<32}  {'#QID':<4}  {'#Send Result':<20}    #MsgId", file=out)
    print(f"{r.message_queue.broker_name:<32}  {r.message_queue.queue_id:<4}  {r.status.name:<20}    "
          f"{r.msg_id}", file=out)
    return None


def cmd_consume_message(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    if a.queueId is not None and a.brokerName is None:
        raise UsageError("give the broker name (-b) before the queue id (-i)")
    if a.offset is not None and a.queueId is None:
        raise UsageError("give the queue id (-i) before the offset (-o)")
    if a.MessageNumber <= 0:
        raise UsageError("the message number (-c) must be positive")
    if a.json:
        msgs = admin.consume(a.topic, broker_name=a.brokerName, queue_id=a.queueId, offset=a.offset,
                             count=a.MessageNumber)
        return [_msg_json(m) for m in msgs]
    count = a.MessageNumber
    if a.queueId is not None:  # ConsumeMessageCommand.executeByCondition
        mq = MessageQueue(a.topic, a.brokerName, a.queueId)
        offset = a.offset or 0
        lo, hi = admin.queue_offsets(mq)
        if offset > hi:
            print(f"{mq_text(mq)} no matched msg, offset={offset}", file=out)
            return None
        lo = max(lo, offset)
        if hi - lo > count:
            print(f"The oldler {count} message will be provided", file=out)  # sic: Apache's words
            hi = lo + count - 1
        _print_queue(admin, mq, lo, hi, out)
        return None
    # executeDefault: the route's queues in the order Java's HashSet of them iterates
    route = admin.topic_route(a.topic)
    queues = hash_set_order(MessageQueue(a.topic, q.broker_name, i) for q in route.queue_datas
                            for i in range(q.read_queue_nums))
    left = count
    for mq in queues:
        if left == 0:
            break
        lo, hi = admin.queue_offsets(mq)
        if hi - lo > left:
            print(f"The older {left} message of the {mq.queue_id} queue will be provided", file=out)
            hi = lo + left - 1
            left = 0
        else:
            left -= hi - lo + 1  # Apache counts one more than the queue's messages (it may go below 0)
        _print_queue(admin, mq, lo, hi, out)
    return None


def _print_queue(admin: MQAdmin, mq: MessageQueue, lo: int, hi: int, out: TextIO) -> None:
    """ConsumeMessageCommand.pullMessageByQueue: pull from ``lo`` through ``hi`` (the queue's
    max offset, so the last pull finds nothing and says where it ended), each message as
    PrintMessageByQueueCommand prints it; nothing committed."""
    offset = lo
    while offset <= hi:
        code, offset, msgs = admin.pull(mq, offset, hi - offset + 1)
        if code == ResponseCode.SUCCESS:
            print("Consume ok", file=out)
            for m in msgs:
                print(f"MSGID: {m.msg_id} {message_ext_text(m)} BODY: {m.body.decode('utf-8', 'replace')}", file=out)
        elif code == ResponseCode.PULL_RETRY_IMMEDIATELY:
            print(f"{mq_text(mq)} no matched msg. status=NO_MATCHED_MSG, offset={offset}", file=out)
        else:
            status = "NO_NEW_MSG" if code == ResponseCode.PULL_NOT_FOUND else "OFFSET_ILLEGAL"
            print(f"{mq_text(mq)} print msg finished. status={status}, offset={offset}", file=out)
            return


def cmd_get_broker_config(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    addrs = _broker_targets(admin, a)
    configs = {addr: admin.broker_config(addr) for addr in addrs}
    if a.json:
        return configs[addrs[0]] if a.brokerAddr else configs
    for addr, props in configs.items():
        head = addr if a.brokerAddr else f"Master: {addr}"
        print(f"============{head}============", file=out)
        for k, v in props.items():
            print(f"{k:<50}=  {v}", file=out)
        print("", file=out)
    return None


def cmd_update_broker_config(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    addrs = _broker_targets(admin, a)
    for addr in addrs:
        warning = admin.update_broker_config(addr, {a.key: a.value})
        if warning:
            print(f"mqadmin: warning: {addr}: {warning}", file=sys.stderr)
    if a.json:
        return {"brokers": addrs, "key": a.key, "value": a.value}
    for addr in addrs:
        print(f"update broker config success, {addr}", file=out)
    return None


# --- argument parsing -----------------------------------------------------------------------------
def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-n", "--namesrvAddr", default=os.environ.get("NAMESRV_ADDR", DEFAULT_NAMESRV),
                   help="name server address(es), 'host:port;host:port' (default: $NAMESRV_ADDR or 127.0.0.1:9876)")
    p.add_argument("--json", action="store_true", help="print JSON for scripts instead of the table")
    p.add_argument("--timeout", type=int, default=5000, metavar="MS", help="per-request timeout (default 5000)")
    p.add_argument("--accessKey", help="plain ACL account: sign every request (admin commands need an admin "
                                       "account); Java's mqadmin reads it from conf/tools.yml")
    p.add_argument("--secretKey", help="the account's secret key")
    return p


def _broker_or_cluster(p: argparse.ArgumentParser, what: str) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("-b", "--brokerAddr", help=f"{what} which broker (host:port)")
    g.add_argument("-c", "--clusterName", help=f"{what} every master of this cluster")


COMMANDS: dict[str, tuple[str, Command]] = {}


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(prog="mqadmin", description="RocketMQ admin commands for mqcore and "
                                     "Apache RocketMQ 4.x clusters (same names and flags as RocketMQ's mqadmin).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def add(name: str, fn: Command, help_text: str) -> argparse.ArgumentParser:
        COMMANDS[name] = (help_text, fn)
        return sub.add_parser(name, parents=[common], help=help_text, description=help_text)

    add("clusterList", cmd_cluster_list, "List the brokers of every cluster with their load")
    p = add("brokerStatus", cmd_broker_status, "Fetch broker runtime status data")
    _broker_or_cluster(p, "status of")
    p = add("topicList", cmd_topic_list, "Fetch all topic list from name server")
    p.add_argument("-c", "--clusterModel", action="store_true", help="with cluster and consumer groups")
    p = add("topicRoute", cmd_topic_route, "Examine topic route info")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-l", "--list", action="store_true", help="print a table instead of the JSON route")
    p = add("topicClusterList", cmd_topic_cluster_list, "Get cluster info for topic")
    p.add_argument("-t", "--topic", required=True)
    p = add("topicStatus", cmd_topic_status, "Examine topic Status info")
    p.add_argument("-t", "--topic", required=True)
    p = add("updateTopic", cmd_update_topic, "Update or create topic")
    _broker_or_cluster(p, "create the topic on")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-r", "--readQueueNums", type=int, default=8)
    p.add_argument("-w", "--writeQueueNums", type=int, default=8)
    p.add_argument("-p", "--perm", type=int, default=6, choices=TOPIC_PERMS, help="2: W, 4: R, 6: RW, 7: RWX")
    p.add_argument("-o", "--order", type=_bool, default=False)
    p = add("deleteTopic", cmd_delete_topic, "Delete topic from broker and NameServer")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-c", "--clusterName", required=True)
    p = add("updateSubGroup", cmd_update_sub_group, "Update or create subscription group")
    _broker_or_cluster(p, "create the group on")
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-s", "--consumeEnable", type=_bool, default=True)
    p.add_argument("-m", "--consumeFromMinEnable", type=_bool, default=False)
    p.add_argument("-d", "--consumeBroadcastEnable", type=_bool, default=False)
    p.add_argument("-q", "--retryQueueNums", type=int, default=1)
    p.add_argument("-r", "--retryMaxTimes", type=int, default=16)
    p.add_argument("-i", "--brokerId", type=int, default=0)
    p.add_argument("-w", "--whichBrokerWhenConsumeSlowly", type=int, default=1)
    p.add_argument("-a", "--notifyConsumerIdsChanged", type=_bool, default=True)
    p.add_argument("-o", "--consumeOrderly", type=_bool, default=False,
                   help="a FIFO group for RocketMQ 5.x clients (RocketMQ 5's mqadmin -o)")
    p = add("deleteSubGroup", cmd_delete_sub_group, "Delete subscription group from broker")
    _broker_or_cluster(p, "delete the group from")
    p.add_argument("-g", "--groupName", required=True)
    p.add_argument("-r", "--removeOffset", type=_bool, default=False)
    p = add("consumerProgress", cmd_consumer_progress, "Query consumers' progress, speed")
    p.add_argument("-g", "--groupName")
    p = add("consumerConnection", cmd_consumer_connection, "Query consumer's connections, versions, subscriptions")
    p.add_argument("-g", "--consumerGroup", required=True)
    p.add_argument("-b", "--brokerAddr")
    p = add("producerConnection", cmd_producer_connection, "Query producer's connections and client versions")
    p.add_argument("-g", "--producerGroup", required=True)
    p.add_argument("-t", "--topic", required=True)
    p = add("queryMsgByKey", cmd_query_msg_by_key, "Query Message by Key")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-k", "--msgKey", required=True)
    p = add("queryMsgById", cmd_query_msg_by_id, "Query Message by Id")
    p.add_argument("-i", "--msgId", required=True, help="offset message id(s), comma separated")
    p.add_argument("-t", "--topic", help="look the id up as a client message id (UNIQ_KEY) in this topic")
    p.add_argument("-g", "--consumerGroup", help="with -d: have this group's consumer consume the message")
    p.add_argument("-d", "--clientId", help="with -g: the client id of the consumer to run its listener on it")
    p = add("queryMsgByOffset", cmd_query_msg_by_offset, "Query Message by offset")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-b", "--brokerName", required=True)
    p.add_argument("-i", "--queueId", type=int, required=True)
    p.add_argument("-o", "--offset", type=int, required=True)
    p = add("resetOffsetByTime", cmd_reset_offset_by_time, "Reset consumer offset by timestamp")
    p.add_argument("-g", "--group", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-s", "--timestamp", required=True, help="milliseconds, now, or yyyy-MM-dd#HH:mm:ss:SSS")
    p.add_argument("-f", "--force", type=_bool, default=True)
    p = add("sendMessage", cmd_send_message, "Send a message")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-p", "--body", required=True, help="UTF-8 message body")
    p.add_argument("-k", "--key")
    p.add_argument("-c", "--tags")
    p.add_argument("-b", "--broker", help="broker name")
    p.add_argument("-i", "--qid", type=int)
    p = add("consumeMessage", cmd_consume_message, "Consume messages (read without committing)")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-b", "--brokerName")
    p.add_argument("-i", "--queueId", type=int)
    p.add_argument("-o", "--offset", type=int)
    p.add_argument("-c", "--MessageNumber", type=int, default=128)
    p = add("getBrokerConfig", cmd_get_broker_config, "Get broker config by cluster or broker")
    _broker_or_cluster(p, "get the config of")
    p = add("updateBrokerConfig", cmd_update_broker_config, "Update a broker setting that can change at run time")
    _broker_or_cluster(p, "update")
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)
    cli_tools.register(add)
    cli_auth.register(add)
    return parser


def _describe(e: MQError) -> str:
    if isinstance(e, RemotingConnectError):
        return f"cannot connect: {e} (is the name server/broker running at that address?)"
    if isinstance(e, RemotingTimeoutError):
        return f"timeout: {e}"
    if isinstance(e, BrokerError) and e.addr:  # the server's own answer: who, code, remark
        try:
            name = f" ({ResponseCode(e.code).name})"
        except ValueError:
            name = ""
        return f"refused by {e.addr}: code {e.code}{name}: {e.remark}"
    return str(e)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    parser = build_parser()
    a = parser.parse_args(argv)
    if not a.command:
        parser.print_help(out)
        return 2
    _help, fn = COMMANDS[a.command]
    a.failures = {}
    try:
        if (a.accessKey is None) != (a.secretKey is None):
            raise UsageError("--accessKey and --secretKey go together")
        with MQAdmin(a.namesrvAddr, timeout_ms=a.timeout, access_key=a.accessKey, secret_key=a.secretKey) as admin:
            result = fn(admin, a, out)
    except UsageError as e:
        print(f"mqadmin {a.command}: {e}", file=sys.stderr)
        return 2
    except MQError as e:
        print(f"mqadmin {a.command}: {_describe(e)}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"mqadmin {a.command}: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # an operator gets one line, never a traceback; the line names the bug
        print(f"mqadmin {a.command}: internal error {type(e).__name__}: {e} (please report it)", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(result, indent=2, sort_keys=True, default=str), file=out)
    for why, whats in a.failures.items():
        print(f"mqadmin {a.command}: {', '.join(whats)}: {why}", file=sys.stderr)
    return 1 if a.failures else 0


if __name__ == "__main__":
    sys.exit(main())
