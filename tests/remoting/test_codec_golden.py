"""Golden frames from shared/spec/test-vectors.md §7 and the parsing rules of §2."""
from __future__ import annotations

import pytest

from mqcore.errors import FrameTooLargeError, IllegalArgumentError, ProtocolError
from mqcore.format.javahash import string_hash as java_string_hash
from mqcore.jsonutil import fastjson_quote, java_hashmap_order
from mqcore.remoting.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    V4_9_8,
    LanguageCode,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from mqcore.remoting.command import (
    RemotingCommand,
    create_request,
    create_response,
    decode_frame,
    decode_header,
    encode,
    encode_frame,
    loads_lenient,
)
from mqcore.remoting.headers import SendMessageRequestHeader, SendMessageResponseHeader

#: every test here runs with orjson and with the stdlib fallback writer (tests/remoting/conftest.py)
pytestmark = pytest.mark.usefixtures("json_writer")

PROPS = "KEYS\x01k1\x02UNIQ_KEY\x01C0A8000A30391B6D358647B760000000\x02WAIT\x01true\x02TAGS\x01TagA"

# 7.1: SEND_MESSAGE_V2, JSON header, 387 bytes
FRAME_7_1 = bytes.fromhex(
    "0000017f000001767b22636f6465223a3331302c226578744669656c6473223a7b2261223a2250726f647563657247726f75704e616d65"
    "222c2262223a22546f70696354657374222c2263223a22544257313032222c2264223a2234222c2265223a2231222c2266223a2230222c"
    "2267223a2231373030303030303030303030222c2268223a2230222c2269223a224b4559535c75303030316b315c7530303032554e4951"
    "5f4b45595c753030303143304138303030413330333931423644333538363437423736303030303030305c7530303032574149545c7530"
    "303031747275655c7530303032544147535c753030303154616741222c226a223a2230222c226b223a2266616c7365222c226d223a2266"
    "616c7365222c226e223a2262726f6b65722d61227d2c22666c6167223a302c226c616e6775616765223a224a415641222c226f70617175"
    "65223a312c2273657269616c697a655479706543757272656e74525043223a224a534f4e222c2276657273696f6e223a3430397d68656c"
    "6c6f"
)
# 7.2: same request, ROCKETMQ binary header
FRAME_7_2 = bytes.fromhex(
    "00000102010000f90136000199000000010000000000000000000000e40001610000001150726f647563657247726f75704e616d650001"
    "6200000009546f70696354657374000163000000065442573130320001640000000134000165000000013100016600000001300001670000"
    "000d313730303030303030303030300001680000000130000169000000454b455953016b3102554e49515f4b455901433041383030304133"
    "303339314236443335383634374237363030303030303002574149540174727565025441475301546167410001"
    "6a000000013000016b0000000566616c736500016d0000000566616c736500016e0000000862726f6b65722d6168656c6c6f"
)
# 7.3: SEND response, JSON, extFields in Java HashMap order
FRAME_7_3 = bytes.fromhex(
    "000000eb000000e77b22636f6465223a302c226578744669656c6473223a7b2271756575654964223a2231222c2254524143455f4f4e22"
    "3a2274727565222c224d53475f524547494f4e223a2244656661756c74526567696f6e222c226d73674964223a22433041383030303130"
    "3030303241394630303030303030303030303030303741222c2271756575654f6666736574223a2231227d2c22666c6167223a312c226c"
    "616e6775616765223a224a415641222c226f7061717565223a312c2273657269616c697a655479706543757272656e74525043223a224a"
    "534f4e222c2276657273696f6e223a3430397d"
)


def _send_header() -> SendMessageRequestHeader:
    return SendMessageRequestHeader(
        producer_group="ProducerGroupName",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        properties=PROPS,
        broker_name="broker-a",
    )


def _request(serialize_type: SerializeType) -> RemotingCommand:
    return create_request(
        RequestCode.SEND_MESSAGE_V2,
        _send_header().to_ext_v2(),
        b"hello",
        opaque=1,
        serialize_type=serialize_type,
    )


# --- 7.1 / 7.2 / 7.3 byte for byte ----------------------------------------------------------
def test_vector_7_1_json_request_bytes() -> None:
    assert len(FRAME_7_1) == 387
    frame = encode_frame(_request(SerializeType.JSON))
    assert frame == FRAME_7_1
    header_json = FRAME_7_1[8:-5]
    assert len(header_json) == 374 and header_json.startswith(b'{"code":310,"extFields":{"a":')


def test_vector_7_2_binary_request_bytes() -> None:
    assert encode_frame(_request(SerializeType.ROCKETMQ)) == FRAME_7_2
    assert len(FRAME_7_2) == 4 + 258


def test_vector_7_3_response_bytes() -> None:
    request = _request(SerializeType.JSON)
    header = SendMessageResponseHeader(msg_id="C0A8000100002A9F000000000000007A", queue_id=1, queue_offset=1)
    response = create_response(request, ResponseCode.SUCCESS, ext_fields=java_hashmap_order(header.to_ext()))
    assert encode_frame(response) == FRAME_7_3


@pytest.mark.parametrize("frame", [FRAME_7_1, FRAME_7_2], ids=["json", "rocketmq"])
def test_vector_requests_decode(frame: bytes) -> None:
    cmd = decode_frame(frame[4:])
    assert cmd.code == RequestCode.SEND_MESSAGE_V2
    assert cmd.opaque == 1 and cmd.flag == 0 and cmd.version == V4_9_8
    assert cmd.language == LanguageCode.JAVA and cmd.remark is None
    assert cmd.body == b"hello"
    header = SendMessageRequestHeader.from_command(cmd)
    assert header == _send_header()
    assert header.properties == PROPS
    # and re-encoding reproduces the exact bytes
    assert encode_frame(cmd) == frame


def test_vector_7_3_decodes() -> None:
    cmd = decode_frame(FRAME_7_3[4:])
    assert cmd.is_response and not cmd.is_oneway and cmd.code == ResponseCode.SUCCESS
    assert list(cmd.ext_fields) == ["queueId", "TRACE_ON", "MSG_REGION", "msgId", "queueOffset"]
    header = SendMessageResponseHeader.from_command(cmd)
    assert (header.msg_id, header.queue_id, header.queue_offset) == ("C0A8000100002A9F000000000000007A", 1, 1)
    assert header.msg_region == "DefaultRegion" and header.trace_on is True
    assert cmd.body == b""


def test_java_hashmap_order_matches_vectors() -> None:
    inserted = ["msgId", "queueId", "queueOffset", "MSG_REGION", "TRACE_ON"]
    assert list(java_hashmap_order([(k, 1) for k in inserted])) == [
        "queueId", "TRACE_ON", "MSG_REGION", "msgId", "queueOffset"]
    # properties orders from store vectors 3.2 and 7.1
    assert list(java_hashmap_order([(k, 1) for k in ["TAGS", "KEYS", "UNIQ_KEY", "CLUSTER"]])) == [
        "KEYS", "UNIQ_KEY", "CLUSTER", "TAGS"]
    assert list(java_hashmap_order([(k, 1) for k in ["WAIT", "TAGS", "UNIQ_KEY", "KEYS"]])) == [
        "KEYS", "UNIQ_KEY", "WAIT", "TAGS"]
    many = [(f"key{i}", i) for i in range(40)]  # forces resizes
    assert sorted(java_hashmap_order(many)) == sorted(k for k, _ in many)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("TagA", 2598919), ("order-123", -392797389), ("标签", 857175), ("Tag😀", 82337373),
     ("polygenelubricants", -2147483648), ("", 0)],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


# --- 7.4 lenient JSON ----------------------------------------------------------------------
def test_vector_7_4_unquoted_long_keys() -> None:
    data = '{"brokerAddrs":{0:"192.168.0.1:10911",1:"192.168.0.2:10911"}}'
    assert loads_lenient(data) == {"brokerAddrs": {0: "192.168.0.1:10911", 1: "192.168.0.2:10911"}}


def test_vector_7_4_consumer_offsets() -> None:
    assert loads_lenient(b'{"offsetTable":{"TopicTest@cg1":{0:250,1:248}}}') == {
        "offsetTable": {"TopicTest@cg1": {0: 250, 1: 248}}}


def test_vector_7_4_delay_offsets() -> None:
    assert loads_lenient('{"offsetTable":{1:12,2:0,3:7}}') == {"offsetTable": {1: 12, 2: 0, 3: 7}}


def test_vector_7_4_heartbeat_without_ext_fields() -> None:
    header = b'{"code":34,"flag":0,"language":"JAVA","opaque":7,"serializeTypeCurrentRPC":"JSON","version":409}'
    cmd = decode_header(SerializeType.JSON, header)
    assert cmd.ext_fields == {} and cmd.code == RequestCode.HEART_BEAT and cmd.opaque == 7
    # a request without ext fields is written back without the key at all
    assert encode(cmd)[0][8:] == header


def test_lenient_leaves_strings_alone() -> None:
    text = '{"a":"{0:1, 2:3}", 5:[1,{"x":{-3:"4:5"}}], "b":" ,7: "}'
    assert loads_lenient(text) == {"a": "{0:1, 2:3}", 5: [1, {"x": {-3: "4:5"}}], "b": " ,7: "}


def test_lenient_object_keys_and_whitespace() -> None:
    text = ' { "offsetTable" : { {"brokerName":"a","queueId":0,"topic":"t"} : 12 } , 1 : { } } '
    value = loads_lenient(text)
    assert value["offsetTable"] == {(("brokerName", "a"), ("queueId", 0), ("topic", "t")): 12}
    assert value[1] == {}


def test_lenient_quoted_keys_stay_strings() -> None:
    assert loads_lenient('{"brokerAddrs":{"0":"a"}}') == {"brokerAddrs": {"0": "a"}}


@pytest.mark.parametrize(
    "bad", ["", "{", "{0:}", '{"a":1}x', "{01a:1}", "{a:1}", "[" * 100000, b"\xff{}", '{"a":1,}', "{:1}"]
)
def test_lenient_rejects_malformed(bad: str | bytes) -> None:
    with pytest.raises(ProtocolError):
        loads_lenient(bad)


# --- JSON header tolerance -------------------------------------------------------------------
def _json_cmd(text: str) -> RemotingCommand:
    return decode_header(SerializeType.JSON, text.encode("utf-8"))


def test_json_ext_values_coerced_to_strings() -> None:
    cmd = _json_cmd('{"code":11,"extFields":{"queueId":3,"commitOffset":-1,"unitMode":true,"b":false,'
                    '"f":1.5,"n":null,"o":{"x":1},"l":[1,"a"]},"opaque":2}')
    assert cmd.ext_fields == {"queueId": "3", "commitOffset": "-1", "unitMode": "true", "b": "false", "f": "1.5",
                              "o": '{"x":1}', "l": '[1,"a"]'}


def test_json_language_forms_and_defaults() -> None:
    assert _json_cmd('{"code":1,"language":"GO"}').language == LanguageCode.GO
    assert _json_cmd('{"code":1,"language":"cpp"}').language == LanguageCode.CPP
    assert _json_cmd('{"code":1,"language":9}').language == LanguageCode.GO
    assert _json_cmd('{"code":1,"language":"KLINGON"}').language == LanguageCode.OTHER
    assert _json_cmd('{"code":1,"language":99}').language == LanguageCode.OTHER
    cmd = _json_cmd('{"code":1}')
    assert (cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark) == (LanguageCode.JAVA, 0, 0, 0, None)


def test_json_go_client_header() -> None:
    text = ('{"code":10,"language":"GO","version":317,"opaque":5,"flag":0,"remark":"",'
            '"extFields":{"producerGroup":"pg","topic":"t"},"unknownKey":[1,2,{"z":null}]}')
    cmd = _json_cmd(text)
    assert cmd.remark == "" and cmd.version == 317 and cmd.ext_fields == {"producerGroup": "pg", "topic": "t"}


def test_json_escape_forms_accepted() -> None:
    cmd = _json_cmd('{"code":1,"extFields":{"i":"K\\u0001v\\u0002\\/\\u00e9\\n\\ud83d\\ude00"},"remark":"\\"x\\""}')
    assert cmd.ext_fields["i"] == "K\x01v\x02/é\n😀" and cmd.remark == '"x"'


def test_json_numeric_strings_accepted() -> None:
    cmd = _json_cmd('{"code":"310","opaque":"7","flag":1.0}')
    assert (cmd.code, cmd.opaque, cmd.flag) == (310, 7, 1)


@pytest.mark.parametrize(
    "text",
    ['{"opaque":1}', "[1,2]", '"x"', '{"code":true}', '{"code":1.5}', '{"code":"abc"}', '{"code":4294967296}',
     '{"code":1,"extFields":[1]}', '{"code":1', "", "\x00", '{"code":1,"opaque":-2147483649}'],
)
def test_json_header_malformed(text: str) -> None:
    with pytest.raises(ProtocolError):
        _json_cmd(text)


def test_fastjson_escapes() -> None:
    assert fastjson_quote("a\x00\x07\b\t\n\x0b\f\r\x0e\x1f\"\\\x7f\x9f\xa0é/") == (
        '"a\\u0000\\u0007\\b\\t\\n\\u000B\\f\\r\\u000E\\u001F\\"\\\\\\u007F\\u009F\xa0é/"')
    assert fastjson_quote("plain") == '"plain"'


def test_lone_surrogate_survives_json_round_trip() -> None:
    cmd = create_request(1, {"k": "a\ud800b"}, remark="\udfff")
    back = decode_frame(encode_frame(cmd)[4:])
    assert back.ext_fields == {"k": "a\ud800b"} and back.remark == "\udfff"


# --- commands and frames ---------------------------------------------------------------------
def test_create_response_echoes_request() -> None:
    req = create_request(RequestCode.PULL_MESSAGE, {"topic": "t"}, opaque=42, serialize_type=SerializeType.ROCKETMQ)
    resp = create_response(req, ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", {"nextBeginOffset": 5})
    assert resp.opaque == 42 and resp.is_response and resp.flag & FLAG_RESPONSE
    assert resp.serialize_type == SerializeType.ROCKETMQ and resp.version == V4_9_8
    assert resp.ext_fields == {"nextBeginOffset": "5"}


def test_oneway_flag_and_response_ext_fields_always_present() -> None:
    req = create_request(RequestCode.UPDATE_CONSUMER_OFFSET, oneway=True)
    assert req.is_oneway and req.flag == FLAG_ONEWAY and not req.is_response
    resp = create_response(create_request(1))
    assert b'"extFields":{}' in encode_frame(resp)  # Java clients NPE without extFields
    assert b"extFields" not in encode_frame(create_request(RequestCode.HEART_BEAT))


def test_remark_only_when_not_null() -> None:
    assert b'"remark"' not in encode_frame(create_request(1))
    assert b'"remark":""' in encode_frame(create_request(1, remark=""))


def test_encode_keeps_memoryview_body_uncopied() -> None:
    backing = bytearray(b"xxhello-worldxx")
    view = memoryview(backing)[2:13]
    cmd = create_request(RequestCode.PULL_MESSAGE, body=view)
    prefix, body = encode(cmd)
    assert body is view
    length = int.from_bytes(prefix[:4], "big")
    assert length == len(prefix) - 4 + 11
    assert decode_frame(prefix[4:] + bytes(view)).body == b"hello-world"


def test_binary_null_quirks() -> None:
    cmd = create_request(1, {"a": "", "": "x", "k": "v"}, remark="", serialize_type=SerializeType.ROCKETMQ)
    back = decode_frame(encode_frame(cmd)[4:])
    assert back.remark is None and back.ext_fields == {"k": "v"}


def test_binary_layout_offsets() -> None:
    cmd = RemotingCommand(code=-2, language=LanguageCode.GO, version=317, opaque=-5, flag=3, remark="r",
                          ext_fields={"k": "v"}, serialize_type=SerializeType.ROCKETMQ)
    frame = encode_frame(cmd)
    header = frame[8:]
    assert header.hex() == "fffe09013dfffffffb000000030000000172" + "00000008" + "00016b0000000176"
    assert decode_frame(frame[4:]) == cmd


@pytest.mark.parametrize(
    "header_hex",
    ["", "00" * 20, "0001" + "00" * 11 + "00000005" + "00" * 4,  # remark overruns
     "0001" + "00" * 11 + "00000000" + "00000010" + "00",  # ext overruns
     "0001" + "00" * 11 + "00000000" + "00000003" + "000500",  # key overruns
     "0001" + "00" * 11 + "00000000" + "00000001" + "00",  # entry truncated
     "0001" + "00" * 11 + "00000000" + "00000007" + "ffff0000000000",  # negative key length
     "0001" + "00" * 11 + "00000000" + "00000008" + "0001ff0000000141",  # invalid UTF-8 key
     "0001" + "00" * 11 + "ffffffff" + "00000000"],  # negative remark length
)

def test_binary_header_malformed(header_hex: str) -> None:
    with pytest.raises(ProtocolError):
        decode_header(SerializeType.ROCKETMQ, bytes.fromhex(header_hex))


def test_frame_errors() -> None:
    with pytest.raises(ProtocolError):
        decode_frame(b"\x00\x00")
    with pytest.raises(ProtocolError):
        decode_frame(b"\x00\x00\x00\x10{}")  # header longer than frame
    with pytest.raises(ProtocolError):
        decode_frame(b"\x02\x00\x00\x02{}")  # serialize type 2
    with pytest.raises(FrameTooLargeError):
        decode_frame(b"\x00" * 65, max_frame_bytes=64)
    assert issubclass(FrameTooLargeError, ProtocolError)


def test_encode_rejects_unrepresentable() -> None:
    with pytest.raises(IllegalArgumentError):
        encode(create_request(70000, serialize_type=SerializeType.ROCKETMQ))
    with pytest.raises(IllegalArgumentError):
        encode(create_request(1, opaque=1 << 31))
    # JSON has no int16 limit: 5.x POP codes are representable
    assert decode_frame(encode_frame(create_request(RequestCode.POP_MESSAGE))[4:]).code == 200050


def test_decode_accepts_bytearray_and_memoryview() -> None:
    frame = FRAME_7_1[4:]
    assert decode_frame(bytearray(frame)) == decode_frame(memoryview(frame)) == decode_frame(frame)
