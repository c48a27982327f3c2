"""The send path's shortcuts give exactly what the general code gives.

* a single ``put_message`` dispatches from the fields the writer already knows instead of
  scanning the record it wrote: its commitlog, consume-queue and index files must be byte
  for byte those of ``put_messages`` (which dispatches by scanning), for properties that
  take the shortcut and for those that fall back to the scan;
* ``SendMessageRequestHeader.from_ext_v2`` reads the usual header without the generic
  reader: same header, same errors;
* the send answer's JSON header is written in one step: the bytes the generic encoder
  writes.
"""
from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore.errors import ProtocolError
from mqcore.message import MessageExtBrokerInner
from mqcore.remoting import RequestCode, SerializeType, create_request
from mqcore.remoting.command import decode_frame, encode, encode_header
from mqcore.remoting.headers import SendMessageRequestHeader, _read
from mqcore.broker.processors.send import SendProcessor
from mqcore.store.message_store import MessageStore
from mqcore.store.results import PutMessageResult, PutMessageStatus
from tests.support.store import BORN, STORE, small_config

# property sets: plain ones take the shortcut; separators inside names or values, a None
# value, delays and transactions go through the scan
PROPS = [
    {},
    {"UNIQ_KEY": "U1"},
    {"TAGS": "tagA", "KEYS": "k1 k2  k3", "UNIQ_KEY": "U2", "WAIT": "true"},
    {"TAGS": "", "KEYS": " ", "UNIQ_KEY": ""},
    {"TAGS": "ü-tag", "KEYS": "ключ", "UNIQ_KEY": "U3", "WAIT": "false"},
    {"X": "1\x02TAGS\x01injected", "UNIQ_KEY": "U4"},
    {"TAGS\x01x": "y", "KEYS": "kk"},
    {"A": None, "TAGS": "t"},
    {"DELAY": "2", "TAGS": "late", "KEYS": "dk"},
    {"CLUSTER": "other", "TAGS": "c"},
]


def _messages():
    out = []
    for i in range(60):
        props = dict(PROPS[i % len(PROPS)])
        sys_flag = 0x8 if i % 13 == 7 else 0  # a committed-transaction record now and then
        out.append(MessageExtBrokerInner(topic=f"Fast{i % 3}", body=b"body-%d" % i, queue_id=i % 2, properties=props,
                                         born_host=BORN, store_host=STORE, born_timestamp=1_700_000_000_000 + i,
                                         sys_flag=sys_flag))
    return out


def _files(root):
    got = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel.split(os.sep)[0] in ("commitlog", "consumequeue", "index"):
                with open(p, "rb") as f:
                    got[rel] = f.read()
    return got


def test_single_put_dispatch_matches_the_scanning_dispatch(tmp_path, kernels):
    def clock():
        clock.now += 1
        return clock.now
    stores = {}
    for name in ("single", "scanned"):
        clock.now = 1_700_000_000_000
        st = MessageStore(small_config(tmp_path / name, broker_cluster_name="C1"), kernels=kernels, clock=clock)
        st.load()
        st.start()
        st.queues.defer_new = None  # compared put by put: a new queue's file is made inline, not by a thread
        arrivals = []
        st.add_arrival_listener(lambda t, q, m, arrivals=arrivals: arrivals.append((t, q, m)))
        results = []
        if name == "single":  # the shortcut is taken for plain properties only
            taken = [st.writer._prepare(m).unit is not None for m in _messages()[:len(PROPS)]]
            assert taken == [True, True, True, True, True, False, False, False, False, True]
        for m in _messages():
            if name == "single":
                results.append(st.put_message(m))
            else:
                results.extend(st.put_messages([m]))
        assert all(r.status is PutMessageStatus.PUT_OK for r in results)
        queried = sorted(x.body for x in st.messages_by_key("Fast0", "k2")) + \
            sorted(x.body for x in st.messages_by_key("Fast1", "ключ"))
        st.shutdown()
        stores[name] = (_files(tmp_path / name), arrivals, [(r.queue_id, r.queue_offset, r.msg_id) for r in results],
                        queried)
    single, scanned = stores["single"], stores["scanned"]
    assert single[2] == scanned[2]
    assert single[1] == scanned[1]            # the same long-polling wake-ups
    assert single[3] == scanned[3] and single[3]
    assert single[0].keys() == scanned[0].keys()
    assert any(k.startswith("index") for k in single[0]) and any(k.startswith("consumequeue") for k in single[0])
    for rel in single[0]:
        assert single[0][rel] == scanned[0][rel], rel


V2 = {"a": "PG", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0", "g": "1700000000000", "h": "0",
      "i": "UNIQ_KEY\x01X", "j": "0", "k": "false", "m": "false"}


@pytest.mark.parametrize("change", [
    {}, {"i": None}, {"j": None, "k": None, "m": None}, {"l": "16", "n": "broker-a"}, {"e": "-1"},
    {"d": " 4"}, {"k": "TRUE"}, {"m": "yes"}, {"g": "99999999999999999999"}, {"e": "2147483648"},
    {"d": "٣"}, {"d": "1_0"}, {"h": 7}, {"a": 5}, {"b": None}, {"g": ""}, {"e": "+3"},
])
def test_v2_header_fast_read_is_the_generic_read(change):
    _assert_fast_read_is_generic(SendMessageRequestHeader.from_ext_v2, SendMessageRequestHeader, "v2",
                                 {k: v for k, v in {**V2, **change}.items() if v is not None})


@pytest.mark.parametrize("change", [
    {}, {"i": None}, {"j": None, "k": None, "m": None}, {"l": "16", "n": "broker-a"}, {"e": "-1"},
    {"d": " 4"}, {"k": "TRUE"}, {"m": "yes"}, {"m": "true"}, {"g": "99999999999999999999"}, {"e": "2147483648"},
    {"d": "٣"}, {"d": "1_0"}, {"h": 7}, {"a": 5}, {"b": None}, {"g": ""}, {"e": "+3"}, {"j": "3"}, {"l": ""},
    {"n": 1}, {"i": 2}, {"c": None}, {"topic": "T"}, {"o": "1"}, {"g": "0" * 18}, {"f": "123456789"},
])
def test_plain_send_v2_fields_are_the_header_fields(change):
    """The fast path's header reader gives the fields the header class reads, and declines
    (None) every header the general reader rejects or reads differently (a batch too)."""
    _check_plain_fields({k: v for k, v in {**V2, **change}.items() if v is not None})


def _check_plain_fields(ext: dict) -> None:
    from mqcore.remoting.headers import plain_send_v2_fields
    got = plain_send_v2_fields(ext)
    try:
        h = SendMessageRequestHeader.from_ext(ext, RequestCode.SEND_MESSAGE_V2)
    except ProtocolError:
        assert got is None, ext
        return
    if got is not None:
        assert not h.batch and set(ext) <= set("abcdefghijklmn"), ext
        assert got == (h.producer_group, h.topic, h.queue_id, h.sys_flag, h.born_timestamp, h.flag, h.properties,
                       h.reconsume_times or 0), ext
        return
    try:  # declined although readable: exactly the shapes the header's own plain reader declines too
        SendMessageRequestHeader._from_plain_v2(ext)
        plain = True
    except (KeyError, ValueError):
        plain = False
    assert h.batch or not set(ext) <= set("abcdefghijklmn") or not plain, ext


_NUMBERISH = st.one_of(st.from_regex(r"[0-9]{1,20}", fullmatch=True), st.sampled_from(["", "-1", "+2", " 3", "٣", "1_0",
                                                                                         "true", "false", "TRUE",
                                                                                         "9" * 10, "9" * 19, "9" * 20]),
                       st.integers(-5, 10**19), st.booleans(), st.none())


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(list("abcdefghijklmno") + ["topic"]), _NUMBERISH | st.text(max_size=6),
                       max_size=16))
def test_plain_send_v2_fields_property(change):
    """Random header values over the usual header: the fast reader agrees with the header
    class or declines; never a different field, never an error the general path gives."""
    _check_plain_fields({k: v for k, v in {**V2, **change}.items() if v is not None})


def _assert_fast_read_is_generic(fast, cls, key_attr: str, ext: dict) -> None:
    """``fast(ext)`` gives what the generic reader gives: the same header, or the same error."""
    try:
        want = _read(cls, ext, key_attr)
    except ProtocolError as e:
        with pytest.raises(ProtocolError) as got:
            fast(ext)
        assert str(got.value) == str(e)
        return
    assert fast(ext) == want


class _Cfg:
    trace_on = True
    region_id = "DefaultRegion"


@pytest.mark.parametrize("status,region,opaque,ids", [
    (PutMessageStatus.PUT_OK, "DefaultRegion", 7, ["7F0000010000A0B40000000000000000"]),
    (PutMessageStatus.FLUSH_DISK_TIMEOUT, "r-1", -5, ["AB", "CD"]),
    (PutMessageStatus.PUT_OK, 'q"uote', 1, ["AB"]),
    (PutMessageStatus.PUT_OK, "région", 2, ["AB"]),
    (PutMessageStatus.PUT_OK, "DefaultRegion", 2147483647, ["AB"]),
])
@pytest.mark.parametrize("serialize", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_send_answer_header_is_the_generic_encoding(status, region, opaque, ids, serialize):
    cfg = _Cfg()
    cfg.region_id = region
    proc = SendProcessor(cfg=cfg, topics=None, groups=None, store=None, pool=None, schedule_register=None,
                         store_host=lambda: STORE)
    request = create_request(RequestCode.SEND_MESSAGE_V2, dict(V2), opaque=opaque)
    request.serialize_type = serialize
    result = PutMessageResult(status, phy_offset=0, queue_id=3, queue_offset=123456789012, msg_ids=ids)
    response = proc.response(request, result)
    fast = response.encoded_header
    response.encoded_header = None
    generic = encode_header(response)
    if fast is not None:
        assert fast == generic
    assert (fast is not None) == (serialize == SerializeType.JSON and region.isascii() and '"' not in region)
    response.encoded_header = fast
    prefix, body = encode(response)
    back = decode_frame(prefix[4:] + bytes(body))
    assert back.ext_fields["msgId"] == ",".join(ids) and back.opaque == opaque and back.ext_fields["queueOffset"] \
        == "123456789012"


def test_batch_dispatch_to_one_queue_matches_the_grouping_dispatch(tmp_path, kernels, monkeypatch):
    """A wire batch dispatches its rows to their one queue without grouping them (and its
    consume-queue units without the replay checks): the same consume-queue and index
    files, byte for byte, as the general dispatch, across consume-queue and commitlog
    file boundaries, and the same long-polling wake-ups. Prepared and rolled-back batches
    take the general path."""
    from mqcore.message import properties_to_bytes
    from mqcore.store.writer import MessageWriter

    def batches():
        out = []
        for b in range(40):
            count = 1 + (b * 7) % 37
            items = kernels.encode_batch_items([
                (0, b"batch-%d-%d" % (b, i) * (1 + i % 5),
                 properties_to_bytes({"UNIQ_KEY": f"U{b}-{i}", "KEYS": f"k{i % 3} shared", "TAGS": f"t{b % 4}"}))
                for i in range(count)])
            sys_flag = (0, 0x8, 0, 0x4, 0, 0xC)[b % 6]  # plain, committed, prepared, rolled back
            out.append((f"Batch{b % 2}", b % 3, items, sys_flag))
        return out

    stores = {}
    general = MessageWriter._dispatch_locked
    for name in ("queue", "grouped"):
        if name == "grouped":
            monkeypatch.setattr(MessageWriter, "_dispatch_batch_locked",
                                lambda self, mf, s, e, c, topic, qid, sf: general(self, mf, s, e, c))
        clock = iter(range(1_700_000_000_000, 1_800_000_000_000)).__next__
        st = MessageStore(small_config(tmp_path / name), kernels=kernels, clock=clock)
        st.load()
        st.start()
        st.queues.defer_new = None  # compared put by put: a new queue's file is made inline, not by a thread
        arrivals = []
        st.add_arrival_listener(lambda t, q, m, arrivals=arrivals: arrivals.append((t, q, m)))
        results = [st.put_batch(topic, qid, items, sys_flag=sf, born_host=BORN, store_host=STORE)
                   for topic, qid, items, sf in batches()]
        assert all(r.status is PutMessageStatus.PUT_OK for r in results)
        queried = sorted(x.body for x in st.messages_by_key("Batch0", "shared"))
        st.shutdown()
        stores[name] = (_files(tmp_path / name), arrivals,
                        [(r.queue_id, r.queue_offset, r.msg_ids) for r in results], queried)
    fast, grouped = stores["queue"], stores["grouped"]
    assert fast[2] == grouped[2]
    assert fast[1] == grouped[1] and fast[1]
    assert fast[3] == grouped[3] and fast[3]
    assert fast[0].keys() == grouped[0].keys()
    assert sum(k.startswith("consumequeue") for k in fast[0]) > 6  # units crossed consume-queue files
    assert sum(k.startswith("commitlog") for k in fast[0]) > 1
    for rel in fast[0]:
        assert fast[0][rel] == grouped[0][rel], rel


SEND_ANSWER = {"msgId": "7F00000100002A9F0000000000001234", "queueId": "3", "queueOffset": "12345",
               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}


@pytest.mark.parametrize("change", [
    {}, {"MSG_REGION": None, "TRACE_ON": None}, {"transactionId": "TX1"}, {"TRACE_ON": "false"},
    {"TRACE_ON": "TRUE"}, {"TRACE_ON": "yes"}, {"queueId": "-1"}, {"queueId": "2147483648"},
    {"queueOffset": "99999999999999999999"}, {"queueId": " 3"}, {"queueId": "٣"}, {"queueOffset": "1_0"},
    {"queueId": 7}, {"msgId": None}, {"queueOffset": ""}, {"MSG_REGION": 5},
])
def test_send_answer_fast_read_is_the_generic_read(change):
    """The client reads every send's answer header directly when its values are plain;
    anything else goes to the generic reader: the same header, or the same error."""
    from mqcore.remoting.headers import SendMessageResponseHeader
    _assert_fast_read_is_generic(SendMessageResponseHeader.from_ext, SendMessageResponseHeader, "key",
                                 {k: v for k, v in {**SEND_ANSWER, **change}.items() if v is not None})
