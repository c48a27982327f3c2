"""What the dashboard changes: topics (create, delete), a group's offsets (reset by time) and
a dead-lettered message (resent to its group). Each does what the matching admin request
does on the broker, through the same managers. Runs on the broker's event loop.
"""
from __future__ import annotations

import asyncio
import logging

from mqcore.config import FlushDiskType
from mqcore.dashboard.source import CreatedTopic, DashboardSource
from mqcore.errors import IllegalArgumentError
from mqcore.format import layout as L
from mqcore.message import (
    DLQ_GROUP_TOPIC_PREFIX,
    MessageExt,
    MessageExtBrokerInner,
    Prop,
    is_system_topic,
    pack_host,
    reply_topic,
    retry_topic,
    system_topic_refusal,
    validate_topic,
)
from mqcore.netaddr import parse_host_port
from mqcore.permissions import PERM_READ, PERM_WRITE

log = logging.getLogger(__name__)

MAX_QUEUES = 1024


class ActionError(IllegalArgumentError):
    """A change the dashboard refused, with a message for the page."""


def create_topic(src: DashboardSource, name: str, read_queues: int, write_queues: int, perm: int) -> CreatedTopic:
    name = name.strip()
    try:
        validate_topic(name)
    except IllegalArgumentError as e:
        raise ActionError(str(e)) from None
    if is_system_topic(name) or name == reply_topic(src.cluster_name):  # as UPDATE_AND_CREATE_TOPIC answers
        raise ActionError(system_topic_refusal(name))
    if not (0 < read_queues <= MAX_QUEUES and 0 < write_queues <= MAX_QUEUES):
        raise ActionError(f"queue numbers must be 1..{MAX_QUEUES}")
    if perm & ~(PERM_READ | PERM_WRITE) or not perm:
        raise ActionError("permission must be read, write or both")
    tc = src.create_topic(name, read_queues, write_queues, perm)
    src.schedule_register()
    log.info("dashboard: topic %s created (read %d, write %d, perm %d)", name, read_queues, write_queues, perm)
    return tc


def delete_topic(src: DashboardSource, name: str) -> None:
    if src.topics.get(name) is None:
        raise ActionError(f"no topic {name!r} on this broker")
    src.topics.delete(name)
    src.store.delete_topic(name)
    src.offsets.remove_topic(name)
    src.schedule_register()
    log.info("dashboard: topic %s deleted", name)


async def reset_offset(src: DashboardSource, group: str, topic: str, timestamp_ms: int) -> str:
    """Move ``group``'s committed offsets on ``topic`` to the first message stored at or after
    ``timestamp_ms`` (-1: the end), as ``mqadmin resetOffsetByTime`` does."""
    if src.topics.get(topic) is None:
        raise ActionError(f"no topic {topic!r} on this broker")
    if not src.offsets.query_queues(group, topic):
        raise ActionError(f"group {group!r} has no offsets on {topic!r} yet")
    ok, text = await src.reset_offset(group, topic, timestamp_ms)
    if not ok:
        raise ActionError(text)
    log.info("dashboard: offsets of %s on %s reset to %d", group, topic, timestamp_ms)
    return text


async def resend_dlq(src: DashboardSource, m: MessageExt) -> MessageExt:
    """Put a dead-lettered message back in its group's retry topic, with its retry count at 0:
    only that group consumes it again, as the original topic it is delivered as."""
    if not m.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        raise ActionError(f"{m.offset_msg_id} is in {m.topic}, not in a dead-letter queue")
    group = m.topic[len(DLQ_GROUP_TOPIC_PREFIX):]
    cfg = src.groups.table.get(group)
    topic = retry_topic(group)
    src.topics.create_group_topic(topic, cfg.retry_queue_nums if cfg is not None else 1)
    props = dict(m.properties)
    props.pop(Prop.DELAY, None)
    props[Prop.WAIT] = "false"
    props.setdefault(Prop.ORIGIN_MESSAGE_ID, m.offset_msg_id)
    msg = MessageExtBrokerInner(topic=topic, body=bytes(m.body), queue_id=0,
                                flag=m.flag, properties=props,
                                sys_flag=m.sys_flag & ~(L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6),
                                born_timestamp=m.born_timestamp,
                                born_host=pack_host(*parse_host_port(m.born_host)),
                                store_host=src.store_host(), reconsume_times=0)
    store = src.store
    if store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
        # a SYNC_FLUSH put waits for its fsync: not on the loop
        result = await asyncio.get_running_loop().run_in_executor(None, store.put_message, msg)
    else:
        result = store.put_message(msg)
    src.stats.on_put(topic, result)
    if not result.status.stored:
        raise ActionError(f"the store refused the message: {result.status.value} {result.remark or ''}".strip())
    src.schedule_register()
    log.info("dashboard: %s resent from %s to %s", m.offset_msg_id, m.topic, topic)
    copy = store.look_message_by_offset(result.phy_offset)
    if copy is None:  # stored a moment ago: only a cleanup racing the put could take it
        raise ActionError(f"the copy at commitlog offset {result.phy_offset} cannot be read back")
    return copy
