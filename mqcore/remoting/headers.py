"""Typed custom headers: the ``extFields`` of requests and responses (spec §5).

Each header is a dataclass whose fields carry their wire key and kind in the field
metadata, so one generic reader/writer serves all of them (Java does the same with
reflection). Reading (``from_ext`` / ``from_command``) mirrors Java's
``decodeCommandCustomHeader``: missing ``NN`` (``@CFNotNull``) fields and integers that
do not parse raise :class:`~mqcore.errors.ProtocolError` with the class and key named,
booleans follow ``Boolean.parseBoolean`` (only ``"true"``, any case, is true), unknown
keys (``AccessKey``, ``Signature``, 5.x ``lo``/``ns``…) are ignored. Writing
(``to_ext``) renders values as Java's ``toString`` and skips ``None``.

A server answering a malformed request lets the ProtocolError propagate: the
dispatcher turns it into SYSTEM_ERROR with the message as remark, as Java does.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from mqcore.errors import IllegalArgumentError, ProtocolError
from mqcore.remoting.codes import RequestCode

__all__ = [
    "ExtHeader",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "RecallMessageRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "ConsumerSendMsgBackRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "OffsetResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "ViewMessageRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "UnregisterClientRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "EndTransactionRequestHeader",
    "CheckTransactionStateRequestHeader",
    "ReplyMessageRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteTopicRequestHeader",
    "GetRouteInfoRequestHeader",
    "RegisterBrokerRequestHeader",
    "RegisterBrokerResponseHeader",
    "UnregisterBrokerRequestHeader",
    # request bodies live in bodies.py; re-exported for convenience
    "MessageQueue",
    "LockBatchRequestBody",
    "UnlockBatchRequestBody",
    "LockBatchResponseBody",
    "GetConsumerListByGroupResponseBody",
]

from mqcore.remoting.bodies import (  # re-exported: the lock bodies travel with these headers
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    UnlockBatchRequestBody,
)

# --- field kinds ----------------------------------------------------------------------
STR, INT, LONG, BOOL = "str", "int", "long", "bool"
_RANGES = {INT: (-(1 << 31), (1 << 31) - 1), LONG: (-(1 << 63), (1 << 63) - 1)}

H = TypeVar("H", bound="ExtHeader")


def _nn(key: str, kind: str, v2: str | None = None) -> Any:
    """A required (``@CFNotNull``) field: no default, must be on the wire."""
    return field(metadata={"key": key, "kind": kind, "nn": True, "v2": v2})


def _opt(key: str, kind: str, default: Any = None, v2: str | None = None) -> Any:
    """An optional field (absent on the wire => ``default``)."""
    return field(default=default, metadata={"key": key, "kind": kind, "nn": False, "v2": v2})


_Spec = tuple[str, str, str, bool]  # attribute, wire key, kind, nn
_SPEC_CACHE: dict[tuple[type, str], tuple[_Spec, ...]] = {}


def _specs(cls: type, key_attr: str) -> tuple[_Spec, ...]:
    """(attribute, wire key, kind, nn) per field, in declaration order (memoised;
    header classes are immutable definitions, so the cache never goes stale)."""
    specs = _SPEC_CACHE.get((cls, key_attr))
    if specs is None:
        specs = tuple(
            (f.name, f.metadata[key_attr], f.metadata["kind"], f.metadata["nn"])
            for f in dataclasses.fields(cls)
            if f.metadata.get(key_attr)
        )
        _SPEC_CACHE[(cls, key_attr)] = specs
    return specs


def _parse_value(owner: str, key: str, kind: str, raw: Any) -> Any:
    if type(raw) is not str:  # a caller-built dict; wire values are always str
        raw = ("true" if raw else "false") if isinstance(raw, bool) else str(raw)
    if kind is STR:
        return raw
    if kind is BOOL:
        return raw.strip().lower() == "true"
    # int() is the fast path; it also takes "1_000" and non-ASCII digits, which Java refuses
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or "_" in raw or not raw.isascii():
        raise ProtocolError(f"{owner}: header field {key!r} must be an integer, got {raw!r}")
    lo, hi = _RANGES[kind]
    if not lo <= value <= hi:
        raise ProtocolError(f"{owner}: header field {key!r}={value} is out of {kind} range")
    return value


def _render(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    return str(value)


def _read(cls: type[H], ext: Mapping[str, Any], key_attr: str) -> H:
    kwargs: dict[str, Any] = {}
    for attr, key, kind, nn in _specs(cls, key_attr):
        raw = ext.get(key)
        if raw is None:
            if nn:
                raise ProtocolError(f"{cls.__name__}: missing required header field {key!r}")
            continue
        kwargs[attr] = _parse_value(cls.__name__, key, kind, raw)
    return cls(**kwargs)


def _write(header: ExtHeader, key_attr: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for attr, key, _kind, nn in _specs(type(header), key_attr):
        value = getattr(header, attr)
        if value is None:
            if nn:
                raise IllegalArgumentError(f"{type(header).__name__}.{attr} is required")
            continue
        out[key] = _render(value)
    return out


def _plain_str(value: Any) -> str:
    if type(value) is not str:
        raise ValueError(value)
    return value


def _plain_int(value: Any, max_digits: int) -> int:
    """A non-negative decimal of at most ``max_digits`` ASCII digits (so within range)."""
    if type(value) is not str or not (value.isascii() and value.isdigit()) or len(value) > max_digits:
        raise ValueError(value)
    return int(value)


def _plain_bool(value: Any) -> bool:
    if value == "false":
        return False
    if value == "true":
        return True
    raise ValueError(value)


class ExtHeader:
    """Base of all headers: generic read/write over the field metadata."""

    __slots__ = ()

    @classmethod
    def from_ext(cls: type[H], ext: Mapping[str, Any]) -> H:
        return _read(cls, ext, "key")

    @classmethod
    def from_command(cls: type[H], cmd: Any) -> H:
        """Read from a :class:`~mqcore.remoting.command.RemotingCommand`'s ext fields."""
        return cls.from_ext(cmd.ext_fields)

    def to_ext(self) -> dict[str, str]:
        return _write(self, "key")


# ======================================================================================
# SEND
# ======================================================================================
@dataclass(slots=True)
class SendMessageRequestHeader(ExtHeader):
    """SEND_MESSAGE (10, long names) and SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (310/320,
    single letters ``a``..``n``) in one class. Defaults match what a 4.9.8 Java client
    sends (``j``=0, ``k``/``m``=false), so ``to_ext_v2`` reproduces its header."""

    V2_CODES: ClassVar[frozenset[int]] = frozenset(
        {RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2}
    )
    #: the v2 keys in field order (what ``to_ext_v2`` writes when every field is set): the
    #: order a caller writing the header in one step gives its values in
    V2_KEYS: ClassVar[tuple[str, ...]] = tuple("abcdefghijklmn")

    producer_group: str = _nn("producerGroup", STR, v2="a")
    topic: str = _nn("topic", STR, v2="b")
    default_topic: str = _nn("defaultTopic", STR, v2="c")
    default_topic_queue_nums: int = _nn("defaultTopicQueueNums", INT, v2="d")
    queue_id: int = _nn("queueId", INT, v2="e")
    sys_flag: int = _nn("sysFlag", INT, v2="f")
    born_timestamp: int = _nn("bornTimestamp", LONG, v2="g")
    flag: int = _nn("flag", INT, v2="h")
    properties: str | None = _opt("properties", STR, v2="i")
    reconsume_times: int | None = _opt("reconsumeTimes", INT, 0, v2="j")
    unit_mode: bool | None = _opt("unitMode", BOOL, False, v2="k")
    max_reconsume_times: int | None = _opt("maxReconsumeTimes", INT, v2="l")
    batch: bool | None = _opt("batch", BOOL, False, v2="m")
    broker_name: str | None = _opt("bname", STR, v2="n")

    @classmethod
    def from_ext_v1(cls, ext: Mapping[str, Any]) -> SendMessageRequestHeader:
        return _read(cls, ext, "key")

    @classmethod
    def from_ext_v2(cls, ext: Mapping[str, Any]) -> SendMessageRequestHeader:
        try:
            return cls._from_plain_v2(ext)
        except (KeyError, ValueError):  # anything unusual: the generic reader decides (and names the field)
            return _read(cls, ext, "v2")

    @classmethod
    def _from_plain_v2(cls, ext: Mapping[str, Any]) -> SendMessageRequestHeader:
        """The header every client sends on every send: plain strings, non-negative decimals,
        ``true``/``false``. The same result as ``_read`` for that input, without its generic
        per-field steps; raises KeyError/ValueError for anything else."""
        j, k, l, m, n = ext.get("j"), ext.get("k"), ext.get("l"), ext.get("m"), ext.get("n")
        return cls(_plain_str(ext["a"]), _plain_str(ext["b"]), _plain_str(ext["c"]), _plain_int(ext["d"], 9),
                   _plain_int(ext["e"], 9), _plain_int(ext["f"], 9), _plain_int(ext["g"], 18),
                   _plain_int(ext["h"], 9), None if (i := ext.get("i")) is None else _plain_str(i),
                   0 if j is None else _plain_int(j, 9), False if k is None else _plain_bool(k),
                   None if l is None else _plain_int(l, 9), False if m is None else _plain_bool(m),
                   None if n is None else _plain_str(n))

    @classmethod
    def from_ext(cls, ext: Mapping[str, Any], code: int | None = None) -> SendMessageRequestHeader:
        """Pick the key set by content (a client may send either), else by ``code``."""
        if "producerGroup" in ext or "topic" in ext:
            return cls.from_ext_v1(ext)
        if "a" in ext or "b" in ext or (code is not None and code in cls.V2_CODES):
            return cls.from_ext_v2(ext)
        return cls.from_ext_v1(ext)

    @classmethod
    def from_command(cls, cmd: Any) -> SendMessageRequestHeader:
        return cls.from_ext(cmd.ext_fields, cmd.code)

    def to_ext_v1(self) -> dict[str, str]:
        return _write(self, "key")

    def to_ext_v2(self) -> dict[str, str]:
        """Short keys in ``a``..``n`` order (= Java HashMap order for one-letter keys)."""
        return _write(self, "v2")

    def to_ext(self, code: int = RequestCode.SEND_MESSAGE) -> dict[str, str]:
        return self.to_ext_v2() if code in self.V2_CODES else self.to_ext_v1()


_V2_KEYS = frozenset("abcdefghijklmn")
_BOOL_TEXT = ("false", "true")


def plain_send_v2_fields(ext: Mapping[str, Any]) -> tuple[str, str, int, int, int, int, str | None, int] | None:
    """(producer group, topic, queue id, sys flag, born timestamp, flag, properties,
    reconsume times) of a SEND_MESSAGE_V2 header of the usual shape, read with a handful
    of steps (the send fast path); None for anything else (a batch, ``m=true``, too), which then goes through
    ``SendMessageRequestHeader.from_command`` (and its errors).

    "Usual" is what ``_from_plain_v2`` reads - only keys ``a``..``n``, strings, decimals
    of at most 9 (``g``: 18) ASCII digits, ``true``/``false`` - and for those values the
    fields are the ones it gives (tests/broker/test_send_fast_paths.py checks both ways)."""
    if not ext.keys() <= _V2_KEYS:
        return None
    try:
        a, b, c, d, e, f, g, h = ext["a"], ext["b"], ext["c"], ext["d"], ext["e"], ext["f"], ext["g"], ext["h"]
    except KeyError:
        return None
    j, k, l, m, n, i = ext.get("j", "0"), ext.get("k", "false"), ext.get("l", "0"), ext.get("m", "false"), \
        ext.get("n", ""), ext.get("i", "")
    try:
        # one concatenation checks the types of all string fields at once (TypeError otherwise)
        digits = d + e + f + g + h + j + l
        a + b + c + i + n  # noqa: B018
    except TypeError:
        return None
    if not (digits.isascii() and digits.isdigit()) or k not in _BOOL_TEXT or m != "false":
        return None
    if not (0 < len(d) <= 9 and 0 < len(e) <= 9 and 0 < len(f) <= 9 and 0 < len(g) <= 18 and 0 < len(h) <= 9
            and 0 < len(j) <= 9 and 0 < len(l) <= 9):
        return None
    return a, b, int(e), int(f), int(g), int(h), ext.get("i"), int(j)


@dataclass(slots=True)
class SendMessageResponseHeader(ExtHeader):
    """SEND response; ``MSG_REGION``/``TRACE_ON`` are what a Java broker adds (clients
    read ``MSG_REGION`` unguarded). Wrap ``to_ext()`` in ``java_hashmap_order`` for
    byte-identical Java output."""

    msg_id: str = _nn("msgId", STR)
    queue_id: int = _nn("queueId", INT)
    queue_offset: int = _nn("queueOffset", LONG)
    transaction_id: str | None = _opt("transactionId", STR)
    msg_region: str | None = _opt("MSG_REGION", STR, "DefaultRegion")
    trace_on: bool | None = _opt("TRACE_ON", BOOL, True)

    @classmethod
    def from_ext(cls, ext: Mapping[str, Any]) -> SendMessageResponseHeader:
        """Every send's answer: read directly when its values are plain (strings,
        non-negative decimals, ``true``/``false``), else by the generic reader, which
        gives the same header or names the bad field."""
        try:
            t, r, o = ext.get("transactionId"), ext.get("MSG_REGION"), ext.get("TRACE_ON")
            return cls(_plain_str(ext["msgId"]), _plain_int(ext["queueId"], 9), _plain_int(ext["queueOffset"], 18),
                       None if t is None else _plain_str(t), "DefaultRegion" if r is None else _plain_str(r),
                       True if o is None else _plain_bool(o))
        except (KeyError, ValueError):
            return _read(cls, ext, "key")


# ======================================================================================
# PULL and offsets
# ======================================================================================
@dataclass(slots=True)
class PullMessageRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    queue_offset: int = _nn("queueOffset", LONG)
    max_msg_nums: int = _nn("maxMsgNums", INT)
    sys_flag: int = _nn("sysFlag", INT)
    commit_offset: int = _nn("commitOffset", LONG)
    suspend_timeout_millis: int = _nn("suspendTimeoutMillis", LONG)
    sub_version: int = _nn("subVersion", LONG)
    subscription: str | None = _opt("subscription", STR)
    expression_type: str | None = _opt("expressionType", STR)
    broker_name: str | None = _opt("bname", STR)
    max_msg_bytes: int | None = _opt("maxMsgBytes", INT)  # 5.x


@dataclass(slots=True)
class PullMessageResponseHeader(ExtHeader):
    """All four are required in every pull response: the Java client unboxes them."""

    suggest_which_broker_id: int = _nn("suggestWhichBrokerId", LONG)
    next_begin_offset: int = _nn("nextBeginOffset", LONG)
    min_offset: int = _nn("minOffset", LONG)
    max_offset: int = _nn("maxOffset", LONG)


@dataclass(slots=True)
class ConsumerSendMsgBackRequestHeader(ExtHeader):
    offset: int = _nn("offset", LONG)  # commitlog offset of the message
    group: str = _nn("group", STR)
    delay_level: int = _nn("delayLevel", INT)
    origin_msg_id: str | None = _opt("originMsgId", STR)
    origin_topic: str | None = _opt("originTopic", STR)
    unit_mode: bool | None = _opt("unitMode", BOOL, False)
    max_reconsume_times: int | None = _opt("maxReconsumeTimes", INT)
    broker_name: str | None = _opt("bname", STR)


@dataclass(slots=True)
class UpdateConsumerOffsetRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    commit_offset: int = _nn("commitOffset", LONG)
    broker_name: str | None = _opt("bname", STR)


@dataclass(slots=True)
class QueryConsumerOffsetRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    broker_name: str | None = _opt("bname", STR)
    set_zero_if_not_found: bool | None = _opt("setZeroIfNotFound", BOOL)  # 5.x


@dataclass(slots=True)
class OffsetResponseHeader(ExtHeader):
    """``offset`` response of QUERY_CONSUMER_OFFSET, GET_MAX/MIN_OFFSET, SEARCH_OFFSET."""

    offset: int = _nn("offset", LONG)


QueryConsumerOffsetResponseHeader = OffsetResponseHeader
GetMaxOffsetResponseHeader = OffsetResponseHeader
GetMinOffsetResponseHeader = OffsetResponseHeader
SearchOffsetResponseHeader = OffsetResponseHeader


@dataclass(slots=True)
class _TopicQueueHeader(ExtHeader):
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    broker_name: str | None = _opt("bname", STR)


@dataclass(slots=True)
class GetMaxOffsetRequestHeader(_TopicQueueHeader):
    """GET_MAX_OFFSET (30): answer = next offset to be written."""


@dataclass(slots=True)
class GetMinOffsetRequestHeader(_TopicQueueHeader):
    """GET_MIN_OFFSET (31)."""


@dataclass(slots=True)
class GetEarliestMsgStoretimeRequestHeader(_TopicQueueHeader):
    """GET_EARLIEST_MSG_STORETIME (32)."""


@dataclass(slots=True)
class GetEarliestMsgStoretimeResponseHeader(ExtHeader):
    timestamp: int = _nn("timestamp", LONG)


@dataclass(slots=True)
class SearchOffsetRequestHeader(ExtHeader):
    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    timestamp: int = _nn("timestamp", LONG)
    broker_name: str | None = _opt("bname", STR)


# ======================================================================================
# query / view / clients
# ======================================================================================
@dataclass(slots=True)
class QueryMessageRequestHeader(ExtHeader):
    """QUERY_MESSAGE (12); ``_UNIQUE_KEY_QUERY=true`` when looking up by UNIQ_KEY."""

    topic: str = _nn("topic", STR)
    key: str = _nn("key", STR)
    max_num: int = _nn("maxNum", INT)
    begin_timestamp: int = _nn("beginTimestamp", LONG)
    end_timestamp: int = _nn("endTimestamp", LONG)
    unique_key_query: bool | None = _opt("_UNIQUE_KEY_QUERY", BOOL)


@dataclass(slots=True)
class QueryMessageResponseHeader(ExtHeader):
    index_last_update_timestamp: int = _nn("indexLastUpdateTimestamp", LONG)
    index_last_update_phyoffset: int = _nn("indexLastUpdatePhyoffset", LONG)


@dataclass(slots=True)
class ViewMessageRequestHeader(ExtHeader):
    offset: int = _nn("offset", LONG)  # commitlog offset (from offsetMsgId)


@dataclass(slots=True)
class GetConsumerListByGroupRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)


@dataclass(slots=True)
class UnregisterClientRequestHeader(ExtHeader):
    client_id: str = _nn("clientID", STR)
    producer_group: str | None = _opt("producerGroup", STR)
    consumer_group: str | None = _opt("consumerGroup", STR)


@dataclass(slots=True)
class NotifyConsumerIdsChangedRequestHeader(ExtHeader):
    consumer_group: str = _nn("consumerGroup", STR)


@dataclass(slots=True)
class EndTransactionRequestHeader(ExtHeader):
    """END_TRANSACTION (37, oneway). ``commitOrRollback``: 0 unknown, 8 commit, 12 rollback."""

    producer_group: str = _nn("producerGroup", STR)
    tran_state_table_offset: int = _nn("tranStateTableOffset", LONG)
    commit_log_offset: int = _nn("commitLogOffset", LONG)
    commit_or_rollback: int = _nn("commitOrRollback", INT)
    msg_id: str = _nn("msgId", STR)
    from_transaction_check: bool | None = _opt("fromTransactionCheck", BOOL, False)
    transaction_id: str | None = _opt("transactionId", STR)
    broker_name: str | None = _opt("bname", STR)


@dataclass(slots=True)
class RecallMessageRequestHeader(ExtHeader):
    """RECALL_MESSAGE (370, 5.3): recall a timer message by the handle its send answer gave."""

    topic: str = _nn("topic", STR)
    recall_handle: str = _nn("recallHandle", STR)
    producer_group: str | None = _opt("producerGroup", STR)
    broker_name: str | None = _opt("bname", STR)


@dataclass(slots=True)
class CheckTransactionStateRequestHeader(ExtHeader):
    """CHECK_TRANSACTION_STATE (39, broker -> producer, oneway); body = the half message."""

    tran_state_table_offset: int | None = _opt("tranStateTableOffset", LONG)
    commit_log_offset: int | None = _opt("commitLogOffset", LONG)
    msg_id: str | None = _opt("msgId", STR)
    transaction_id: str | None = _opt("transactionId", STR)
    offset_msg_id: str | None = _opt("offsetMsgId", STR)


@dataclass(slots=True)
class ReplyMessageRequestHeader(ExtHeader):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326, broker -> requesting client); body = the reply's
    body. The replier's send header (long names) plus where and when the broker got it:
    ``bornHost``/``storeHost`` as ``host:port``, ``storeTimestamp`` in epoch ms."""

    producer_group: str = _nn("producerGroup", STR)
    topic: str = _nn("topic", STR)
    default_topic: str = _nn("defaultTopic", STR)
    default_topic_queue_nums: int = _nn("defaultTopicQueueNums", INT)
    queue_id: int = _nn("queueId", INT)
    sys_flag: int = _nn("sysFlag", INT)
    born_timestamp: int = _nn("bornTimestamp", LONG)
    flag: int = _nn("flag", INT)
    born_host: str = _nn("bornHost", STR)
    store_host: str = _nn("storeHost", STR)
    store_timestamp: int = _nn("storeTimestamp", LONG)
    properties: str | None = _opt("properties", STR)
    reconsume_times: int | None = _opt("reconsumeTimes", INT)
    unit_mode: bool | None = _opt("unitMode", BOOL, False)


# ======================================================================================
# admin and name server
# ======================================================================================
@dataclass(slots=True)
class CreateTopicRequestHeader(ExtHeader):
    topic: str = _nn("topic", STR)
    default_topic: str = _nn("defaultTopic", STR)
    read_queue_nums: int = _nn("readQueueNums", INT)
    write_queue_nums: int = _nn("writeQueueNums", INT)
    perm: int = _nn("perm", INT)
    topic_filter_type: str = _nn("topicFilterType", STR)  # SINGLE_TAG / MULTI_TAG
    topic_sys_flag: int | None = _opt("topicSysFlag", INT)
    order: bool | None = _opt("order", BOOL, False)


@dataclass(slots=True)
class DeleteTopicRequestHeader(ExtHeader):
    """DELETE_TOPIC_IN_BROKER (215) / DELETE_TOPIC_IN_NAMESRV (216)."""

    topic: str = _nn("topic", STR)


@dataclass(slots=True)
class GetRouteInfoRequestHeader(ExtHeader):
    topic: str = _nn("topic", STR)
    accept_standard_json_only: bool | None = _opt("acceptStandardJsonOnly", BOOL)


@dataclass(slots=True)
class RegisterBrokerRequestHeader(ExtHeader):
    """REGISTER_BROKER (103). ``body_crc32`` = ``crc32(body) & 0x7FFFFFFF``, 0 = unchecked."""

    broker_name: str = _nn("brokerName", STR)
    broker_addr: str = _nn("brokerAddr", STR)
    cluster_name: str = _nn("clusterName", STR)
    ha_server_addr: str = _nn("haServerAddr", STR)
    broker_id: int = _nn("brokerId", LONG)
    compressed: bool | None = _opt("compressed", BOOL, False)
    body_crc32: int | None = _opt("bodyCrc32", INT, 0)


@dataclass(slots=True)
class RegisterBrokerResponseHeader(ExtHeader):
    ha_server_addr: str | None = _opt("haServerAddr", STR)
    master_addr: str | None = _opt("masterAddr", STR)


@dataclass(slots=True)
class UnregisterBrokerRequestHeader(ExtHeader):
    broker_name: str = _nn("brokerName", STR)
    broker_addr: str = _nn("brokerAddr", STR)
    cluster_name: str = _nn("clusterName", STR)
    broker_id: int = _nn("brokerId", LONG)


# ======================================================================================
# ADMIN AND TOOLING (mqadmin, DefaultMQAdminExt)
# ======================================================================================
@dataclass(slots=True)
class QueryConsumeTimeSpanRequestHeader(ExtHeader):
    """QUERY_CONSUME_TIME_SPAN (303)."""

    topic: str = _nn("topic", STR)
    group: str = _nn("group", STR)


@dataclass(slots=True)
class CloneGroupOffsetRequestHeader(ExtHeader):
    """CLONE_GROUP_OFFSET (314): ``topic`` empty or absent clones every topic of ``srcGroup``."""

    src_group: str = _nn("srcGroup", STR)
    dest_group: str = _nn("destGroup", STR)
    topic: str | None = _opt("topic", STR)
    offline: bool | None = _opt("offline", BOOL, False)


@dataclass(slots=True)
class ViewBrokerStatsDataRequestHeader(ExtHeader):
    """VIEW_BROKER_STATS_DATA (315)."""

    stats_name: str = _nn("statsName", STR)
    stats_key: str = _nn("statsKey", STR)


@dataclass(slots=True)
class GetConsumeStatsInBrokerHeader(ExtHeader):
    """GET_BROKER_CONSUME_STATS (317)."""

    is_order: bool | None = _opt("isOrder", BOOL, False)


@dataclass(slots=True)
class QueryConsumeQueueRequestHeader(ExtHeader):
    """QUERY_CONSUME_QUEUE (321)."""

    topic: str = _nn("topic", STR)
    queue_id: int = _nn("queueId", INT)
    index: int = _nn("index", LONG)
    count: int = _nn("count", INT)
    consumer_group: str | None = _opt("consumerGroup", STR)


@dataclass(slots=True)
class GetConsumerRunningInfoRequestHeader(ExtHeader):
    """GET_CONSUMER_RUNNING_INFO (307): tool -> broker -> client."""

    consumer_group: str = _nn("consumerGroup", STR)
    client_id: str = _nn("clientId", STR)
    jstack_enable: bool | None = _opt("jstackEnable", BOOL, False)


@dataclass(slots=True)
class ConsumeMessageDirectlyResultRequestHeader(ExtHeader):
    """CONSUME_MESSAGE_DIRECTLY (309): tool -> broker -> client (the broker adds ``brokerName``
    and the message's record as the body)."""

    consumer_group: str = _nn("consumerGroup", STR)
    client_id: str | None = _opt("clientId", STR)
    msg_id: str | None = _opt("msgId", STR)
    broker_name: str | None = _opt("brokerName", STR)


@dataclass(slots=True)
class WipeWritePermOfBrokerRequestHeader(ExtHeader):
    """WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327), to the name server."""

    broker_name: str = _nn("brokerName", STR)


@dataclass(slots=True)
class GetTopicsByClusterRequestHeader(ExtHeader):
    """GET_TOPICS_BY_CLUSTER (224), to the name server."""

    cluster: str = _nn("cluster", STR)
