"""What a request touches: request code -> the topics and groups it needs, and how.

Follows RocketMQ 4.9.8's ``PlainAccessValidator.parse`` (groups are resources named
``%RETRY%<group>``), with the differences docs/ACCESS_CONTROL.md lists:

=============================  ==================================================
SEND_MESSAGE, SEND_MESSAGE_V2  PUB on the topic; a send to ``%RETRY%g`` needs SUB on group g
SEND_BATCH_MESSAGE             as SEND_MESSAGE_V2 (4.9.8 checks no resource: mqcore's addition)
CONSUMER_SEND_MSG_BACK         SUB on the group
PULL_MESSAGE, LITE_PULL_MESSAGE SUB on the topic and on the group
QUERY_MESSAGE                  SUB on the topic
HEART_BEAT                     SUB on each consumer group and each topic it subscribes
UNREGISTER_CLIENT              SUB on the consumer group (if one is named)
GET_CONSUMER_LIST_BY_GROUP     SUB on the group
UPDATE/QUERY_CONSUMER_OFFSET   SUB on the topic and the group (QUERY: mqcore's addition)
LOCK/UNLOCK_BATCH_MQ           SUB on the group and its queues' topics (mqcore's addition)
RECALL_MESSAGE                 PUB on the topic (only who may send to it recalls from it)
QUERY_ASSIGNMENT               SUB on the body's topic and group (5.x; mqcore's addition)
SET_MESSAGE_REQUEST_MODE       SUB on the body's topic and group (5.x; mqcore's addition)
=============================  ==================================================

Every other code needs a valid signature only (and ``ADMIN_CODES`` an admin account).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mqcore.acl.config import group_resource, is_group_resource
from mqcore.acl.permission import PUB, SUB
from mqcore.errors import ProtocolError
from mqcore.jsonutil import loads_lenient
from mqcore.remoting.codes import RequestCode as RC

if TYPE_CHECKING:
    from mqcore.remoting.command import RemotingCommand


class ResourceParseError(Exception):
    """The request cannot be read well enough to know what it touches (it is refused)."""


def _send(topic: Any, group: Any, out: dict[str, int]) -> None:
    if isinstance(topic, str) and is_group_resource(topic):
        out[topic] = SUB  # the retry topic *is* the group resource
    elif topic is not None:
        out[str(topic)] = PUB


def _group(group: Any, out: dict[str, int]) -> None:
    if isinstance(group, str) and group:
        out[group_resource(group)] = SUB


def _topic(topic: Any, out: dict[str, int]) -> None:
    if isinstance(topic, str) and topic:
        out[topic] = SUB


def _body(request: RemotingCommand) -> dict[str, Any]:
    try:
        data = loads_lenient(bytes(request.body or b""))
    except (ProtocolError, ValueError, RecursionError) as e:
        raise ResourceParseError(f"cannot read the request body: {e}") from None
    if not isinstance(data, dict):
        raise ResourceParseError("the request body is not a JSON object")
    return data


def needed(request: RemotingCommand) -> dict[str, int]:
    """resource -> permission this request needs (empty: signature only)."""
    code = request.code
    ext = request.ext_fields or {}
    out: dict[str, int] = {}
    if code == RC.SEND_MESSAGE:
        _send(ext.get("topic"), ext.get("producerGroup"), out)
    elif code in (RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
        _send(ext.get("b"), ext.get("a"), out)
    elif code == RC.CONSUMER_SEND_MSG_BACK:
        _group(ext.get("group"), out)
    elif code == RC.RECALL_MESSAGE:
        _send(ext.get("topic"), None, out)
    elif code in (RC.PULL_MESSAGE, RC.LITE_PULL_MESSAGE):
        _topic(ext.get("topic"), out)
        _group(ext.get("consumerGroup"), out)
    elif code == RC.QUERY_MESSAGE:
        _topic(ext.get("topic"), out)
    elif code == RC.HEART_BEAT:
        for item in _body(request).get("consumerDataSet") or ():
            if not isinstance(item, dict):
                raise ResourceParseError("a consumerDataSet entry is not an object")
            _group(item.get("groupName"), out)
            for sub in item.get("subscriptionDataSet") or ():
                if isinstance(sub, dict):
                    _topic(sub.get("topic"), out)
    elif code in (RC.UNREGISTER_CLIENT, RC.GET_CONSUMER_LIST_BY_GROUP):
        _group(ext.get("consumerGroup"), out)
    elif code in (RC.UPDATE_CONSUMER_OFFSET, RC.QUERY_CONSUMER_OFFSET):
        _group(ext.get("consumerGroup"), out)
        _topic(ext.get("topic"), out)
    elif code in (RC.QUERY_ASSIGNMENT, RC.SET_MESSAGE_REQUEST_MODE):
        data = _body(request)
        _group(data.get("consumerGroup"), out)
        _topic(data.get("topic"), out)
    elif code in (RC.LOCK_BATCH_MQ, RC.UNLOCK_BATCH_MQ):
        data = _body(request)
        _group(data.get("consumerGroup"), out)
        for mq in data.get("mqSet") or ():
            if isinstance(mq, dict):
                _topic(mq.get("topic"), out)
    return out
