"""MessageExt.stamp_property: the consumer's per-message stamp (CONSUME_START_TIME) does
not force the properties of every delivered message to be parsed."""
from __future__ import annotations

from mqcore.client.message import decode_messages
from mqcore.message import Prop

from .test_message import record


def test_stamp_before_any_read_stays_unparsed_and_wins_over_a_stored_value():
    m = decode_messages(record(props={"TAGS": "A", "UNIQ_KEY": "U1", Prop.CONSUME_START_TIME: "1"}))[0]
    m.stamp_property(Prop.CONSUME_START_TIME, "1700000000123")
    m.stamp_property("X", "y")
    assert m._properties is None  # nothing parsed yet
    assert m.properties == {"TAGS": "A", "UNIQ_KEY": "U1", Prop.CONSUME_START_TIME: "1700000000123", "X": "y"}
    assert m.tags == "A" and m.msg_id == "U1"


def test_stamp_after_a_read_updates_the_parsed_properties():
    m = decode_messages(record(props={"TAGS": "A"}))[0]
    assert m.properties["TAGS"] == "A"
    m.stamp_property(Prop.CONSUME_START_TIME, "5")
    assert m.properties == {"TAGS": "A", Prop.CONSUME_START_TIME: "5"}


def test_stamp_on_a_message_without_properties():
    m = decode_messages(record(props={"A": "1"}))[0]
    m._props_raw = b""  # as a record with an empty properties field decodes
    m.stamp_property("K", "v")
    assert m.properties == {"K": "v"}
