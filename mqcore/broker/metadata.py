"""Broker metadata tables: topics, subscription groups, consumer offsets, delay-level progress.

Each table is one JSON file under ``<store>/config`` that a Java 4.9 broker reads too
(store-format.md §5.4 in the project specs; the shapes are in ``docs/ARCHITECTURE.md``).
The tables are plain data plus persistence, no broker policy: the managers in
``topics.py`` and ``groups.py`` own the policy. Persistence (crash-safe write, ``.bak``
fallback) is the store's :class:`~mqcore.store.config_files.JsonTable`.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from mqcore.clock import system_clock_ms
from mqcore.format import layout as L
from mqcore.jsonutil import dumps_pretty_at
from mqcore.store.config_files import (
    JsonTable,
    bean_from_json,
    bean_to_json,
    camel_case,
    expect_type,
    int_map,
    json_root,
)

TOPICS_FILE = L.TOPICS_FILE
CONSUMER_OFFSET_FILE = L.CONSUMER_OFFSET_FILE
DELAY_OFFSET_FILE = L.DELAY_OFFSET_FILE
SUBSCRIPTION_GROUP_FILE = L.SUBSCRIPTION_GROUP_FILE

#: ``ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR``
TOPIC_GROUP_SEPARATOR = "@"
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")


@dataclasses.dataclass
class DataVersion:
    """``DataVersion``: bumped on every change so peers can tell tables apart."""

    counter: int = 0
    timestamp: int = 0

    def next(self, now_ms: int) -> None:
        self.counter += 1
        self.timestamp = now_ms


@dataclasses.dataclass
class TopicConfig:
    """``TopicConfig`` (common/TopicConfig.java); defaults are the Java constructor's."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def __post_init__(self) -> None:
        if self.topic_filter_type not in TOPIC_FILTER_TYPES:
            raise ValueError(f"topicFilterType {self.topic_filter_type!r} is not one of {TOPIC_FILTER_TYPES}")


@dataclasses.dataclass
class SubscriptionGroupConfig:
    """``SubscriptionGroupConfig`` (4.9 fields); defaults are the Java field initialisers."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True
    #: RocketMQ 5's FIFO group (``consumeMessageOrderly``): 5.x receives hand out a queue's
    #: messages in order, one batch at a time. Not a 4.9 field: written only when true, so a
    #: 4.9 broker's file keeps its exact shape (4.9 ignores the key when it reads one)
    consume_message_orderly: bool = False


# --- tables -------------------------------------------------------------------------------------------
class ConsumerOffsetTable(JsonTable):
    """``consumerOffset.json``: ``topic@group`` -> {queue id: next offset to consume}."""

    file_name = CONSUMER_OFFSET_FILE

    def __init__(self, path: str):
        super().__init__(path)
        self._table: dict[str, dict[int, int]] = {}

    @staticmethod
    def key(group: str, topic: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record a committed offset; negative offsets (a client's "unknown") are ignored."""
        if offset < 0:
            return
        with self._lock:
            self._table.setdefault(self.key(group, topic), {})[queue_id] = offset

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        with self._lock:
            return self._table.get(self.key(group, topic), {}).get(queue_id)

    def query_queues(self, group: str, topic: str) -> dict[int, int]:
        with self._lock:
            return dict(self._table.get(self.key(group, topic), {}))

    def remove(self, group: str, topic: str) -> None:
        with self._lock:
            self._table.pop(self.key(group, topic), None)

    def snapshot(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {k: dict(v) for k, v in self._table.items()}

    def to_json_value(self) -> dict[str, Any]:
        return {"offsetTable": {k: dict(v) for k, v in self._table.items()}}

    def _decode(self, value: Any) -> dict[str, dict[int, int]]:
        table = expect_type(json_root(value).get("offsetTable", {}), dict, "offsetTable")
        out = {}
        for key, queues in table.items():
            if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key:
                raise ValueError(f"offsetTable key {key!r:.60} is not topic@group")
            out[key] = int_map(queues, f"offsetTable[{key}]")
        return out

    def _replace_locked(self, value: dict[str, dict[int, int]]) -> None:
        self._table = value

    def _merge_locked(self, value: dict[str, dict[int, int]]) -> None:
        # per topic@group, as Java's ConcurrentMap.putAll: the master's queues for a key replace
        # the slave's for it; a key only the slave has (a group that committed there) stays
        self._table.update(value)


class DelayOffsetTable(JsonTable):
    """``delayOffset.json``: delay level -> next SCHEDULE_TOPIC_XXXX queue offset to deliver."""

    file_name = DELAY_OFFSET_FILE

    def __init__(self, path: str):
        super().__init__(path)
        self._table: dict[int, int] = {}

    def update(self, level: int, offset: int) -> None:
        with self._lock:
            self._table[level] = offset

    def query(self, level: int) -> int | None:
        with self._lock:
            return self._table.get(level)

    def snapshot(self) -> dict[int, int]:
        with self._lock:
            return dict(self._table)

    def to_json_value(self) -> dict[str, Any]:
        return {"offsetTable": dict(self._table)}

    def _decode(self, value: Any) -> dict[int, int]:
        return int_map(json_root(value).get("offsetTable", {}), "offsetTable")

    def _replace_locked(self, value: dict[int, int]) -> None:
        self._table = value


BeanT = TypeVar("BeanT", TopicConfig, SubscriptionGroupConfig)


class _VersionedBeanTable(JsonTable, Generic[BeanT]):
    """``{"dataVersion": {...}, "<table_key>": {name: bean}}``; changes bump dataVersion."""

    table_key = ""
    bean_cls: type[BeanT]
    name_attr = ""

    def __init__(self, path: str, *, clock: Callable[[], int] = system_clock_ms):
        super().__init__(path)
        self.clock = clock
        self.data_version = DataVersion()
        self._table: dict[str, BeanT] = {}
        #: each entry's text in the file (``dumps_pretty`` at its depth), kept until it changes:
        #: a table written whole on every change (topics.json per topic created) would
        #: otherwise encode every entry again each time
        self._texts: dict[str, str] = {}

    def get(self, name: str) -> BeanT | None:
        with self._lock:
            bean = self._table.get(name)
            return dataclasses.replace(bean) if bean is not None else None

    def put(self, bean: BeanT) -> None:
        with self._lock:
            name = getattr(bean, self.name_attr)
            self._table[name] = dataclasses.replace(bean)
            self._texts.pop(name, None)
            self.data_version.next(self.clock())

    def remove(self, name: str) -> bool:
        with self._lock:
            if self._table.pop(name, None) is None:
                return False
            self._texts.pop(name, None)
            self.data_version.next(self.clock())
            return True

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._table)

    def snapshot(self) -> dict[str, BeanT]:
        with self._lock:
            return {k: dataclasses.replace(v) for k, v in self._table.items()}

    def to_json_value(self) -> dict[str, Any]:
        return {"dataVersion": bean_to_json(self.data_version),
                self.table_key: {k: self._bean_json(v) for k, v in self._table.items()}}

    def to_json(self) -> str:
        """``dumps_pretty(to_json_value())``, the same text, from the entries' kept texts."""
        with self._lock:
            texts = self._texts
            entries = []
            for name in sorted(self._table):  # dumps_pretty's order of string keys
                text = texts.get(name)
                if text is None:
                    text = texts[name] = (f"\t\t{json.dumps(name, ensure_ascii=False)}:"
                                          + dumps_pretty_at(self._bean_json(self._table[name]), 2))
                entries.append(text)
            version = dumps_pretty_at(bean_to_json(self.data_version), 1)
        table = "{\n" + ",\n".join(entries) + "\n\t}" if entries else "{}"
        # the two root keys in dumps_pretty's (sorted) order: "dataVersion" sorts before either table key
        return f'{{\n\t"dataVersion":{version},\n\t{json.dumps(self.table_key)}:{table}\n}}'

    @staticmethod
    def _bean_json(bean: Any) -> dict[str, Any]:
        return bean_to_json(bean)

    def _decode(self, value: Any) -> tuple[DataVersion, dict[str, BeanT]]:
        root = json_root(value)
        version = bean_from_json(DataVersion, root.get("dataVersion", {}), "dataVersion")
        table: dict[str, BeanT] = {}
        for name, raw in expect_type(root.get(self.table_key, {}), dict, self.table_key).items():
            what = f"{self.table_key}[{name}]"
            if isinstance(raw, dict) and camel_case(self.name_attr) not in raw:
                raw = {**raw, camel_case(self.name_attr): name}
            table[str(name)] = bean_from_json(self.bean_cls, raw, what)
        return version, table

    def _replace_locked(self, value: tuple[DataVersion, dict[str, BeanT]]) -> None:
        self.data_version, self._table = value
        self._texts = {}


class TopicConfigTable(_VersionedBeanTable[TopicConfig]):
    """``topics.json`` (``TopicConfigSerializeWrapper``): topic name -> ``TopicConfig``."""

    file_name = TOPICS_FILE
    table_key = "topicConfigTable"
    bean_cls = TopicConfig
    name_attr = "topic_name"


class SubscriptionGroupTable(_VersionedBeanTable[SubscriptionGroupConfig]):
    """``subscriptionGroup.json``: group name -> ``SubscriptionGroupConfig``."""

    file_name = SUBSCRIPTION_GROUP_FILE
    table_key = "subscriptionGroupTable"
    bean_cls = SubscriptionGroupConfig
    name_attr = "group_name"

    @staticmethod
    def _bean_json(bean: Any) -> dict[str, Any]:
        out = bean_to_json(bean)
        if not out["consumeMessageOrderly"]:
            del out["consumeMessageOrderly"]  # the 5.x key, only where it says something
        return out
