"""The PULL pipeline (broker/processors/pull_pipeline.py, kernels mqcore/_pipeline_pull.pxi
and their twins in mqcore/_pipeline_py.py, the store's ``cq_runs``) answers exactly what the
general pull path answers.

* the same pulls through the pipeline and through the general path only - one per write,
  and all pipelined in one write - give the same answer bytes (found, not found, offset
  moved, tag filtered, transfer caps, runs crossing commitlog files, long-polling suspend,
  refusals) and commit the same offsets, with the Cython kernels and with the twins;
* the kernels and the twins read the same frames the same way and write the same answer
  header as the generic encoder; ``cq_runs`` picks and joins like ``cq_select``;
* a pull never hands out a byte past the commitlog's committed end.
"""
from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import _pipeline_py, _store_py
from mqcore.format import layout as L
from mqcore.remoting import RequestCode, ResponseCode, create_request, create_response
from mqcore.remoting.command import encode, encode_frame
from tests.support.store import msg, small_config

from mqcore import _pipeline, _store  # the compiled kernels: a missing build fails here, never skips

KERNELS = {"cython": _pipeline, "twin": _pipeline_py}
STORE_KERNELS = {"cython": _store, "twin": _store_py}
TOPIC = "PullT"
GROUP = "PullG"
#: messages stored in queue 0 (three 64 KiB commitlog files' worth), tags alternating
STORED = 700
#: the transfer cap by bytes the broker runs with (a pull of 200 never gets them all)
MAX_TRANSFER_BYTES = 24 * 1024


def _pull(**change):
    ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
           "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
           "subscription": "*", "expressionType": "TAG"}
    ext.update(change)
    return {k: v for k, v in ext.items() if v is not None}


#: (what it exercises, extFields (or an action), taken by the pipeline)
CASES = [
    ("found", _pull(), True),
    ("found, 5.x broker name", {**_pull(queueOffset="32"), "bname": "b0"}, True),
    ("found across a commitlog file end", _pull(queueOffset="200", maxMsgNums="50"), True),
    ("found across the next file end", _pull(queueOffset="450", maxMsgNums="50"), True),
    ("transfer cap by bytes", _pull(queueOffset="100", maxMsgNums="200"), True),
    ("transfer cap by count", _pull(queueOffset="10", maxMsgNums="5000"), True),
    ("tag filtered, from the request", _pull(queueOffset="3", subscription="TagA", sysFlag="4"), True),
    ("two tags", _pull(queueOffset="7", subscription="TagB || TagA", sysFlag="4"), True),
    ("no tag matches", _pull(subscription="Nope", sysFlag="4"), True),
    ("tag in the request, no heartbeat, no flag", _pull(queueOffset="40", subscription="TagB"), True),
    ("commit offset", _pull(queueOffset="64", sysFlag="1", commitOffset="17"), True),
    ("commit offset, another group and queue", _pull(consumerGroup="PullG2", queueId="1", sysFlag="1",
                                                     commitOffset="5"), True),
    ("offset overflow one", _pull(queueOffset=str(STORED)), True),
    ("offset overflow badly", _pull(queueOffset=str(STORED + 50)), True),
    ("offset too small", _pull(queueOffset="-3"), True),
    ("empty queue at 0", _pull(queueId="2"), True),
    ("empty queue, offset moved", _pull(queueId="2", queueOffset="9"), True),
    ("suspend with messages", _pull(queueOffset="33", sysFlag="3", commitOffset="20",
                                    suspendTimeoutMillis="15000"), True),
    ("suspend, nothing new: parked", _pull(queueOffset=str(STORED), sysFlag="2", suspendTimeoutMillis="30"), False),
    ("unknown topic", _pull(topic="NoSuchT"), False),
    ("invalid topic", _pull(topic="bad topic"), False),
    ("invalid group", _pull(consumerGroup="bad/group"), False),
    ("queue out of range", _pull(queueId="9"), False),
    ("unparsable subscription", _pull(subscription="||", sysFlag="4"), False),
    ("SQL92 without the property filter", _pull(expressionType="SQL92", subscription="a > 1", sysFlag="4"), False),
    ("a leading zero", _pull(queueOffset="05"), False),
    ("an unknown field", {**_pull(), "group": "x"}, False),
    ("a missing field", _pull(subVersion=None), False),
    ("a malformed number", _pull(maxMsgNums="3x"), False),
    ("int out of range", _pull(queueId="2147483648"), False),
    ("found after refusals (pipelined: the Python Channel's pipeline)", _pull(queueOffset="500"), True),
    ("disable consuming", "disable", False),
    ("group may not consume", _pull(), False),
    ("enable consuming", "enable", False),
    ("found again", _pull(queueOffset="650", maxMsgNums="64"), True),
]


class _Recorder:
    """The pipeline kernels, noting the opaque of every pull the pipeline answers: through
    ``PullPipeline.__call__`` (``opaques``: the answers it writes) or the C connection core
    (``core_opaques``: the frames ``PullCore.take`` took, read again from the buffer)."""

    def __init__(self, kernels):
        self.k = kernels
        self.opaques: list[int] = []
        self.core_opaques: list[int] = []
        if hasattr(kernels, "PullCore"):
            recorder = self

            class RecordingCore(kernels.PullCore):
                def take(self, channel, view, start, end):
                    stop, answers = super().take(channel, view, start, end)
                    taken, at = kernels.parse_pulls(view, start, stop, 1 << 30)
                    assert at == stop
                    recorder.core_opaques.extend(item[0] for item in taken)
                    return stop, answers

            self.PullCore = RecordingCore

    def __getattr__(self, name):
        return getattr(self.k, name)

    def pull_answer(self, code, opaque, *rest):
        self.opaques.append(opaque)
        return self.k.pull_answer(code, opaque, *rest)


def _fill(broker):
    from mqcore.broker.metadata import TopicConfig

    broker.topics.update(TopicConfig(TOPIC, 4, 4))
    for i in range(STORED):
        broker.store.put_message(msg(TOPIC, body=b"b%03d" % i * 40, qid=0, TAGS="TagA" if i % 3 else "TagB"))
    assert broker.store.commitlog.queue.files[-1].file_from_offset >= 2 * 64 * 1024  # three files at least


def _run(tmp_path, monkeypatch, *, pipeline: bool, pipelined: bool, kernels=None, store_kernels=None,
         core: bool = True, in_place: bool = True):
    """Run CASES against a broker: the answers, the committed offsets, the opaques the
    pipeline answered through its Python ``__call__`` and through the C connection core
    (``core=False``: the core leaves pulls to the Python Channel; ``in_place=False``: the core
    calls the offsets' ``commit`` and the stats' ``on_pulled`` as for classes of their own)."""
    from mqcore import _compat
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.processors import pull_pipeline

    recorder = _Recorder(kernels or _compat.default_pipeline_kernels())
    monkeypatch.setattr(_compat, "pipeline_kernels", recorder)
    if store_kernels is not None:
        monkeypatch.setattr(_compat, "kernels", store_kernels)
    if not pipeline:
        monkeypatch.setattr(pull_pipeline.PullPipeline, "__call__", lambda self, ch, view, start, end: start)
    if not pipeline or not core:
        monkeypatch.setattr(pull_pipeline.PullPipeline, "use_core", False)
    if not in_place:
        monkeypatch.setattr(pull_pipeline, "ConsumerOffsetTable", type("OtherOffsets", (), {}))
        monkeypatch.setattr(pull_pipeline, "BrokerStats", type("OtherStats", (), {}))

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="pulls"),
                        small_config(tmp_path, max_transfer_bytes_on_message_in_memory=MAX_TRANSFER_BYTES,
                                     max_transfer_count_on_message_in_memory=150),
                        clock=lambda: 1_700_000_000_000)
        await broker.start()
        _fill(broker)
        answers = []
        try:
            await _wait_dispatched(broker)
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            pending: list[bytes] = []

            async def flush():
                writer.write(b"".join(pending))
                for _ in pending:
                    length = int.from_bytes(await reader.readexactly(4), "big")
                    answers.append(await reader.readexactly(length))
                pending.clear()

            for opaque, (_, ext, _taken) in enumerate(CASES):
                if isinstance(ext, dict):
                    pending.append(encode_frame(create_request(RequestCode.PULL_MESSAGE, ext, opaque=opaque + 100)))
                    if not pipelined:
                        await flush()
                    continue
                await flush()
                broker.groups.update_from_json(json.dumps({"groupName": GROUP,
                                                           "consumeEnable": ext == "enable"}).encode())
            await flush()
            writer.close()
            offsets = broker.offsets.query(GROUP, TOPIC, 0)
            # the state a pull leaves: every committed offset, the pull counters, the long polls
            state = {"offsets": broker.offsets.snapshot(), "pull_requests": dict(broker.stats.pull_requests),
                     "pulled": {k: list(v) for k, v in broker.stats.pulled.items()},
                     "long_polls": broker.stats.long_polls, "waiting": broker.hold.waiting_count}
        finally:
            await broker.shutdown()
        return answers, offsets, state

    answers, offsets, state = asyncio.run(scenario())
    return answers, offsets, recorder.opaques, recorder.core_opaques, state


async def _wait_dispatched(broker, timeout_s=10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while broker.store.get_max_offset_in_queue(TOPIC, 0) < STORED:
        assert loop.time() < deadline, "the dispatcher did not catch up"
        await asyncio.sleep(0.01)


def _by_opaque(answers):
    out = {}
    for a in answers:
        header_len = int.from_bytes(a[:4], "big") & 0xFFFFFF
        out[json.loads(a[4:4 + header_len])["opaque"]] = a
    return out


@pytest.mark.parametrize("path", ["core", "core-calls", "cython", "twin"])
@pytest.mark.parametrize("pipelined", [False, True], ids=["one-per-write", "pipelined"])
def test_pipeline_gives_the_general_answers(tmp_path, monkeypatch, path, pipelined):
    """The C connection core (``core``; ``core-calls``: calling the commit and count methods
    instead of doing them in place), the compiled kernels under the Python Channel
    (``cython``) and the twins (``twin``) answer as the general path, byte for byte, and
    leave the same offsets, counters and long polls."""
    kernel = "twin" if path == "twin" else "cython"
    with monkeypatch.context() as m:
        fast = _run(tmp_path / "fast", m, pipeline=True, pipelined=pipelined, kernels=KERNELS[kernel],
                    store_kernels=STORE_KERNELS[kernel], core=path.startswith("core"),
                    in_place=path != "core-calls")
    with monkeypatch.context() as m:
        general = _run(tmp_path / "general", m, pipeline=False, pipelined=pipelined)
    requests = [c for c in CASES if isinstance(c[1], dict)]
    assert len(fast[0]) == len(general[0]) == len(requests)
    fast_by, general_by = _by_opaque(fast[0]), _by_opaque(general[0])
    assert fast_by.keys() == general_by.keys()
    for opaque, answer in fast_by.items():
        assert answer == general_by[opaque], CASES[opaque - 100][0]
    assert fast[1] == general[1] == 20  # the last commit (the suspended pull's)
    assert fast[4] == general[4]  # offsets, counters and long polls: the same state after the pulls
    assert fast[4]["offsets"][f"{TOPIC}@PullG2"] == {1: 5} and fast[4]["pulled"][(GROUP, TOPIC)][0] > 0
    assert sorted(fast[2] + fast[3]) == [i + 100 for i, (_, ext, taken) in enumerate(CASES) if taken]
    assert general[2] == general[3] == []
    if path.startswith("core"):  # one pull per buffer: the core takes all it takes; pipelined: the head of each
        assert fast[3] and (fast[2] if pipelined else fast[2] == [])  # buffer, the Python Channel the rest
    else:
        assert fast[3] == []
    # what the cases are about really happened
    found = [_header(fast_by[i + 100]) for i, c in enumerate(CASES) if c[0].startswith("found")]
    assert all(h["code"] == 0 and h["remark"] == "FOUND" for h in found)
    for label in ("found across a commitlog file end", "found across the next file end"):
        answer = fast_by[CASES.index(next(c for c in CASES if c[0] == label)) + 100]
        body = answer[4 + (int.from_bytes(answer[:4], "big") & 0xFFFFFF):]
        phys = [r.phy_offset for r in _store.decode_records(body, 0, len(body), 1000, False)]
        assert phys[0] // (64 * 1024) != phys[-1] // (64 * 1024), label  # the records span two files
        assert [r.queue_offset for r in _store.decode_records(body, 0, len(body), 1000, False)] == \
            list(range(int(_header(answer)["extFields"]["nextBeginOffset"]) - len(phys),
                       int(_header(answer)["extFields"]["nextBeginOffset"])))
    capped = _header(fast_by[CASES.index(next(c for c in CASES if c[0] == "transfer cap by bytes")) + 100])
    assert 100 < int(capped["extFields"]["nextBeginOffset"]) < 300
    by_count = _header(fast_by[CASES.index(next(c for c in CASES if c[0] == "transfer cap by count")) + 100])
    assert int(by_count["extFields"]["nextBeginOffset"]) <= 10 + 150


def _header(answer):
    header_len = int.from_bytes(answer[:4], "big") & 0xFFFFFF
    return json.loads(answer[4:4 + header_len])


# --- kernel and twin, frame by frame -------------------------------------------------------------
def _frames():
    frames = [encode_frame(create_request(RequestCode.PULL_MESSAGE, ext, opaque=i))
              for i, (_, ext, _) in enumerate(CASES) if isinstance(ext, dict)]
    plain = encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(), opaque=7))
    frames += [
        plain.replace(b'"topic":"PullT"', b'"topic":"Pull\\u0054"'),  # an escape
        plain.replace(b'"consumerGroup":"PullG"', b'"consumerGroup":"P\xc3\xbcllG"'),  # non-ASCII
        plain.replace(b'"flag":0', b'"flag":2'),  # oneway
        plain.replace(b'"flag":0', b'"flag":1'),  # a response
        plain.replace(b'"code":11', b'"code":12'),  # another request
        plain.replace(b'"sysFlag":"0"', b'"sysFlag":"0","sysFlag":"2"'),  # a duplicate field
        plain.replace(b'"opaque":7', b'"opaque":7,"opaque":8'),  # a duplicate top-level key
        plain.replace(b'"queueOffset":"0"', b'"queueOffset":"-9223372036854775808"'),
        plain.replace(b'"queueOffset":"0"', b'"queueOffset":"9223372036854775808"'),
        plain.replace(b'"queueOffset":"0"', b'"queueOffset":"+1"'),
        plain.replace(b'"queueOffset":"0"', b'"queueOffset":"-0"'),
        plain.replace(b'"maxMsgNums":"32"', b'"maxMsgNums":32'),  # a number, not a string
        plain.replace(b',"extFields"', b' , "extFields" '),  # whitespace
        plain.replace(b'"remark"', b'"x"') if b'"remark"' in plain else plain[:-1] + b"\x00",
    ]
    return frames


def _fixed(frame: bytes) -> bytes:
    """``frame`` with its length fields fitted to its header (the replacements above change it)."""
    header = frame[8:]
    return (len(header) + 4).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header


def test_kernel_and_twin_read_the_same_frames_the_same_way():
    taken = 0
    for frame in map(_fixed, _frames()):
        got = _pipeline.parse_pulls(frame, 0, len(frame), 1 << 20)
        assert got == _pipeline_py.parse_pulls(frame, 0, len(frame), 1 << 20), frame
        taken += len(got[0])
    assert taken >= 20
    # binary (ROCKETMQ) headers are the general path's
    frame = encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(), opaque=1))
    binary = frame[:4] + bytes([1]) + frame[5:]
    for k in KERNELS.values():
        assert k.parse_pulls(binary, 0, len(binary), 1 << 20) == ([], 0)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_kernel_and_twin_agree_on_damaged_frames(data):
    """Bytes from the network: a plain pull frame with bytes changed, cut or added is read
    the same by the kernel and the twin (taken the same, or left to the general path),
    never a crash."""
    frame = bytearray(_fixed(encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(subscription="A || B"),
                                                         opaque=3))))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(frame) - 1))
        frame[at] = data.draw(st.sampled_from([0, 34, 44, 45, 48, 49, 58, 92, 123, 125, 200, 32]))
    if data.draw(st.booleans()):
        frame = frame[:data.draw(st.integers(0, len(frame)))]
    buf = bytes(frame)
    assert _pipeline.parse_pulls(buf, 0, len(buf), 1 << 20) == _pipeline_py.parse_pulls(buf, 0, len(buf), 1 << 20)


@pytest.mark.parametrize("kernel", ["cython", "twin"])
def test_reading_stops_at_the_first_frame_it_does_not_take_and_at_incomplete_frames(kernel):
    k = KERNELS[kernel]
    a = encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(), opaque=1))
    b = encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(queueOffset="5"), opaque=2))
    odd = encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(queueOffset="05"), opaque=3))
    buf = bytearray(b"xx" + a + b + odd + a)
    items, stop = k.parse_pulls(memoryview(buf), 2, len(buf), 1 << 20)
    assert [i[0] for i in items] == [1, 2] and stop == 2 + len(a) + len(b)
    assert items[1][4] == 5 and items[1][-1] == stop
    items, stop = k.parse_pulls(buf, 2, 2 + len(a) + len(b) - 1, 1 << 20)
    assert [i[0] for i in items] == [1] and stop == 2 + len(a)
    assert k.parse_pulls(buf, 2, len(buf), 16) == ([], 2)  # too large: the generic reader raises
    with pytest.raises(ValueError):
        k.parse_pulls(buf, 0, len(buf) + 1, 1 << 20)


@pytest.mark.parametrize("kernel", ["cython", "twin"])
@settings(max_examples=60, deadline=None)
@given(code=st.sampled_from([0, 1, 19, 20, 25]), opaque=st.integers(-2**31, 2**31 - 1),
       offsets=st.tuples(*[st.integers(-2**63, 2**63 - 1)] * 3), body=st.integers(0, 1 << 20),
       remark=st.sampled_from(["FOUND", "NO_MATCHED_MESSAGE", "OFFSET_OVERFLOW_ONE", "NO_MESSAGE_IN_QUEUE"]))
def test_pull_answer_is_the_general_encoders(kernel, code, opaque, offsets, body, remark):
    request = create_request(RequestCode.PULL_MESSAGE, {}, opaque=opaque)
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(offsets[0]), "minOffset": str(offsets[1]),
           "maxOffset": str(offsets[2])}
    prefix, _ = encode(create_response(request, code, remark, ext_fields=ext, body=b"\0" * body))
    assert KERNELS[kernel].pull_answer(code, opaque, remark.encode(), *offsets, body, 409) == prefix


# --- the lookup kernel ---------------------------------------------------------------------------
@settings(max_examples=150, deadline=None)
@given(units=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 300), st.integers(-3, 3)), min_size=0,
                      max_size=60),
       codes=st.one_of(st.none(), st.frozensets(st.integers(-3, 3), max_size=4),
                       st.frozensets(st.integers(-40, 40), min_size=17, max_size=30)),
       max_count=st.integers(1, 40), max_bytes=st.integers(1, 6000), min_phy=st.integers(0, 2000),
       file_size=st.integers(200, 5000))
def test_cq_runs_picks_as_cq_select_and_joins_adjacent_records(units, codes, max_count, max_bytes, min_phy,
                                                                file_size):
    # units: (gap before the record, its size, its tags code)
    buf = bytearray()
    phys, sizes = [], []
    at = 0
    for gap, size, tags in units:
        at += gap
        buf += L.CQ_UNIT.pack(at, size, tags)
        phys.append(at)
        sizes.append(size)
        at += size
    count = len(units)
    want = _store_py.cq_runs(bytes(buf), 0, count, codes, max_count, max_bytes, min_phy, file_size)
    assert _store.cq_runs(bytes(buf), 0, count, codes, max_count, max_bytes, min_phy, file_size) == want
    scanned, runs, removed = want
    sel_scanned, picked = _store_py.cq_select(bytes(buf), 0, count, codes, max_count, max_bytes)
    assert scanned == sel_scanned
    live = [i for i in picked.tolist() if phys[i] >= min_phy]
    assert removed == (len(live) < len(picked))
    # the runs cover exactly the live picked records, in order, each within one file
    covered = []
    for start, length, n in runs:
        at = start
        for _ in range(n):
            # every record of a run starts in the run's file (a stored record never crosses a
            # file end, so a run is one view of one mapped file)
            assert at // file_size == start // file_size
            i = phys.index(at, covered[-1] + 1 if covered else 0)
            covered.append(i)
            at += sizes[i]
        assert at == start + length
    assert covered == live


# --- the committed end ---------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", ["cython", "twin"])
def test_a_pull_never_exposes_a_record_past_the_committed_end(tmp_path, monkeypatch, kernel):
    """Units whose records lie past the commitlog's committed end (``wrote_position``) are
    not answered, through the pipeline and through the general path: a pull hands out the
    records before it and not one byte more."""
    from mqcore import _compat
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig
    from mqcore.broker.processors import pull_pipeline

    monkeypatch.setattr(_compat, "pipeline_kernels", KERNELS[kernel])
    monkeypatch.setattr(_compat, "kernels", STORE_KERNELS[kernel])

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="ends"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        try:
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            results = [broker.store.put_message(msg(TOPIC, body=b"m%02d" % i * 10, qid=1)) for i in range(40)]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while broker.store.get_max_offset_in_queue(TOPIC, 1) < 40:
                assert loop.time() < deadline
                await asyncio.sleep(0.01)
            # the committed end moves back into record 30: records 30.. are not there yet
            mf = broker.store.commitlog.queue.files[-1]
            end = results[30].phy_offset + 10
            mf.wrote_position = end - mf.file_from_offset
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            got = {}
            frames = broker.server._frames
            for label in ("core", "pipeline", "general"):
                if label == "pipeline":  # the C connection core leaves pulls to the Python Channel
                    monkeypatch.setattr(frames, "pull_core", None)
                if label == "general":
                    monkeypatch.setattr(pull_pipeline.PullPipeline, "__call__", lambda self, ch, v, s, e: s)
                writer.write(encode_frame(create_request(RequestCode.PULL_MESSAGE,
                                                         _pull(queueId="1", queueOffset="20"), opaque=1)))
                length = int.from_bytes(await reader.readexactly(4), "big")
                got[label] = await reader.readexactly(length)
            writer.close()
            return got, results, end
        finally:
            await broker.shutdown()

    got, results, end = asyncio.run(scenario())
    assert got["core"] == got["pipeline"] == got["general"]
    answer = got["pipeline"]
    header_len = int.from_bytes(answer[:4], "big") & 0xFFFFFF
    assert _header(answer)["code"] == ResponseCode.SUCCESS
    body = answer[4 + header_len:]
    # records 20..29, whole, and nothing of record 30
    assert len(body) == results[30].phy_offset - results[20].phy_offset
    assert b"m29" * 10 in body and b"m30" not in body
    assert results[30].phy_offset < end



# --- one write per receive buffer, sends and pulls mixed -----------------------------------------
PAIRS = 4

def test_sends_and_pulls_of_one_receive_buffer_are_answered_in_order_in_one_write(tmp_path):
    """A buffer of plain sends and pulls in turn: each pipeline takes its kind, the answers
    come back in request order, and they leave in one transport write (the pulls' bodies as
    the store's views, handed to ``writelines``)."""
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="mixed"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        writes: list[int] = []

        def counting(channel):
            transport = channel._transport
            write, writelines = transport.write, transport.writelines
            transport.write = lambda data: (writes.append(1), write(data))[1]
            transport.writelines = lambda bufs: (writes.append(len(bufs)), writelines(bufs))[1]
        broker.server.add_connect_listener(counting)
        await broker.start()
        try:
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            for i in range(64):
                broker.store.put_message(msg(TOPIC, body=b"q%02d" % i, qid=1))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while broker.store.get_max_offset_in_queue(TOPIC, 1) < 64:
                assert loop.time() < deadline
                await asyncio.sleep(0.01)
            send_ext = {"a": "PG", "b": TOPIC, "c": "TBW102", "d": "4", "e": "2", "f": "0", "g": "1700000000123",
                        "h": "0", "i": "", "j": "0", "k": "false", "m": "false"}
            frames = []
            for i in range(PAIRS):
                frames.append(encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, send_ext, b"s%d" % i,
                                                          opaque=2 * i + 1)))
                frames.append(encode_frame(create_request(
                    RequestCode.PULL_MESSAGE, _pull(queueId="1", queueOffset=str(8 * i), maxMsgNums="8"),
                    opaque=2 * i + 2)))
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            writes.clear()
            writer.write(b"".join(frames))
            answers = []
            for _ in frames:
                length = int.from_bytes(await reader.readexactly(4), "big")
                answers.append(await reader.readexactly(length))
            writer.close()
            return answers, list(writes)
        finally:
            await broker.shutdown()

    answers, writes = asyncio.run(scenario())
    headers = [_header(a) for a in answers]
    assert [h["opaque"] for h in headers] == list(range(1, 2 * PAIRS + 1))
    assert all(h["code"] == 0 for h in headers)
    # a read stays within one consume-queue file (50 units in small_config)
    assert [h["extFields"]["nextBeginOffset"] for h in headers[1::2]] == \
        [str(min(8 * i + 8, (8 * i // 50 + 1) * 50)) for i in range(PAIRS)]
    assert [h["extFields"]["queueOffset"] for h in headers[0::2]] == [str(i) for i in range(PAIRS)]
    # the frames (under 3 KiB) arrive in one read, or two on a busy machine: one write each
    assert 1 <= len(writes) <= 2, writes
    assert max(writes) > 2 * PAIRS  # the pulls' bodies went as separate buffers, not joined


# --- a peer that does not read its answers -------------------------------------------------------
def test_a_peer_that_does_not_read_stops_the_pipeline_until_it_does(tmp_path, monkeypatch):
    """Many pulls pipelined by a peer that reads no answer: the broker stops reading (and
    answering) once the unsent answers pass the connection's high-water mark, instead of
    holding the answers of every pull sent; once the peer reads, every pull is answered."""
    from mqcore import _compat
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig

    recorder = _Recorder(_pipeline)  # the compiled kernels, whose C core is under test, in either mode
    monkeypatch.setattr(_compat, "pipeline_kernels", recorder)
    pulls = 1500

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="slow"),
                        small_config(tmp_path, max_transfer_count_on_message_in_memory=150),
                        clock=lambda: 1_700_000_000_000)
        await broker.start()
        try:
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            for i in range(50):
                broker.store.put_message(msg(TOPIC, body=b"w" * 300, qid=1))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 10
            while broker.store.get_max_offset_in_queue(TOPIC, 1) < 50:
                assert loop.time() < deadline
                await asyncio.sleep(0.01)
            frame = encode_frame(create_request(RequestCode.PULL_MESSAGE,
                                                _pull(queueId="1", maxMsgNums="50"), opaque=1))
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            writer.transport.set_write_buffer_limits(high=1 << 30)
            writer.write(frame * pulls)  # ~20 KB of answer each: ~30 MB if all were answered
            deadline = loop.time() + 20
            while not any(ch.reading_paused for ch in broker.server.channels):
                assert loop.time() < deadline, "the broker never stopped reading"
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)
            answered_while_paused = len(recorder.opaques) + len(recorder.core_opaques)
            got = 0
            while got < pulls:
                length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 20), "big")
                answer = await reader.readexactly(length)
                assert answer[4:].startswith(b'{"code":0,')
                got += 1
            writer.close()
            return answered_while_paused
        finally:
            await broker.shutdown()

    answered_while_paused = asyncio.run(scenario())
    # the high-water mark (4 MiB) and the socket buffers hold a few hundred answers, not all
    assert 0 < answered_while_paused < pulls * 2 // 3, answered_while_paused
    assert len(recorder.opaques) + len(recorder.core_opaques) == pulls
    assert recorder.core_opaques  # the C connection core took (and paused) some


def test_the_pipeline_stops_within_a_receive_buffer_once_reading_pauses(tmp_path):
    """The pause is honoured between two pulls of one receive buffer, not only between
    buffers: the frames after it wait in the buffer."""
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig
    from mqcore.broker.processors.pull_pipeline import PullPipeline

    class Behind:
        """A channel whose peer falls behind at the second answer."""
        is_active = True

        def __init__(self):
            self.answers = 0

        @property
        def reading_paused(self):
            return self.answers >= 2

        def write_buffers_nowait(self, buffers, nbytes):
            self.answers += 1

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="behind"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        try:
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            broker.store.put_message(msg(TOPIC, body=b"one", qid=1))
            frames = [encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(queueId="1"), opaque=i))
                      for i in range(5)]
            buf = b"".join(frames)
            channel = Behind()
            stop = PullPipeline(broker._pull)(channel, memoryview(buf), 0, len(buf))
            return stop, len(frames[0]), channel.answers
        finally:
            await broker.shutdown()

    stop, frame_len, answers = asyncio.run(scenario())
    assert answers == 2 and stop == 2 * frame_len


# --- the lookup kernel on a store's own files ----------------------------------------------------
def _lookup_store(tmp_path, kernels):
    from mqcore.store.message_store import MessageStore

    store = MessageStore(small_config(tmp_path, max_transfer_bytes_on_message_in_memory=MAX_TRANSFER_BYTES),
                         kernels=kernels, clock=lambda: 1_700_000_000_000)
    store.load()
    store.start()
    results = [store.put_message(msg(TOPIC, body=b"r%03d" % i * 40, qid=0, TAGS="TagA" if i % 3 else "TagB"))
               for i in range(STORED)]
    assert len(store.commitlog.queue.files) >= 3 and len(store.queues.get(TOPIC, 0).queue.files) >= 10
    return store, results


def _lookups(store, offsets, kernels_list, readers=()):
    """Every kernel's ``pull_lookup``, the ``readers`` (``PullReader``s kept from pull to pull)
    and the reader's ``get_message`` for a spread of pulls."""
    from mqcore.broker.clients import subscription_codes
    from mqcore.store.reader import MAX_FILTER_UNITS

    cq, commitlog = store.queues.get(TOPIC, 0), store.commitlog
    out = []
    for offset in offsets:
        for max_nums, cap_count, cap_bytes in ((32, 1024, 1 << 22), (200, 150, MAX_TRANSFER_BYTES), (0, 8, 1),
                                               (5000, 1024, 1 << 22)):
            for codes in (None, subscription_codes("TagA"), subscription_codes("TagB || TagC"),
                          subscription_codes("Nope")):
                got = [k.pull_lookup(cq, commitlog, offset, max_nums, cap_count, cap_bytes, codes, MAX_FILTER_UNITS)
                       for k in kernels_list]
                got += [reader.lookup(cq, offset, max_nums, cap_count, cap_bytes, codes, MAX_FILTER_UNITS)
                        for reader in readers]
                as_bytes = [None if g is None else (*g[:4], [bytes(v) for v in g[4]], g[5], g[6]) for g in got]
                assert all(b == as_bytes[0] for b in as_bytes), (offset, max_nums, codes)
                r = store.get_message(TOPIC, 0, offset, max_nums, cap_bytes, tag_codes=codes) \
                    if cap_count == store.config.max_transfer_count_on_message_in_memory else None
                out.append((offset, max_nums, cap_count, cap_bytes, codes, as_bytes[0], r))
    return out


@pytest.mark.parametrize("kernel", ["cython", "twin"])
def test_pull_lookup_kernel_and_twin_read_a_store_the_same_way(tmp_path, kernel):
    """``pull_lookup`` (C, reading the mapped files' fields) and its twin (through the store's
    methods) answer the same for every kind of pull - file crossings in the consume queue and
    the commitlog, caps by count and bytes, tag filters, offsets below, at and past the end -
    and as the reader's ``get_message``; a record past the committed end is never in a view."""
    store, results = _lookup_store(tmp_path, STORE_KERNELS[kernel])
    try:
        offsets = [-5, 0, 1, 31, 49, 50, 99, 190, 200, 248, 449, 450, STORED - 1, STORED, STORED + 9]
        seen = set()
        readers = [_store.PullReader(store.commitlog), _store_py.PullReader(store.commitlog)]
        for offset, max_nums, cap_count, cap_bytes, codes, got, r in _lookups(store, offsets,
                                                                              [_store, _store_py], readers):
            assert got is not None
            name, next_begin, lo, hi, views, n, total = got
            seen.add(name)
            assert sum(map(len, views)) == total and (n > 0) == (name == "FOUND")
            if r is not None:  # the reader's answer is the kernel's
                assert (r.status.name, r.next_begin_offset, r.min_offset, r.max_offset, r.message_count,
                        r.buffer_total_size) == (name, next_begin, lo, hi, n, total)
                assert [bytes(v) for v in r.buffers] == views
            if n:
                records = [rec for v in views for rec in _store.decode_records(v, 0, len(v), 5000, True)]
                assert len(records) == n and all(rec.queue_offset >= offset for rec in records)
                assert len(records) <= max(1, min(max_nums, cap_count))
        assert seen >= {"FOUND", "NO_MATCHED_MESSAGE", "OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_ONE",
                        "OFFSET_OVERFLOW_BADLY"}
        # a run across a commitlog file end is two views
        first_in_next = next(i for i in range(1, STORED) if results[i].phy_offset // (64 * 1024) !=
                             results[i - 1].phy_offset // (64 * 1024))
        at = max(first_in_next - 3, first_in_next // 50 * 50)  # in the same consume-queue file
        crossing = _store.pull_lookup(store.queues.get(TOPIC, 0), store.commitlog, at, 5, 1024, 1 << 22, None, 800)
        assert first_in_next % 50 and crossing[5] == 5 and len(crossing[4]) == 2

        # the committed end moved back into record c + 5: the run holding it is not one view, so
        # the kernels hand the pull to the reader, which gives records c..c+4 and no byte more
        c = STORED - 15
        mf = store.commitlog.queue.files[-1]
        assert results[c].phy_offset >= mf.file_from_offset
        wrote = mf.wrote_position
        mf.wrote_position = results[c + 5].phy_offset + 7 - mf.file_from_offset
        cut = results[c + 5].phy_offset - results[c].phy_offset
        try:
            for k in (_store, _store_py):
                assert k.pull_lookup(store.queues.get(TOPIC, 0), store.commitlog, c, 32, 1024, 1 << 22, None,
                                     800) is None
                # a pull ending before it is still the kernels' own
                short = k.pull_lookup(store.queues.get(TOPIC, 0), store.commitlog, c, 5, 1024, 1 << 22, None, 800)
                assert short[5] == 5 and short[6] == cut
            for reader in readers:  # the readers, warm, read the committed end again
                assert reader.lookup(store.queues.get(TOPIC, 0), c, 32, 1024, 1 << 22, None, 800) is None
                short = reader.lookup(store.queues.get(TOPIC, 0), c, 5, 1024, 1 << 22, None, 800)
                assert short[5] == 5 and short[6] == cut
            r = store.get_message(TOPIC, 0, c, 32)
            assert r.message_count == 5 and r.buffer_total_size == cut and sum(map(len, r.buffers)) == cut
        finally:
            mf.wrote_position = wrote
    finally:
        store.shutdown()


@pytest.mark.parametrize("kernel", ["cython", "twin"])
def test_pull_lookup_checks_what_it_reads_from_a_damaged_consume_queue(tmp_path, kernel):
    """Units with an offset or size no record has (past the commitlog's end, negative, a
    filler's, inside another file) never become a view: kernel and twin agree, and the
    reader answers without an exception."""
    store, results = _lookup_store(tmp_path, STORE_KERNELS[kernel])
    try:
        cq = store.queues.get(TOPIC, 0)
        mf = cq.queue.find_by_offset(100 * L.CQ_UNIT_SIZE)
        at = 100 * L.CQ_UNIT_SIZE - mf.file_from_offset
        end = store.commitlog.max_offset
        damage = [(end + 10, 100, 0), (results[101].phy_offset, -40, 0), (0, L.CQ_FILLER_SIZE, 0),
                  (results[102].phy_offset, 1 << 30, 0), (-8, 64, 0), (results[104].phy_offset, 1, 0)]
        for i, unit in enumerate(damage):
            L.CQ_UNIT.pack_into(mf.buf, at + i * L.CQ_UNIT_SIZE, *unit)
        reader = _store.PullReader(store.commitlog)
        for offset in range(98, 108):
            for max_nums in (1, 3, 32):
                got = [k.pull_lookup(cq, store.commitlog, offset, max_nums, 1024, 1 << 22, None, 800)
                       for k in (_store, _store_py)]
                got.append(reader.lookup(cq, offset, max_nums, 1024, 1 << 22, None, 800))
                assert [None if g is None else (*g[:4], [bytes(v) for v in g[4]], *g[5:]) for g in got] == \
                    [None if got[1] is None else (*got[1][:4], [bytes(v) for v in got[1][4]], *got[1][5:])] * 3
                r = store.get_message(TOPIC, 0, offset, max_nums)
                for v in r.buffers:  # whatever it hands out lies below the committed end
                    assert v.obj is not None and len(v) <= r.buffer_total_size
    finally:
        store.shutdown()


def _same(got):
    as_bytes = [None if g is None else (*g[:4], [bytes(v) for v in g[4]], *g[5:]) for g in got]
    assert all(b == as_bytes[-1] for b in as_bytes), as_bytes
    return as_bytes[-1]


@pytest.mark.parametrize("kernel", ["cython", "twin"])
def test_pull_reader_follows_the_files_as_they_change(tmp_path, kernel):
    """A ``PullReader`` kept from pull to pull (it holds each file's fixed parts and the file
    lists as last seen) answers as ``pull_lookup`` and its twin while the files change: new
    files rolled in, the first ones deleted by cleanup, a file closed while still listed."""
    store, results = _lookup_store(tmp_path, STORE_KERNELS[kernel])
    try:
        reader = _store.PullReader(store.commitlog)

        def check(offsets, max_nums=32):
            cq = store.queues.get(TOPIC, 0)
            return [_same([k.pull_lookup(cq, store.commitlog, o, max_nums, 1024, 1 << 22, None, 800)
                           for k in (_store, _store_py)] + [reader.lookup(cq, o, max_nums, 1024, 1 << 22, None, 800)])
                    for o in offsets]

        check([0, 40, 200, 450, STORED - 40, STORED - 1, STORED])  # the reader warm on every file
        for i in range(400):  # both the consume queue and the commitlog roll to new files
            store.put_message(msg(TOPIC, body=b"n%03d" % i * 40, qid=0, TAGS="TagA"))
        cq = store.queues.get(TOPIC, 0)
        assert len(store.commitlog.queue.files) >= 5
        got = check([STORED - 1, STORED, STORED + 5, STORED + 150, STORED + 399, STORED + 400])
        assert got[1][0] == "FOUND" and got[1][5] == 32 and got[-2][5] == 1 and got[-1][0] == "OFFSET_OVERFLOW_ONE"
        # cleanup deletes the first files (each list replaced, the files closed)
        store.commitlog.queue.delete_first(2)
        cq.queue.delete_first(3)
        cq.min_logic_offset = cq.queue.files[0].file_from_offset
        got = check([0, 60, 160, 400, STORED + 10])
        assert got[0][0] == "OFFSET_TOO_SMALL" and got[-1][0] == "FOUND"
        assert {g[0] for g in check([200, 300])} <= {"FOUND", "MESSAGE_WAS_REMOVING", "OFFSET_TOO_SMALL"}
        # a file closed while still in the list (the reader holds its fixed parts): never read
        last = cq.queue.files[-1]
        at = last.file_from_offset // L.CQ_UNIT_SIZE
        check([at, at + 1])
        assert last.close()
        got = check([at, at + 1])
        assert all(g[0] == "OFFSET_FOUND_NULL" and g[4] == [] for g in got)
    finally:
        store.shutdown()


# --- the connection core against bad input and long polling --------------------------------------
def test_a_malformed_pull_frame_closes_only_its_own_connection(tmp_path, monkeypatch):
    """A frame that opens like a pull but is broken (its header longer than the frame) goes
    from the C core to the Channel's reader, which closes that connection; another
    connection's pulls are answered by the core before and after."""
    from mqcore import _compat
    # the C core under test comes with the compiled pipeline kernels, in either mode (under
    # MQCORE_PURE_PYTHON=1 the store runs the twin store kernels)
    monkeypatch.setattr(_compat, "pipeline_kernels", _pipeline)
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="bad"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        try:
            assert broker.server._frames.pull_core is not None
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            for i in range(10):
                broker.store.put_message(msg(TOPIC, body=b"z%d" % i, qid=1))
            good = encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(queueId="1"), opaque=5))
            host, port = broker.addr.rsplit(":", 1)
            r1, w1 = await asyncio.open_connection(host, port)
            r2, w2 = await asyncio.open_connection(host, port)

            async def pull_ok(reader, writer):
                writer.write(good)
                length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
                return _header(await reader.readexactly(length))

            assert (await pull_ok(r1, w1))["code"] == 0
            header = good[8:]
            bad = (len(header) + 4).to_bytes(4, "big") + (len(header) + 50).to_bytes(4, "big") + header
            assert bad[8:19] == b'{"code":11,'
            w2.write(good + bad)
            length = int.from_bytes(await asyncio.wait_for(r2.readexactly(4), 10), "big")
            assert _header(await r2.readexactly(length))["code"] == 0  # the good pull before it
            assert await asyncio.wait_for(r2.read(), 10) == b""  # then closed
            assert (await pull_ok(r1, w1))["code"] == 0
            w1.close()
            return len(broker.server.channels)
        finally:
            await broker.shutdown()

    assert asyncio.run(scenario()) >= 1


def test_a_long_poll_pull_through_the_core_channel_is_parked_and_woken(tmp_path):
    """A pull with SUSPEND that finds nothing is left by the C core to the general path,
    which parks it; a message arriving wakes it and it is answered FOUND, while the core
    keeps answering the connection's other pulls."""
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="poll"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        try:
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            broker.store.put_message(msg(TOPIC, body=b"first", qid=1))
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            parked = encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(
                queueId="2", queueOffset="0", sysFlag="2", suspendTimeoutMillis="15000"), opaque=1))
            plain = encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(queueId="1"), opaque=2))
            writer.write(parked)
            writer.write(plain)
            length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
            first = _header(await reader.readexactly(length))
            assert first["opaque"] == 2 and first["code"] == 0
            broker.store.put_message(msg(TOPIC, body=b"wakes", qid=2))
            length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
            answer = await reader.readexactly(length)
            writer.close()
            return answer
        finally:
            await broker.shutdown()

    answer = asyncio.run(scenario())
    header = _header(answer)
    assert header["opaque"] == 1 and header["code"] == 0 and header["remark"] == "FOUND"
    assert b"wakes" in answer


def test_the_core_asks_again_after_a_topic_or_group_change(tmp_path):
    """The core remembers the check and route verdicts of a pull only while no topic changes,
    and asks whether the group may consume on every pull: after a topic turns write-only,
    loses queues, or the group is disabled, the general path answers the refusal."""
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig
    from mqcore.permissions import PERM_READ, PERM_WRITE

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="changes"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        try:
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            for qid in (0, 3):
                broker.store.put_message(msg(TOPIC, body=b"c", qid=qid))
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))

            async def pull(qid):
                writer.write(encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(queueId=str(qid)), opaque=9)))
                length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
                return _header(await reader.readexactly(length))["code"]

            codes = [await pull(3)]
            broker.topics.update(TopicConfig(TOPIC, 4, 4, PERM_WRITE))
            codes.append(await pull(3))
            broker.topics.update(TopicConfig(TOPIC, 2, 4, PERM_READ | PERM_WRITE))
            codes += [await pull(0), await pull(3)]
            broker.groups.update_from_json(json.dumps({"groupName": GROUP, "consumeEnable": False}).encode())
            codes.append(await pull(0))
            writer.close()
            return codes
        finally:
            await broker.shutdown()

    assert asyncio.run(scenario()) == [ResponseCode.SUCCESS, ResponseCode.NO_PERMISSION, ResponseCode.SUCCESS,
                                       ResponseCode.INVALID_PARAMETER, ResponseCode.NO_PERMISSION]


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_changed_heartbeat_subscription_filters_the_next_pull(tmp_path, monkeypatch, kernel):
    """A pull without its own subscription is filtered by the group's heartbeat subscription:
    the core remembers the verdict of the subscription it last saw, so a heartbeat that
    replaces it (a new object) filters the connection's next pull at once."""
    from mqcore import _compat
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig

    monkeypatch.setattr(_compat, "pipeline_kernels", KERNELS[kernel])

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="heartbeat"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        try:
            assert (broker.server._channel_class.__name__ == "CoreChannel") == (kernel == "cython")
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            for i in range(6):
                broker.store.put_message(msg(TOPIC, body=b"body-%s%d" % (b"AB"[i % 2:i % 2 + 1], i), qid=1,
                                             TAGS="TagA" if i % 2 == 0 else "TagB"))
            reader, writer = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            member = object()  # the heartbeat's channel: only its identity matters here
            bodies = []
            for expression in ("TagA", "TagA", "TagB", "*", "TagB"):
                broker.clients.heartbeat(member, "client-1", 0, 0, {"consumerDataSet": [
                    {"groupName": GROUP, "subscriptionDataSet": [{"topic": TOPIC, "subString": expression}]}]})
                writer.write(encode_frame(create_request(RequestCode.PULL_MESSAGE, _pull(queueId="1"), opaque=3)))
                length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
                answer = await reader.readexactly(length)
                bodies.append("".join(sorted(c for c in "AB" if b"body-" + c.encode() in answer)))
            writer.close()
            return bodies
        finally:
            await broker.shutdown()

    # the same expression twice keeps its subscription object (a hit); each change is a miss
    assert asyncio.run(scenario()) == ["A", "A", "B", "AB", "B"]
