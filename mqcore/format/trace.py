"""Apache RocketMQ 4.x message trace records: the one definition of their text format,
written by ``mqcore.client`` (``enable_msg_trace``) and read by ``mqadmin queryMsgTraceById`` and
the dashboard's trace view (``records_about``, one function for both). Kept below the client,
the admin tool and the dashboard so that all three can import it.

A Java client started with ``enableMsgTrace=true`` sends, besides its messages, trace
messages to ``RMQ_SYS_TRACE_TOPIC`` (or a topic it names): their keys are the traced
message's id (and its keys), their body one or more records, each ended by ``\\x02``, whose
fields are separated by ``\\x01``. The records of 4.9.8's ``TraceDataEncoder``:

    Pub        timestamp region group topic msgId tags keys storeHost bodyLength costMs
               msgType [offsetMsgId] success [clientHost]
    SubBefore  timestamp region group requestId msgId retryTimes keys
    SubAfter   requestId msgId costMs success keys [contextCode [timestamp group]]
    EndTransaction timestamp region group topic msgId tags keys storeHost msgType
               transactionId transactionState fromTransactionCheck

Older clients wrote fewer fields; the optional ones above are read when present, as the Java
decoder reads them. A record that does not parse is counted, not fatal: anyone allowed to send
to the trace topic can write into it.
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable

from mqcore.format import layout as L

__all__ = ["TRACE_TOPIC", "CONTENT_SEPARATOR", "FIELD_SEPARATOR", "TRACE_TYPES", "TraceRecord",
           "decode_records", "encode_record", "encode_pub", "pub_context", "records_about"]

#: TopicValidator.RMQ_SYS_TRACE_TOPIC: where clients send traces unless they name another topic
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
# TraceConstants.CONTENT_SPLITOR and FIELD_SPLITOR are the characters that separate a stored
# message's property names and values (1) and its properties (2)
CONTENT_SEPARATOR = L.NAME_VALUE_SEPARATOR.decode()
FIELD_SEPARATOR = L.PROPERTY_SEPARATOR.decode()
TRACE_TYPES = ("Pub", "SubBefore", "SubAfter", "EndTransaction")


@dataclasses.dataclass(frozen=True)
class TraceRecord:
    """One trace record (``TraceContext`` with its ``TraceBean``), and the host of the client
    that sent the trace message (the trace message's born host: ``TraceView.clientHost``)."""
    trace_type: str
    msg_id: str
    timestamp: int
    group: str
    cost_ms: int = 0
    success: bool = True
    topic: str | None = None
    tags: str | None = None
    keys: str | None = None
    store_host: str | None = None
    offset_msg_id: str | None = None
    region_id: str = ""
    request_id: str | None = None
    retry_times: int = 0
    context_code: int = 0
    client_host: str | None = None

    @property
    def status(self) -> str:
        return "success" if self.success else "failed"

    def to_json(self) -> dict[str, object]:
        return {"type": self.trace_type, "msgId": self.msg_id, "timestamp": self.timestamp,
                "groupName": self.group, "costTime": self.cost_ms, "status": self.status, "topic": self.topic,
                "tags": self.tags, "keys": self.keys, "storeHost": self.store_host,
                "offsetMsgId": self.offset_msg_id, "regionId": self.region_id, "requestId": self.request_id,
                "retryTimes": self.retry_times, "contextCode": self.context_code, "clientHost": self.client_host}


def _java_split(text: str, sep: str) -> list[str]:
    """``String.split(sep)``: trailing empty strings dropped (the Java decoder counts fields so)."""
    parts = text.split(sep)
    while parts and parts[-1] == "":
        parts.pop()
    return parts or [""]


def _bool(text: str) -> bool:
    return text.strip().lower() == "true"  # Boolean.parseBoolean


def _record(f: list[str], client_host: str | None) -> TraceRecord | None:
    kind = f[0]
    if kind == "Pub":
        if len(f) < 12:
            raise ValueError(f"a Pub record has {len(f)} fields, at least 12 expected")
        success, offset_id = True, None
        if len(f) == 13:
            success = _bool(f[12])
        elif len(f) >= 14:
            offset_id, success = f[12], _bool(f[13])
        int(f[9]), int(f[11])  # bodyLength and msgType must be numbers, as for the Java decoder
        return TraceRecord("Pub", f[5], int(f[1]), f[3], int(f[10]), success, topic=f[4], tags=f[6], keys=f[7],
                           store_host=f[8], offset_msg_id=offset_id, region_id=f[2], client_host=client_host)
    if kind == "SubBefore":
        if len(f) < 8:
            raise ValueError(f"a SubBefore record has {len(f)} fields, at least 8 expected")
        return TraceRecord("SubBefore", f[5], int(f[1]), f[3], keys=f[7], region_id=f[2], request_id=f[4],
                           retry_times=int(f[6]), client_host=client_host)
    if kind == "SubAfter":
        if len(f) < 6:
            raise ValueError(f"a SubAfter record has {len(f)} fields, at least 6 expected")
        code = int(f[6]) if len(f) >= 7 else 0
        # records of clients before 4.9 carry no time or group: the Java decoder leaves its
        # defaults (the decoding time, an empty group), and so the printed view shows them
        timestamp, group = (int(f[7]), f[8]) if len(f) >= 9 else (int(time.time() * 1000), "")
        return TraceRecord("SubAfter", f[2], timestamp, group, int(f[3]), _bool(f[4]), keys=f[5],
                           request_id=f[1], context_code=code, client_host=client_host)
    if kind == "EndTransaction":
        if len(f) < 13:
            raise ValueError(f"an EndTransaction record has {len(f)} fields, at least 13 expected")
        return TraceRecord("EndTransaction", f[5], int(f[1]), f[3], topic=f[4], tags=f[6], keys=f[7],
                           store_host=f[8], region_id=f[2], client_host=client_host)
    return None  # not a trace type the Java decoder knows: it skips it too




def decode_records(body: bytes, client_host: str | None = None) -> tuple[list[TraceRecord], int]:
    """The records of one trace message body, and how many records could not be read."""
    out: list[TraceRecord] = []
    bad = 0
    for context in _java_split(body.decode("utf-8", "replace"), FIELD_SEPARATOR):
        if not context:
            continue
        try:
            rec = _record(_java_split(context, CONTENT_SEPARATOR), client_host)
        except (ValueError, IndexError):
            bad += 1
            continue
        if rec is not None:
            out.append(rec)
    return out, bad


def records_about(msg_id: str, traces: Iterable[tuple[bytes, str | None]]) -> tuple[list[TraceRecord], int]:
    """``TraceView.decodeFromTraceTransData`` over the trace messages found for ``msg_id``
    (each as its body and its client's host, the trace message's born host without the port):
    the records about that message, in message and record order; and the unreadable count."""
    views: list[TraceRecord] = []
    bad = 0
    for body, client_host in traces:
        records, n = decode_records(bytes(body), client_host)
        bad += n
        views.extend(r for r in records if r.msg_id == msg_id)
    return views, bad


def pub_parts(timestamp: int, region_id: str, group: str, topic: str, tags: str, keys: str, store_host: str,
              body_length: int, cost_ms: int, msg_type: int, success: bool) -> tuple[str, str, str]:
    """A Pub record as ``(head, middle, tail)``: the record of message id ``m`` and offset id
    ``o`` is ``head + m + middle + o + tail``. The records of one auto-batched send differ
    only in those two ids, so its hundred records share one formatting."""
    c = CONTENT_SEPARATOR
    return (f"Pub{c}{timestamp}{c}{region_id}{c}{group}{c}{topic}{c}",
            f"{c}{tags}{c}{keys}{c}{store_host}{c}{body_length}{c}{cost_ms}{c}{msg_type}{c}",
            f"{c}{'true' if success else 'false'}{FIELD_SEPARATOR}")


def encode_pub(timestamp: int, region_id: str, group: str, topic: str, msg_id: str, tags: str, keys: str,
               store_host: str, body_length: int, cost_ms: int, msg_type: int, offset_msg_id: str,
               success: bool) -> str:
    """A Pub record from its fields (what a traced producer writes per send), in one format
    string: ``pub_parts`` cut in three, which a property test keeps equal to it; this is the
    per-send record, 0.65 us here against 1.6 us joined from the parts."""
    c = CONTENT_SEPARATOR
    return (f"Pub{c}{timestamp}{c}{region_id}{c}{group}{c}{topic}{c}{msg_id}{c}{tags}{c}{keys}{c}{store_host}{c}"
            f"{body_length}{c}{cost_ms}{c}{msg_type}{c}{offset_msg_id}{c}{'true' if success else 'false'}"
            f"{FIELD_SEPARATOR}")


def pub_context(region_id: str, group: str, topic: str, tags: str, store_host: str) -> tuple[str, str, str]:
    """The parts of a Pub record that the sends of one producer to one topic, tag and broker
    share, ``(a, b, c)``: the record is ``encode_pub``'s with ``a`` from the region to the
    topic, ``b`` around the tags and ``c`` around the store host (the client's trace
    dispatcher formats them once, not per record; a property test keeps the two equal)."""
    c = CONTENT_SEPARATOR
    return f"{c}{region_id}{c}{group}{c}{topic}{c}", f"{c}{tags}{c}", f"{c}{store_host}{c}"


def encode_record(r: TraceRecord, *, body_length: int = 0, msg_type: int = 0) -> str:
    """One record as 4.9.8's ``TraceDataEncoder.encoderFromContextBean`` writes it, its
    ``FIELD_SEPARATOR`` included (a trace message body is records joined back to back).
    ``msg_type`` is ``MessageType``'s ordinal (0 normal, 1 transactional half, 3 delayed)."""
    c = CONTENT_SEPARATOR
    if r.trace_type == "Pub":
        return encode_pub(r.timestamp, r.region_id, r.group, r.topic or "", r.msg_id, r.tags or "", r.keys or "",
                          r.store_host or "", body_length, r.cost_ms, msg_type, r.offset_msg_id or "", r.success)
    if r.trace_type == "SubBefore":
        fields = ["SubBefore", r.timestamp, r.region_id, r.group, r.request_id or "", r.msg_id, r.retry_times,
                  r.keys or ""]
    elif r.trace_type == "SubAfter":
        fields = ["SubAfter", r.request_id or "", r.msg_id, r.cost_ms, "true" if r.success else "false",
                  r.keys or "", r.context_code, r.timestamp, r.group]
    else:
        raise ValueError(f"cannot encode a {r.trace_type} record")
    return c.join(str(f) for f in fields) + FIELD_SEPARATOR
