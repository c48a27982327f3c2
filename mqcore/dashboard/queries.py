"""What the dashboard's pages show, read from a ``DashboardSource`` (plain dicts and lists
for the templates). Read only: changes are in ``actions``. Runs on the broker's loop.
"""
from __future__ import annotations

import os
from typing import Any

from mqcore.dashboard.source import DashboardSource
from mqcore.message import (
    BENCHMARK_TOPIC,
    DEFAULT_TOPIC,
    DLQ_GROUP_TOPIC_PREFIX,
    OFFSET_MOVED_EVENT,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    dlq_topic,
    retry_topic,
)
from mqcore.permissions import PERM_READ, PERM_WRITE
from mqcore.remoting import LanguageCode, MQVersion
from mqcore.store.space import statvfs_usage


def version_name(version: int) -> str:
    """A 4.x client's MQVersion ordinal as its release name (409 -> V4_9_8)."""
    try:
        return MQVersion(version).name
    except ValueError:
        return f"V{version}"


def language_name(code: int) -> str:
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


def perm_text(perm: int) -> str:
    return ("R" if perm & PERM_READ else "-") + ("W" if perm & PERM_WRITE else "-")


#: the topics a 4.9 broker makes for itself (besides the ones named after its cluster and itself)
SYSTEM_TOPICS = frozenset({DEFAULT_TOPIC, SCHEDULE_TOPIC, SELF_TEST_TOPIC, BENCHMARK_TOPIC, OFFSET_MOVED_EVENT})


def topic_kind(topic: str, src: DashboardSource | None = None) -> str:
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dlq"
    if topic in SYSTEM_TOPICS or topic.startswith("RMQ_SYS_") or (
            src is not None and topic in (src.cluster_name, src.broker_name)):
        return "system"
    return "normal"


# --- broker ------------------------------------------------------------------------------------------
def broker_overview(src: DashboardSource) -> dict[str, Any]:
    fig = src.runtime_figures()
    disks = []
    for name, path in src.disk_paths().items():
        while not os.path.exists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)  # made on first write: its partition is its parent's
        try:  # df's measure: used of used + available (root's reserve is neither), as the broker's
            used, avail = statvfs_usage(path)
            ratio = src.disk_ratio(path)
        except OSError:
            continue
        disks.append({"name": name, "path": os.path.abspath(path), "used": used, "total": used + avail,
                      "ratio": ratio})
    store = src.store
    # version, uptime and rates: GET_BROKER_RUNTIME_INFO's own values (brokerStatus, clusterList)
    return {"cluster": src.cluster_name, "broker": src.broker_name,
            "version": fig.get("brokerVersionDesc") or src.version,
            "addr": src.listen_addr(), "runtime": fig.get("runtime", ""), "boot_ms": int(fig.get("bootTimestamp") or 0),
            "put_tps": fig.get("putTps", ""), "get_tps": fig.get("getTransferedTps", ""),
            "commitlog_min": store.get_min_phy_offset(), "commitlog_max": store.get_max_phy_offset(),
            "refusal": store.refusal, "disks": disks,
            "topics": len(src.topics.table.names()), "queues": queue_count(src),
            "groups": len(src.groups.table.names()), "consumers_online": len(src.clients.consumers),
            "grpc_clients": len(src.grpc_clients()), "settings": src.settings()}


def queue_count(src: DashboardSource) -> int:
    """Queues the broker serves: each topic's writeQueueNums, the queues mqadmin topicStatus
    lists (GET_TOPIC_STATS_INFO), whether or not they hold messages yet."""
    return sum(tc.write_queue_nums for tc in src.topics.table.snapshot().values())


# --- topics ------------------------------------------------------------------------------------------
def topic_list(src: DashboardSource, rates: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    out = []
    store = src.store
    for name, tc in sorted(src.topics.table.snapshot().items()):
        total = sum(max(0, store.get_max_offset_in_queue(name, q) - max(0, store.get_min_offset_in_queue(name, q)))
                    for q in range(tc.write_queue_nums))
        put, get = rates.get(name, (0.0, 0.0))
        out.append({"name": name, "kind": topic_kind(name, src), "read": tc.read_queue_nums, "write": tc.write_queue_nums,
                    "perm": perm_text(tc.perm), "messages": total, "put_rate": put, "get_rate": get})
    return out


def queue_offsets(src: DashboardSource, topic: str, tc: Any = None) -> dict[int, tuple[int, int]]:
    """queue id -> (min offset, max offset) of each of the topic's queues, as mqadmin topicStatus
    lists them: the topic page's table and its charts' samples (``QueueHistory``) read this."""
    tc = tc if tc is not None else src.topics.get(topic)
    if tc is None:
        return {}
    store = src.store
    return {qid: (max(0, store.get_min_offset_in_queue(topic, qid)), store.get_max_offset_in_queue(topic, qid))
            for qid in range(max(tc.read_queue_nums, tc.write_queue_nums))}


def topic_detail(src: DashboardSource, topic: str) -> dict[str, Any] | None:
    tc = src.topics.get(topic)
    if tc is None:
        return None
    store = src.store
    queues = []
    for qid, (lo, hi) in queue_offsets(src, topic, tc).items():
        last = store.get_message_store_timestamp(topic, qid, hi - 1) if hi > 0 else 0
        queues.append({"id": qid, "min": lo, "max": hi, "last_ts": max(0, last)})
    groups = sorted(src.offsets.committed_by_group(topic))
    subscribed = sorted(g.group for g in src.clients.consumers.values() if topic in g.subscriptions)
    subscribed += [c.group for c in src.grpc_clients() if c.group and topic in c.topics]
    return {"name": topic, "kind": topic_kind(topic, src), "read": tc.read_queue_nums, "write": tc.write_queue_nums,
            "perm": perm_text(tc.perm), "order": tc.order, "queues": queues,
            "groups": sorted(set(groups) | set(subscribed))}


# --- consumer groups -----------------------------------------------------------------------------------
def _lag_rows(src: DashboardSource, group: str, topic: str) -> list[dict[str, Any]]:
    store = src.store
    rows = []
    for qid, committed in sorted(src.offsets.query_queues(group, topic).items()):
        top = store.get_max_offset_in_queue(topic, qid)
        committed = max(0, committed)
        last = store.get_message_store_timestamp(topic, qid, committed - 1) if committed > 0 else 0
        rows.append({"topic": topic, "queue": qid, "broker_offset": top, "consumer_offset": committed,
                     "lag": max(0, top - committed), "last_ts": max(0, last)})
    return rows


def _queue_depth(src: DashboardSource, topic: str) -> int:
    store = src.store
    qids = store.queue_ids().get(topic, [])
    return sum(max(0, store.get_max_offset_in_queue(topic, q) - max(0, store.get_min_offset_in_queue(topic, q)))
               for q in qids)


def group_names(src: DashboardSource) -> list[str]:
    names = set(src.groups.table.names()) | set(src.clients.consumers)
    for key in src.offsets.snapshot():
        names.add(key.partition("@")[2])
    names.update(c.group for c in src.grpc_clients() if c.group)
    return sorted(n for n in names if n)


def group_list(src: DashboardSource) -> list[dict[str, Any]]:
    out = []
    grpc = src.grpc_clients()
    for g in group_names(src):
        lag = sum(r["lag"] for t in src.offsets.topics_of(g) if not t.startswith(RETRY_GROUP_TOPIC_PREFIX)
                  for r in _lag_rows(src, g, t))
        info = src.clients.group(g)
        members = (len(info.channels) if info else 0) + sum(1 for c in grpc if c.group == g)
        out.append({"name": g, "members": members, "lag": lag,
                    "retry": _retry_backlog(src, g), "dlq": _queue_depth(src, dlq_topic(g)),
                    "model": info.message_model if info else ""})
    return out


def _retry_backlog(src: DashboardSource, group: str) -> int:
    topic = retry_topic(group)
    committed = src.offsets.query_queues(group, topic)
    store = src.store
    return sum(max(0, store.get_max_offset_in_queue(topic, q) - max(0, committed.get(q, 0)))
               for q in store.queue_ids().get(topic, []))


def group_detail(src: DashboardSource, group: str) -> dict[str, Any]:
    info = src.clients.group(group)
    members = []
    if info is not None:
        for ch, m in info.channels.items():
            members.append({"client_id": m.client_id, "addr": ch.remote_addr, "protocol": "4.x remoting",
                            "language": language_name(m.language), "version": version_name(m.version),
                            "last_seen_ms": m.last_update_ms})
    for c in src.grpc_clients():
        if c.group == group:
            members.append({"client_id": c.client_id, "addr": "", "protocol": f"5.x gRPC ({c.client_type})",
                            "language": c.language, "version": c.version, "last_seen_ms": c.last_seen_ms})
    topics = [t for t in sorted(src.offsets.topics_of(group)) if not t.startswith(RETRY_GROUP_TOPIC_PREFIX)]
    lag = [r for t in topics for r in _lag_rows(src, group, t)]
    subs = sorted((t, s.sub_string) for t, s in info.subscriptions.items()) if info else []
    return {"name": group, "members": members, "lag": lag, "total_lag": sum(r["lag"] for r in lag),
            "topics": topics, "subscriptions": subs, "retry": _retry_backlog(src, group),
            "dlq": _queue_depth(src, dlq_topic(group)), "dlq_topic": dlq_topic(group),
            "model": info.message_model if info else "", "consume_type": info.consume_type if info else "",
            "max_retries": src.groups.dead_letter_after(group)}


def consumers_of(src: DashboardSource, topic: str) -> list[tuple[str, str]]:
    """(group, client id) of every online 4.x consumer subscribed to ``topic``: the ones a
    message can be consumed directly by (CONSUME_MESSAGE_DIRECTLY goes down their channel)."""
    return sorted((info.group, m.client_id) for info in src.clients.consumers.values()
                  if topic in info.subscriptions for m in info.channels.values())


# --- clients -------------------------------------------------------------------------------------------
def client_list(src: DashboardSource) -> list[dict[str, Any]]:
    """Every connected client, 4.x (heartbeats over remoting) and 5.x (gRPC) side by side."""
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    for group, members in sorted(src.clients.producers.items()):
        for ch, m in members.items():
            _add_client(rows, m.client_id, ch.remote_addr, "4.x remoting", "producer", group,
                        language_name(m.language), version_name(m.version))
    for group, info in sorted(src.clients.consumers.items()):
        for ch, m in info.channels.items():
            _add_client(rows, m.client_id, ch.remote_addr, "4.x remoting", "consumer", group,
                        language_name(m.language), version_name(m.version))
    for c in src.grpc_clients():
        _add_client(rows, c.client_id, "", "5.x gRPC", c.client_type.lower(), c.group or "", c.language, c.version)
    return sorted(rows.values(), key=lambda r: (r["protocol"], r["client_id"]))


def _add_client(rows: dict[tuple[str, str, str], dict[str, Any]], client_id: str, addr: str, protocol: str,
                role: str, group: str, language: str, version: str) -> None:
    row = rows.setdefault((protocol, client_id, addr), {"client_id": client_id, "addr": addr, "protocol": protocol,
                                                        "roles": [], "language": language, "version": version})
    row["roles"].append(f"{role} {group}".strip())
