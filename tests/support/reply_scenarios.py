"""Request-reply at the wire, the same scenario for any broker (mqbroker or Apache's).

A *requester* connection says by heartbeat that it is a producer with client id
``REQUESTER_ID``; a *replier* connection sends SEND_REPLY_MESSAGE(_V2) frames, some well
formed, some not. For each case the scenario records the replier's answer (code, remark, the
answer's header keys), what the requester was pushed (PUSH_REPLY_MESSAGE_TO_CLIENT: its header
fields, properties and body) and, at the end, what the reply topics hold. Tests run it against
the Java broker and mqbroker and compare, so the expectations are Apache's own.
"""
from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from mqcore.client.message import decode_messages
from mqcore.message import string_to_properties
from mqcore.remoting import RemotingClient, RequestCode, ResponseCode
from mqcore.remoting.command import create_request, create_response

REQUESTER_ID = "127.0.0.1@requester#1"
CONSUMER_ONLY_ID = "127.0.0.1@consumer-only#1"


def reply_props(**overrides) -> str:
    """The properties a reply made by ``MessageUtil.createReplyMessage`` carries, changed by
    ``overrides`` (a value of None removes the key)."""
    props = {"MSG_TYPE": "reply", "CORRELATION_ID": "corr-1", "REPLY_TO_CLIENT": REQUESTER_ID, "TTL": "3000",
             "UNIQ_KEY": "7F0000010000000000000000000000A1", "WAIT": "true"}
    for k, v in overrides.items():
        if v is None:
            props.pop(k, None)
        else:
            props[k] = v
    return "".join(f"{k}\x01{v}\x02" for k, v in props.items())


def v2_header(topic: str, props: str, **overrides) -> dict:
    h = {"a": "PG_REPLIER", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
         "g": str(int(time.time() * 1000)), "h": "0", "i": props, "j": "0", "k": "false", "m": "false"}
    for k, v in overrides.items():
        if v is None:
            h.pop(k, None)
        else:
            h[k] = v
    return h


def v1_header(topic: str, props: str) -> dict:
    return {"producerGroup": "PG_REPLIER", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
            "queueId": "0", "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)), "flag": "0",
            "properties": props, "reconsumeTimes": "0", "unitMode": "false"}


@dataclass
class Case:
    name: str
    code: int
    ext: dict
    props: str
    body: bytes = b"reply-body"
    #: how the requester answers a push: "ok", "error", or "silent" (never answers)
    requester: str = "ok"


@dataclass
class Outcome:
    code: int
    remark: str | None
    answer_keys: list
    queue_offset: str | None
    pushed: dict | None = None
    elapsed_s: float = 0.0


@dataclass
class Observed:
    outcomes: dict = field(default_factory=dict)
    #: topic -> [(properties without volatile keys, body)] stored in queue 0
    stored: dict = field(default_factory=dict)


def cases(cluster: str) -> list[Case]:
    topic = f"{cluster}_REPLY_TOPIC"
    V2, V1 = RequestCode.SEND_REPLY_MESSAGE_V2, RequestCode.SEND_REPLY_MESSAGE
    return [
        Case("ok_v2", V2, v2_header(topic, reply_props()), reply_props()),
        Case("ok_v1", V1, v1_header(topic, reply_props(CORRELATION_ID="corr-v1")), ""),
        Case("no_reply_to", V2, v2_header(topic, reply_props(REPLY_TO_CLIENT=None, CORRELATION_ID="corr-nrt")), ""),
        Case("unknown_requester", V2, v2_header(topic, reply_props(REPLY_TO_CLIENT="127.0.0.1@nobody",
                                                                   CORRELATION_ID="corr-unk")), ""),
        Case("consumer_only_requester", V2, v2_header(topic, reply_props(REPLY_TO_CLIENT=CONSUMER_ONLY_ID,
                                                                         CORRELATION_ID="corr-cons")), ""),
        Case("requester_refuses", V2, v2_header(topic, reply_props(CORRELATION_ID="corr-ref")), "",
             requester="error"),
        Case("no_correlation_id", V2, v2_header(topic, reply_props(CORRELATION_ID=None)), ""),
        Case("other_cluster_topic", V2, v2_header("NoSuchCluster_REPLY_TOPIC", reply_props(CORRELATION_ID="corr-oc")),
             ""),
        Case("bad_queue_id_type", V2, v2_header(topic, reply_props(CORRELATION_ID="corr-bq"), e="zero"), ""),
        Case("missing_topic_field", V2, v2_header(topic, reply_props(CORRELATION_ID="corr-mt"), b=None), ""),
        Case("queue_id_out_of_range", V2, v2_header(topic, reply_props(CORRELATION_ID="corr-qr"), e="7"), ""),
        Case("illegal_topic_name", V2, v2_header("bad topic!", reply_props(CORRELATION_ID="corr-it")), ""),
        Case("bad_born_timestamp", V2, v2_header(topic, reply_props(CORRELATION_ID="corr-bt"), g="soon"), ""),
        Case("any_queue", V2, v2_header(topic, reply_props(CORRELATION_ID="corr-any"), e="-1"), ""),
    ]


#: the case whose requester never answers: the broker's own wait decides (about 3 or 10 s)
SILENT = "requester_silent"


async def run(broker_addr: str, cluster: str, *, include_silent: bool = False, timeout_ms: int = 20_000) -> Observed:
    """Run every case against ``broker_addr``; return what was observed."""
    pushes: asyncio.Queue = asyncio.Queue()
    mode = {"now": "ok"}

    async def on_push(channel, request):
        ext = dict(request.ext_fields)
        pushes.put_nowait((request.code, ext, bytes(request.body)))
        if mode["now"] == "silent":
            await asyncio.sleep(30)
            return None
        code = ResponseCode.SUCCESS if mode["now"] == "ok" else ResponseCode.SYSTEM_ERROR
        return create_response(request, code, None if code == ResponseCode.SUCCESS else "requester refused")

    requester = RemotingClient(name="requester")
    requester.register_processor(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, on_push)
    consumer_only = RemotingClient(name="consumer-only")
    replier = RemotingClient(name="replier")
    obs = Observed()
    try:
        hb = {"clientID": REQUESTER_ID, "producerDataSet": [{"groupName": "PG_REQUESTER"}], "consumerDataSet": []}
        resp = await requester.invoke(broker_addr, create_request(RequestCode.HEART_BEAT, None,
                                                                  json.dumps(hb).encode()), 5000)
        assert resp.code == ResponseCode.SUCCESS, resp
        hb = {"clientID": CONSUMER_ONLY_ID, "producerDataSet": [], "consumerDataSet": [
            {"groupName": "CG_ONLY", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
             "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": [], "unitMode": False}]}
        resp = await consumer_only.invoke(broker_addr, create_request(RequestCode.HEART_BEAT, None,
                                                                      json.dumps(hb).encode()), 5000)
        assert resp.code == ResponseCode.SUCCESS, resp
        todo = cases(cluster)
        if include_silent:
            topic = f"{cluster}_REPLY_TOPIC"
            todo.append(Case(SILENT, RequestCode.SEND_REPLY_MESSAGE_V2,
                             v2_header(topic, reply_props(CORRELATION_ID="corr-sil")), "", requester="silent"))
        for case in todo:
            mode["now"] = case.requester
            while not pushes.empty():
                pushes.get_nowait()
            t0 = time.monotonic()
            resp = await replier.invoke(broker_addr, create_request(case.code, case.ext, case.body), timeout_ms)
            elapsed = time.monotonic() - t0
            pushed = None
            if not pushes.empty():
                code, ext, body = pushes.get_nowait()
                pushed = {"code": code, "body": body, **_push_view(ext)}
            obs.outcomes[case.name] = Outcome(resp.code, resp.remark, sorted(resp.ext_fields),
                                              resp.ext_fields.get("queueOffset"), pushed, elapsed)
        for topic in (f"{cluster}_REPLY_TOPIC", "NoSuchCluster_REPLY_TOPIC"):
            obs.stored[topic] = await _stored(replier, broker_addr, topic)
    finally:
        for c in (requester, consumer_only, replier):
            await c.shutdown()
    return obs


#: differ between runs, or are added by the pulling side
_VOLATILE = {"PUSH_REPLY_TIME", "MIN_OFFSET", "MAX_OFFSET"}


def _push_view(ext: dict) -> dict:
    """The pushed header, with what differs between runs replaced by its shape."""
    view = {}
    for k, v in ext.items():
        if k in ("bornTimestamp", "storeTimestamp"):
            view[k] = "<ms>" if v.isdigit() else v
        elif k in ("bornHost", "storeHost"):
            host, _, port = v.rpartition(":")
            view[k] = f"{host}:<port>" if port.isdigit() else v
        elif k == "properties":
            props = string_to_properties(v)
            view["PUSH_REPLY_TIME"] = "<ms>" if props.get("PUSH_REPLY_TIME", "").isdigit() else props.get(
                "PUSH_REPLY_TIME")
            view[k] = {p: q for p, q in props.items() if p != "PUSH_REPLY_TIME"}
        else:
            view[k] = v
    return view


async def _stored(client: RemotingClient, addr: str, topic: str) -> list:
    ext = {"consumerGroup": "CG_PROBE", "topic": topic, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
           "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0", "subscription": "*",
           "expressionType": "TAG"}
    resp = await client.invoke(addr, create_request(RequestCode.PULL_MESSAGE, ext), 5000)
    if resp.code != ResponseCode.SUCCESS:
        return [("pull", resp.code)]
    out = []
    for m in decode_messages(bytes(resp.body)):
        props = {k: v for k, v in m.properties.items() if k not in _VOLATILE}
        out.append((props, m.body))
    return out
