"""Apache RocketMQ 4.x message traces as ``mqadmin queryMsgTraceById`` shows them: the
records of a traced message (their text format is defined once, in
``mqcore.format.trace``) turned into the tool's views."""
from __future__ import annotations

from mqcore.client.message import MessageExt
# the format's one definition, shared with the client (it writes traces) and the dashboard
from mqcore.format.trace import (CONTENT_SEPARATOR, FIELD_SEPARATOR, TRACE_TOPIC, TRACE_TYPES, TraceRecord,
                                 decode_records, records_about)
from mqcore.netaddr import host_of

__all__ = ["TRACE_TOPIC", "TraceRecord", "decode_records", "trace_views", "CONTENT_SEPARATOR",
           "FIELD_SEPARATOR", "TRACE_TYPES"]


def trace_views(msg_id: str, messages: list[MessageExt]) -> tuple[list[TraceRecord], int]:
    """``TraceView.decodeFromTraceTransData`` over the trace messages found for ``msg_id``:
    the records about that message, in message and record order; and the unreadable count."""
    return records_about(msg_id, ((m.body, host_of(m.born_host)) for m in messages))
