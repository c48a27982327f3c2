"""The SEND pipeline (broker/processors/send_pipeline.py, kernels mqcore/_pipeline.pyx and
its twin mqcore/_pipeline_py.py) gives exactly what the general send path gives.

* the same requests through the pipeline and through the general path only - one request
  per write, and all of them pipelined in as few writes as the scenario allows - give the
  same answer bytes, the same commitlog, consume-queue and index files and the same
  counters, with the Cython kernels and with the twin;
* the kernel and the twin read the same frames the same way (every frame the kernel
  reads, the twin reads into the same item), stop at the same incomplete frame, and write
  the same answer bytes as the general encoder;
* all the answers to one receive buffer leave in one write.
"""
from __future__ import annotations

import asyncio
import bisect
import dataclasses
import json
import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import _pipeline_py
from mqcore.histogram import PUT_LATENCY_BOUNDS_S, Histogram
from mqcore.remoting import RequestCode, create_request
from mqcore.remoting.command import encode_frame
from tests.support.store import BORN, STORE, small_config

from mqcore import _pipeline  # the compiled kernel: a missing build fails here, never skips

KERNELS = {"cython": _pipeline, "twin": _pipeline_py}
PLAIN_TOPIC = "PlainT"
CLUSTER = b"DefaultCluster"


def _v2(**change):
    ext = {"a": "PG", "b": PLAIN_TOPIC, "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1700000000123", "h": "0",
           "i": "UNIQ_KEY\x01U0\x02TAGS\x01tg\x02KEYS\x01k1 k2\x02", "j": "0", "k": "false", "m": "false"}
    ext.update(change)
    return {k: v for k, v in ext.items() if v is not None}


#: (what it exercises, extFields or an action on the broker, body, taken by the pipeline);
#: every request is answered (the answers' bytes are compared)
CASES = [
    ("plain", _v2(), b"p0", True),
    ("no properties", _v2(i=None, j=None, k=None, m=None), b"p1", True),
    ("empty properties", _v2(i=""), b"p2", True),
    ("flag, sys flag bits, reconsume", _v2(h="7", f="3", j="2", l="16", n="broker-x"), b"p3", True),
    ("WAIT given, empty segments", _v2(i="WAIT\x01false\x02\x02TAGS\x01w\x02\x01x\x02B\x01"), b"p4", True),
    ("many keys", _v2(i="KEYS\x01" + " ".join(f"k{i}" for i in range(40)) + "  x"), b"p5", True),
    ("a trace message's keys", _v2(i="KEYS\x01" + " ".join(f"7F0000010000{i:020X}" for i in range(450))),
     b"p6", True),
    ("more keys than the kernel reads", _v2(i="KEYS\x01" + " ".join(f"k{i}" for i in range(2100))), b"c3", False),
    ("CLUSTER given", _v2(i="WAIT\x01false\x02CLUSTER\x01other\x02TAGS\x01w"), b"c0", False),
    ("duplicate names", _v2(i="A\x011\x02\x02A\x012\x02\x01x\x02B\x01"), b"c1", False),
    ("non-ASCII tag", _v2(i="TAGS\x01ü-tag\x02KEYS\x01ключ"), b"c2", False),
    ("a separator inside a value", _v2(i="A\x01b\x01c\x02TAGS\x01s"), b"f0", False),
    ("delayed", _v2(i="DELAY\x012\x02TAGS\x01d"), b"f1", False),
    ("delay level 0", _v2(i="DELAY\x010"), b"f1b", False),
    ("prepared transaction", _v2(f="4", i="TRAN_MSG\x01true"), b"f2", False),
    ("TRAN_MSG without its bits", _v2(i="TRAN_MSG\x01true"), b"f2a", False),
    ("committed transaction bits", _v2(f="8"), b"f2b", False),
    ("random queue", _v2(e="-1"), b"f3", False),
    ("queue out of range", _v2(e="99"), b"f4", False),
    ("batch flag with a malformed batch", _v2(m="true"), b"f5", False),
    ("unknown topic, auto-created", _v2(b="PlainNew"), b"f6", False),
    ("retry topic", _v2(b="%RETRY%PG"), b"f7", False),
    ("invalid topic", _v2(b="bad topic"), b"f8", False),
    ("invalid group", _v2(a="bad/group"), b"f9", False),
    ("forbidden topic", _v2(b="SCHEDULE_TOPIC_XXXX"), b"f10", False),
    ("unusual number", _v2(d=" 4"), b"f11", False),
    ("unusual bool", _v2(k="TRUE"), b"f12", False),
    ("long name key", {**_v2(), "topic": PLAIN_TOPIC}, b"f13", False),
    ("missing field", _v2(h=None), b"f14", False),
    ("big number", _v2(g="1" * 19), b"f15", False),
    ("read-only topic", _v2(b="PlainRO"), b"f16", False),
    ("body over the limit", _v2(), b"x" * 3000, False),
    ("properties over the limit", _v2(i="P\x01" + "v" * 33000), b"f17", False),
    ("refusing puts", "refuse", None, False),
    ("plain while refused", _v2(), b"r0", False),
    ("accepting again", "accept", None, False),
    ("region needing escapes", "region", None, False),
    ("plain, escaped region", _v2(), b"g0", False),
    ("broker not writable", "readonly", None, False),
    ("plain, broker not writable", _v2(), b"g1", False),
    ("plain again", "writable", None, False),
    ("plain, after the changes", _v2(e="3", i="UNIQ_KEY\x01U9\x02KEYS\x01k9"), b"z0", True),
    ("plain, 1 KiB", _v2(e="2"), b"k" * 1024, True),
]


def _files(root):
    got = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if rel.startswith(("commitlog", "consumequeue", "index")):
                with open(p, "rb") as f:
                    got[rel] = f.read()
    return got


def _run(tmp_path, monkeypatch, *, pipeline: bool, pipelined: bool, kernels=None, core: bool = False):
    """Run CASES against a broker; the answers (in request order), the store files, the
    counters, the bodies the pipeline stored and (with the core) where the Python stages
    stopped each time they took plain sends."""
    from mqcore import _compat
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig
    from mqcore.broker.processors import send as send_mod
    from mqcore.broker.processors import send_pipeline
    from mqcore.permissions import PERM_READ, PERM_WRITE

    # the peer's address is the connection's: the same for every run
    monkeypatch.setattr(send_mod, "peer_host", lambda channel: BORN)
    monkeypatch.setattr(send_pipeline, "peer_host", lambda channel: BORN)
    if kernels is not None:
        monkeypatch.setattr(_compat, "pipeline_kernels", kernels)
    if not pipeline:
        monkeypatch.setattr(send_pipeline.SendPipeline, "__call__", lambda self, ch, view, start, end: start)
    if not core:  # the connections run the Python Channel and SendPipeline.__call__
        monkeypatch.setattr(send_pipeline.SendPipeline, "use_core", False)
    random.seed(5)
    taken: list[bytes] = []
    if core:  # which plain sends the Python stages took (the core should leave them none one per write)
        python_stages = send_pipeline.SendPipeline.__call__

        def python_call(self, ch, view, start, end):
            stop = python_stages(self, ch, view, start, end)
            if stop != start:
                taken_by_python.append(stop)
            return stop
        monkeypatch.setattr(send_pipeline.SendPipeline, "__call__", python_call)
    taken_by_python: list[int] = []

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="plain"),
                        small_config(tmp_path, max_message_size_bytes=2048), clock=lambda: 1_700_000_000_000)
        await broker.start()
        # the C connection core (mqcore/_send_core.pxi) serves the connections exactly when asked for
        assert (broker.server._channel_class.__name__ == "CoreChannel") == core
        broker.store_host = STORE
        broker.topics.update(TopicConfig(PLAIN_TOPIC, 4, 4))
        broker.topics.update(TopicConfig("PlainRO", 4, 4, perm=PERM_READ))
        put = broker.store.put_plain_sends

        def recording(items, born, store_host):
            stored, refusal = put(items, born, store_host)
            taken.extend(item[10] for item in items[:len(stored)])
            return stored, refusal
        broker.store.put_plain_sends = recording
        answers = []
        try:
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            pending: list[bytes] = []

            async def flush():
                writer.write(b"".join(pending))
                for _ in pending:
                    length = int.from_bytes(await reader.readexactly(4), "big")
                    answers.append(await reader.readexactly(length))
                pending.clear()

            for opaque, (_, ext, body, _taken) in enumerate(CASES):
                if isinstance(ext, dict):
                    pending.append(encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, ext, body,
                                                               opaque=opaque + 100)))
                    if not pipelined:
                        await flush()
                    continue
                await flush()
                if ext == "refuse":
                    broker.store.refuse_puts("going away")
                elif ext == "accept":
                    broker.store.accept_puts()
                elif ext == "region":
                    broker.apply_runtime_config(dataclasses.replace(broker.cfg, region_id='r"1'))
                elif ext == "readonly":
                    broker.apply_runtime_config(dataclasses.replace(broker.cfg, region_id="DefaultRegion",
                                                                    broker_permission=PERM_READ))
                elif ext == "writable":
                    broker.apply_runtime_config(dataclasses.replace(broker.cfg,
                                                                    broker_permission=PERM_READ | PERM_WRITE))
            await flush()
            writer.close()
            # put latencies are observed once per request, or once per stored batch when pipelined
            stats = (dict(broker.stats.put), dict(broker.stats.put_failures),
                     None if pipelined else sum(broker.stats.put_latency.counts))
        finally:
            await broker.shutdown()
        return answers, stats

    answers, stats = asyncio.run(scenario())
    return answers, _files(tmp_path), stats, taken, taken_by_python


def _answers_by_opaque(answers):
    """Pipelined answers may come back in another order when a general-path request
    waits (auto-creation registers first): compare them by opaque."""
    out = {}
    for a in answers:
        header_len = int.from_bytes(a[:4], "big") & 0xFFFFFF
        out[json.loads(a[4:4 + header_len])["opaque"]] = a
    return out


#: "core": the compiled kernels with the C connection core (what a broker runs); "cython": the
#: compiled kernels under the Python Channel and SendPipeline.__call__; "twin": the pure-Python twin
PATHS = ["core", "cython", "twin"]


def _kernels(path):
    return _pipeline_py if path == "twin" else _pipeline


@pytest.mark.parametrize("kernel", PATHS)
@pytest.mark.parametrize("pipelined", [False, True], ids=["one-per-write", "pipelined"])
def test_pipeline_gives_the_general_answers_and_files(tmp_path, monkeypatch, kernel, pipelined):
    """The same requests through the pipeline and through the general path only: the same
    answer bytes, commitlog, consume-queue and index files and counters; and the pipeline
    stored exactly the plain requests itself."""
    with monkeypatch.context() as m:
        fast = _run(tmp_path / "fast", m, pipeline=True, pipelined=pipelined, kernels=_kernels(kernel),
                    core=kernel == "core")
    if kernel == "core" and not pipelined:  # each plain send alone in its buffer: the C core took it
        assert fast[4] == []
    with monkeypatch.context() as m:
        general = _run(tmp_path / "general", m, pipeline=False, pipelined=pipelined)
    requests = [c for c in CASES if isinstance(c[1], dict)]
    assert len(fast[0]) == len(general[0]) == len(requests)
    fast_by, general_by = _answers_by_opaque(fast[0]), _answers_by_opaque(general[0])
    assert fast_by.keys() == general_by.keys()
    for opaque, answer in fast_by.items():
        assert answer == general_by[opaque], CASES[opaque - 100][0]
    assert fast[1].keys() == general[1].keys()
    assert any(k.startswith("index") for k in fast[1]) and any(k.startswith("consumequeue") for k in fast[1])
    for rel in fast[1]:
        assert fast[1][rel] == general[1][rel], rel
    assert fast[2] == general[2]
    assert fast[3] == [body for _, ext, body, taken in CASES if taken]
    assert general[3] == []
    assert b'"code":0' in fast[0][0] and b'"code":0' in fast[0][-1]


# --- kernel and twin, frame by frame -------------------------------------------------------------
def _frames():
    out = [encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, ext, body, opaque=i))
           for i, (_, ext, body, _t) in enumerate(CASES) if isinstance(ext, dict)]
    plain = out[0]
    hlen = int.from_bytes(plain[4:8], "big")
    header = plain[8:8 + hlen]
    body = plain[8 + hlen:]

    def frame(h: bytes, flag_word: int = 0) -> bytes:
        return (4 + len(h) + len(body)).to_bytes(4, "big") + (flag_word << 24 | len(h)).to_bytes(4, "big") + h + body

    # spellings of the same header: whitespace, escapes, number forms, key order, odd shapes
    obj = json.loads(header)
    variants = [
        json.dumps(obj, indent=1).encode(),
        json.dumps(obj, ensure_ascii=True).replace("PlainT", "Plain\\u0054").encode(),
        header.replace(b'"opaque":0', b'"opaque":"0"'),
        header.replace(b'"opaque":0', b'"opaque":0.0'),
        header.replace(b'"opaque":0', b'"opaque":-0'),
        header.replace(b'"opaque":0', b'"opaque":2147483648'),
        header.replace(b'"flag":0', b'"flag":2'),
        header.replace(b'"flag":0', b'"flag":1'),
        header.replace(b'"code":310', b'"code":10'),
        header.replace(b'"language":"JAVA"', b'"language":"CPP","remark":"hi"'),
        header.replace(b'"language":"JAVA"', b'"language":null'),
        header.replace(b'"version":', b'"extra":1,"version":'),
        header.replace(b'"a":"PG"', b'"a":"PG","a":"PG2"'),
        header.replace(b'"a":"PG"', b'"a":"P\\u0047"'),
        header.replace(b'"i":"', b'"i":"X\\u0001\\u00e9\\u0002'),
        header.replace(b'"i":"', b'"i":"X\\u0001\\t\\"\\\\/\\u0002'),
        header.replace(b'"i":"', b'"i":"X\\u0001\xc3\xa9\\u0002'),
        json.dumps(dict(reversed(list(obj.items())))).encode(),
        header[:-1],
        b"[" + header + b"]",
        header + b" ",
    ]
    out += [frame(v) for v in variants]
    out.append(frame(header, flag_word=1))  # ROCKETMQ serialisation
    return out


FRAMES = _frames()


def test_kernel_and_twin_read_the_same_frames_the_same_way():
    read = 0
    for frame in FRAMES:
        for cluster, indexed in ((CLUSTER, True), (b"", False)):
            k_items, k_stop = _pipeline.parse_plain_sends(frame, 0, len(frame), 1 << 20, cluster, indexed)
            t_items, t_stop = _pipeline_py.parse_plain_sends(frame, 0, len(frame), 1 << 20, cluster, indexed)
            if k_items:
                read += 1
                assert t_items == k_items and t_stop == k_stop
            else:
                assert k_stop == 0
    assert read > 20  # the corpus has frames the kernel reads, not only declines


@pytest.mark.parametrize("kernel", ["cython", "twin"])
def test_reading_stops_at_the_first_frame_it_does_not_take_and_at_incomplete_frames(kernel):
    k = KERNELS[kernel]
    plain = FRAMES[0]
    other = FRAMES[CASES.index(next(c for c in CASES if c[0] == "delayed")) - 0]
    buf = bytearray(b"\0" * 5 + plain + plain + other + plain)
    items, stop = k.parse_plain_sends(buf, 5, len(buf), 1 << 20, CLUSTER, True)
    assert len(items) == 2 and stop == 5 + 2 * len(plain) == items[-1][11]
    for cut in range(5, 5 + 2 * len(plain)):
        items, stop = k.parse_plain_sends(buf, 5, cut, 1 << 20, CLUSTER, True)
        assert len(items) == (cut - 5) // len(plain) and stop == 5 + len(items) * len(plain)
    # a frame over the limit is left to the generic reader (which closes the connection)
    assert k.parse_plain_sends(plain, 0, len(plain), len(plain) - 5, CLUSTER, True) == ([], 0)
    with pytest.raises(ValueError):
        k.parse_plain_sends(plain, 0, len(plain) + 1, 1 << 20, CLUSTER, True)


_names = st.text(alphabet="abcXYZ019_-%|", min_size=1, max_size=12)
_values = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "WAIT", "X", "DELAY", ""]) | _names,
                          _values), max_size=6),
       st.sampled_from(["", "\x02"]), _names, st.integers(0, 2 ** 31 - 1))
def test_kernel_and_twin_agree_on_properties(pairs, tail, topic, opaque):
    text = "\x02".join(f"{n}\x01{v}" for n, v in pairs) + tail
    frame = encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, _v2(b=topic, i=text), b"b", opaque=opaque))
    k = _pipeline.parse_plain_sends(frame, 0, len(frame), 1 << 20, CLUSTER, True)
    t = _pipeline_py.parse_plain_sends(frame, 0, len(frame), 1 << 20, CLUSTER, True)
    if k[0]:
        assert k == t


@pytest.mark.parametrize("kernel", ["cython", "twin"])
@pytest.mark.parametrize("queue_id,phy,queue_offset,opaque", [(0, 0, 0, 0), (7, 2 ** 40 + 5, 123456789, -5),
                                                              (1023, 2 ** 63 - 1, 2 ** 62, 2 ** 31 - 1)])
def test_send_answer_is_the_general_encoders(kernel, queue_id, phy, queue_offset, opaque):
    from mqcore.broker.processors.send import SendProcessor
    from mqcore.message import offset_msg_id
    from mqcore.remoting import CURRENT_VERSION, FLAG_RESPONSE
    from mqcore.remoting.command import encode
    from mqcore.store.results import PutMessageResult, PutMessageStatus

    k = KERNELS[kernel]
    if k is None:
        pytest.fail("the compiled mqcore._pipeline did not load")
    cfg = type("Cfg", (), {"trace_on": True, "region_id": "DefaultRegion"})()
    proc = SendProcessor.__new__(SendProcessor)
    proc.cfg = cfg
    request = create_request(RequestCode.SEND_MESSAGE_V2, _v2(), b"", opaque=opaque)
    result = PutMessageResult(PutMessageStatus.PUT_OK, phy_offset=phy, wrote_bytes=1, queue_id=queue_id,
                              queue_offset=queue_offset, msg_ids=[offset_msg_id(STORE, phy)], message_count=1)
    cmd = proc.response(request, result)
    cmd.flag |= FLAG_RESPONSE
    cmd.encoded_header = None  # the generic encoder, not the one-step header
    prefix, body = encode(cmd)
    got = k.send_answer(b'{"code":0,"extFields":{"queueId":"',
                        b'","TRACE_ON":"true","MSG_REGION":"DefaultRegion","msgId":"',
                        STORE.hex().upper().encode(), queue_id, phy, queue_offset, opaque, int(CURRENT_VERSION))
    assert got == prefix + body


@pytest.mark.parametrize("kernel", ["cython", "twin"])
def test_send_answers_are_the_single_answers_back_to_back(kernel):
    """The batch answer kernel writes, for every stored item, the bytes ``send_answer``
    gives, in order; items past the stored ones get none."""
    k = KERNELS[kernel]
    before_q, before_m = b'{"code":0,"extFields":{"queueId":"', b'","TRACE_ON":"false","MSG_REGION":"R","msgId":"'
    host = STORE.hex().upper().encode()
    items = [(opaque, PLAIN_TOPIC, queue_id) for opaque, queue_id in ((1, 0), (-7, 3), (2 ** 31 - 1, 1023), (9, 2))]
    stored = [(0, 0, 100), (123456789, 2 ** 40 + 5, 200), (2 ** 62, 2 ** 63 - 1, 300)]
    want = b"".join(_pipeline_py.send_answer(before_q, before_m, host, item[2], phy, offset, item[0], 317)
                    for item, (offset, phy, _size) in zip(items, stored))
    assert k.send_answers(before_q, before_m, host, items, stored, 317) == want
    assert k.send_answers(before_q, before_m, host, items, [], 317) == b""
    assert k.send_answers(before_q, before_m, host, items[:1], stored[:1], 317) == \
        k.send_answer(before_q, before_m, host, 0, 0, 0, 1, 317)
    with pytest.raises(ValueError):
        k.send_answers(before_q, before_m, host, items[:1], stored, 317)


def test_a_stored_batch_wakes_long_polling_once_per_run_of_a_queue(tmp_path):
    """The store stage tells the arrival listeners (long polling) the last offset of each run
    of items to one queue, in order, before the put returns - every offset a waiter could
    wait for is covered."""
    from mqcore.store.message_store import MessageStore

    st = MessageStore(small_config(tmp_path, broker_cluster_name="DefaultCluster"), clock=lambda: 1_700_000_000_000)
    st.load()
    st.start()
    try:
        arrivals = []
        st.add_arrival_listener(lambda t, q, m: arrivals.append((t, q, m)))
        queues = [0, 0, 0, 1, 1, 0, 2]
        frames = b"".join(encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, _v2(e=str(q)), b"b%d" % i,
                                                      opaque=i)) for i, q in enumerate(queues))
        # the first unit of each queue goes the general way (it creates the file); then plain ones
        for q in sorted(set(queues)):
            one = encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, _v2(e=str(q)), b"first", opaque=99))
            items, _ = _pipeline.parse_plain_sends(one, 0, len(one), 1 << 20, CLUSTER, True)
            assert len(st.put_plain_sends(items, BORN, STORE)[0]) == 1
        st.queues.make_all_ready()  # a new queue's file is made off the put's path: made now
        arrivals.clear()
        items, stop = _pipeline.parse_plain_sends(frames, 0, len(frames), 1 << 20, CLUSTER, True)
        assert stop == len(frames) and len(items) == len(queues)
        stored, refusal = st.put_plain_sends(items, BORN, STORE)
        assert refusal is None
        assert [s[0] for s in stored] == [1, 2, 3, 1, 2, 4, 1]
        assert arrivals == [(PLAIN_TOPIC, 0, 4), (PLAIN_TOPIC, 1, 3), (PLAIN_TOPIC, 0, 5), (PLAIN_TOPIC, 2, 2)]
    finally:
        st.shutdown()


def test_plain_sends_to_queues_waiting_for_their_file_give_the_files_of_ready_queues(tmp_path, kernels):
    """Units of queues that wait for their first file (pending) are kept in memory by the
    compiled store stage as by the general steps (the first unit of each such queue takes the
    general steps: the partition's check): once the files are made, the store's files are
    those of the same sends to queues that had their files all along."""
    from mqcore.store.message_store import MessageStore

    queues = [0, 1, 0, 1, 1, 2, 0, 2, 2, 1]

    def run(root, hold: bool):
        st = MessageStore(small_config(root, broker_cluster_name="DefaultCluster"), clock=lambda: 1_700_000_000_000,
                          kernels=kernels)
        st.load()
        st.start()
        try:
            frames = [encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, _v2(e=str(q)), b"b%d" % i, opaque=i))
                      for i, q in enumerate(queues)]
            stored = []
            if hold:  # every queue stays pending while the sends are stored (one batch)
                with st.queues._making:
                    blob = b"".join(frames)
                    items, _ = _pipeline.parse_plain_sends(blob, 0, len(blob), 1 << 20, CLUSTER, True)
                    got, refusal = st.put_plain_sends(items, BORN, STORE)
                    assert refusal is None
                    stored.extend(got)
                    assert len(st.queues.pending) == 3 and not st.queues.queues
            else:  # each queue gets its file right after its first unit
                for f in frames:
                    items, _ = _pipeline.parse_plain_sends(f, 0, len(f), 1 << 20, CLUSTER, True)
                    got, refusal = st.put_plain_sends(items, BORN, STORE)
                    assert refusal is None
                    stored.extend(got)
                    st.queues.make_all_ready()
            st.queues.make_all_ready()
            assert not st.queues.pending
            return stored, [st.get_max_offset_in_queue(PLAIN_TOPIC, q) for q in range(3)]
        finally:
            st.shutdown()

    assert run(tmp_path / "pending", True) == run(tmp_path / "ready", False)
    assert _files(tmp_path / "pending") == _files(tmp_path / "ready")


def test_the_system_clock_stamps_plain_sends_with_the_wall_clock(tmp_path):
    """A store on the system clock (every broker's): the compiled store stage reads the wall
    clock itself, and stamps each record with epoch milliseconds as mqcore.clock does."""
    import time

    from mqcore.store.message_store import MessageStore

    st = MessageStore(small_config(tmp_path, broker_cluster_name="DefaultCluster"))
    st.load()
    st.start()
    try:
        frames = [encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, _v2(e="0"), b"c%d" % i, opaque=i))
                  for i in range(3)]  # the first goes the general way (it creates the queue's file)
        for frame in frames:
            items, _ = _pipeline.parse_plain_sends(frame, 0, len(frame), 1 << 20, CLUSTER, True)
            before_ms = time.time_ns() // 1_000_000
            stored, refusal = st.put_plain_sends(items, BORN, STORE)
            after_ms = time.time_ns() // 1_000_000
            assert refusal is None and len(stored) == 1
            stamped = st.look_message_by_offset(stored[0][1]).store_timestamp
            assert before_ms <= stamped <= after_ms
            assert st.writer.last_store_timestamp == stamped
    finally:
        st.shutdown()


def test_routes_follow_topic_changes(tmp_path):
    """The pipeline remembers the topics that passed its route checks; a change of a topic
    (permission, queue count, deletion) reaches the very next send."""
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig
    from mqcore.permissions import PERM_READ

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="routes",
                                     auto_create_topic_enable=False),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        taken = []
        put = broker.store.put_plain_sends

        def recording(items, born, store_host):
            stored, refusal = put(items, born, store_host)
            taken.extend(item[2] for item in items[:len(stored)])
            return stored, refusal
        broker.store.put_plain_sends = recording
        try:
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))

            async def send(queue_id):
                writer.write(encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, _v2(e=str(queue_id)), b"r")))
                length = int.from_bytes(await reader.readexactly(4), "big")
                answer = await reader.readexactly(length)
                header_len = int.from_bytes(answer[:4], "big") & 0xFFFFFF
                return json.loads(answer[4:4 + header_len])["code"]

            broker.topics.update(TopicConfig(PLAIN_TOPIC, 4, 4))
            assert await send(0) == 0 and await send(3) == 0
            taken.clear()
            assert await send(3) == 0 and taken == [3]
            broker.topics.update(TopicConfig(PLAIN_TOPIC, 4, 4, perm=PERM_READ))
            assert await send(3) != 0 and taken == [3]
            broker.topics.update(TopicConfig(PLAIN_TOPIC, 2, 2))
            assert await send(3) != 0 and taken == [3]
            assert await send(0) == 0 and taken == [3, 0]
            broker.topics.delete(PLAIN_TOPIC)
            assert await send(0) != 0 and taken == [3, 0]
            writer.close()
        finally:
            await broker.shutdown()

    asyncio.run(scenario())


# --- the C connection core ----------------------------------------------------------------------
def test_connection_core_is_not_installed_under_acl():
    """A server with a before_request hook (ACL) installs neither the frames processor nor
    its connection core: every request reaches the hook as a command."""
    from mqcore.remoting import RemotingServer
    from mqcore.remoting.channel import Channel

    class Marker(Channel):
        pass

    async def scenario():
        guarded = RemotingServer(idle_timeout_s=None, before_request=lambda ch, req: None)
        assert not guarded.register_frames_processor(lambda ch, view, start, end: start, Marker)
        assert type(guarded._new_channel()) is Channel
        plain = RemotingServer(idle_timeout_s=None)
        assert plain.register_frames_processor(lambda ch, view, start, end: start, Marker)
        assert type(plain._new_channel()) is Marker

    asyncio.run(scenario())


def test_a_failure_inside_the_core_closes_only_its_connection(tmp_path, monkeypatch):
    """An unexpected error while the C core handles a buffer closes that connection (as the
    Python Channel does); the broker keeps serving the others."""
    from mqcore import _compat
    # the C core under test comes with the compiled pipeline kernels, in either mode (under
    # MQCORE_PURE_PYTHON=1 the store runs the twin store kernels)
    monkeypatch.setattr(_compat, "pipeline_kernels", _pipeline)
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="boom"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        assert broker.server._channel_class.__name__ == "CoreChannel"
        broker.topics.update(TopicConfig(PLAIN_TOPIC, 4, 4))
        put = broker.store.put_plain_sends
        failing = [True]

        def flaky(items, born, store_host):
            if failing[0]:
                failing[0] = False
                raise RuntimeError("a bug in the store stage")
            return put(items, born, store_host)
        broker.store.put_plain_sends = flaky
        frame = encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, _v2(), b"boom"))
        try:
            r1, w1 = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            r2, w2 = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            w1.write(frame)
            assert await asyncio.wait_for(r1.read(), 10) == b""  # closed, nothing answered
            w2.write(frame)
            length = int.from_bytes(await asyncio.wait_for(r2.readexactly(4), 10), "big")
            answer = await r2.readexactly(length)
            assert b'"code":0' in answer
            w1.close()
            w2.close()
        finally:
            await broker.shutdown()

    asyncio.run(scenario())


# --- one write per receive buffer ----------------------------------------------------------------
def test_answers_to_one_receive_buffer_leave_in_one_write():
    from mqcore.remoting import RemotingServer, create_response

    async def scenario():
        server = RemotingServer(idle_timeout_s=None, name="cork")
        server.register_processor(RequestCode.HEART_BEAT, lambda ch, req: create_response(req))
        writes = []

        def counting(channel):
            transport = channel._transport
            write = transport.write
            transport.write = lambda data: (writes.append(len(data)), write(data))[1]
        server.add_connect_listener(counting)
        await server.start("127.0.0.1", 0)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            frames = b"".join(encode_frame(create_request(RequestCode.HEART_BEAT, {}, b"", opaque=i))
                              for i in range(40))
            writer.write(frames)
            for _ in range(40):
                length = int.from_bytes(await reader.readexactly(4), "big")
                await reader.readexactly(length)
            writer.close()
        finally:
            await server.shutdown()
        return writes

    writes = asyncio.run(scenario())
    # one write per receive (the 40 frames arrive in one or two reads on loopback)
    assert 1 <= len(writes) <= 3, writes


# --- across file rolls ---------------------------------------------------------------------------
def _roll_frames():
    """Plain sends over three queues, enough to roll commitlog, consume-queue and index files
    (small_config's sizes), with keys, tags and bodies of changing sizes."""
    frames = []
    for i in range(420):
        keys = " ".join(f"k{i}-{j}" for j in range(i % 4))
        props = f"UNIQ_KEY\x01U{i}\x02TAGS\x01t{i % 5}" + (f"\x02KEYS\x01{keys}" if keys else "")
        frames.append(encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, _v2(e=str(i % 3), i=props),
                                                  b"r" * (50 + (i * 37) % 900), opaque=1000 + i)))
    return frames


def _run_rolls(tmp_path, monkeypatch, *, pipeline: bool, kernels=None, core: bool = False):
    from mqcore import _compat
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig
    from mqcore.broker.processors import send as send_mod
    from mqcore.broker.processors import send_pipeline

    monkeypatch.setattr(send_mod, "peer_host", lambda channel: BORN)
    monkeypatch.setattr(send_pipeline, "peer_host", lambda channel: BORN)
    if kernels is not None:
        monkeypatch.setattr(_compat, "pipeline_kernels", kernels)
    if not pipeline:
        monkeypatch.setattr(send_pipeline.SendPipeline, "__call__", lambda self, ch, view, start, end: start)
    if not core:  # the connections run the Python Channel and SendPipeline.__call__
        monkeypatch.setattr(send_pipeline.SendPipeline, "use_core", False)
    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="plain"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        # the C connection core (mqcore/_send_core.pxi) serves the connections exactly when asked for
        assert (broker.server._channel_class.__name__ == "CoreChannel") == core
        broker.store_host = STORE
        broker.topics.update(TopicConfig(PLAIN_TOPIC, 4, 4))
        broker.stats.put_latency = _RecordingHistogram(PUT_LATENCY_BOUNDS_S)
        answers = []
        try:
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            frames = _roll_frames()
            for start in range(0, len(frames), 60):  # pipelined, 60 requests per write
                chunk = frames[start:start + 60]
                writer.write(b"".join(chunk))
                for _ in chunk:
                    length = int.from_bytes(await reader.readexactly(4), "big")
                    answers.append(await reader.readexactly(length))
            writer.close()
            state = (*_store_state(broker), broker.stats.put_latency)
        finally:
            await broker.shutdown()
        return answers, state

    answers, state = asyncio.run(scenario())
    return answers, _files(tmp_path), state


def _store_state(broker):
    """What the store keeps in memory about its files after the sends (the C core writes it
    in place of the Python steps): per consume queue its end and the commitlog end it
    covers, the writer's next queue offsets, the commitlog end, the last store timestamps
    and the put counters."""
    store = broker.store
    queues = {key: (cq.max_offset(), cq.max_physic_offset) for key, cq in store.dispatcher.queues.queues.items()}
    return (queues, dict(store.writer.queue_offsets), store.get_max_phy_offset(), store.writer.last_store_timestamp,
            store.dispatcher.last_store_timestamp, {t: list(c) for t, c in broker.stats.put.items()})


class _RecordingHistogram(Histogram):
    """A Histogram that keeps every value observed (through the ``sum`` it adds them to), so
    a test can say which bucket each belongs in."""

    __slots__ = ("values", "_total")

    def __init__(self, bounds):
        self.values = []
        self._total = 0.0
        super().__init__(bounds)

    @property  # type: ignore[override]
    def sum(self):
        return self._total

    @sum.setter
    def sum(self, total):
        if total:
            self.values.append(total - self._total)
        self._total = total


@pytest.mark.parametrize("kernel", PATHS)
def test_pipeline_across_file_rolls_gives_the_general_files(tmp_path, monkeypatch, kernel):
    with monkeypatch.context() as m:
        fast = _run_rolls(tmp_path / "fast", m, pipeline=True, kernels=_kernels(kernel), core=kernel == "core")
    with monkeypatch.context() as m:
        general = _run_rolls(tmp_path / "general", m, pipeline=False)
    assert fast[0] == general[0]
    assert all(b'"code":0' in a for a in fast[0])
    # several files of each kind: the rolls were crossed
    for kind in ("commitlog", "consumequeue", "index"):
        assert sum(1 for rel in fast[1] if rel.startswith(kind)) >= 3, kind
    assert fast[1].keys() == general[1].keys()
    for rel in fast[1]:
        assert fast[1][rel] == general[1][rel], rel
    assert fast[2][:-1] == general[2][:-1]  # the store's own view of its files and the counters
    # each put latency is counted in its bucket (Histogram.observe's bisect_left)
    for state in (fast[2], general[2]):
        hist = state[-1]
        assert hist.values and len(hist.values) == sum(hist.counts)
        want = [0] * len(hist.counts)
        for value in hist.values:
            want[bisect.bisect_left(hist.bounds, value)] += 1
        assert hist.counts == want


def test_the_core_keeps_the_store_host_and_asks_again_after_a_configuration_change(tmp_path, monkeypatch):
    """The C core asks ``SendProcessor.store_host`` until it knows the address (fixed once the
    broker listens) and again only when the configuration object is replaced: the answers'
    message ids carry the host it was given."""
    from mqcore import _compat
    # the C core under test comes with the compiled pipeline kernels, in either mode (under
    # MQCORE_PURE_PYTHON=1 the store runs the twin store kernels)
    monkeypatch.setattr(_compat, "pipeline_kernels", _pipeline)
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig
    from mqcore.message import pack_host

    other = pack_host("10.9.8.7", 10911)

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="host"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        try:
            assert broker.server._channel_class.__name__ == "CoreChannel"
            broker.topics.update(TopicConfig(PLAIN_TOPIC, 4, 4))
            broker.store_host = STORE
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            answers = []

            async def send(opaque):
                writer.write(encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, _v2(), b"h", opaque=opaque)))
                length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
                answers.append(await reader.readexactly(length))

            await send(1)
            broker.store_host = other  # not expected while the broker runs: the core keeps what it knew
            await send(2)
            broker.apply_runtime_config(dataclasses.replace(broker.cfg))  # a new configuration object
            await send(3)
            writer.close()
            return answers
        finally:
            await broker.shutdown()

    answers = asyncio.run(scenario())
    hosts = [b'"msgId":"' + h.hex().upper().encode() for h in (STORE, STORE, other)]
    assert [host in a for host, a in zip(hosts, answers)] == [True, True, True]
