"""Message, MessageExt, compression and wire codecs."""
from __future__ import annotations

import struct
import zlib

import pytest

from mqcore._compat import kernels
from mqcore.client.message import (
    Message,
    MessageExt,
    SendResult,
    SendStatus,
    compress_body,
    decode_messages,
    decompress_body,
    encode_batch_body,
)
from mqcore.errors import IllegalArgumentError, MessageDecodeError
from mqcore.message import pack_host, properties_to_bytes
from mqcore.remoting.bodies import MessageQueue


def record(topic="T", body=b"hello", props=None, sys_flag=0, qid=1, qoff=7, phy=100, reconsume=0) -> bytes:
    pb = properties_to_bytes(props or {"TAGS": "A", "UNIQ_KEY": "ABC"})
    size = kernels.record_size(len(body), len(topic), len(pb), 0)
    buf = bytearray(size)
    kernels.encode_record(buf, 0, topic.encode(), qid, 3, qoff, phy, sys_flag, 1_700_000_000_000,
                          pack_host("10.0.0.2", 5555), 1_700_000_000_001, pack_host("127.0.0.1", 10911),
                          reconsume, 0, body, pb)
    return bytes(buf)


def test_message_fields_and_defaults():
    m = Message("Orders", "héllo", tags="created", keys=["o-1", "o-2"], delay_level=3)
    assert m.body == "héllo".encode()
    assert m.tags == "created" and m.keys == ["o-1", "o-2"]
    assert m.properties["KEYS"] == "o-1 o-2"
    assert m.delay_level == 3 and m.properties["DELAY"] == "3"
    assert m.properties["WAIT"] == "true" and m.wait_store_msg_ok
    m.delay_level = 0
    assert "DELAY" not in m.properties
    m.keys = "single"
    assert m.keys == ["single"]
    assert Message("T", b"x", wait_store_msg_ok=False).properties["WAIT"] == "false"


def test_message_repr_is_useful():
    m = Message("Orders", b"x" * 100, tags="created", keys="k1")
    m.put_user_property("region", "eu")
    text = repr(m)
    assert "topic='Orders'" in text and "tags='created'" in text and "keys=['k1']" in text
    assert "'region': 'eu'" in text and "(100 bytes)" in text and "WAIT" not in text


def test_user_property_rejects_system_names():
    m = Message("T", b"x")
    with pytest.raises(IllegalArgumentError):
        m.put_user_property("TAGS", "x")
    with pytest.raises(IllegalArgumentError):
        m.put_user_property("a", "")
    with pytest.raises(IllegalArgumentError):
        Message("T", 123)  # type: ignore[arg-type]


def test_decode_messages_roundtrip():
    raw = record() + record(body=b"second", qoff=8, phy=200)
    msgs = decode_messages(raw, "broker-a")
    assert [m.body for m in msgs] == [b"hello", b"second"]
    m = msgs[0]
    assert isinstance(m, MessageExt)
    assert (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.flag) == ("T", 1, 7, 100, 3)
    assert m.broker_name == "broker-a" and m.tags == "A" and m.msg_id == "ABC"
    assert m.born_host == "10.0.0.2:5555" and m.store_host == "127.0.0.1:10911"
    assert m.offset_msg_id == "7F00000100002A9F0000000000000064"
    assert m.message_queue == MessageQueue("T", "broker-a", 1)
    assert "offset=7" in repr(m) and "msg_id='ABC'" in repr(m)


def test_msg_id_falls_back_to_offset_id():
    m = decode_messages(record(props={"TAGS": "A"}))[0]
    assert m.msg_id == m.offset_msg_id


@pytest.mark.parametrize("sys_flag", [0x1, 0x301])  # 4.9.0-4.9.3 and 4.9.4+ producers
def test_compressed_bodies_are_decompressed(sys_flag):
    body = b"payload " * 1000
    m = decode_messages(record(body=zlib.compress(body, 5), sys_flag=sys_flag))[0]
    assert m.body == body


def test_compress_body_matches_java_flags():
    data, flag = compress_body(b"a" * 5000, 5)
    assert flag == 0x301
    assert zlib.decompress(data) == b"a" * 5000
    assert decompress_body(data, flag) == b"a" * 5000


def test_unknown_compression_is_a_clear_error():
    with pytest.raises(MessageDecodeError):
        decompress_body(b"zzz", 0x1 | (5 << 8))
    with pytest.raises(MessageDecodeError):
        decompress_body(b"not zlib", 0x301)


def test_corrupt_records_raise_message_decode_error():
    raw = bytearray(record())
    raw[4:8] = b"\x00\x00\x00\x01"  # bad magic
    with pytest.raises(MessageDecodeError):
        decode_messages(bytes(raw) + record())


def test_batch_body_layout():
    msgs = [Message("T", b"one", tags="A"), Message("T", b"two!", keys="k")]
    body = encode_batch_body(msgs)
    pos = 0
    for m in msgs:
        total, magic, crc, flag, blen = struct.unpack_from(">iiiii", body, pos)
        assert (magic, crc, flag) == (0, 0, 0)
        assert body[pos + 20:pos + 20 + blen] == m.body
        (plen,) = struct.unpack_from(">h", body, pos + 20 + blen)
        assert body[pos + 22 + blen:pos + 22 + blen + plen] == properties_to_bytes(m.properties)
        assert total == 22 + blen + plen
        pos += total
    assert pos == len(body)


def test_send_result_helpers():
    r = SendResult(SendStatus.SEND_OK, "A,B", MessageQueue("T", "b", 0), 5, "X,Y")
    assert r.ok and r.msg_ids == ["A", "B"] and r.offset_msg_ids == ["X", "Y"]


@pytest.mark.parametrize("props_suffix", [b"", b"MIN_OFFSET\x010\x02MAX_OFFSET\x0199"])
def test_decode_message_objects_compiled_twin_and_record_decoder_agree(props_suffix):
    """The consumer's decoder writes each record straight into a MessageExt: the compiled
    kernel, its twin and the generic record decoder give the same field values."""
    from mqcore import _store, _store_py
    raw = (record() + record(body=b"second", qoff=8, phy=200, reconsume=2, props={})
           + record(topic="U2", body=zlib.compress(b"z" * 100), sys_flag=0x1, props={"TAGS": "é"}))
    records = _store_py.decode_records(raw, 0, len(raw), 1 << 30)
    got = {}
    for name, k in (("compiled", _store), ("twin", _store_py)):
        msgs, compressed = k.decode_message_objects(raw, 0, len(raw), 1 << 30, MessageExt, "b", props_suffix)
        assert compressed and all(type(m) is MessageExt for m in msgs)
        got[name] = [tuple(getattr(m, s) for s in _store_py.MESSAGE_SLOTS) for m in msgs]
        two, _ = k.decode_message_objects(raw, 0, len(raw), 2, MessageExt, "b", props_suffix)
        assert len(two) == 2  # max_count
    assert got["compiled"] == got["twin"]
    for r, values in zip(records, got["compiled"]):
        fields = dict(zip(_store_py.MESSAGE_SLOTS, values))
        joined = (r.properties + b"\x02" + props_suffix if r.properties else props_suffix) if props_suffix \
            else r.properties
        assert fields == {
            "topic": r.topic, "body": r.body, "flag": r.flag, "_properties": None, "_props_raw": joined,
            "transaction_id": None, "broker_name": "b", "queue_id": r.queue_id, "queue_offset": r.queue_offset,
            "commitlog_offset": r.phy_offset, "store_size": r.store_size, "body_crc": r.body_crc,
            "sys_flag": r.sys_flag, "born_timestamp": r.born_timestamp, "born_host": r.born_host,
            "store_timestamp": r.store_timestamp, "store_host": r.store_host,
            "reconsume_times": r.reconsume_times, "prepared_transaction_offset": r.prepared_offset}
    m = decode_messages(raw, "b", props_suffix=props_suffix)[2]
    assert m.body == b"z" * 100 and m.tags == "é" and m.topic == "U2"  # decompressed, parsed when read
    if props_suffix:
        assert m.properties["MAX_OFFSET"] == "99"


def test_decode_message_objects_refuses_a_class_it_cannot_fill():
    from mqcore import _store

    class NoSlots:
        pass
    with pytest.raises(TypeError, match="slots"):
        _store.decode_message_objects(record(), 0, len(record()), 10, NoSlots, None, b"")


def test_timer_helpers_set_the_rocketmq5_properties():
    from mqcore.client import Message
    from mqcore.errors import IllegalArgumentError

    m = Message("T", "x")
    assert m.deliver_time_ms is None and m.delay_time_sec is None and m.delay_time_ms is None
    m.deliver_time_ms = 1_800_000_000_000
    m.delay_time_sec = 30
    m.delay_time_ms = 2500
    assert m.properties["TIMER_DELIVER_MS"] == "1800000000000" and m.deliver_time_ms == 1_800_000_000_000
    assert m.properties["TIMER_DELAY_SEC"] == "30" and m.properties["TIMER_DELAY_MS"] == "2500"
    m.deliver_time_ms = None
    assert "TIMER_DELIVER_MS" not in m.properties
    for bad in (-1, 1.5, "10", True):
        with pytest.raises(IllegalArgumentError):
            m.delay_time_sec = bad
