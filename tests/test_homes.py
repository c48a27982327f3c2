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
