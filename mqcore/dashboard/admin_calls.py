"""What the dashboard asks of the broker through its admin requests: a test send (SEND_MESSAGE),
topic edits (UPDATE_AND_CREATE_TOPIC), subscription groups (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
DELETE_SUBSCRIPTIONGROUP), producer connections (GET_PRODUCER_CONNECTION_LIST) and the calls the
broker forwards to a consumer (GET_CONSUMER_RUNNING_INFO 307, CONSUME_MESSAGE_DIRECTLY 309).

Each builds the request mqadmin (or a client) would send and hands it to the broker's own
processor (``DashboardSource.admin_request``): the same validation, the same system-topic
rules, the same answer. A refusal is the processor's remark, shown as a 400 with it. Runs on
the broker's event loop.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from mqcore.dashboard.actions import ActionError
from mqcore.dashboard.source import DashboardSource
from mqcore.errors import ProtocolError
from mqcore.format import layout as L
from mqcore.jsonutil import dumps_compact, loads_lenient
from mqcore.message import Prop, properties_to_string, unpack_host
from mqcore.remoting import RequestCode, ResponseCode
from mqcore.remoting.headers import SendMessageRequestHeader
from mqcore.store.config_files import bean_to_json, camel_case
from mqcore.uniq_id import UniqIdGenerator

#: the producer group test sends are made under (rocketmq-dashboard's, ``MixAll.SELF_TEST_PRODUCER_GROUP``)
TEST_PRODUCER_GROUP = "SELF_TEST_P_GROUP"
#: a test message's body, at most (the broker's own limit is larger; a form is not a bulk tool)
MAX_TEST_BODY = 64 * 1024
#: the send statuses a stored message answers with (``SendStatus``), by response code
SEND_STATUS = {ResponseCode.SUCCESS: "SEND_OK", ResponseCode.FLUSH_DISK_TIMEOUT: "FLUSH_DISK_TIMEOUT",
               ResponseCode.FLUSH_SLAVE_TIMEOUT: "FLUSH_SLAVE_TIMEOUT",
               ResponseCode.SLAVE_NOT_AVAILABLE: "SLAVE_NOT_AVAILABLE"}
#: the subscription group fields the dashboard edits: form name -> (bean property, kind)
GROUP_FIELDS = {"consume_enable": bool, "consume_broadcast_enable": bool, "consume_from_min_enable": bool,
                "retry_queue_nums": int, "retry_max_times": int, "broker_id": int,
                "which_broker_when_consume_slowly": int, "notify_consumer_ids_changed_enable": bool}
#: RocketMQ's limits on what a group's numbers may be (beyond them the broker's own loops misbehave)
GROUP_LIMITS = {"retry_queue_nums": (0, 1024), "retry_max_times": (-1, 1000), "broker_id": (0, 1024),
                "which_broker_when_consume_slowly": (0, 1024)}


async def _call(src: DashboardSource, code: int, fields: dict[str, str], body: bytes | None, remote: str,
                ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> Any:
    try:
        answer = await src.admin_request(code, fields, body, remote)
    except ProtocolError as e:  # a field of a shape the header parser refuses: the request's fault
        raise ActionError(str(e)) from None
    if answer.code not in ok:
        raise ActionError(answer.remark or f"the broker answered code {answer.code}")
    return answer


def _json(answer: Any) -> Any:
    try:
        return loads_lenient(bytes(answer.body or b"{}"))
    except ProtocolError as e:
        raise ActionError(f"the answer is not JSON: {e}") from None


# --- test message -----------------------------------------------------------------------------------
_ids: dict[str, UniqIdGenerator] = {}
_round = itertools.count()


def _uniq_id(src: DashboardSource) -> str:
    ip = unpack_host(src.store_host())[0]
    gen = _ids.get(ip)
    if gen is None:
        gen = _ids[ip] = UniqIdGenerator(ip)
    return gen.next_id()


async def send_test_message(src: DashboardSource, topic: str, tags: str, keys: str, body: str,
                            remote: str, now_ms: int) -> dict[str, Any]:
    """Send one message as a producer would (SEND_MESSAGE to this broker, the next of the
    topic's write queues in turn) and answer its ``SendResult``'s fields."""
    topic, tags = topic.strip(), tags.strip()
    data = body.encode("utf-8")
    if not data:
        raise ActionError("the message body is empty (a producer refuses an empty body too)")
    if len(data) > MAX_TEST_BODY:
        raise ActionError(f"the body is {len(data)} bytes; a test message takes at most {MAX_TEST_BODY}")
    tc = src.topics.get(topic) if topic else None
    queue_id = next(_round) % tc.write_queue_nums if tc is not None and tc.write_queue_nums > 0 else 0
    msg_id = _uniq_id(src)
    props = {Prop.WAIT: "true", Prop.UNIQ_KEY: msg_id}
    if tags:
        props[Prop.TAGS] = tags
    key_list = " ".join(k for k in keys.split() if k)
    if key_list:
        props[Prop.KEYS] = key_list
    separators = (L.NAME_VALUE_SEPARATOR.decode(), L.PROPERTY_SEPARATOR.decode())
    for name, value in (("tags", tags), ("keys", key_list)):
        if any(sep in value for sep in separators):  # they would split the stored properties
            raise ActionError(f"{name} may not contain the properties' separator characters (1 and 2)")
    header = SendMessageRequestHeader(
        producer_group=TEST_PRODUCER_GROUP, topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
        queue_id=queue_id, sys_flag=0, born_timestamp=now_ms, flag=0,
        properties=properties_to_string(props), reconsume_times=0, unit_mode=False, batch=False)
    answer = await _call(src, RequestCode.SEND_MESSAGE, header.to_ext(RequestCode.SEND_MESSAGE), data, remote,
                         ok=tuple(SEND_STATUS))
    ext = answer.ext_fields or {}
    return {"send_status": SEND_STATUS[answer.code], "msg_id": msg_id, "offset_msg_id": ext.get("msgId", ""),
            "topic": topic, "broker_name": src.broker_name, "queue_id": int(ext.get("queueId", queue_id)),
            "queue_offset": int(ext.get("queueOffset", -1)), "region_id": ext.get("MSG_REGION", ""),
            "trace_on": ext.get("TRACE_ON", "")}


# --- topics -----------------------------------------------------------------------------------------
async def update_topic(src: DashboardSource, topic: str, read_queues: int, write_queues: int, perm: int,
                       remote: str) -> None:
    """Change a topic's queue counts and permission: UPDATE_AND_CREATE_TOPIC with its other
    fields (filter type, system flag, order) as they are."""
    tc = src.topics.get(topic)
    if tc is None:
        raise ActionError(f"no topic {topic!r} on this broker")
    for name, n in (("read queues", read_queues), ("write queues", write_queues), ("perm", perm)):
        if not -(1 << 31) <= n < (1 << 31):
            raise ActionError(f"{name} {n} is not a 32-bit number")
    fields = {"topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(read_queues),
              "writeQueueNums": str(write_queues), "perm": str(perm),
              "topicFilterType": str(getattr(tc, "topic_filter_type", "SINGLE_TAG") or "SINGLE_TAG"),
              "topicSysFlag": str(getattr(tc, "topic_sys_flag", 0) or 0),
              "order": "true" if getattr(tc, "order", False) else "false"}
    await _call(src, RequestCode.UPDATE_AND_CREATE_TOPIC, fields, None, remote)


# --- subscription groups ----------------------------------------------------------------------------
def group_config(src: DashboardSource, group: str) -> dict[str, Any] | None:
    """The group's subscription group config (``GET_ALL_SUBSCRIPTIONGROUP_CONFIG``'s bean), or None."""
    cfg = src.groups.table.get(group)
    if cfg is None:
        return None
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def group_form(form: Any, base: dict[str, Any] | None) -> dict[str, Any]:
    """The config fields from a posted form: checkboxes (absent: off), whole numbers within
    RocketMQ's limits; a field the form lacks keeps ``base``'s value (or the default)."""
    out: dict[str, Any] = {}
    for name, kind in GROUP_FIELDS.items():
        if kind is bool:
            out[name] = bool(form.get(name))
            continue
        text = str(form.get(name, "")).strip()
        if not text:
            if base is not None and name in base:
                out[name] = base[name]
            continue
        if len(text) > 12 or not text.lstrip("-").isdigit():
            raise ActionError(f"{name} must be a whole number")
        n = int(text)
        lo, hi = GROUP_LIMITS[name]
        if not lo <= n <= hi:
            raise ActionError(f"{name} must be {lo}..{hi}")
        out[name] = n
    return out


async def update_group(src: DashboardSource, group: str, values: dict[str, Any], remote: str) -> None:
    """Create or change a subscription group: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP with the
    group's whole config (the fields not edited as they are, or their defaults)."""
    current = src.groups.table.get(group)
    bean: dict[str, Any] = bean_to_json(current) if current is not None else {}
    bean.update({camel_case(k): v for k, v in values.items()})
    bean["groupName"] = group
    await _call(src, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, dumps_compact(bean), remote)


async def delete_group(src: DashboardSource, group: str, remove_offsets: bool, remote: str) -> None:
    if src.groups.table.get(group) is None:
        raise ActionError(f"group {group!r} has no subscription group config on this broker")
    await _call(src, RequestCode.DELETE_SUBSCRIPTIONGROUP,
                {"groupName": group, "removeOffset": "true" if remove_offsets else "false"}, None, remote)


# --- consume stats ----------------------------------------------------------------------------------
async def consume_stats(src: DashboardSource, group: str, remote: str) -> tuple[float, int, dict[tuple[str, int], int]]:
    """GET_CONSUME_STATS as ``mqadmin consumerProgress`` asks it: (consumeTps, Diff Total, lag
    per (topic, queue)), each lag brokerOffset - consumerOffset as the tool computes it."""
    answer = await _call(src, RequestCode.GET_CONSUME_STATS, {"consumerGroup": group}, None, remote)
    body = _json(answer)
    queues: dict[tuple[str, int], int] = {}
    for key, w in (body.get("offsetTable") or {}).items():
        mq = dict(key) if isinstance(key, tuple) else {}
        if isinstance(w, dict):
            queues[(str(mq.get("topic", "")), int(mq.get("queueId", 0)))] = \
                int(w.get("brokerOffset", 0)) - int(w.get("consumerOffset", 0))
    return float(body.get("consumeTps") or 0.0), sum(queues.values()), queues


# --- clients ----------------------------------------------------------------------------------------
async def producer_connections(src: DashboardSource, group: str, remote: str) -> list[dict[str, Any]]:
    """GET_PRODUCER_CONNECTION_LIST's ``connectionSet`` (what ``mqadmin producerConnection`` lists)."""
    answer = await _call(src, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": group}, None, remote)
    conns = _json(answer).get("connectionSet") or []
    return sorted((c for c in conns if isinstance(c, dict)), key=lambda c: str(c.get("clientId")))


async def consumer_running_info(src: DashboardSource, group: str, client_id: str, remote: str) -> dict[str, Any]:
    """The consumer's ``ConsumerRunningInfo``, asked of it by the broker (307, as for mqadmin consumerStatus)."""
    answer = await _call(src, RequestCode.GET_CONSUMER_RUNNING_INFO,
                         {"consumerGroup": group, "clientId": client_id, "jstackEnable": "false"}, None, remote)
    info = _json(answer)
    if not isinstance(info, dict):
        raise ActionError("the consumer's running info is not an object")
    return info


async def consume_directly(src: DashboardSource, group: str, client_id: str, offset_msg_id: str,
                           remote: str) -> dict[str, Any]:
    """Have one consumer run its listener on a stored message (309, as for mqadmin
    queryMsgById -g -d): its ``ConsumeMessageDirectlyResult``."""
    answer = await _call(src, RequestCode.CONSUME_MESSAGE_DIRECTLY,
                         {"consumerGroup": group, "clientId": client_id, "msgId": offset_msg_id}, None, remote)
    result = _json(answer)
    if not isinstance(result, dict):
        raise ActionError("the consumer's answer is not an object")
    return result


def mq_rows(info: dict[str, Any]) -> list[dict[str, Any]]:
    """A running info's ``mqTable`` (keys are MessageQueue objects, read as (key, value) pairs)."""
    rows = []
    for key, pq in (info.get("mqTable") or {}).items():
        mq = dict(key) if isinstance(key, tuple) else {"topic": str(key)}
        rows.append({"topic": mq.get("topic", ""), "broker": mq.get("brokerName", ""),
                     "queue": mq.get("queueId", 0), **(pq if isinstance(pq, dict) else {})})
    return sorted(rows, key=lambda r: (str(r["topic"]), str(r["broker"]), int(r["queue"] or 0)))


def jsonable(info: dict[str, Any]) -> dict[str, Any]:
    """A running info with its object-keyed ``mqTable`` as a list (for the raw JSON view)."""
    out = dict(info)
    if isinstance(out.get("mqTable"), dict):
        out["mqTable"] = [{"messageQueue": dict(k) if isinstance(k, tuple) else k, "processQueue": v}
                          for k, v in out["mqTable"].items()]
    return out
