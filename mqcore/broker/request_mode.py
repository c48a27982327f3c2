"""How each group consumes each topic, PULL or POP (RocketMQ 5's ``MessageRequestMode``), set
by SET_MESSAGE_REQUEST_MODE and read by QUERY_ASSIGNMENT.

The table is ``config/messageRequestMode.json``, the shape RocketMQ 5.3.3's
``MessageRequestModeManager`` writes: ``{"messageRequestModeMap": {topic: {group:
{"topic", "consumerGroup", "mode", "popShareQueueNum"}}}}``, so a Java broker opening the store
keeps the settings and the reverse.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any

from mqcore.errors import ProtocolError
from mqcore.jsonutil import loads_lenient
from mqcore.store.config_files import JsonTable, expect_type, json_root

MESSAGE_REQUEST_MODE_FILE = "messageRequestMode.json"
#: RocketMQ's MixAll.RETRY_GROUP_TOPIC_PREFIX: a retry topic is always pulled
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"


class MessageRequestMode(enum.Enum):
    PULL = "PULL"
    POP = "POP"


@dataclasses.dataclass(frozen=True)
class RequestModeSetting:
    """One group's mode for one topic; ``pop_share_queue_num`` <= 0 lets every client pop every
    queue, N > 0 adds the queues of the N clients after it to a client's own."""

    topic: str
    consumer_group: str
    mode: MessageRequestMode
    pop_share_queue_num: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "consumerGroup": self.consumer_group, "mode": self.mode.value,
                "popShareQueueNum": self.pop_share_queue_num}

    @classmethod
    def from_json(cls, value: Any, what: str) -> RequestModeSetting:
        """Raises ProtocolError naming ``what`` and the field that is wrong."""
        if not isinstance(value, dict):
            raise ProtocolError(f"{what} is not a JSON object")
        topic, group = value.get("topic"), value.get("consumerGroup")
        if not isinstance(topic, str) or not topic:
            raise ProtocolError(f"{what}: topic is missing")
        if not isinstance(group, str) or not group:
            raise ProtocolError(f"{what}: consumerGroup is missing")
        mode = value.get("mode", MessageRequestMode.PULL.value)
        if mode not in [m.value for m in MessageRequestMode]:
            raise ProtocolError(f"{what}: mode {mode!r:.40} is neither PULL nor POP")
        share = value.get("popShareQueueNum", 0)
        if isinstance(share, bool) or not isinstance(share, int):
            raise ProtocolError(f"{what}: popShareQueueNum {share!r:.40} is not an integer")
        return cls(topic, group, MessageRequestMode(mode), share)


def parse_setting_body(body: object) -> RequestModeSetting:
    """A SET_MESSAGE_REQUEST_MODE body (``SetMessageRequestModeRequestBody``)."""
    return RequestModeSetting.from_json(json_body(body, "the request mode body"), "the request mode body")


def json_body(body: object, what: str) -> dict[str, Any]:
    """A request body that must be one JSON object; ProtocolError otherwise."""
    if not isinstance(body, (bytes, bytearray, memoryview)) or not body:
        raise ProtocolError(f"{what} is missing")
    try:
        value = loads_lenient(bytes(body))
    except (ProtocolError, ValueError, RecursionError) as e:
        raise ProtocolError(f"{what} is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} is not a JSON object")
    return value


class MessageRequestModeTable(JsonTable):
    """topic -> group -> setting, persisted on each change (they are rare: an admin's)."""

    file_name = MESSAGE_REQUEST_MODE_FILE

    def __init__(self, path: str):
        super().__init__(path)
        self._table: dict[str, dict[str, RequestModeSetting]] = {}

    def get(self, topic: str, group: str) -> RequestModeSetting | None:
        with self._lock:
            return self._table.get(topic, {}).get(group)

    def put(self, setting: RequestModeSetting) -> None:
        with self._lock:
            self._table.setdefault(setting.topic, {})[setting.consumer_group] = setting

    def to_json_value(self) -> dict[str, Any]:
        return {"messageRequestModeMap": {t: {g: s.to_json() for g, s in groups.items()}
                                          for t, groups in self._table.items()}}

    def _decode(self, value: Any) -> dict[str, dict[str, RequestModeSetting]]:
        table = expect_type(json_root(value).get("messageRequestModeMap", {}), dict, "messageRequestModeMap")
        out: dict[str, dict[str, RequestModeSetting]] = {}
        for topic, groups in table.items():
            expect_type(groups, dict, f"messageRequestModeMap[{topic}]")
            for group, setting in groups.items():
                try:
                    out.setdefault(str(topic), {})[str(group)] = RequestModeSetting.from_json(
                        setting, f"messageRequestModeMap[{topic}][{group}]")
                except ProtocolError as e:
                    raise ValueError(str(e)) from None
        return out

    def _replace_locked(self, value: dict[str, dict[str, RequestModeSetting]]) -> None:
        self._table = value
