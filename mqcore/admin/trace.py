"""Apache RocketMQ 4.x message traces, as ``mqadmin queryMsgTraceById`` reads them.

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

from mqcore.client.message import MessageExt
# the format's one definition is the client's (it writes traces); admin reads them
from mqcore.client.trace_format import (CONTENT_SEPARATOR, FIELD_SEPARATOR, TRACE_TOPIC, TRACE_TYPES,
                                        TraceRecord, decode_records)
from mqcore.errors import IllegalArgumentError
from mqcore.netaddr import parse_host_port

__all__ = ["TRACE_TOPIC", "TraceRecord", "decode_records", "trace_views", "CONTENT_SEPARATOR",
           "FIELD_SEPARATOR", "TRACE_TYPES"]


def _host(addr: str | None) -> str | None:
    """``MessageExt.getBornHostString``: the address without the port."""
    if not addr:
        return None
    try:
        return parse_host_port(addr)[0]
    except IllegalArgumentError:
        return addr


def trace_views(msg_id: str, messages: list[MessageExt]) -> tuple[list[TraceRecord], int]:
    """``TraceView.decodeFromTraceTransData`` over the trace messages found for ``msg_id``:
    the records about that message, in message and record order; and the unreadable count."""
    views: list[TraceRecord] = []
    bad = 0
    for m in messages:
        records, n = decode_records(m.body, _host(m.born_host))
        bad += n
        views.extend(r for r in records if r.msg_id == msg_id)
    return views, bad
