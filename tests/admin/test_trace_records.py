"""mqcore.admin.trace reads the records Apache's Java clients write (4.9.8's TraceDataEncoder
layout, and the shorter ones of older clients) and counts, without failing, records that do not
parse: anyone allowed to send to the trace topic writes into it."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqcore.admin.trace import decode_records, trace_views
from mqcore.format.trace import encode_pub, pub_parts
from mqcore.client.message import MessageExt

C, F = "\x01", "\x02"


def rec(*fields: object) -> str:
    return C.join(str(f) for f in fields) + F


PUB = rec("Pub", 1700000000123, "DefaultRegion", "pg", "T", "MSGID1", "TagA", "k1", "127.0.0.1:10911", 6, 3, 0,
          "OFFID1", "true")
SUB_BEFORE = rec("SubBefore", 1700000000200, "DefaultRegion", "cg", "REQ1", "MSGID1", 0, "k1")
SUB_AFTER = rec("SubAfter", "REQ1", "MSGID1", 5, "false", "k1", 0, 1700000000300, "cg")


def test_the_records_of_a_4_9_8_client():
    records, bad = decode_records((PUB + SUB_BEFORE + SUB_AFTER).encode(), "127.0.0.1")
    assert bad == 0
    pub, before, after = records
    assert (pub.trace_type, pub.msg_id, pub.group, pub.timestamp, pub.cost_ms, pub.status, pub.offset_msg_id,
            pub.topic, pub.tags, pub.keys, pub.store_host) == \
        ("Pub", "MSGID1", "pg", 1700000000123, 3, "success", "OFFID1", "T", "TagA", "k1", "127.0.0.1:10911")
    assert (before.trace_type, before.group, before.request_id, before.retry_times) == ("SubBefore", "cg", "REQ1", 0)
    assert (after.trace_type, after.group, after.timestamp, after.cost_ms, after.status) == \
        ("SubAfter", "cg", 1700000000300, 5, "failed")
    assert {r.client_host for r in records} == {"127.0.0.1"}


def test_older_layouts_and_empty_fields():
    no_offset_id = rec("Pub", 1, "r", "pg", "T", "M", "", "", "h", 1, 2, 0, "false")  # 13 fields
    old_sub_after = rec("SubAfter", "REQ", "M", 7, "true", "k")  # before 4.9: no code, time or group
    # Java's split drops trailing empty fields: an old SubAfter without keys is too short for
    # Java's decoder too
    keyless_old = rec("SubAfter", "REQ", "M", 7, "true", "")
    records, bad = decode_records((no_offset_id + old_sub_after + keyless_old).encode())
    assert bad == 1 and len(records) == 2
    assert (records[0].offset_msg_id, records[0].status, records[0].tags) == (None, "failed", "")
    assert (records[1].group, records[1].cost_ms, records[1].context_code) == ("", 7, 0)


def test_unreadable_records_are_counted_and_the_rest_kept():
    junk = [rec("Pub", "not-a-time", "r", "pg"), rec("SubAfter", "REQ"), rec("Pub", 1, "r", "pg", "T", "M", "", "", "h",
                                                                            "x", 2, 0, "OFF", "true"),
            "\xff\xfe" + F, rec("Unknown", 1, 2), F]
    records, bad = decode_records(("".join(junk) + PUB).encode("utf-8", "surrogatepass"))
    assert bad == 3 and [r.msg_id for r in records] == ["MSGID1"]
    assert decode_records(b"") == ([], 0)


def test_views_keep_the_message_s_own_records_in_order():
    m1 = MessageExt("RMQ_SYS_TRACE_TOPIC", (PUB + rec("Pub", 2, "r", "pg", "T", "OTHER", "", "", "h", 1, 2, 0, "O",
                                                       "true")).encode(), b"")
    m2 = MessageExt("RMQ_SYS_TRACE_TOPIC", (SUB_BEFORE + SUB_AFTER).encode(), b"")
    m1.born_host, m2.born_host = "10.0.0.5:4321", "[::1]:9"
    views, bad = trace_views("MSGID1", [m1, m2])
    assert bad == 0
    assert [(v.trace_type, v.client_host) for v in views] == [("Pub", "10.0.0.5"), ("SubBefore", "::1"),
                                                              ("SubAfter", "::1")]


_FIELD = st.text(alphabet=st.characters(blacklist_characters="\x01\x02"), max_size=12)


@given(st.integers(0, 2**62), _FIELD, _FIELD, _FIELD, _FIELD, _FIELD, _FIELD, _FIELD, st.integers(0, 2**31),
       st.integers(0, 10**6), st.integers(0, 3), _FIELD, st.booleans())
def test_a_pub_record_cut_in_parts_is_the_record(ts, region, group, topic, msg_id, tags, keys, host, length, cost,
                                                 msg_type, offset_id, ok):
    """pub_parts (an auto-batched send's records share all but their ids) is encode_pub cut in three."""
    head, middle, tail = pub_parts(ts, region, group, topic, tags, keys, host, length, cost, msg_type, ok)
    assert head + msg_id + middle + offset_id + tail == encode_pub(ts, region, group, topic, msg_id, tags, keys,
                                                                   host, length, cost, msg_type, offset_id, ok)
    assert PUB == encode_pub(1700000000123, "DefaultRegion", "pg", "T", "MSGID1", "TagA", "k1", "127.0.0.1:10911",
                             6, 3, 0, "OFFID1", True)


@given(st.integers(0, 2**40), _FIELD, _FIELD, _FIELD, _FIELD, _FIELD, _FIELD, _FIELD, st.binary(max_size=40),
       st.integers(0, 10**6), _FIELD, st.booleans())
def test_the_dispatcher_s_pub_record_is_the_record(ts, region, group, topic, msg_id, tags, keys, host, body, cost,
                                                   offset_id, ok):
    """The record a traced producer queues per send (its shared parts from pub_context, kept
    between sends) is encode_pub's, also after a send with other shared parts."""
    from mqcore.client.message import Message, MessageQueue, SendResult, SendStatus
    from mqcore.client.trace import TraceDispatcher
    d = TraceDispatcher("127.0.0.1:1", "RMQ_SYS_TRACE_TOPIC", group, lambda g, a: None, store_host=lambda b: host)
    msg = Message("T", body)
    msg.topic, msg._properties = topic, {k: v for k, v in (("TAGS", tags), ("KEYS", keys)) if v}
    status = SendStatus.SEND_OK if ok else SendStatus.FLUSH_DISK_TIMEOUT
    for region_id in ("other", region, region):
        result = SendResult(status, msg_id, MessageQueue(topic, "b", 0), 0, offset_id, region_id=region_id)
        d._push_pub(msg, result, ts, ts + cost)
    texts = [item[0] for item in d._queue]
    assert texts[1] == texts[2] == encode_pub(ts, region or "DefaultRegion", group, topic, msg_id, tags, keys, host,
                                              len(body), cost, 0, offset_id, ok)
