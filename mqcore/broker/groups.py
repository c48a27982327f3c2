"""Subscription groups (``config/subscriptionGroup.json``) and consumer offsets
(``config/consumerOffset.json``), with the broker's policies on top of the tables."""
from __future__ import annotations

import logging

from mqcore.broker.metadata import (
    TOPIC_GROUP_SEPARATOR,
    ConsumerOffsetTable,
    SubscriptionGroupConfig,
    SubscriptionGroupTable,
)
from mqcore.clock import Clock
from mqcore.errors import ProtocolError
from mqcore.jsonutil import loads_lenient
from mqcore.store.config_files import bean_from_json

log = logging.getLogger(__name__)


class SubscriptionGroupManager:
    """Threads: the broker's event loop (persist may run on any thread)."""

    def __init__(self, config_dir: str, clock: Clock, auto_create: bool) -> None:
        self.table = SubscriptionGroupTable.in_dir(config_dir, clock=clock)
        self.auto_create = auto_create
        self._known: set[str] = set()
        #: groups with consumeEnable=false, kept apart so the pull path asks a set, not the table
        self._disabled: set[str] = set()
        #: bumped by every change of what ``ensure`` and ``consume_enabled`` answer: a reader that
        #: remembers their verdicts (the pull pipeline's C core) asks again when it moves
        self.version = 0
        #: group -> the maxReconsumeTimes its client's last send-back carried
        self._client_max: dict[str, int] = {}

    def load(self) -> None:
        self.table.load()
        self._known = set(self.table.names())
        self._disabled = {g for g, c in self.table.snapshot().items() if not c.consume_enable}
        self.version += 1

    def ensure(self, group: str) -> bool:
        """The group exists (created on first use when auto-creation is on)."""
        if group in self._known:
            return True
        if self.table.get(group) is None:
            if not self.auto_create:
                return False
            self.table.put(SubscriptionGroupConfig(group))
            log.info("subscription group %s created", group)
        self._known.add(group)
        self.version += 1
        return True

    def exists(self, group: str) -> bool:
        """The group exists (never created here: an ack names a group, it does not make one)."""
        return group in self._known or self.table.get(group) is not None

    def consume_enabled(self, group: str) -> bool:
        """False when the group's ``consumeEnable`` was turned off (pulls are refused)."""
        return group not in self._disabled

    def retry_max_times(self, group: str) -> int:
        cfg = self.table.get(group)
        return cfg.retry_max_times if cfg else 16

    def note_client_max_retries(self, group: str, times: int) -> None:
        """A client's send-back named its own maxReconsumeTimes, which then wins over the
        group's retryMaxTimes: kept so that what is shown is what the broker applied."""
        self._client_max[group] = times

    def dead_letter_after(self, group: str) -> tuple[int, str]:
        """(retries after which the broker dead-letters the group's messages, where that comes from)."""
        if group in self._client_max:
            return self._client_max[group], "the maxReconsumeTimes its client sent with its last retry"
        return self.retry_max_times(group), "the group's retryMaxTimes (a client may send its own maxReconsumeTimes)"

    def consume_orderly(self, group: str) -> bool:
        """A FIFO group (RocketMQ 5's ``consumeMessageOrderly``): 5.x receives keep order."""
        cfg = self.table.get(group)
        return bool(cfg and cfg.consume_message_orderly)

    def update_from_json(self, body: bytes) -> None:
        try:
            cfg = bean_from_json(SubscriptionGroupConfig, loads_lenient(body), "subscriptionGroupConfig")
        except (ValueError, TypeError, KeyError) as e:
            raise ProtocolError(f"malformed subscription group config: {e}") from e
        self.table.put(cfg)
        self._known.add(cfg.group_name)
        (self._disabled.discard if cfg.consume_enable else self._disabled.add)(cfg.group_name)
        self.version += 1
        self.table.persist()

    def delete(self, group: str) -> bool:
        """Forget a group's config (deleteSubGroup); a later heartbeat may auto-create it again."""
        self._known.discard(group)
        self.version += 1
        removed = self.table.remove(group)
        self.table.persist()
        return removed

    def encode_json(self) -> bytes:
        return self.table.to_json().encode()

    def persist(self) -> None:
        self.table.persist()


class ConsumerOffsetManager(ConsumerOffsetTable):
    """Committed offsets per group/topic/queue; persisted every 5 s and at shutdown."""

    def topics_of(self, group: str) -> list[str]:
        suffix = TOPIC_GROUP_SEPARATOR + group
        return [k[: -len(suffix)] for k in self.snapshot() if k.endswith(suffix)]

    def committed_by_group(self, topic: str) -> dict[str, dict[int, int]]:
        """{group: {queue id: committed offset}} of every group with offsets in ``topic``."""
        prefix = topic + TOPIC_GROUP_SEPARATOR
        return {k[len(prefix):]: v for k, v in self.snapshot().items() if k.startswith(prefix)}

    def remove_topic(self, topic: str) -> None:
        prefix = topic + TOPIC_GROUP_SEPARATOR
        for key in [k for k in self.snapshot() if k.startswith(prefix)]:
            self.remove(key[len(prefix):], topic)

    def encode_json(self) -> bytes:
        return self.to_json().encode()
