"""The one homes of small shared concepts: Java's hashCode, tag expressions, host:port text."""
from __future__ import annotations

import pytest

from mqcore.errors import IllegalArgumentError
from mqcore.format.javahash import hash_code, string_hash
from mqcore.netaddr import format_host_port, format_sockaddr, parse_host_port
from mqcore.tags import split_tags, subscribes_all, tag_codes, unparsable

#: String.hashCode, s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units wrapped to int32, worked by
#: hand: "\u00e9t\u00e9" is (233*31 + 116)*31 + 233; U+1F600 is the surrogate pair D83D DE00, so
#: 31*0xD83D + 0xDE00; "order-123" wraps below zero
JAVA_STRING_HASHES = {"": 0, "TagA": 2598919, "hello": 99162322, "order-123": -392797389,
                      "\u00e9t\u00e9": 227742, "\U0001f600": 1772899}


@pytest.mark.parametrize("text,expected", sorted(JAVA_STRING_HASHES.items()))
def test_string_hash_is_javas_and_the_kernels_agree(text, expected, kernels):
    assert string_hash(text) == expected
    assert kernels.java_hash(text) == expected  # the compiled loop and the twin give the same
    assert kernels.java_hash_utf8(text.encode("utf-8")) == expected


def test_hash_code_of_java_boxed_types():
    assert hash_code(True) == 1231 and hash_code(False) == 1237
    assert hash_code(7) == 7 and hash_code(-7) == -7  # Integer
    assert hash_code(2**40 + 5) == 5 ^ 2**8  # Long: the low word of v ^ (v >>> 32)
    assert hash_code(-1 << 40) == -256  # Long with the sign in the high word
    assert hash_code(b"hello") == hash_code("hello")
    with pytest.raises(TypeError):
        hash_code(1.5)


def test_tag_expressions():
    assert split_tags("TagA || TagB") == ("TagA", "TagB")
    assert split_tags(" TagA||TagB ||  TagA ") == ("TagA", "TagB")  # blanks and repeats dropped
    assert split_tags("*") == split_tags("") == split_tags(None) == split_tags(" || ") == ()
    assert subscribes_all("*") and subscribes_all("  ") and subscribes_all(None)
    assert not subscribes_all(" || ")  # names no tag: matches nothing, not everything
    assert unparsable("||") and unparsable("||||")
    assert not unparsable(" || ") and not unparsable("*") and not unparsable("") and not unparsable("A")
    assert tag_codes(("TagA", "hello")) == (2598919, 99162322)


def test_host_port_text():
    assert parse_host_port("10.0.0.7:40000") == ("10.0.0.7", 40000)
    assert parse_host_port("[::1]:9876") == ("::1", 9876)
    assert format_host_port("::1", 9876) == "[::1]:9876"
    assert format_sockaddr(("127.0.0.1", 10911)) == "127.0.0.1:10911"
    assert format_sockaddr(("::1", 10911, 0, 0)) == "[::1]:10911"  # an IPv6 socket's 4-tuple
    assert format_sockaddr("/tmp/sock") == "/tmp/sock"
    for bad in ("10.0.0.7", "host:", ":80", "h:99999", "h:x"):
        with pytest.raises(IllegalArgumentError):
            parse_host_port(bad)


# --- topic and group names: format.names ----------------------------------------------------------
NAMES = {"Orders": True, "%RETRY%group-1": True, "a|b_c": True, "": False, "a b": False, "a/b": False,
         "..": False, "caf\u00e9": False, "x\n": False, "A" * 127: True}


@pytest.mark.parametrize("name,ok", sorted(NAMES.items()))
def test_every_name_check_asks_format_names(name, ok):
    """The client's check, the broker's request guard and the store's own refusal agree,
    because all three ask format.names."""
    from mqcore.broker.validate import topic_problem
    from mqcore.format.names import valid_name_bytes, valid_name_chars
    from mqcore.message import validate_topic
    from mqcore.store.writer import _topic_problem as store_topic_problem

    assert valid_name_chars(name) is ok
    assert valid_name_bytes(name.encode()) is ok
    assert (topic_problem(name) is None) is ok
    assert (store_topic_problem(name.encode()) is None) is ok
    if ok:
        validate_topic(name)
    else:
        with pytest.raises(IllegalArgumentError):
            validate_topic(name)


# --- body compression: format.compression ---------------------------------------------------------
def test_one_decompression_for_client_grpc_and_spark():
    import zlib

    from mqcore.client.message import decompress_body as client_decompress
    from mqcore.errors import MessageDecodeError, RecordDecodeError
    from mqcore.format import layout as L
    from mqcore.format.compression import compress_body, decompress_body
    from mqcore.spark import decode

    body, flag = compress_body(b"hello " * 50, 5)
    assert flag == 0x301 and decompress_body(body, flag) == b"hello " * 50
    assert decompress_body(zlib.compress(b"x"), L.SYSFLAG_COMPRESSED) == b"x"  # a 4.x producer: no type
    assert client_decompress(body, flag) == b"hello " * 50
    with pytest.raises(RecordDecodeError, match="corrupt"):
        decompress_body(b"not zlib", flag)
    with pytest.raises(RecordDecodeError, match="unknown compression type 5"):
        decompress_body(body, 0x501)
    with pytest.raises(MessageDecodeError, match="corrupt"):  # the client's own error type
        client_decompress(b"not zlib", flag)
    assert decode.decompress_body is decompress_body
    grpc_convert = pytest.importorskip("mqcore.grpc.convert")
    assert grpc_convert.inflate is decompress_body


# --- property separators: format.properties -------------------------------------------------------
def test_separator_helpers():
    from mqcore.format.properties import format_pair, has_separator, parse_properties, separators_only_between

    raw = b"\x01".join([b"A", b"1"]) + b"\x02" + b"B\x012"
    assert separators_only_between(raw, 2)
    assert not separators_only_between(b"A\x011\x02B\x012\x02", 2)   # a value holding a separator
    assert has_separator("a\x02b") and has_separator("\x01") and not has_separator("plain")
    assert parse_properties(format_pair("K", 7)) == {"K": "7"}


# --- consume-queue units and index geometry: format.layout / format.files -------------------------
def test_spark_reads_units_and_index_geometry_through_format(tmp_path):
    from mqcore.errors import ConfigError
    from mqcore.format import layout as L
    from mqcore.format.files import ReadOnlyFile
    from mqcore.spark import stream
    from mqcore.spark.index import IndexGeometry

    assert stream._CQ is L.CQ_UNIT_DTYPE
    # a small index file of 10 slots and 40 entries (RocketMQ's 1:4 ratio) holding no entry yet
    p = tmp_path / "20240101000000000"
    p.write_bytes(L.INDEX_HEADER.pack(0, 0, 0, 0, 0, 1) + bytes(L.index_file_size(10, 40) - L.INDEX_HEADER_SIZE))
    with ReadOnlyFile(str(p)) as f:
        assert IndexGeometry.for_file(f) == IndexGeometry(10, 40)
        assert IndexGeometry.for_file(f, 20, 38) == IndexGeometry(20, 38)  # given counts that fit
        with pytest.raises(ConfigError, match="indexSlots"):
            IndexGeometry.for_file(f, 7, 7)
