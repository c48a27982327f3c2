"""TopicConfigManager: topics, their queue counts and permissions (``config/topics.json``).

System topics are created at start as a 4.9 broker does; client topics are created
on demand from ``TBW102`` when ``autoCreateTopicEnable``; ``%RETRY%``/``%DLQ%``
topics of a group get one queue. Threads: called on the broker's event loop only.
"""
from __future__ import annotations

import logging
from typing import Any, cast

from mqcore.broker.config import BrokerConfig
from mqcore.broker.metadata import TopicConfig as TopicConfig  # re-exported: processors import it from here
from mqcore.broker.metadata import TopicConfigTable
from mqcore.clock import Clock
from mqcore.errors import StoreIOError
from mqcore.message import (  # the system topic names live there now; importing them from here still works
    BENCHMARK_TOPIC,
    DEFAULT_TOPIC,
    OFFSET_MOVED_EVENT,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    reply_topic,
)
from mqcore.permissions import PERM_INHERIT, PERM_READ, PERM_WRITE
from mqcore.store.config_files import bean_to_json

log = logging.getLogger(__name__)


def readable(tc: TopicConfig) -> bool:
    return bool(tc.perm & PERM_READ)


def writable(tc: TopicConfig) -> bool:
    return bool(tc.perm & PERM_WRITE)


class TopicConfigManager:
    """Topics with their queue counts and permissions; system topics and on-demand creation."""

    def __init__(self, config: BrokerConfig, config_dir: str, clock: Clock) -> None:
        self.cfg = config
        self.table = TopicConfigTable.in_dir(config_dir, clock=clock)
        #: read-mostly copy for the send and pull paths (the table hands out a copy per get);
        #: callers treat what ``get`` returns as read-only
        self._cache: dict[str, TopicConfig] = {}
        #: bumped by every change of a topic (load, update, delete): a reader that caches what
        #: it derived from topics (the send pipeline's routes) drops its cache when it moves
        self.version = 0
        #: topics changed or added since the name servers were last sent the table
        #: (``registration``), and whether one was deleted meanwhile
        self._unregistered: set[str] = set()
        self._deleted_unregistered = False

    def load(self) -> None:
        self.table.load()
        self._add_system_topics()
        self._cache = self.table.snapshot()
        self.version += 1

    def _add_system_topics(self) -> None:
        cfg = self.cfg
        system = [TopicConfig(SELF_TEST_TOPIC, 1, 1),
                  TopicConfig(BENCHMARK_TOPIC, 1024, 1024),
                  TopicConfig(OFFSET_MOVED_EVENT, 1, 1),
                  TopicConfig(SCHEDULE_TOPIC, 18, 18),
                  # request-reply: replies are sent here and pushed to the requester
                  TopicConfig(reply_topic(cfg.broker_cluster_name), 1, 1)]
        if cfg.auto_create_topic_enable:
            system.append(TopicConfig(DEFAULT_TOPIC, cfg.default_topic_queue_nums, cfg.default_topic_queue_nums,
                                      PERM_INHERIT | PERM_READ | PERM_WRITE))
        if cfg.cluster_topic_enable:
            system.append(TopicConfig(cfg.broker_cluster_name, 16, 16, PERM_INHERIT | PERM_READ | PERM_WRITE))
        if cfg.broker_topic_enable:
            system.append(TopicConfig(cfg.broker_name, 1, 1, PERM_INHERIT | PERM_READ | PERM_WRITE))
        for tc in system:
            if self.table.get(tc.topic_name) is None:
                self.table.put(tc)

    def persist(self) -> None:
        self.table.persist()

    # --- lookups and changes -------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        return self._cache.get(topic)

    def update(self, tc: TopicConfig) -> None:
        """Change or add a topic and persist the table; a table that cannot be persisted
        (``StoreIOError``, ``DiskFullError`` on a full disk) leaves the topic as it was."""
        before = self.table.get(tc.topic_name)
        self.table.put(tc)
        try:
            self.persist()
        except StoreIOError:
            if before is None:
                self.table.remove(tc.topic_name)
            else:
                self.table.put(before)
            raise
        self._cache[tc.topic_name] = cast(TopicConfig, self.table.get(tc.topic_name))  # put just above
        self._unregistered.add(tc.topic_name)
        self.version += 1
        log.info("topic %s: read %d, write %d, perm %d", tc.topic_name, tc.read_queue_nums,
                 tc.write_queue_nums, tc.perm)

    def delete(self, topic: str) -> bool:
        self._cache.pop(topic, None)
        self._deleted_unregistered = True
        self.version += 1
        if not self.table.remove(topic):
            return False
        self.persist()
        return True

    def create_in_send(self, topic: str, default_topic: str, queue_nums: int) -> TopicConfig | None:
        """Auto-create from ``default_topic`` (TBW102) as SEND does; None when not allowed."""
        tc = self.get(topic)
        if tc is not None:
            return tc
        base = self.get(default_topic)
        if base is None or not base.perm & PERM_INHERIT:
            return None
        n = max(1, min(queue_nums, base.write_queue_nums))
        tc = TopicConfig(topic, n, n, base.perm & ~PERM_INHERIT)
        self.update(tc)
        return tc

    def create_group_topic(self, topic: str, queue_nums: int = 1, perm: int = PERM_READ | PERM_WRITE) -> TopicConfig:
        """``%RETRY%group`` / ``%DLQ%group``: one queue, created on demand."""
        tc = self.get(topic)
        if tc is None:
            tc = TopicConfig(topic, queue_nums, queue_nums, perm)
            self.update(tc)
        return tc

    def serialize_wrapper(self) -> dict[str, Any]:
        """``TopicConfigSerializeWrapper`` for REGISTER_BROKER."""
        return {"dataVersion": bean_to_json(self.table.data_version),
                "topicConfigTable": {n: bean_to_json(tc) for n, tc in self.table.snapshot().items()}}

    def registration(self, incremental: bool) -> tuple[dict[str, Any] | None, bool]:
        """The wrapper to register with and whether it holds only the topics changed since the
        last one (RocketMQ's ``registerIncrementBrokerData``: a topic created by
        UPDATE_AND_CREATE_TOPIC is registered alone, not with the whole table, which made a
        burst of N creations cost O(N²)). ``incremental`` asks for that; the whole table is
        sent anyway after a deletion (a name server drops a broker's topics only on a whole
        table). (None, True): nothing changed since the last registration. The changes
        taken are cleared: the caller sends the wrapper to every name server in order."""
        if not incremental or self._deleted_unregistered:
            self._unregistered.clear()
            self._deleted_unregistered = False
            return self.serialize_wrapper(), False
        names, self._unregistered = self._unregistered, set()
        if not names:
            return None, True
        table = {n: bean_to_json(tc) for n in sorted(names) if (tc := self.get(n)) is not None}
        return {"dataVersion": bean_to_json(self.table.data_version), "topicConfigTable": table}, True
