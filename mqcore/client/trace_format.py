"""The trace records' text format, defined in ``mqcore.format.trace`` (below the client, the
admin tool and the dashboard, which all read or write it); kept here under its old name."""
from mqcore.format.trace import (CONTENT_SEPARATOR, FIELD_SEPARATOR, TRACE_TOPIC, TRACE_TYPES, TraceRecord,
                                 decode_records, encode_pub, encode_record, records_about)

__all__ = ["TRACE_TOPIC", "CONTENT_SEPARATOR", "FIELD_SEPARATOR", "TRACE_TYPES", "TraceRecord",
           "decode_records", "encode_record", "encode_pub", "records_about"]
