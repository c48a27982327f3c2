"""The client wire kernels (mqcore/_wire_client.pyx and its twin mqcore/_wire_client_py.py)
against the generic remoting codec: ``encode_request_frame`` writes exactly the bytes of
``encode_frame(create_request(...))`` or declines (None), ``decode_json_answer`` reads
exactly what ``decode_frame`` reads or declines; Cython and twin agree on every input,
hostile ones included, and the usual send request / answer is never declined."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import _wire_client, _wire_client_py
from mqcore.errors import FrameTooLargeError, ProtocolError
from mqcore.remoting.codes import LanguageCode, RequestCode, ResponseCode
from mqcore.remoting.command import create_request, create_response, decode_frame, encode_frame

BOTH = (_wire_client, _wire_client_py)
I32 = st.integers(-2**31, 2**31 - 1)
#: the characters a send header usually holds: printable ASCII and the property separators
USUAL = st.text(st.sampled_from([chr(c) for c in range(0x20, 0x7f)] + ["\x01", "\x02"]), max_size=40)
ANY_TEXT = st.text(max_size=20)
VALUES = st.one_of(st.none(), USUAL, ANY_TEXT, st.booleans(), st.integers(-2**70, 2**70),
                   st.floats(allow_nan=False), st.sampled_from([LanguageCode.JAVA, RequestCode.SEND_MESSAGE_V2]))
V2_KEYS = tuple("abcdefghijklmn")


def _generic(code, language, version, opaque, flag, keys, values, body):
    cmd = create_request(code, dict(zip(keys, values)), body, opaque=opaque, language=language, version=version)
    cmd.flag = flag
    return encode_frame(cmd)


def _both_encode(*args):
    out = [k.encode_request_frame(*args) for k in BOTH]
    assert out[0] == out[1], args  # Cython and twin: same bytes, or both decline
    return out[0]


def test_the_usual_send_request_is_written_byte_for_byte():
    values = ("ProducerGroup", "BenchTopic", "TBW102", 4, 3, 0, 1_700_000_000_000, 0,
              "UNIQ_KEY\x01ABCDEF0123456789\x02WAIT\x01true\x02TAGS\x01a\"b\\c\x02", 0, False, None, False, "broker-a")
    body = b"x" * 100
    frame = _both_encode(int(RequestCode.SEND_MESSAGE_V2), "PYTHON", 399, 17, 0, V2_KEYS, values, body)
    assert frame is not None
    assert frame == _generic(RequestCode.SEND_MESSAGE_V2, LanguageCode.PYTHON, 399, 17, 0, V2_KEYS, values, body)
    assert b'"i":"UNIQ_KEY\\u0001ABCDEF0123456789\\u0002' in frame and b'"l"' not in frame  # None: absent


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(code=I32, language=st.sampled_from(list(LanguageCode)), version=I32, opaque=I32, flag=I32,
       ext=st.dictionaries(st.one_of(USUAL, ANY_TEXT), VALUES, max_size=8), body=st.binary(max_size=64))
def test_encode_is_the_generic_frame_or_declines(code, language, version, opaque, flag, ext, body):
    keys, values = tuple(ext), tuple(ext.values())
    frame = _both_encode(code, language.name, version, opaque, flag, keys, values, body)
    usual = all(isinstance(k, str) and _usual(k) for k in keys) and all(
        v is None or type(v) in (bool, int) or (type(v) is str and _usual(v)) for v in values) and not flag & 1
    if usual:
        assert frame is not None  # the kernel must not decline what a send carries
    if frame is not None:
        assert frame == _generic(code, language, version, opaque, flag, keys, values, body)


def _usual(text: str) -> bool:
    return all(0x20 <= ord(c) < 0x7f or c in "\x01\x02" for c in text)


@pytest.mark.parametrize("k", BOTH, ids=["cython", "python"])
@pytest.mark.parametrize("value", ["caf\u00e9", "\x7f", "\x1a", "\x0b", "\ud800", 1.5, b"x", LanguageCode.JAVA])
def test_encode_declines_what_the_writers_render_differently_or_it_does_not_know(k, value):
    assert k.encode_request_frame(310, "JAVA", 399, 1, 0, ("a",), (value,), b"") is None
    assert k.encode_request_frame(310, "JAVA", 399, 1, 0, ("a",), ("ok",), b"") is not None


@pytest.mark.parametrize("k", BOTH, ids=["cython", "python"])
def test_encode_declines_out_of_range_numbers_and_mismatched_fields(k):
    ok = (310, "JAVA", 399, 1, 0, ("a",), ("v",), b"")
    assert k.encode_request_frame(*ok) is not None
    for i in range(5):
        bad = list(ok)
        bad[i] = 2**31 if i != 1 else "J\u00c4VA"
        assert k.encode_request_frame(*bad) is None, i
    assert k.encode_request_frame(True, "JAVA", 399, 1, 0, ("a",), ("v",), b"") is None  # a bool is not a code
    assert k.encode_request_frame(310, "JAVA", 399, 1, 0, ("a", "b"), ("v",), b"") is None
    assert k.encode_request_frame(310, "JAVA", 399, 1, 0, (1,), ("v",), b"") is None


# --- answers -------------------------------------------------------------------------------------------
def _header_of(frame: bytes) -> bytes:
    return frame[8:8 + int.from_bytes(frame[5:8], "big")]


def _both_decode(header):
    out = [k.decode_json_answer(header) for k in BOTH]
    assert out[0] == out[1], header
    return out[0]


def _agrees_with_generic(header: bytes, result) -> None:
    """A header the kernel reads, the generic decoder reads to the same values."""
    if result is None:
        return
    cmd = decode_frame(len(header).to_bytes(4, "big") + header)  # header word (JSON) + header, no body
    assert (cmd.code, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields) == result


def test_the_usual_send_answer_is_read():
    resp = create_response(create_request(310, opaque=41), ResponseCode.SUCCESS, None, {
        "msgId": "7F00000100002A9F0000000000001234", "queueId": "3", "queueOffset": "17",
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
    header = _header_of(encode_frame(resp))
    result = _both_decode(header)
    assert result == (0, 41, 1, None, {"msgId": "7F00000100002A9F0000000000001234", "queueId": "3",
                                       "queueOffset": "17", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
    _agrees_with_generic(header, result)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(code=I32, opaque=I32, flag=I32, remark=st.one_of(st.none(), USUAL, ANY_TEXT),
       ext=st.dictionaries(st.one_of(USUAL, ANY_TEXT), st.one_of(USUAL, ANY_TEXT), max_size=6))
def test_decode_reads_what_the_generic_decoder_reads(code, opaque, flag, remark, ext):
    request = create_request(310, opaque=opaque)
    resp = create_response(request, code, remark, ext)
    resp.flag = flag
    header = _header_of(encode_frame(resp))
    result = _both_decode(header)
    plain = all(0x20 <= ord(c) < 0x7f and c not in '"\\' for s in [*ext, *ext.values(), remark or ""] for c in s)
    if plain:
        assert result is not None
    _agrees_with_generic(header, result)


def _json_like():
    atoms = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=False),
                      st.text(max_size=8))
    return st.recursive(atoms, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                        max_leaves=12)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(obj=st.dictionaries(st.sampled_from(["code", "opaque", "flag", "version", "remark", "extFields",
                                            "language", "serializeTypeCurrentRPC", "other"]), _json_like(),
                           max_size=6),
       spaced=st.booleans())
def test_decode_of_hostile_headers_declines_or_agrees(obj, spaced):
    header = json.dumps(obj, separators=(", ", " : ") if spaced else (",", ":")).encode()
    _agrees_with_generic(header, _both_decode(header))


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(raw=st.binary(max_size=80), cut=st.integers(0, 200))
def test_decode_of_garbage_and_truncated_headers_declines_or_agrees(raw, cut):
    usual = _header_of(encode_frame(create_response(create_request(310, opaque=3), 0, "r", {"k": "v"})))
    for header in (raw, usual[:cut], usual[:cut] + raw, raw + usual):
        result = _both_decode(header)
        if result is not None:
            _agrees_with_generic(header, result)


@pytest.mark.parametrize("header", [
    b"", b"{}", b"[]", b'{"code":0', b'{"code":0,}', b'{"code":01}', b'{"code":1.0}', b'{"code":1e3}',
    b'{"code":2147483648}', b'{"code":-2147483649}', b'{"code":0,"code":1}', b'{"code":"0"}',
    b'{"code":0,"remark":null}', b'{"code":0,"remark":"a\\"b"}', b'{"code":0,"extFields":{"a":"1","a":"2"}}',
    b'{"code":0,"extFields":{"a":1}}', b'{"code":0,"extFields":{"a":"x",}}', b'{"code":0,"extFields":[]}',
    b'{"code":0,"language":1}', b'{"code":0} x', b'{"opaque":1}', b'{"code":0,"unknown":"x"}',
    b'{"code":0,"remark":"caf\xc3\xa9"}', b'{"code":0,"remark":"a\x01"}', b'{"code":0 "flag":1}',
])
def test_decode_declines_anything_unusual(header):
    assert _both_decode(header) is None


@pytest.mark.parametrize("header", [b'{"code":0}', b' {"code" : -7 , "flag":1,"extFields":{}} ',
                                    b'{"code":2147483647,"opaque":-2147483648,"remark":""}'])
def test_decode_reads_small_and_spaced_headers(header):
    result = _both_decode(header)
    assert result is not None
    _agrees_with_generic(header, result)


def test_a_malformed_answer_still_raises_the_generic_errors():
    """What the kernel declines goes to the generic decoder, which names the problem."""
    with pytest.raises(ProtocolError):
        decode_frame(len(b'{"opaque":1}').to_bytes(4, "big") + b'{"opaque":1}')
    with pytest.raises((ProtocolError, FrameTooLargeError)):
        decode_frame(b"\x00\x00\x00\x09{")


# --- exchange: one request written and its answer read on a non-blocking socket -------------
def _answer_frame(opaque: int, body: bytes = b"", code: int = 0) -> bytes:
    return encode_frame(create_response(create_request(310, opaque=opaque), code, None,
                                        {"msgId": "ABC", "queueId": "1", "queueOffset": "7"}, body=body))


def _blocking_like_a_connection(sock) -> None:
    """Make ``sock`` what ``BlockingConnection`` hands the kernels: blocking, with receive and
    send timeouts of one wait slice."""
    import socket
    import struct
    sock.setblocking(True)
    ms = _wire_client.EXCHANGE_WAIT_SLICE_MS
    timeval = struct.pack("@ll", ms // 1000, ms % 1000 * 1000)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


def _exchange_with(k, peer_sends: bytes, *, close: bool = False, timeout_s: float = 5.0, blocking: bool = False,
                   delay_s: float = 0.0):
    """Run ``k.exchange`` on one end of a socket pair whose other end reads the request and
    answers ``peer_sends`` (after ``delay_s``; then closes when asked); returns (result,
    request bytes seen). ``blocking``: the caller's end as ``BlockingConnection`` sets it."""
    import socket
    import threading
    import time
    a, b = socket.socketpair()
    if blocking:
        _blocking_like_a_connection(a)
    else:
        a.setblocking(False)
    seen = bytearray()
    request = _generic(310, LanguageCode.JAVA, 399, 5, 0, ("a",), ("x" * 100,), b"body")

    def peer():
        while len(seen) < len(request):
            seen.extend(b.recv(65536))
        if delay_s:
            time.sleep(delay_s)  # the peer's own pace: what the test waits through
        if peer_sends:
            b.sendall(peer_sends)
        if close:
            b.shutdown(socket.SHUT_WR)
    t = threading.Thread(target=peer)
    t.start()
    try:
        result = k.exchange(a.fileno(), request, 5, time.monotonic() + timeout_s)
    finally:
        t.join(10)
        a.close()
        b.close()
    assert bytes(seen) == request
    return result


@pytest.mark.parametrize("k", BOTH)
def test_exchange_reads_the_usual_answer_in_one_call(k):
    code, opaque, flag, remark, ext = _exchange_with(k, _answer_frame(5))
    assert (code, opaque, flag & 1, remark) == (0, 5, 1, None) and ext["queueOffset"] == "7"


@pytest.mark.parametrize("k", BOTH)
def test_exchange_leaves_unusual_answers_to_the_frame_reader(k):
    """A body, another opaque, two frames, a frame over the kernel's buffer: the bytes read
    come back as they are, the same in both implementations."""
    cases = [_answer_frame(5, body=b"xyz"), _answer_frame(6), _answer_frame(6) + _answer_frame(5),
             _answer_frame(5, body=b"x" * 20_000)]
    for peer_sends in cases:
        got = _exchange_with(k, peer_sends)
        assert type(got) is bytes and peer_sends.startswith(got) and len(got) >= 4, peer_sends[:40]


@pytest.mark.parametrize("k", BOTH)
def test_exchange_reports_a_timeout_and_a_peer_close(k):
    assert _exchange_with(k, b"", timeout_s=0.2) == k.EXCHANGE_READ_TIMEOUT
    assert _exchange_with(k, b"", close=True) == k.EXCHANGE_PEER_CLOSED
    assert _exchange_with(k, _answer_frame(5)[:10], close=True) == k.EXCHANGE_PEER_CLOSED  # half a frame


@pytest.mark.parametrize("k", BOTH)
def test_exchange_on_a_blocking_socket_waits_in_the_read_and_keeps_the_deadline(k):
    """BlockingConnection's sockets block (SO_RCVTIMEO of one slice): the answer is read by a
    read that waits itself, across slices, and a deadline between two slices still holds."""
    import time
    slice_s = k.EXCHANGE_WAIT_SLICE_MS / 1000
    code, opaque, _flag, _remark, ext = _exchange_with(k, _answer_frame(5), blocking=True)
    assert (code, opaque, ext["queueOffset"]) == (0, 5, "7")
    late = _exchange_with(k, _answer_frame(5), blocking=True, delay_s=2.5 * slice_s)  # past two slices
    assert type(late) is tuple and late[1] == 5
    for timeout_s in (0.5 * slice_s, 2.5 * slice_s):
        t0 = time.monotonic()
        assert _exchange_with(k, b"", blocking=True, timeout_s=timeout_s) == k.EXCHANGE_READ_TIMEOUT
        waited = time.monotonic() - t0
        assert timeout_s <= waited < timeout_s + 0.5 * slice_s, (timeout_s, waited)
    assert _exchange_with(k, b"", close=True, blocking=True) == k.EXCHANGE_PEER_CLOSED
    body = _answer_frame(5, body=b"x" * 20_000)
    got = _exchange_with(k, body, blocking=True)
    assert type(got) is bytes and body.startswith(got) and len(got) >= 4


def test_exchange_constants_agree():
    names = ("EXCHANGE_WRITE_TIMEOUT", "EXCHANGE_READ_TIMEOUT", "EXCHANGE_PEER_CLOSED", "EXCHANGE_WRITE_FAILED",
             "EXCHANGE_READ_FAILED", "EXCHANGE_BUFFER_BYTES", "EXCHANGE_WAIT_SLICE_MS")
    assert [getattr(_wire_client, n) for n in names] == [getattr(_wire_client_py, n) for n in names]


@pytest.mark.parametrize("k", BOTH)
def test_exchange_lets_a_signal_handler_interrupt_the_wait(k):
    """Waiting with the GIL released must not swallow Ctrl-C: a signal's Python handler runs
    during the wait and its exception ends the call (the caller then closes the socket)."""
    import signal
    import socket
    import time

    class Interrupted(Exception):
        pass

    def handler(*_args):
        raise Interrupted
    previous = signal.signal(signal.SIGALRM, handler)
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(Interrupted):
            k.exchange(a.fileno(), b"\x00\x00\x00\x04\x00\x00\x00\x00", 1, time.monotonic() + 10)
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        a.close()
        b.close()


# --- SendTemplate: the plain blocking send in one call ----------------------------------------
def _template(k, *, group="ProducerGroup", topic="BenchTopic", default_topic="TBW102", nums=4, queue_id=3,
              broker="broker-a", language="PYTHON", version=399):
    from mqcore.client.message import SendResult, SendStatus
    from mqcore.remoting.bodies import MessageQueue
    mq = MessageQueue(topic, broker, queue_id) if type(queue_id) is int else None
    return k.send_template(int(RequestCode.SEND_MESSAGE_V2), language, version, group, topic, default_topic, nums,
                           queue_id, broker, mq, SendResult, SendStatus.SEND_OK)


def _template_values(group, topic, default_topic, nums, queue_id, broker, born, flag, props):
    """The header fields a plain send carries, in V2_KEYS order (what send_plain_blocking sent before)."""
    from mqcore.message import properties_to_string
    return (group, topic, default_topic, nums, queue_id, 0, born, flag, properties_to_string(props), 0, False, None,
            False, broker)


def test_the_usual_send_is_written_from_its_template_byte_for_byte():
    props = {"WAIT": "true", "UNIQ_KEY": "7F0000010001ABCDEF0000000000000001", "TAGS": 'a"b\\c'}
    body = b"x" * 100
    values = _template_values("ProducerGroup", "BenchTopic", "TBW102", 4, 3, "broker-a", 1_700_000_000_000, 0, props)
    generic = _generic(RequestCode.SEND_MESSAGE_V2, LanguageCode.PYTHON, 399, 17, 0, V2_KEYS, values, body)
    for k in BOTH:
        assert _template(k).frame(17, 1_700_000_000_000, 0, props, body) == generic


PROP_TEXT = st.one_of(USUAL, ANY_TEXT)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(group=PROP_TEXT, topic=PROP_TEXT, broker=PROP_TEXT, nums=st.integers(-5, 2**40), queue_id=I32,
       born=st.integers(-2**63, 2**63 - 1), flag=st.integers(-2**40, 2**40), opaque=st.integers(0, 2**31 - 1),
       props=st.dictionaries(PROP_TEXT, st.one_of(st.none(), PROP_TEXT), max_size=5), body=st.binary(max_size=64))
def test_template_frames_are_the_generic_frame_or_decline(group, topic, broker, nums, queue_id, born, flag, opaque,
                                                          props, body):
    """Cython and twin write the same bytes (or both decline); what they write is the
    frame encode_request_frame and the generic codec write for the same fields; they
    decline only what encode_request_frame declines."""
    frames = []
    for k in BOTH:
        t = _template(k, group=group, topic=topic, broker=broker, nums=nums, queue_id=queue_id)
        frames.append(None if t is None else t.frame(opaque, born, flag, props, body))
    assert frames[0] == frames[1]
    values = _template_values(group, topic, "TBW102", nums, queue_id, broker, born, flag, props)
    expected = _wire_client.encode_request_frame(int(RequestCode.SEND_MESSAGE_V2), "PYTHON", 399, opaque, 0, V2_KEYS,
                                                 values, body)
    assert frames[0] == expected  # exactly the one-step encoder's frame, or a decline where it declines
    if expected is not None:
        assert expected == _generic(RequestCode.SEND_MESSAGE_V2, LanguageCode.PYTHON, 399, opaque, 0, V2_KEYS,
                                    values, body)


@pytest.mark.parametrize("k", BOTH)
def test_template_declines_what_it_does_not_write(k):
    t = _template(k)
    assert t.frame(1, 0, 0, {"K": 1}, b"x") is None  # a non-str property value
    assert t.frame(1, 0, 0, {"K": "caf\u00e9"}, b"x") is None  # non-ASCII: the generic encoder writes it
    assert t.frame(1, 2**63, 0, {}, b"x") is None and t.frame(-1, 0, 0, {}, b"x") is None
    assert _template(k, topic="T\u00e9") is None and _template(k, queue_id=2**31) is None


SEND_EXT_KEYS = st.sampled_from(["msgId", "queueId", "queueOffset", "transactionId", "MSG_REGION", "TRACE_ON",
                                 "other"])
SEND_EXT_VALUES = st.one_of(st.sampled_from(["", "0", "3", "03", "7", "123456789", "1234567890",
                                             "123456789012345678", "1234567890123456789", "-1", "true", "false",
                                             "True", "DefaultRegion", "7F00000100002A9F0000000000001234"]), USUAL)


def _api_result(header: bytes, opaque: int, mq):
    """What the general path makes of this answer: decode_frame + MQClientAPI.send_result."""
    from mqcore.client.api import MQClientAPI
    from mqcore.errors import BrokerError
    cmd = decode_frame(len(header).to_bytes(4, "big") + header)
    if not (cmd.flag & 1 and cmd.opaque == opaque):
        return "not the answer"
    try:
        return MQClientAPI.send_result("addr", mq.broker_name, mq.topic, "UNIQ", cmd.code, cmd.remark, cmd.ext_fields,
                                       mq)
    except (BrokerError, ProtocolError, ValueError) as e:
        return type(e)


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(code=st.sampled_from([0, 0, 0, 10, 1, 17]), answer_opaque=st.sampled_from([5, 5, 6]),
       flag=st.sampled_from([1, 1, 0, 3]), remark=st.one_of(st.none(), USUAL),
       ext=st.dictionaries(SEND_EXT_KEYS, SEND_EXT_VALUES, max_size=7))
def test_template_answers_are_what_the_general_path_reads(code, answer_opaque, flag, remark, ext):
    """read_answer (the compiled one reads the usual answer without the ext dict): the same
    in Cython and twin, and the SendResult it gives is the one MQClientAPI.send_result gives;
    what it leaves as a decoded answer, the general path reads to the same outcome."""
    from mqcore.client.message import SendResult
    resp = create_response(create_request(310, opaque=answer_opaque), code, remark, ext)
    resp.flag = flag
    header = _header_of(encode_frame(resp))
    templates = [_template(k) for k in BOTH]
    results = [t.read_answer(header, 5, "UNIQ") for t in templates]
    assert results[0] == results[1]
    got, t = results[0], templates[0]
    expected = _api_result(header, 5, t.mq)
    if type(got) is SendResult:
        # each template's own queue object, not a copy (the results were compared above, so
        # the same template's mq: a fresh template holds a fresh, equal MessageQueue)
        assert got == expected and all(r.message_queue is tpl.mq for r, tpl in zip(results, templates))
    elif got is None:
        assert expected == "not the answer" or _wire_client.decode_json_answer(header) is None
    else:  # left to the caller: a decoded answer that is not a plain SUCCESS for this queue
        assert got == _wire_client.decode_json_answer(header)
        assert type(expected) is not SendResult or expected.message_queue != t.mq or any(
            k not in ("msgId", "queueId", "queueOffset", "transactionId", "MSG_REGION", "TRACE_ON") for k in ext) \
            or code != 0 or ext.get("TRACE_ON", "true") not in ("true", "false")


def test_the_usual_answer_is_read_straight_into_a_send_result():
    from mqcore.client.message import SendResult, SendStatus
    header = _header_of(_answer_frame(5).replace(b'"queueId":"1"', b'"queueId":"3"'))
    for k in BOTH:
        t = _template(k)
        r = t.read_answer(header, 5, "UNIQ")
        assert type(r) is SendResult and r.message_queue is t.mq
        assert (r.status, r.msg_id, r.queue_offset, r.offset_msg_id, r.region_id, r.trace_on) == (
            SendStatus.SEND_OK, "UNIQ", 7, "ABC", "DefaultRegion", True)


def _template_send_with(k, peer_sends: bytes, *, timeout_s: float = 5.0, body: bytes = b"body"):
    """``SendTemplate.send`` on one end of a socket pair whose other end reads the request
    and answers ``peer_sends``; (result, request bytes seen, the frame expected)."""
    import socket
    import threading
    import time
    a, b = socket.socketpair()
    a.setblocking(False)
    seen = bytearray()
    t = _template(k)
    props = {"WAIT": "true", "UNIQ_KEY": "U1"}
    request = t.frame(5, 1_700_000_000_000, 0, props, body)

    def peer():
        while len(seen) < len(request):
            seen.extend(b.recv(65536))
        if peer_sends:
            b.sendall(peer_sends)
    th = threading.Thread(target=peer)
    th.start()
    try:
        result = t.send(a.fileno(), 5, 1_700_000_000_000, 0, props, body, time.monotonic() + timeout_s, "U1")
    finally:
        th.join(10)
        a.close()
        b.close()
    assert bytes(seen) == request
    return result


@pytest.mark.parametrize("k", BOTH)
def test_template_send_exchanges_in_one_call(k):
    from mqcore.client.message import SendResult
    usual = _answer_frame(5).replace(b'"queueId":"1"', b'"queueId":"3"')
    got = _template_send_with(k, usual)
    assert type(got) is SendResult and got.queue_offset == 7 and got.msg_id == "U1"
    other_queue = _template_send_with(k, _answer_frame(5))  # names queue 1: the caller builds the result
    assert type(other_queue) is tuple and other_queue[4]["queueId"] == "1"
    refused = _template_send_with(k, _answer_frame(5, code=int(ResponseCode.SYSTEM_BUSY)))
    assert type(refused) is tuple and refused[0] == ResponseCode.SYSTEM_BUSY
    with_body = _answer_frame(5, body=b"xyz")
    assert _template_send_with(k, with_body) == with_body  # bytes: the frame reader's
    assert _template_send_with(k, b"", timeout_s=0.2) == k.EXCHANGE_READ_TIMEOUT
    for size in (3_600, 4_200, 20_000):  # frames around and over the size the kernel writes on its stack
        got = _template_send_with(k, usual, body=b"b" * size)  # (the helper checks the bytes the peer read)
        assert type(got) is SendResult and got.queue_offset == 7


@pytest.mark.parametrize("k", BOTH)
def test_template_send_lets_a_signal_handler_interrupt_the_wait(k):
    """Ctrl-C during a blocking Producer.send: the handler's exception ends the call."""
    import signal
    import socket
    import time

    class Interrupted(Exception):
        pass

    def handler(*_args):
        raise Interrupted
    previous = signal.signal(signal.SIGALRM, handler)
    a, b = socket.socketpair()
    a.setblocking(False)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        t0 = time.monotonic()
        with pytest.raises(Interrupted):
            _template(k).send(a.fileno(), 1, 0, 0, {}, b"x", time.monotonic() + 10, "U")
        assert time.monotonic() - t0 < 5
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        a.close()
        b.close()


@pytest.mark.parametrize("token", [None, "tok-1"])
def test_a_signed_send_is_the_generic_signed_frame(token):
    """``SessionCredentials.sign_fields`` (the blocking pool's ``call`` under ACL) gives the
    fields ``sign`` gives the same request as a command: the kernel's frame is the generic
    signed frame byte for byte."""
    from mqcore.acl import SessionCredentials
    creds = SessionCredentials("ak1", "sk-secret", token)
    values = ("ProducerGroup", "BenchTopic", "TBW102", 4, 3, 0, 1_700_000_000_000, 0,
              "UNIQ_KEY\x01ABCDEF0123456789\x02TAGS\x01t", 0, False, None, False, "broker-a")
    body = b"y" * 300
    keys2, values2 = creds.sign_fields(V2_KEYS, values, body)
    frame = _both_encode(int(RequestCode.SEND_MESSAGE_V2), "PYTHON", 399, 17, 0, keys2, values2, body)
    cmd = create_request(RequestCode.SEND_MESSAGE_V2, {k: v for k, v in zip(V2_KEYS, values) if v is not None}, body,
                         opaque=17, language=LanguageCode.PYTHON, version=399)
    creds.sign(cmd)
    assert frame == encode_frame(cmd)
    assert creds.sign_fields(("a", "AccessKey"), ("x", "y"), b"") is None  # already signed: the command path


# --- a signed SendTemplate (plain ACL): the signature SessionCredentials.sign adds ---------------
def _signed_template(k, access_key="RocketMQ", secret_key="12345678", **kw):
    from mqcore.client.message import SendResult, SendStatus
    from mqcore.remoting.bodies import MessageQueue
    group, topic, broker, queue_id = (kw.get("group", "ProducerGroup"), kw.get("topic", "BenchTopic"),
                                      kw.get("broker", "broker-a"), kw.get("queue_id", 3))
    return k.send_template(int(RequestCode.SEND_MESSAGE_V2), "PYTHON", 399, group, topic, "TBW102", 4, queue_id,
                           broker, MessageQueue(topic, broker, queue_id), SendResult, SendStatus.SEND_OK,
                           access_key, secret_key)


def _signed_generic(values, opaque, body, access_key="RocketMQ", secret_key="12345678"):
    from mqcore.acl.signing import SessionCredentials
    cmd = create_request(RequestCode.SEND_MESSAGE_V2, dict(zip(V2_KEYS, values)), body, opaque=opaque,
                         language=LanguageCode.PYTHON, version=399)
    SessionCredentials(access_key, secret_key).sign(cmd)
    return encode_frame(cmd)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(group=USUAL, topic=USUAL, born=st.integers(0, 2**63 - 1), opaque=st.integers(0, 2**31 - 1),
       props=st.dictionaries(USUAL, USUAL, max_size=6),
       body=st.one_of(st.binary(max_size=200), st.integers(0, 2048).map(lambda n: b"b" * n)),
       secret=st.one_of(st.sampled_from(["12345678", "k" * 64, "k" * 65]), st.text("xyz7", min_size=1, max_size=80)))
def test_a_signed_template_writes_the_frame_the_signing_hook_writes(group, topic, born, opaque, props, body, secret):
    """Cython and twin sign alike, and their frame is the generic path's after
    SessionCredentials.sign: same fields, same order, the same signature (messages around
    SHA-1's 64-byte blocks, keys longer than a block, bodies up to the limit)."""
    frames = []
    for k in BOTH:
        t = _signed_template(k, secret_key=secret, group=group, topic=topic)
        frames.append(None if t is None else t.frame(opaque, born, 0, props, body))
    assert frames[0] == frames[1]
    if frames[0] is None:
        return
    values = _template_values(group, topic, "TBW102", 4, 3, "broker-a", born, 0, props)
    assert frames[0] == _signed_generic(values, opaque, body, secret_key=secret)


@pytest.mark.parametrize("k", BOTH)
def test_a_signed_template_leaves_long_bodies_and_tokens_to_the_generic_path(k):
    t = _signed_template(k)
    assert t.signed and not _template(k).signed
    assert t.frame(1, 0, 0, {}, b"x" * 2048) is not None
    assert t.frame(1, 0, 0, {}, b"x" * 2049) is None  # OpenSSL's SHA-1 signs it faster
    assert _signed_template(k, secret_key="") is None
    assert _signed_template(k, access_key="caf\u00e9") is None
