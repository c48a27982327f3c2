"""Names in requests: every topic and group a request carries is checked before any
processor sees it (``check_request``, wrapped around each processor at registration).

Topic names follow the broker's ``TopicValidator`` (1..127 characters of
``[%|a-zA-Z0-9_-]``, same response code and remark as Apache RocketMQ 4.9). Group names
follow the rules RocketMQ's clients apply (1..255 characters of the same set): a 4.9
broker itself accepts any group, but here groups become file paths (``%RETRY%<group>``
consume queues) and config keys, so ``''``, ``'..'`` or ``'a/../../b'`` must never get in.

Sends to the topics the broker owns are refused as Apache 4.9 refuses them (checked
against the Java broker in tests/reference/test_hardening_reference.py): the delay
topic, the transaction topics and the other internal ones answer NO_PERMISSION. The
auto-create key topic ``TBW102``, the trace topic and ``rmq_sys_*`` stay writable,
as in 4.9 (message trace writes ``RMQ_SYS_TRACE_TOPIC`` from clients).
"""
from __future__ import annotations

import functools
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Callable

from mqcore.errors import ProtocolError
from mqcore.format import layout as L
from mqcore.format.names import MAX_GROUP_LENGTH, NAME_CHARS_TEXT, valid_name_chars
from mqcore.jsonutil import loads_lenient
from mqcore.message import (  # defined below the broker: the dashboard applies the same rules
    NOT_ALLOWED_SEND_TOPICS,
    is_system_topic,
    system_topic_refusal,
)
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import RemotingCommand, ResponseCode, create_response
from mqcore.tags import unparsable

if TYPE_CHECKING:
    from mqcore.remoting.channel import Channel
    from mqcore.remoting.command import Body
    from mqcore.remoting.dispatch import Processor, ProcessorResult

_ILLEGAL_CHARS = f"contains illegal characters, allowing only ^{NAME_CHARS_TEXT}+$"

SEND_CODES = frozenset({RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE, RC.SEND_REPLY_MESSAGE})
_V2_CODES = frozenset({RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE, RC.SEND_REPLY_MESSAGE_V2})
# header keys naming a topic or a group; SEND_MESSAGE_V2 abbreviates them to letters
_TOPIC_KEYS = ("topic",)
_GROUP_KEYS = ("consumerGroup", "producerGroup", "group", "groupName")  # groupName: DELETE_SUBSCRIPTIONGROUP
_V2_TOPIC_KEYS = ("b",)
_V2_GROUP_KEYS = ("a",)


def topic_problem(topic: Any) -> str | None:
    """Apache's remark for an invalid topic name, or None."""
    if not isinstance(topic, str):
        return "The specified topic is blank."
    return _topic_problem(topic)


#: a broker sees the same few names on every request, so verdicts on names of a plausible
#: length are remembered; the cache is bounded (hostile names only push older ones out)
_NAME_CACHE = 4096


def _topic_problem(topic: str) -> str | None:
    return _topic_verdict(topic) if len(topic) <= MAX_GROUP_LENGTH else _topic_verdict.__wrapped__(topic)


def _group_problem(group: str) -> str | None:
    return _group_verdict(group) if len(group) <= MAX_GROUP_LENGTH + 1 else _group_verdict.__wrapped__(group)


@functools.lru_cache(maxsize=_NAME_CACHE)
def _topic_verdict(topic: str) -> str | None:
    if not topic.strip():
        return "The specified topic is blank."
    if not valid_name_chars(topic):
        return f"The specified topic {_ILLEGAL_CHARS}"
    if len(topic) > L.MAX_TOPIC_LENGTH:
        return "The specified topic is longer than topic max length."
    return None


def group_problem(group: Any) -> str | None:
    """Why a group name is refused (RocketMQ ``Validators.checkGroup`` rules), or None."""
    if not isinstance(group, str):
        return "the specified group is blank"
    return _group_problem(group)


@functools.lru_cache(maxsize=_NAME_CACHE)
def _group_verdict(group: str) -> str | None:
    if not group.strip():
        return "the specified group is blank"
    if not valid_name_chars(group):
        return f"the specified group[{group[:80]}] {_ILLEGAL_CHARS}"
    if len(group) > MAX_GROUP_LENGTH:
        return f"the specified group is longer than group max length {MAX_GROUP_LENGTH}."
    return None


def send_refusal(topic: Any) -> str | None:
    """Apache's remark refusing a producer's send to a topic the broker owns, or None.
    One rule for every way in: remoting sends here, the gRPC endpoint's SendMessage too."""
    if topic in NOT_ALLOWED_SEND_TOPICS:
        return f"Sending message to topic[{topic}] is forbidden."
    return None


def _body_names(code: int, body: Body) -> tuple[list[Any], list[Any]]:
    """(topics, groups) named in the JSON body of the requests that carry them there."""
    if code not in (RC.HEART_BEAT, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, RC.LOCK_BATCH_MQ, RC.UNLOCK_BATCH_MQ) \
            or not body:
        return [], []
    try:
        data = loads_lenient(bytes(body))
    except (ProtocolError, ValueError, RecursionError):
        return [], []  # the processor answers a malformed body itself
    if not isinstance(data, dict):
        return [], []
    topics: list[Any] = []
    groups: list[Any] = []
    if code == RC.HEART_BEAT:
        for key in ("consumerDataSet", "producerDataSet"):
            for item in data.get(key) or ():
                if isinstance(item, dict):
                    groups.append(item.get("groupName"))
                    for sub in item.get("subscriptionDataSet") or ():
                        if isinstance(sub, dict):
                            topics.append(sub.get("topic"))
    elif code == RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:
        groups.append(data.get("groupName"))
    else:
        groups.append(data.get("consumerGroup"))
        for mq in data.get("mqSet") or ():
            if isinstance(mq, dict):
                topics.append(mq.get("topic"))
    return topics, groups


#: PULL_MESSAGE sysFlag bit: the request carries its subscription expression
_PULL_HAS_SUBSCRIPTION = 0x4


def subscription_unparsable(expression: Any) -> bool:
    """RocketMQ's ``FilterAPI`` fails on an expression that splits on ``||`` into nothing
    (Java's split drops trailing empty pieces): ``"||"``, ``"||||"``. An expression of
    blank tags (``" || "``) parses, to no tag at all, and matches nothing."""
    return isinstance(expression, str) and unparsable(expression)


def check_request(code: int, request: RemotingCommand,
                  consume_enabled: Callable[[str], bool] | None = None) -> RemotingCommand | None:
    """The error response for a request naming an invalid or forbidden topic or group
    (or pulling with an unparsable subscription, or for a group whose ``consumeEnable`` is
    false), or None when the request may go to its processor."""
    ext = request.ext_fields or {}
    v2 = code in _V2_CODES
    if v2:
        return _check_send_v2(request, ext)
    topics = [ext[k] for k in (_V2_TOPIC_KEYS if v2 else _TOPIC_KEYS) if k in ext]
    groups = [ext[k] for k in (_V2_GROUP_KEYS if v2 else _GROUP_KEYS) if k in ext]
    if code == RC.UNREGISTER_CLIENT:
        groups = [g for g in groups if g != ""]  # the C++ client sends the group it is not as ''
    more_topics, more_groups = _body_names(code, request.body)
    # a field of the wrong type (a dict, a number) is the processor's to answer: its header
    # parsing reports the shape error precisely; here only names that are strings are judged
    topics = [t for t in topics if isinstance(t, str)]
    more_topics = [t for t in more_topics if isinstance(t, str)]
    groups = [g for g in groups + more_groups if isinstance(g, str)]
    for topic in topics + more_topics:
        problem = topic_problem(topic)
        if problem:
            return create_response(request, ResponseCode.SYSTEM_ERROR, problem)
    for group in groups:
        problem = group_problem(group)
        if problem:
            return create_response(request, ResponseCode.SYSTEM_ERROR, problem)
    if code in SEND_CODES and topics and send_refusal(topics[0]):
        return create_response(request, ResponseCode.NO_PERMISSION, send_refusal(topics[0]))
    if code == RC.UPDATE_AND_CREATE_TOPIC and topics and is_system_topic(topics[0]):
        return create_response(request, ResponseCode.SYSTEM_ERROR, system_topic_refusal(topics[0]))
    if code in (RC.PULL_MESSAGE, RC.LITE_PULL_MESSAGE):
        group = ext.get("consumerGroup", "")
        if consume_enabled is not None and isinstance(group, str) and not consume_enabled(group):
            return create_response(request, ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}")
        if _int(ext.get("sysFlag")) & _PULL_HAS_SUBSCRIPTION and subscription_unparsable(ext.get("subscription")):
            return create_response(request, ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                                   "parse the consumer's subscription failed")
    return None


def _check_send_v2(request: RemotingCommand, ext: Mapping[str, Any]) -> RemotingCommand | None:
    """``check_request`` for SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE, the hot path: one topic
    (``b``) and one group (``a``) in the header, nothing in the body."""
    topic = ext.get("b")
    if isinstance(topic, str):
        problem = _topic_problem(topic)
        if problem:
            return create_response(request, ResponseCode.SYSTEM_ERROR, problem)
    group = ext.get("a")
    if isinstance(group, str):
        problem = _group_problem(group)
        if problem:
            return create_response(request, ResponseCode.SYSTEM_ERROR, problem)
    if isinstance(topic, str) and topic in NOT_ALLOWED_SEND_TOPICS:
        return create_response(request, ResponseCode.NO_PERMISSION, send_refusal(topic))
    return None


def send_v2_names_pass(topic: str, group: str) -> bool:
    """True when ``check_request`` lets a SEND_MESSAGE_V2 naming these (string) topic and
    group through: the send fast path's guard, the same verdicts without a response."""
    return _topic_problem(topic) is None and _group_problem(group) is None and topic not in NOT_ALLOWED_SEND_TOPICS


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0  # the processor's header parsing answers a malformed number


def guarded(code: int, processor: Processor, consume_enabled: Callable[[str], bool] | None = None) -> Processor:
    """``processor`` behind ``check_request`` (the dispatcher awaits what it returns, so
    one wrapper serves sync and async processors)."""
    def run(channel: Channel, request: RemotingCommand) -> ProcessorResult | Awaitable[ProcessorResult]:
        refused = check_request(code, request, consume_enabled)
        return refused if refused is not None else processor(channel, request)
    return run


def pull_names_pass(topic: str, group: str, sys_flag: int, subscription: str | None,
                    consume_enabled: Callable[[str], bool] | None = None) -> bool:
    """True when ``check_request`` lets a PULL_MESSAGE with just these fields through: the
    pull pipeline's guard, the same verdicts without a response."""
    if _topic_problem(topic) is not None or _group_problem(group) is not None:
        return False
    if consume_enabled is not None and not consume_enabled(group):
        return False
    return not (sys_flag & _PULL_HAS_SUBSCRIPTION and subscription_unparsable(subscription))
