"""The pure-Python twin of the broker's request pipeline kernels (``_pipeline.pyx``).

Same functions, same items, same answer bytes; ``MQCORE_PURE_PYTHON=1`` selects it
(``_compat.default_pipeline_kernels``). It reads the JSON header with the standard JSON
reader, so it accepts some spellings the kernel leaves to the general path (escapes the
kernel does not decode, numbers written as text, whitespace); for every frame the kernel
reads, both give the same item (tests/broker/test_send_pipeline.py).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

from mqcore import _store_py
from mqcore._store_py import index_hash, java_hash
from mqcore.format import layout as L
from mqcore.format.properties import NAME_VALUE_SEPARATOR_TEXT, PROPERTY_SEPARATOR_TEXT
from mqcore.histogram import Histogram  # the compiled kernels' keeps its buckets in C; this is the reference

#: an item of ``parse_plain_sends`` (``mqcore.kernel_api.PlainSend``): ``(opaque, topic, queue_id,
#: sys_flag, born_timestamp, flag, reconsume_times, properties, tags_code, key_hashes, body, frame_end)``
PlainSend = tuple[int, str, int, int, int, int, int, bytes, int, list[int], bytes, int]

__all__ = ["IMPLEMENTATION", "append_plain", "parse_plain_sends", "send_answer", "send_answers"]

IMPLEMENTATION = "python"

_SEND_MESSAGE_V2 = 310
_FLAG_RESPONSE_OR_ONEWAY = 0b11
_TX_MASK = 0xC
_MAX_PROPERTIES_BYTES = 32767
_MAX_PROPERTIES = 128
_MAX_KEYS = 2048  # (_pipeline.pyx MAX_KEYS)
_NAME = re.compile(r"[%|a-zA-Z0-9_\-]+")
_V2_KEYS = frozenset("abcdefghijklmn")
_REQUIRED = ("a", "b", "c", "d", "e", "f", "g", "h")
#: properties the plain send does not handle: the delay and transaction stages, a CLUSTER
#: the store would replace in place, and the timer properties (the store's timer rewrite)
_NOT_PLAIN = frozenset({"DELAY", "TRAN_MSG", "CLUSTER", "TIMER_DELIVER_MS", "TIMER_DELAY_SEC", "TIMER_DELAY_MS",
                        "__STARTDELIVERTIME"})
_INT32 = 1 << 31
#: the members of a request header the kernels read
_TOP_KEYS = frozenset({"code", "extFields", "flag", "language", "opaque", "serializeTypeCurrentRPC", "version",
                       "remark"})
_Item = TypeVar("_Item")


def _decimal(text: str, max_digits: int) -> int:
    if not (0 < len(text) <= max_digits and text.isascii() and text.isdigit()):
        return -1
    return int(text)


def _int32(value: Any) -> bool:
    return type(value) is int and -_INT32 <= value < _INT32


def _request_ext(obj: Any, code: int, ext_keys: frozenset[str]) -> tuple[int, dict[str, str]] | None:
    """The opaque and extFields of a header object that is a plain ``code`` request as the kernels
    read one (known members only, int32 numbers, string texts, a request that wants an answer,
    extFields all strings under ``ext_keys``); None for anything else."""
    if type(obj) is not dict or not obj.keys() <= _TOP_KEYS:
        return None
    code_, flag_word, opaque = obj.get("code"), obj.get("flag", 0), obj.get("opaque", 0)
    if not (_int32(code_) and _int32(flag_word) and _int32(opaque) and _int32(obj.get("version", 0))):
        return None
    if any(type(obj.get(k, "")) is not str for k in ("language", "serializeTypeCurrentRPC", "remark")):
        return None
    if code_ != code or flag_word & _FLAG_RESPONSE_OR_ONEWAY:
        return None
    ext = obj.get("extFields")
    if type(ext) is not dict or not ext.keys() <= ext_keys or any(type(v) is not str for v in ext.values()):
        return None
    return opaque, ext


def _plain_send(view: memoryview, hdr_at: int, body_at: int, frame_end: int, cluster: bytes,
                indexed: bool) -> PlainSend | None:
    try:
        obj = json.loads(bytes(view[hdr_at:body_at]))
    except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError is a ValueError)
        return None
    request = _request_ext(obj, _SEND_MESSAGE_V2, _V2_KEYS)
    if request is None:
        return None
    opaque, ext = request
    if any(k not in ext for k in _REQUIRED):
        return None
    queue_id, sys_flag, born_ts, flag = (_decimal(ext["e"], 9), _decimal(ext["f"], 9), _decimal(ext["g"], 18),
                                         _decimal(ext["h"], 9))
    reconsume = _decimal(ext["j"], 9) if "j" in ext else 0
    if min(_decimal(ext["d"], 9), queue_id, sys_flag, born_ts, flag, reconsume) < 0:
        return None
    if ("l" in ext and _decimal(ext["l"], 9) < 0) or ext.get("k", "false") not in ("true", "false") \
            or ext.get("m", "false") != "false":
        return None
    if sys_flag & _TX_MASK:
        return None  # a transaction's half message: the general path's transaction stage
    topic, group = ext["b"], ext["a"]
    if not (_NAME.fullmatch(topic) and len(topic) <= 127 and _NAME.fullmatch(group) and len(group) <= 255):
        return None
    text = ext.get("i", "")
    if not text.isascii():
        return None
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for seg in text.split(PROPERTY_SEPARATOR_TEXT):
        i = seg.find(NAME_VALUE_SEPARATOR_TEXT)
        if not 0 < i < len(seg) - 1:
            continue  # skipped, as the property reader does
        name, value = seg[:i], seg[i + 1:]
        if NAME_VALUE_SEPARATOR_TEXT in value or name in _NOT_PLAIN or name in seen or len(seen) == _MAX_PROPERTIES:
            return None
        seen.add(name)
        if name != "WAIT":
            pairs.append((name, value))
    if cluster:
        pairs.append(("CLUSTER", cluster.decode("ascii")))
    props_b = PROPERTY_SEPARATOR_TEXT.join(f"{n}{NAME_VALUE_SEPARATOR_TEXT}{v}" for n, v in pairs).encode()
    if len(props_b) > _MAX_PROPERTIES_BYTES:
        return None
    props = dict(pairs)
    tags = props.get("TAGS")
    tags_code = java_hash(tags) if tags else 0
    hashes: list[int] = []
    if indexed:
        uniq, keys = props.get("UNIQ_KEY"), props.get("KEYS")
        words = ([uniq] if uniq else []) + ([w for w in keys.split(" ") if w] if keys else [])
        if len(words) > _MAX_KEYS:
            return None
        hashes = [index_hash(java_hash(f"{topic}#{w}")) for w in words]
    return (opaque, topic, queue_id, sys_flag, born_ts, flag, reconsume, props_b, tags_code, hashes,
            bytes(view[body_at:frame_end]), frame_end)


def _parse_frames(buf: Any, start: int, end: int, max_frame_bytes: int,
                  item_of: Callable[[memoryview, int, int, int], _Item | None]) -> tuple[list[_Item], int]:
    """The frames of ``buf[start:end]`` one by one (length, header length, header, body), each
    through ``item_of(view, header_at, body_at, frame_end)``, up to the first one that is short,
    too long, not JSON-serialized or not ``item_of``'s: the items and where that one begins."""
    view = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)
    if end > len(view) or start < 0 or start > end:
        raise ValueError(f"range {start}..{end} is outside a buffer of {len(view)} bytes")
    items: list[_Item] = []
    pos = start
    while end - pos >= 8:
        length = int.from_bytes(view[pos:pos + 4], "big")
        if length > max_frame_bytes or length < 4:
            break
        total = 4 + length
        if total > end - pos:
            break
        word = int.from_bytes(view[pos + 4:pos + 8], "big")
        if word >> 24:
            break
        hlen = word & 0xFFFFFF
        if hlen > length - 4:
            break
        item = item_of(view, pos + 8, pos + 8 + hlen, pos + total)
        if item is None:
            break
        items.append(item)
        pos += total
    return items, pos


def parse_plain_sends(buf: Any, start: int, end: int, max_frame_bytes: int, cluster: bytes,
                      indexed: bool) -> tuple[list[PlainSend], int]:
    """See ``_pipeline.parse_plain_sends``."""
    return _parse_frames(buf, start, end, max_frame_bytes,
                         lambda view, hdr_at, body_at, frame_end: _plain_send(view, hdr_at, body_at, frame_end,
                                                                              cluster, indexed))


def send_answer(before_queue_id: bytes, before_msg_id: bytes, host_hex: bytes, queue_id: int, phy: int,
                queue_offset: int, opaque: int, version: int) -> bytes:
    """See ``_pipeline.send_answer``."""
    header = (before_queue_id + str(queue_id).encode() + before_msg_id + host_hex
              + f'{phy & 0xFFFFFFFFFFFFFFFF:016X}","queueOffset":"{queue_offset}"}},"flag":1,"language":"JAVA",'
                f'"opaque":{opaque},"serializeTypeCurrentRPC":"JSON","version":{version}}}'.encode())
    return (len(header) + 4).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header


def send_answers(before_queue_id: bytes, before_msg_id: bytes, host_hex: bytes, items: list[tuple[Any, ...]],
                 stored: list[tuple[int, int, int]], version: int) -> bytes:
    """See ``_pipeline.send_answers``."""
    if len(stored) > len(items):
        raise ValueError("more stored results than items")
    return b"".join(send_answer(before_queue_id, before_msg_id, host_hex, item[2], phy, queue_offset, item[0],
                                version) for item, (queue_offset, phy, _size) in zip(items, stored))


def append_plain(commitlog: Any, pos: int, limit: int, phy: int, topic: bytes, queue_id: int, flag: int,
                 queue_offset: int, sys_flag: int, born_timestamp: int, born_host: bytes, store_timestamp: int,
                 store_host: bytes, reconsume_times: int, body: bytes, properties: bytes, consume_queue: Any,
                 unit_pos: int, tags_code: int, index: Any, slots: int, max_entries: int,
                 key_hashes: list[int]) -> tuple[int, bool]:
    """See ``_pipeline.append_plain``."""
    want = (L.HOST_V6_BYTES if sys_flag & L.SYSFLAG_BORNHOST_V6 else L.HOST_V4_BYTES,
            L.HOST_V6_BYTES if sys_flag & L.SYSFLAG_STOREHOST_V6 else L.HOST_V4_BYTES)
    if (len(born_host), len(store_host)) != want:
        raise ValueError("a host's length does not match the sys flag's V6 bits")
    if len(topic) > L.MAX_TOPIC_LENGTH or len(properties) > _MAX_PROPERTIES_BYTES:
        raise ValueError("topic longer than 127 bytes or properties longer than 32767 bytes")
    size = _store_py.record_size(len(body), len(topic), len(properties), sys_flag)
    if pos < 0 or pos + size > limit:
        return 0, False
    if pos + size > len(memoryview(commitlog)) or unit_pos < 0 \
            or unit_pos + L.CQ_UNIT_SIZE > len(memoryview(consume_queue)):
        raise ValueError("the record or the unit does not fit in its buffer")
    _store_py.encode_record(commitlog, pos, topic, queue_id, flag, queue_offset, phy, sys_flag, born_timestamp,
                            born_host, store_timestamp, store_host, reconsume_times, 0, body, properties)
    L.CQ_UNIT.pack_into(consume_queue, unit_pos, phy, size, tags_code)
    if index is None or not key_hashes:
        return size, not key_hashes
    if any(h < 0 for h in key_hashes):
        raise ValueError("index key hashes must be >= 0 (index_hash)")
    n = len(key_hashes)
    if slots <= 0 or max_entries <= 0 or len(memoryview(index)) < L.index_file_size(slots, max_entries):
        return size, False
    slot_count = int.from_bytes(index[L.IDXH_HASH_SLOT_COUNT:L.IDXH_HASH_SLOT_COUNT + 4], "big", signed=True)
    count = int.from_bytes(index[L.IDXH_INDEX_COUNT:L.IDXH_INDEX_COUNT + 4], "big", signed=True)
    if count < 1 or count > max_entries or slot_count < 0 or slot_count > count or count + n > max_entries:
        return size, False
    for h in key_hashes:
        _store_py.index_put_one(index, slots, max_entries, h, phy, store_timestamp)
    return size, True


# --- PULL: twins of the pull pipeline's kernels (``_pipeline_pull.pxi``) ---------------------
#: an item of ``parse_pulls`` (``mqcore.kernel_api.PlainPull``): ``(opaque, group, topic, queue_id,
#: queue_offset, max_msg_nums, sys_flag, commit_offset, suspend_timeout_millis, subscription,
#: expression_type, frame_end)``
PlainPull = tuple[int, str, str, int, int, int, int, int, int, "str | None", "str | None", int]

_PULL_MESSAGE = 11
#: (field, int32?) of the pull header's numbers, in item order
_PULL_NUMBERS = (("queueId", True), ("queueOffset", False), ("maxMsgNums", True), ("sysFlag", True),
                 ("commitOffset", False), ("suspendTimeoutMillis", False), ("subVersion", False))
_PULL_KNOWN = frozenset({"consumerGroup", "topic", "subscription", "expressionType", "bname"}
                        | {k for k, _ in _PULL_NUMBERS})
_CANONICAL = re.compile(r"-?(0|[1-9][0-9]{0,18})")
_INT64 = 1 << 63


def _pairs_no_known_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen and (key in _PULL_KNOWN or key in _TOP_KEYS):
            raise ValueError(f"duplicate {key}")
        seen[key] = value
    return seen


def _plain_pull(view: memoryview, hdr_at: int, body_at: int, frame_end: int) -> PlainPull | None:
    raw = bytes(view[hdr_at:body_at])
    if not raw.isascii() or b"\\" in raw:
        return None  # an escape or a non-ASCII byte: the generic reader decides
    try:
        obj = json.loads(raw, object_pairs_hook=_pairs_no_known_duplicates)
    except (ValueError, RecursionError):
        return None
    request = _request_ext(obj, _PULL_MESSAGE, _PULL_KNOWN)
    if request is None:
        return None
    opaque, ext = request
    if "consumerGroup" not in ext or "topic" not in ext:
        return None
    numbers = []
    for key, is_int32 in _PULL_NUMBERS:
        text = ext.get(key)
        if text is None or not _CANONICAL.fullmatch(text):
            return None
        value = int(text)
        bound = _INT32 if is_int32 else _INT64
        if not -bound <= value < bound:
            return None
        numbers.append(value)
    queue_id, queue_offset, max_msg_nums, sys_flag, commit_offset, suspend, _sub_version = numbers
    return (opaque, ext["consumerGroup"], ext["topic"], queue_id, queue_offset, max_msg_nums, sys_flag, commit_offset,
            suspend, ext.get("subscription"), ext.get("expressionType"), frame_end)


def parse_pulls(buf: Any, start: int, end: int, max_frame_bytes: int) -> tuple[list[PlainPull], int]:
    """See ``_pipeline.parse_pulls``."""
    return _parse_frames(buf, start, end, max_frame_bytes, _plain_pull)


def pull_answer(code: int, opaque: int, remark: bytes, next_begin_offset: int, min_offset: int, max_offset: int,
                body_len: int, version: int) -> bytes:
    """See ``_pipeline.pull_answer``."""
    if body_len < 0 or len(remark) > 64:
        raise ValueError("a pull answer's remark is a short status name and its body length is not negative")
    header = (f'{{"code":{code},"extFields":{{"suggestWhichBrokerId":"0","nextBeginOffset":"{next_begin_offset}",'
              f'"minOffset":"{min_offset}","maxOffset":"{max_offset}"}},"flag":1,"language":"JAVA",'
              f'"opaque":{opaque},"remark":"').encode() + remark \
        + f'","serializeTypeCurrentRPC":"JSON","version":{version}}}'.encode()
    length = 4 + len(header) + body_len
    if length > 0x7FFFFFFF:
        raise ValueError(f"a pull answer of {length} bytes exceeds the int32 length field")
    return length.to_bytes(4, "big") + len(header).to_bytes(4, "big") + header


__all__ += ["parse_pulls", "pull_answer"]


# --- the broker's small shared state (_broker_state.pxi) ---

class ArrivalGate:
    """See ``_pipeline.ArrivalGate``: an arrival listener that calls ``listener`` only while
    ``waiting`` > 0 (the long-polling hold service counts its parked pulls here)."""

    __slots__ = ("listener", "waiting")

    def __init__(self, listener: Callable[[str, int, int], None]) -> None:
        self.listener = listener
        self.waiting = 0

    def __call__(self, topic: str, queue_id: int, max_offset: int) -> None:
        if self.waiting > 0:
            self.listener(topic, queue_id, max_offset)

__all__ += ["ArrivalGate", "Histogram"]
