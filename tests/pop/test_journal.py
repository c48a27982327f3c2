"""The pop journal's records: RocketMQ 5's CK/ACK/BatchAck JSON with its short keys, read back
to the same records; a record this broker cannot read is skipped, not fatal."""
from __future__ import annotations

import json

from mqcore.message import MessageExt, Prop
from mqcore.pop import journal


def _ext(topic: str, body: bytes, properties: dict) -> MessageExt:
    """The message as the revive queue gives it back (the fields a record reader uses)."""
    return MessageExt(topic=topic, body=body, queue_id=0, queue_offset=7, commitlog_offset=0, store_size=0, body_crc=0,
                      flag=0, sys_flag=0, born_timestamp=0, born_host="127.0.0.1:0", store_timestamp=0,
                      store_host="127.0.0.1:0", reconsume_times=0, prepared_transaction_offset=0, properties=properties)


def _stored(msg) -> MessageExt:
    return _ext(msg.topic, msg.body, dict(msg.properties))


def test_records_round_trip_in_rocketmqs_shapes():
    ck = journal.Checkpoint("G", "T", 1, 10, 1_795_000_000_000, 30_000, (10, 12, 15), "broker-a")
    ack = journal.Ack("G", "T", 1, 12, 10, 1_795_000_000_000, "broker-a")
    back = journal.BatchAck("G", "%RETRY%G_T", 0, (3, 4), 3, 1_795_000_000_001, "broker-a")
    for rec, tag in ((ck, "ck"), (ack, "ack"), (back, "bAck")):
        msg = journal.to_message(rec, journal.revive_topic("DefaultCluster"), 1, b"\x7f\x00\x00\x01\x00\x00\x00\x00")
        assert msg.topic == "rmq_sys_REVIVE_LOG_DefaultCluster" and msg.properties[Prop.TAGS] == tag
        assert journal.from_message(_stored(msg)) == rec
    body = json.loads(ck.body())
    assert (body["so"], body["n"], body["d"], body["c"], body["t"], body["q"]) == (10, 3, [0, 2, 5], "G", "T", 1)
    assert json.loads(back.body())["aol"] == [3, 4]


def test_an_unreadable_record_is_skipped():
    assert journal.from_message(_ext("rmq_sys_REVIVE_LOG_X", b"{not json", {Prop.TAGS: "ck"})) is None
    assert journal.from_message(_ext("rmq_sys_REVIVE_LOG_X", b'{"so": 1}', {Prop.TAGS: "ck"})) is None
    assert journal.from_message(_ext("rmq_sys_REVIVE_LOG_X", b"{}", {Prop.TAGS: "other"})) is None
