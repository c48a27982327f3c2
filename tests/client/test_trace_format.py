"""The trace records mqcore.client writes (mqcore.client.trace_format.encode_record) read back
by the decoder mqadmin queryMsgTraceById uses, field for field."""
from mqcore.client.trace_format import FIELD_SEPARATOR, TraceRecord, decode_records, encode_record


def test_pub_sub_before_and_sub_after_round_trip():
    pub = TraceRecord("Pub", "C0A8000100002A9F0000000000000001", 1700000000123, "pg", 7, True, topic="T",
                      tags="TagA", keys="k1 k2", store_host="127.0.0.1:10911",
                      offset_msg_id="7F00000100002A9F0000000000000000")
    before = TraceRecord("SubBefore", pub.msg_id, 1700000000200, "cg", keys="k1 k2", request_id="req-1",
                         retry_times=2)
    after = TraceRecord("SubAfter", pub.msg_id, 1700000000210, "cg", 10, False, keys="k1 k2",
                        request_id="req-1", context_code=1)
    body = (encode_record(pub, body_length=5) + encode_record(before) + encode_record(after)).encode()
    assert body.count(FIELD_SEPARATOR.encode()) == 3
    records, bad = decode_records(body)
    assert bad == 0
    assert records == [pub, before, after]
