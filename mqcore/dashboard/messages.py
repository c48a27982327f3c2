"""Message search and a message's page: its body three ways, its properties, and where it
went (delays, retries, the DLQ, and which groups consumed it).

"Consumed by a group" means the group's committed offset on the message's queue is past the
message's queue offset, the same test ``consumerProgress`` makes. Retries and DLQ copies keep
the original's ``UNIQ_KEY`` (the send-back copies every property), so they are found through
the index in ``%RETRY%group``, ``SCHEDULE_TOPIC_XXXX`` and ``%DLQ%group``.
"""
from __future__ import annotations

import base64
import json
import string
from typing import Any

from mqcore.dashboard.source import DashboardSource
from mqcore.errors import IllegalArgumentError
from mqcore.format.trace import TRACE_TOPIC, TraceRecord, records_about
from mqcore.jsonutil import java_hashmap_order
from mqcore.netaddr import host_of
from mqcore.message import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    MessageExt,
    Prop,
    decode_offset_msg_id,
    dlq_topic,
    retry_topic,
)

#: at most this many messages in one result list
MAX_RESULTS = 64
#: Pages past this are refused: page N reads up to (N + 1) * 64 entries of every queue.
MAX_PAGE = 999
#: the hex view stops here; the text and JSON views show the whole body
HEX_LIMIT_BYTES = 64 * 1024
_PRINTABLE = set(string.printable) - set("\x0b\x0c")


def summary(m: MessageExt) -> dict[str, Any]:
    body = bytes(m.body)
    preview = body[:80].decode("utf-8", "replace")
    return {"msg_id": m.msg_id, "offset_msg_id": m.offset_msg_id, "phy": m.commitlog_offset, "topic": m.topic,
            "queue": m.queue_id,
            "queue_offset": m.queue_offset, "tags": m.tags or "", "key_list": " ".join(m.keys),
            "store_ts": m.store_timestamp, "born_ts": m.born_timestamp, "size": len(body),
            "preview": "".join(c if c in _PRINTABLE else "." for c in preview)}


def by_key(src: DashboardSource, topic: str, key: str, begin_ts: int = 0, end_ts: int = 1 << 62) -> list[MessageExt]:
    """Messages of ``topic`` whose KEYS or UNIQ_KEY is ``key`` (the index; exact matches)."""
    return src.store.messages_by_key(topic, key, MAX_RESULTS, begin_ts, end_ts)


def by_id(src: DashboardSource, msg_id: str, topic: str | None = None) -> list[MessageExt]:
    """By the broker's offset message id (store address + commitlog offset), else by the
    client's message id (UNIQ_KEY), which needs the topic to look in."""
    msg_id = msg_id.strip()
    found: list[MessageExt] = []
    try:
        _ip, _port, phy = decode_offset_msg_id(msg_id)
    except IllegalArgumentError:
        phy = None
    if phy is not None and src.store.get_min_phy_offset() <= phy < src.store.get_max_phy_offset():
        m = src.store.look_message_by_offset(phy)
        if m is not None and m.offset_msg_id == msg_id.upper():
            found.append(m)
    if not found and topic:
        found = [m for m in by_key(src, topic, msg_id) if m.properties.get(Prop.UNIQ_KEY) == msg_id]
    return found


def by_time(src: DashboardSource, topic: str, begin_ts: int, end_ts: int) -> list[MessageExt]:
    """Messages of ``topic`` stored in [begin_ts, end_ts], oldest first, at most MAX_RESULTS."""
    return by_time_page(src, topic, begin_ts, end_ts, 0)[0]


def by_time_page(src: DashboardSource, topic: str, begin_ts: int, end_ts: int,
                 page: int) -> tuple[list[MessageExt], bool]:
    """Page ``page`` (from 0, MAX_RESULTS a page) of the messages of ``topic`` stored in
    [begin_ts, end_ts], oldest first, and whether a further page holds any. Each queue is read
    from the consume-queue entry its start time maps to, at most (page + 1) * MAX_RESULTS + 1
    entries: the merged order's first that many can only come from each queue's first that
    many, so the page is exact without reading the whole range."""
    if not 0 <= page <= MAX_PAGE:
        raise ValueError(f"page {page} is outside 0..{MAX_PAGE}")
    want = (page + 1) * MAX_RESULTS + 1
    store = src.store
    out: list[MessageExt] = []
    for qid in store.queue_ids().get(topic, []):
        off = max(store.get_offset_in_queue_by_time(topic, qid, begin_ts), store.get_min_offset_in_queue(topic, qid))
        top = store.get_max_offset_in_queue(topic, qid)
        taken = 0
        while off < top and taken < want:
            phy = store.get_commitlog_offset_in_queue(topic, qid, off)
            off += 1
            m = store.look_message_by_offset(phy) if phy >= 0 else None
            if m is None or m.store_timestamp < begin_ts:
                continue
            if m.store_timestamp > end_ts:
                break
            out.append(m)
            taken += 1
    out.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
    start = page * MAX_RESULTS
    return out[start:start + MAX_RESULTS], len(out) > start + MAX_RESULTS


def is_dead_letter(m: MessageExt) -> bool:
    return m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def export(m: MessageExt) -> dict[str, Any]:
    """A message as the export writes it: its ids, place, times, properties and body (as text
    when it is UTF-8, else base64), enough to inspect or replay it elsewhere."""
    body = bytes(m.body)
    try:
        text, b64 = body.decode("utf-8"), None
    except UnicodeDecodeError:
        text, b64 = None, base64.b64encode(body).decode()
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic, "queueId": m.queue_id,
            "queueOffset": m.queue_offset, "commitLogOffset": m.commitlog_offset, "tags": m.tags or "",
            "keys": list(m.keys), "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp,
            "bornHost": m.born_host, "storeHost": m.store_host, "reconsumeTimes": m.reconsume_times,
            "properties": dict(sorted(m.properties.items())), "body": text, "bodyBase64": b64}


def at_offset(src: DashboardSource, phy_offset: int) -> MessageExt | None:
    if not src.store.get_min_phy_offset() <= phy_offset < src.store.get_max_phy_offset():
        return None
    return src.store.look_message_by_offset(phy_offset)


# --- one message -----------------------------------------------------------------------------------------
def body_views(body: bytes) -> dict[str, Any]:
    """The body as text (when it is UTF-8), pretty-printed JSON (when it parses) and hex."""
    text = None
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    pretty = None
    if text is not None and text.lstrip()[:1] in ("{", "["):
        try:
            pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
        except ValueError:
            pass
    shown = body[:HEX_LIMIT_BYTES]
    lines = []
    for i in range(0, len(shown), 16):
        chunk = shown[i:i + 16]
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {chunk[:8].hex(' '):<23}  {chunk[8:].hex(' '):<23}  |{ascii_}|")
    return {"text": text, "json": pretty, "hex": "\n".join(lines), "hex_cut": len(body) > HEX_LIMIT_BYTES,
            "size": len(body)}


def _consumed(src: DashboardSource, topic: str, queue_id: int, queue_offset: int) -> list[dict[str, Any]]:
    out = []
    for group, queues in sorted(src.offsets.committed_by_group(topic).items()):
        committed = queues.get(queue_id, -1)
        out.append({"group": group, "committed": committed, "consumed": committed > queue_offset})
    return out


def trail(src: DashboardSource, m: MessageExt) -> dict[str, Any]:
    """Where the message went: delayed, retried by which groups, in which DLQ, consumed by whom."""
    props = m.properties
    uniq = props.get(Prop.UNIQ_KEY)
    origin_topic = props.get(Prop.RETRY_TOPIC) or props.get(Prop.REAL_TOPIC) or m.topic
    steps: list[dict[str, Any]] = []
    delay = props.get(Prop.DELAY)
    if m.topic == SCHEDULE_TOPIC:
        steps.append({"kind": "delay", "text": f"waiting in {SCHEDULE_TOPIC} (delay level {delay}) for "
                      f"{props.get(Prop.REAL_TOPIC)}"})
    elif delay and not m.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        steps.append({"kind": "delay", "text": f"delivered after delay level {delay}"})
    groups = set(src.offsets.committed_by_group(origin_topic))
    groups.update(g.group for g in src.clients.consumers.values() if origin_topic in g.subscriptions)
    copies: list[dict[str, Any]] = []
    if uniq:
        for g in sorted(groups):
            for kind, topic in (("retry", retry_topic(g)), ("dlq", dlq_topic(g))):
                if src.topics.get(topic) is None:
                    continue
                for c in by_key(src, topic, uniq):
                    if c.commitlog_offset == m.commitlog_offset:
                        continue
                    committed = src.offsets.query(g, topic, c.queue_id)
                    copies.append({"kind": kind, "group": g, "summary": summary(c), "reconsume": c.reconsume_times,
                                   # a dead letter is never consumed: nothing reads a DLQ by itself
                                   "consumed": None if kind == "dlq" else
                                   committed is not None and committed > c.queue_offset})
        for c in by_key(src, SCHEDULE_TOPIC, uniq):
            if c.commitlog_offset != m.commitlog_offset:
                copies.append({"kind": "delay", "group": "", "summary": summary(c), "reconsume": c.reconsume_times,
                               "consumed": None})
    copies.sort(key=lambda c: c["summary"]["store_ts"])
    return {"origin_topic": origin_topic, "steps": steps, "copies": copies,
            "consumed": _consumed(src, m.topic, m.queue_id, m.queue_offset)}


# --- message traces ---------------------------------------------------------------------------------
#: trace messages read for one message id, as ``mqadmin queryMsgTraceById`` asks (QUERY_MESSAGE maxNum 64)
MAX_TRACE_MESSAGES = 64


def traces(src: DashboardSource, msg_id: str, trace_topic: str = TRACE_TOPIC) -> dict[str, Any]:
    """The trace records about ``msg_id`` in ``trace_topic`` (found by key in its index, as
    ``queryMsgTraceById`` finds them, and decoded by the same function), grouped as that tool
    prints them: the Pub records, then each consumer group's Sub records (SubAfter: consume
    time, cost, status; SubBefore: when it was handed to the listener, how many retries)."""
    found = src.store.messages_by_key(trace_topic, msg_id, MAX_TRACE_MESSAGES, 0, 1 << 62)
    views, bad = records_about(msg_id, ((m.body, host_of(m.born_host)) for m in found))
    pubs = [v for v in views if v.trace_type == "Pub"]
    by_group: dict[str, list[TraceRecord]] = {}
    for v in views:
        if v.trace_type in ("SubBefore", "SubAfter"):
            by_group.setdefault(v.group, []).append(v)
    ends = [v for v in views if v.trace_type == "EndTransaction"]
    return {"msg_id": msg_id, "topic": trace_topic, "trace_messages": len(found), "unreadable": bad,
            "pubs": pubs, "subs": list(java_hashmap_order(by_group).items()), "ends": ends, "count": len(views)}
