"""The broker's config JSON files under ``<store>/config/`` as rows for analytics.

Parsing is the store's own ``config_files.load``: fastjson's unquoted integer map keys
(``{0:250,1:248}``) are accepted, and a missing, empty or unparsable file falls back to
its ``.bak`` copy as RocketMQ's ``ConfigManager.load`` does. Here the values are only
flattened into rows; a missing file is an empty table.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from mqcore.errors import CorruptFileError
from mqcore.format import layout as L
from mqcore.spark.files import StoreDirs
from mqcore.store import config_files

log = logging.getLogger(__name__)

TOPICS = L.TOPICS_FILE
CONSUMER_OFFSETS = L.CONSUMER_OFFSET_FILE
DELAY_OFFSETS = L.DELAY_OFFSET_FILE
SUBSCRIPTION_GROUPS = L.SUBSCRIPTION_GROUP_FILE


def load_config(dirs: StoreDirs, name: str) -> dict[str, Any]:
    """One config file as a dict ({} when neither it nor its .bak exists)."""
    if dirs.config is None:
        return {}
    path = os.path.join(dirs.config, name)
    value = config_files.load(path)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CorruptFileError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return value


@dataclasses.dataclass(frozen=True)
class TopicRow:
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str
    topic_sys_flag: int
    order: bool


def topics(dirs: StoreDirs) -> list[TopicRow]:
    table = load_config(dirs, TOPICS).get("topicConfigTable") or {}
    out = []
    for name, c in sorted(table.items()):
        out.append(TopicRow(str(c.get("topicName", name)), int(c.get("readQueueNums", 0)),
                            int(c.get("writeQueueNums", 0)), int(c.get("perm", 0)),
                            str(c.get("topicFilterType", "SINGLE_TAG")), int(c.get("topicSysFlag", 0)),
                            bool(c.get("order", False))))
    return out


@dataclasses.dataclass(frozen=True)
class ConsumerOffsetRow:
    topic: str
    group: str
    queue_id: int
    offset: int


def consumer_offsets(dirs: StoreDirs) -> list[ConsumerOffsetRow]:
    """``offsetTable`` rows; keys are ``topic@group`` (neither name may contain ``@``)."""
    table = load_config(dirs, CONSUMER_OFFSETS).get("offsetTable") or {}
    out = []
    for key, queues in sorted(table.items()):
        topic, sep, group = str(key).partition("@")
        if not sep:
            log.warning("consumerOffset.json: key %r has no '@'; skipped", key)
            continue
        for qid, offset in sorted((int(q), int(o)) for q, o in (queues or {}).items()):
            out.append(ConsumerOffsetRow(topic, group, qid, offset))
    return out


def delay_offsets(dirs: StoreDirs) -> list[tuple[int, int]]:
    """(delay level, next SCHEDULE_TOPIC_XXXX queue offset to deliver) pairs."""
    table = load_config(dirs, DELAY_OFFSETS).get("offsetTable") or {}
    return sorted((int(k), int(v)) for k, v in table.items())


@dataclasses.dataclass(frozen=True)
class GroupRow:
    group: str
    consume_enable: bool
    consume_broadcast_enable: bool
    retry_queue_nums: int
    retry_max_times: int


def subscription_groups(dirs: StoreDirs) -> list[GroupRow]:
    table = load_config(dirs, SUBSCRIPTION_GROUPS).get("subscriptionGroupTable") or {}
    return [GroupRow(str(c.get("groupName", name)), bool(c.get("consumeEnable", True)),
                     bool(c.get("consumeBroadcastEnable", True)), int(c.get("retryQueueNums", 1)),
                     int(c.get("retryMaxTimes", 16)))
            for name, c in sorted(table.items())]
