"""Small JSON request/response bodies shared by broker and client (spec §6).

Written as fastjson writes beans (keys sorted, compact, nulls omitted); read with
:func:`~mqcore.jsonutil.loads_lenient` so Java's quirks are accepted. Any
shape error raises :class:`~mqcore.errors.ProtocolError`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mqcore.errors import ProtocolError
from mqcore.jsonutil import dumps_compact, loads_lenient

__all__ = [
    "INCREMENTAL_REGISTRATION",
    "MessageQueue",
    "LockBatchRequestBody",
    "UnlockBatchRequestBody",
    "LockBatchResponseBody",
    "GetConsumerListByGroupResponseBody",
]


#: REGISTER_BROKER body key (mqbroker's, not RocketMQ's; a Java name server ignores it): the
#: body's topic table holds only topics changed since the broker's last registration, so the
#: broker's topics missing from it are not to be dropped. RocketMQ 4.9's registrations of a
#: created topic (registerIncrementBrokerData) are incremental too, unmarked; its name server
#: never drops a topic on a registration.
INCREMENTAL_REGISTRATION = "mqcoreIncremental"


def _obj(data: Any, what: str) -> dict[str, Any]:
    value = loads_lenient(data) if isinstance(data, (bytes, bytearray, memoryview, str)) else data
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} body is not a JSON object")
    return value


def _str(obj: dict[str, Any], key: str, what: str, default: str | None = None) -> str | None:
    value = obj.get(key, default)
    if value is not None and not isinstance(value, str):
        raise ProtocolError(f"{what}.{key} is not a string: {value!r}")
    return value


def _list(obj: dict[str, Any], key: str, what: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"{what}.{key} is not an array")
    return value


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """(topic, brokerName, queueId); hashable so it can key dicts and sets."""

    topic: str
    broker_name: str
    queue_id: int

    def to_json_obj(self) -> dict[str, Any]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}

    @classmethod
    def from_json_obj(cls, obj: Any) -> MessageQueue:
        if not isinstance(obj, dict):
            raise ProtocolError(f"MessageQueue is not a JSON object: {obj!r}")
        queue_id = obj.get("queueId")
        if isinstance(queue_id, str) and queue_id.lstrip("-").isdigit():
            queue_id = int(queue_id)
        if not isinstance(queue_id, int) or isinstance(queue_id, bool):
            raise ProtocolError(f"MessageQueue.queueId is not an integer: {queue_id!r}")
        topic = _str(obj, "topic", "MessageQueue")
        broker_name = _str(obj, "brokerName", "MessageQueue")
        if topic is None or broker_name is None:
            raise ProtocolError(f"MessageQueue lacks topic or brokerName: {obj!r}")
        return cls(topic=topic, broker_name=broker_name, queue_id=queue_id)


def _mq_list(obj: dict[str, Any], key: str, what: str) -> list[MessageQueue]:
    return [MessageQueue.from_json_obj(item) for item in _list(obj, key, what)]


@dataclass(slots=True)
class LockBatchRequestBody:
    """LOCK_BATCH_MQ (41) body. ``only_this_broker`` is 5.x and written only when true."""

    consumer_group: str
    client_id: str
    mq_set: list[MessageQueue] = field(default_factory=list)
    only_this_broker: bool = False

    _WHAT = "LockBatchRequestBody"

    def encode(self) -> bytes:
        obj: dict[str, Any] = {
            "clientId": self.client_id,
            "consumerGroup": self.consumer_group,
            "mqSet": [mq.to_json_obj() for mq in self.mq_set],
        }
        if self.only_this_broker:
            obj["onlyThisBroker"] = True
        return dumps_compact(obj)

    @classmethod
    def decode(cls, data: Any) -> LockBatchRequestBody:
        what = cls._WHAT
        obj = _obj(data, what)
        group = _str(obj, "consumerGroup", what)
        client_id = _str(obj, "clientId", what)
        if group is None or client_id is None:
            raise ProtocolError(f"{what} lacks consumerGroup or clientId")
        return cls(
            consumer_group=group,
            client_id=client_id,
            mq_set=_mq_list(obj, "mqSet", what),
            only_this_broker=obj.get("onlyThisBroker") is True,
        )


@dataclass(slots=True)
class UnlockBatchRequestBody(LockBatchRequestBody):
    """UNLOCK_BATCH_MQ (42) body: same shape as the lock request."""

    _WHAT = "UnlockBatchRequestBody"


@dataclass(slots=True)
class LockBatchResponseBody:
    lock_ok_mq_set: list[MessageQueue] = field(default_factory=list)

    def encode(self) -> bytes:
        return dumps_compact({"lockOKMQSet": [mq.to_json_obj() for mq in self.lock_ok_mq_set]})

    @classmethod
    def decode(cls, data: Any) -> LockBatchResponseBody:
        obj = _obj(data, "LockBatchResponseBody")
        return cls(lock_ok_mq_set=_mq_list(obj, "lockOKMQSet", "LockBatchResponseBody"))


@dataclass(slots=True)
class GetConsumerListByGroupResponseBody:
    consumer_id_list: list[str] = field(default_factory=list)

    def encode(self) -> bytes:
        return dumps_compact({"consumerIdList": list(self.consumer_id_list)})

    @classmethod
    def decode(cls, data: Any) -> GetConsumerListByGroupResponseBody:
        what = "GetConsumerListByGroupResponseBody"
        ids = _list(_obj(data, what), "consumerIdList", what)
        if not all(isinstance(i, str) for i in ids):
            raise ProtocolError(f"{what}.consumerIdList has non-string entries")
        return cls(consumer_id_list=ids)
