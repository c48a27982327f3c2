"""mqadmin commands over :class:`AdminTools`: consumerStatus, getNamesrvConfig,
updateNamesrvConfig, wipeWritePerm, addWritePerm, brokerConsumeStats, statsAll, cloneGroupOffset,
queryMsgTraceById, updateOrderConf and queryMsgById's direct consumption (``-g``/``-d``). Flags and
printed tables are Apache 4.9.8 mqadmin's; ``--json`` prints the answer instead.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from mqcore.admin import trace
from mqcore.admin.api import MQAdmin, version_desc
from mqcore.admin.tools_api import AdminTools, parse_order_conf
from mqcore.errors import BrokerError, MQError, NoRouteError
from mqcore.jsonutil import java_hashmap_order
from mqcore.remoting.codes import ResponseCode

Command = Callable[[MQAdmin, argparse.Namespace, TextIO], object]


class UsageError(Exception):
    """A flag combination the command cannot run with (exit status 2)."""
Adder = Callable[[str, Command, str], argparse.ArgumentParser]


def _human(ms: int) -> str:
    """``UtilAll.timeMillisToHumanString``: 20240501120000123."""
    t = dt.datetime.fromtimestamp(ms / 1000)
    return t.strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


def _mq(key: Any) -> dict[str, Any]:
    return dict(key) if isinstance(key, tuple) else dict(key)


def _bool(text: str) -> bool:
    s = text.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def format_running_info(info: dict[str, Any]) -> str:
    """``ConsumerRunningInfo.formatString``."""
    lines = ["#Consumer Properties#"]
    lines += [f"{k:<40}: {v}" for k, v in sorted((info.get("properties") or {}).items())]
    lines += ["", "", "#Consumer Subscription#"]
    for i, s in enumerate(info.get("subscriptionSet") or [], 1):
        lines.append(f"{i:03d} Topic: {s.get('topic', ''):<40} ClassFilter: {str(bool(s.get('classFilterMode'))).lower():<8}"
                     f" SubExpression: {s.get('subString')}")
    table = sorted(((_mq(k), v) for k, v in (info.get("mqTable") or {}).items()),
                   key=lambda kv: (kv[0].get("topic", ""), kv[0].get("brokerName", ""), kv[0].get("queueId", 0)))
    lines += ["", "", "#Consumer Offset#", f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Consumer Offset':<20}"]
    lines += [f"{mq['topic']:<32}  {mq['brokerName']:<32}  {mq['queueId']:<4d}  {pq.get('commitOffset', 0):<20d}"
              for mq, pq in table]
    lines += ["", "", "#Consumer MQ Detail#", f"{'#Topic':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#ProcessQueueInfo':<20}"]
    for mq, pq in table:
        detail = (f"ProcessQueueInfo [commitOffset={pq.get('commitOffset')}, cachedMsgMinOffset={pq.get('cachedMsgMinOffset')}, "
                  f"cachedMsgMaxOffset={pq.get('cachedMsgMaxOffset')}, cachedMsgCount={pq.get('cachedMsgCount')}, "
                  f"cachedMsgSizeInMiB={pq.get('cachedMsgSizeInMiB')}, transactionMsgMinOffset={pq.get('transactionMsgMinOffset')}, "
                  f"transactionMsgMaxOffset={pq.get('transactionMsgMaxOffset')}, transactionMsgCount={pq.get('transactionMsgCount')}, "
                  f"locked={str(pq.get('locked')).lower()}, tryUnlockTimes={pq.get('tryUnlockTimes')}, "
                  f"lastLockTimestamp={_human(int(pq.get('lastLockTimestamp', 0)))}, droped={str(pq.get('droped')).lower()}, "
                  f"lastPullTimestamp={_human(int(pq.get('lastPullTimestamp', 0)))}, "
                  f"lastConsumeTimestamp={_human(int(pq.get('lastConsumeTimestamp', 0)))}]")
        lines.append(f"{mq['topic']:<64}  {mq['brokerName']:<32}  {mq['queueId']:<4d}  {detail}")
    lines += ["", "", "#Consumer RT&TPS#",
              f"{'#Topic':<64}  {'#Pull RT':>14} {'#Pull TPS':>14} {'#Consume RT':>14} {'#ConsumeOK TPS':>14} "
              f"{'#ConsumeFailed TPS':>18} {'#ConsumeFailedMsgsInHour':>25}"]
    for topic, s in sorted((info.get("statusTable") or {}).items()):
        lines.append(f"{topic:<32}  {s.get('pullRT', 0):14.2f} {s.get('pullTPS', 0):14.2f} {s.get('consumeRT', 0):14.2f} "
                     f"{s.get('consumeOKTPS', 0):14.2f} {s.get('consumeFailedTPS', 0):18.2f} {int(s.get('consumeFailedMsgs', 0)):25d}")
    text = "\n".join(lines) + "\n"
    if info.get("jstack"):
        text += "\n\n#Consumer jstack#\n" + str(info["jstack"])
    return text


def cmd_consumer_status(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    tools = AdminTools(admin)
    if a.clientId:
        info = tools.running_info(a.consumerGroup, a.clientId, jstack=a.jstackEnable)
        if a.json:
            return _jsonable(info)
        out.write(format_running_info(info))
        return None
    conns = admin.consumer_connection(a.consumerGroup, a.brokerAddr).connections
    infos: dict[str, dict[str, Any]] = {}
    now = int(time.time() * 1000)
    if not a.json:
        print(f"{'#Index':<10} {'#ClientId':<40} {'#Version':<20} #ConsumerRunningInfoFile", file=out)
    for i, conn in enumerate(conns, 1):
        info = infos[conn.client_id] = tools.running_info(a.consumerGroup, conn.client_id, jstack=a.jstackEnable)
        if a.json:
            continue
        path = os.path.join(str(now), conn.client_id)  # where Apache's mqadmin writes it: relative to the cwd
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(format_running_info(info))
        print(f"{i:<10d} {conn.client_id:<40} {version_desc(conn.version):<20} {path}", file=out)
    if a.json:
        return {cid: _jsonable(info) for cid, info in infos.items()}
    if infos:
        subs = [sorted((s.get("topic"), s.get("subString")) for s in info.get("subscriptionSet") or [])
                for info in infos.values()]
        if all(s == subs[0] for s in subs):
            owners: dict[tuple[tuple[str, Any], ...], int] = {}
            for info in infos.values():
                for k in info.get("mqTable") or {}:
                    key = tuple(sorted(_mq(k).items()))
                    owners[key] = owners.get(key, 0) + 1
            print("\n\nSame subscription in the same group of consumer", end="", file=out)
            print(f"\n\nRebalance {'OK' if all(n == 1 for n in owners.values()) else 'Failed'}", file=out)
        else:
            print("\n\nWARN: Different subscription in the same group of consumer!!!", end="", file=out)
    return None


def _jsonable(info: dict[str, Any]) -> dict[str, Any]:
    """Object-keyed maps (mqTable) as lists, for --json."""
    out = dict(info)
    if "mqTable" in out:
        out["mqTable"] = [{"messageQueue": _mq(k), "processQueue": v} for k, v in (info["mqTable"] or {}).items()]
    return out


def cmd_get_namesrv_config(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    configs = AdminTools(admin).namesrv_config()
    if a.json:
        return configs
    for addr, props in configs.items():
        print(f"============{addr}============", file=out)
        for k, v in props.items():
            print(f"{k:<50}=  {v}", file=out)
    return None


def cmd_update_namesrv_config(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    AdminTools(admin).update_namesrv_config({a.key.strip(): a.value.strip()})
    if a.json:
        return {"nameServers": admin.namesrv_addrs, "key": a.key, "value": a.value}
    print(f"update name server config success![{', '.join(admin.namesrv_addrs)}]\n{a.key} : {a.value}", file=out)
    return None


def _write_perm(writable: bool) -> Command:
    def cmd(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
        counts = AdminTools(admin).change_write_perm(a.brokerName, writable)
        if a.json:
            return counts
        for addr, n in counts.items():
            print(f"{'add' if writable else 'wipe'} write perm of broker[{a.brokerName}] in name server[{addr}] "
                  f"OK, {n}", file=out)
        return None
    return cmd


def cmd_broker_consume_stats(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    if a.timeoutMillis:
        admin.timeout_ms = a.timeoutMillis
    stats = AdminTools(admin).broker_consume_stats(a.brokerAddr, order=a.order)
    if a.json:
        return {"brokerAddr": stats.get("brokerAddr"), "totalDiff": stats.get("totalDiff"),
                "groups": {g: [{"consumeTps": s.get("consumeTps"),
                                "offsetTable": [{"messageQueue": _mq(k), **v} for k, v in s["offsetTable"].items()]}
                               for s in lst] for d in stats.get("consumeStatsList") or [] for g, lst in d.items()}}
    print(f"{'#Topic':<64}  {'#Group':<64}  {'#Broker Name':<32}  {'#QID':<4}  {'#Broker Offset':<20}  "
          f"{'#Consumer Offset':<20}  {'#Diff':<20}  #LastTime", file=out)
    for d in stats.get("consumeStatsList") or []:
        for group, lst in d.items():
            for s in lst:
                rows = sorted(((_mq(k), v) for k, v in (s.get("offsetTable") or {}).items()),
                              key=lambda kv: (kv[0]["topic"], kv[0]["brokerName"], kv[0]["queueId"]))
                for mq, w in rows:
                    diff = int(w.get("brokerOffset", 0)) - int(w.get("consumerOffset", 0))
                    if diff < a.level or not int(w.get("lastTimestamp", 0)) > 0:
                        continue
                    last = dt.datetime.fromtimestamp(int(w["lastTimestamp"]) / 1000).strftime("%Y-%m-%d %H:%M:%S")
                    print(f"{mq['topic']:<64}  {group:<64}  {mq['brokerName']:<32}  {mq['queueId']:<4d}  "
                          f"{int(w.get('brokerOffset', 0)):<20d}  {int(w.get('consumerOffset', 0)):<20d}  {diff:<20d}  "
                          f"{last}", file=out)
    print(f"\nDiff Total: {stats.get('totalDiff', 0)}", file=out)
    return None


def cmd_clone_group_offset(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    addrs = AdminTools(admin).clone_group_offset(a.srcGroup, a.destGroup, a.topic, offline=a.offline)
    if a.json:
        return {"srcGroup": a.srcGroup, "destGroup": a.destGroup, "topic": a.topic, "brokers": addrs}
    print(f"clone group offset success. srcGroup[{a.srcGroup}], destGroup=[{a.destGroup}], topic[{a.topic}]",
          file=out)
    return None


def consume_directly(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    """queryMsgById -g group -d clientId: the consumer runs its listener on each message."""
    results = []
    for msg_id in [i.strip() for i in a.msgId.split(",") if i.strip()]:
        offset_id = admin.view_message(msg_id, a.topic).offset_msg_id if a.topic else msg_id
        r = AdminTools(admin).consume_directly(a.consumerGroup, a.clientId, offset_id)
        results.append(r)
        if not a.json:
            print(f"ConsumeMessageDirectlyResult [order={str(r.get('order')).lower()}, "
                  f"autoCommit={str(r.get('autoCommit')).lower()}, consumeResult={r.get('consumeResult')}, "
                  f"remark={r.get('remark') if r.get('remark') is not None else 'null'}, spentTimeMills={r.get('spentTimeMills')}]", file=out)
    return (results if len(results) > 1 else results[0]) if a.json else None


def _day_sum(data: dict[str, Any]) -> int:
    """``compute24HourSum``: the day's sum, else the hour's, else the minute's."""
    for window in ("statsDay", "statsHour", "statsMinute"):
        total = int((data.get(window) or {}).get("sum", 0))
        if total:
            return total
    return 0


def cmd_stats_all(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    """Per topic and consumer group: backlog, in/out messages per second (last minute) and in
    the last 24 hours, from every master's stats windows."""
    tools = AdminTools(admin)
    rows = []
    for topic in admin.topic_list():
        if topic.startswith(("%RETRY%", "%DLQ%")) or (a.topic and topic != a.topic):
            continue
        masters = [addr for _name, addr in admin._topic_brokers(topic)]
        in_tps, in_day = 0.0, 0
        for addr in masters:
            data = tools.stats_data(addr, "TOPIC_PUT_NUMS", topic)
            if data:
                in_tps += float(data["statsMinute"]["tps"])
                in_day += _day_sum(data)
        groups = admin.topic_consumed_by(topic)
        if not groups:
            if not a.activeTopic or in_day > 0:
                rows.append({"topic": topic, "group": "", "accumulation": 0, "inTps": in_tps, "outTps": None,
                             "inMsg24Hour": in_day, "outMsg24Hour": None})
            continue
        for group in groups:
            out_tps, out_day = 0.0, 0
            for addr in masters:
                data = tools.stats_data(addr, "GROUP_GET_NUMS", f"{topic}@{group}")
                if data:
                    out_tps += float(data["statsMinute"]["tps"])
                    out_day += _day_sum(data)
            try:
                backlog = max(0, admin.consume_stats(group, topic).diff_total)
            except NoRouteError:  # a group without a retry topic's route: no progress to show
                backlog = 0
            if not a.activeTopic or in_day > 0 or out_day > 0:
                rows.append({"topic": topic, "group": group, "accumulation": backlog, "inTps": in_tps,
                             "outTps": out_tps, "inMsg24Hour": in_day, "outMsg24Hour": out_day})
    if a.json:
        return rows
    print(f"{'#Topic':<64}  {'#Consumer Group':<64} {'#Accumulation':>12} {'#InTPS':>11} {'#OutTPS':>11} "
          f"{'#InMsg24Hour':>14} {'#OutMsg24Hour':>14}", file=out)
    for r in rows:
        if r["outTps"] is None:
            print(f"{r['topic']:<64}  {'':<64} {0:12d} {r['inTps']:11.2f} {'':>11} {r['inMsg24Hour']:14d} "
                  f"{'NO_CONSUMER':>14}", file=out)
        else:
            print(f"{r['topic']:<64}  {r['group']:<64} {r['accumulation']:12d} {r['inTps']:11.2f} "
                  f"{r['outTps']:11.2f} {r['inMsg24Hour']:14d} {r['outMsg24Hour']:14d}", file=out)
    return None


def cmd_query_msg_trace_by_id(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    """The Pub and SubAfter records Java clients (enableMsgTrace=true) wrote about one message."""
    msg_id = a.msgId.strip()
    topic = (a.traceTopic or trace.TRACE_TOPIC).strip()
    msgs = admin.query_msg_by_key(topic, msg_id, max_num=64, end_ms=int(time.time() * 1000), sort=False)
    if not msgs:
        raise BrokerError(ResponseCode.QUERY_NOT_FOUND, f"no trace of message {msg_id} in {topic} (its client "
                          "traces only with enableMsgTrace=true; -t names another trace topic)")
    views, bad = trace.trace_views(msg_id, msgs)
    if bad:
        print(f"mqadmin queryMsgTraceById: warning: {bad} trace record(s) in {topic} could not be read",
              file=sys.stderr)
    if a.json:
        return [v.to_json() for v in views]
    row = "{:<10} {:<20} {:<20} {:<20} {:<10} {:<10}"
    by_group: dict[str, list[trace.TraceRecord]] = {}
    for v in views:
        if v.trace_type == "Pub":
            print(row.format("#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"), file=out)
            print(row.format("Pub", v.group, str(v.client_host), _date(v.timestamp), f"{v.cost_ms}ms", v.status),
                  file=out)
            print("", file=out)
        elif v.trace_type == "SubAfter":
            by_group.setdefault(v.group, []).append(v)
    for group, subs in java_hashmap_order(by_group).items():  # the Java tool groups them in a HashMap
        print(row.format("#Type", "#ConsumerGroup", "#ClientHost", "#ConsumerTime", "#CostTimes", "#Status"),
              file=out)
        for v in subs:
            print(row.format("Sub", group, str(v.client_host), _date(v.timestamp), f"{v.cost_ms}ms", v.status),
                  file=out)
        print("", file=out)
    return None


def _date(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def cmd_update_order_conf(admin: MQAdmin, a: argparse.Namespace, out: TextIO) -> object:
    """Read, set or delete a topic's order configuration on the name servers
    (namespace ORDER_TOPIC_CONFIG: ``brokerName:queueNums;...``)."""
    tools = AdminTools(admin)
    topic, method = a.topic.strip(), a.method.strip()
    if method == "get":
        conf = tools.order_conf(topic)
        if a.json:
            return {"topic": topic, "orderConf": conf}
        print(f"get orderConf success. topic=[{topic}], orderConf=[{conf}] ", file=out)  # Java's trailing space
        return None
    if method == "put":
        value = (a.orderConf or "").strip()
        if not value:
            raise UsageError("please set orderConf with option -v.")
        try:
            parse_order_conf(value)
        except ValueError as e:
            raise UsageError(str(e)) from None
        tools.put_order_conf(topic, value)
        if a.json:
            return {"topic": topic, "orderConf": value}
        print(f"update orderConf success. topic=[{topic}], orderConf=[{value}]", file=out)
        return None
    if method == "delete":
        tools.delete_order_conf(topic)
        if a.json:
            return {"topic": topic, "deleted": True}
        print(f"delete orderConf success. topic=[{topic}]", file=out)
        return None
    raise UsageError(f"-m is put, get or delete, not {method!r}")


def register(add: Adder) -> None:
    """Add these commands to mqadmin's parser (``add(name, fn, help)`` returns the subparser)."""
    p = add("consumerStatus", cmd_consumer_status, "Query consumer's internal data structure")
    p.add_argument("-g", "--consumerGroup", required=True)
    p.add_argument("-i", "--clientId", help="the consumer's client id (without: every consumer of the group, "
                                            "each written to <now>/<clientId>)")
    p.add_argument("-s", "--jstackEnable", action="store_true", help="with the consumer's thread stacks")
    p.add_argument("-b", "--brokerAddr", help="ask this broker for the group's connections")
    p = add("getNamesrvConfig", cmd_get_namesrv_config, "Get configs of name server.")
    p = add("updateNamesrvConfig", cmd_update_namesrv_config, "Update configs of name server.")
    p.add_argument("-k", "--key", required=True)
    p.add_argument("-v", "--value", required=True)
    p = add("wipeWritePerm", _write_perm(False), "Wipe write perm of broker in all name server you defined in "
                                                 "the -n param")
    p.add_argument("-b", "--brokerName", required=True)
    p = add("addWritePerm", _write_perm(True), "Add write perm of broker in all name server you defined in the "
                                               "-n param")
    p.add_argument("-b", "--brokerName", required=True)
    p = add("brokerConsumeStats", cmd_broker_consume_stats, "Fetch broker consume stats data")
    p.add_argument("-b", "--brokerAddr", required=True)
    p.add_argument("-t", "--timeoutMillis", type=int, default=50_000)
    p.add_argument("-l", "--level", type=int, default=0, help="threshold of print diff")
    p.add_argument("-o", "--order", type=_bool, default=False, help="order topics only")
    p = add("statsAll", cmd_stats_all, "Topic and Consumer tps stats")
    p.add_argument("-a", "--activeTopic", action="store_true", help="print active topic only")
    p.add_argument("-t", "--topic", help="print select topic only")
    p = add("cloneGroupOffset", cmd_clone_group_offset, "clone offset from other group.")
    p.add_argument("-s", "--srcGroup", required=True)
    p.add_argument("-d", "--destGroup", required=True)
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-o", "--offline", type=_bool, default=False, help="the group or the topic is offline")
    p = add("queryMsgTraceById", cmd_query_msg_trace_by_id, "query a message trace")
    p.add_argument("-i", "--msgId", required=True, help="the message id (the client's msgId a send returns)")
    p.add_argument("-t", "--traceTopic", help=f"the trace topic (default {trace.TRACE_TOPIC})")
    p = add("updateOrderConf", cmd_update_order_conf, "Create or update or delete order conf")
    p.add_argument("-t", "--topic", required=True)
    p.add_argument("-v", "--orderConf", help="with -m put: brokerName1:num;brokerName2:num")
    p.add_argument("-m", "--method", required=True, help="put, get or delete")


__all__ = ["register", "consume_directly", "format_running_info"]
