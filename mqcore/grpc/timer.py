"""Delivery at a given time (5.x delay messages: ``delivery_timestamp``).

A 4.9 store knows delay *levels* only; a 5.x producer names any instant. Such a message is
stored in ``rmq_sys_wheel_timer`` queue 0 (RocketMQ 5's timer topic name) with
``REAL_TOPIC``/``REAL_QID`` and ``TIMER_DELIVER_MS``; when its time comes it is put again
into its real topic and queue through the store's normal put, keeping ``TIMER_DELIVER_MS``
so a consumer sees when it was due. Progress — the lowest timer-queue offset not yet
delivered — is the consumer offset of the system group ``rmq_sys_grpc_timer`` in
``consumerOffset.json``, so after a restart the pending messages are found again by reading
the timer queue from there (messages delivered past a gap may be delivered again: at
least once, as RocketMQ's timer).

Threads: the broker's event loop. Time from the injected ``clock`` (ms).
"""
from __future__ import annotations

import heapq
import logging

from mqcore.clock import Clock
from mqcore.format import layout as L
from mqcore.grpc.source import GrpcSource
from mqcore.message import MessageExt, MessageExtBrokerInner, Prop, pack_host
from mqcore.store.results import GetMessageStatus
from mqcore.netaddr import parse_host_port

log = logging.getLogger(__name__)

TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_GROUP = "rmq_sys_grpc_timer"
PROP_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
#: how many pending messages one load reads per store call
_SCAN_BATCH = 256


class TimerService:
    def __init__(self, source: GrpcSource, clock: Clock) -> None:
        self.src = source
        self.clock = clock
        self._heap: list[tuple[int, int, int]] = []  # (deliver ms, timer queue offset, commitlog offset)
        self._pending: set[int] = set()
        self._scanned = 0

    def load(self) -> None:
        """Find the messages not yet delivered (those from the committed offset on)."""
        self.src.topics.create_group_topic(TIMER_TOPIC)
        start = self.src.offsets.query(TIMER_GROUP, TIMER_TOPIC, 0)
        offset = max(start or 0, self.src.store.get_min_offset_in_queue(TIMER_TOPIC, 0))
        while True:
            result = self.src.store.get_message(TIMER_TOPIC, 0, offset, _SCAN_BATCH)
            if result.status is not GetMessageStatus.FOUND:
                break
            for buf in result.buffers:
                for rec in self.src.store.k.decode_records(buf, 0, len(buf), 1 << 30, False):
                    msg = MessageExt.from_decoded(rec)
                    self.add(msg.queue_offset, msg.commitlog_offset, _deliver_ms(msg))
            offset = result.next_begin_offset
        self._scanned = offset
        if self._pending:
            log.info("timer: %d messages waiting for their delivery time", len(self._pending))

    def add(self, queue_offset: int, commitlog_offset: int, deliver_ms: int) -> None:
        heapq.heappush(self._heap, (deliver_ms, queue_offset, commitlog_offset))
        self._pending.add(queue_offset)
        self._scanned = max(self._scanned, queue_offset + 1)

    def next_due_ms(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def due_messages(self, now: int) -> list[tuple[int, MessageExtBrokerInner | None]]:
        """(timer queue offset, message for its real topic or None if unreadable) for each due one."""
        out = []
        while self._heap and self._heap[0][0] <= now:
            _, qoff, phy = heapq.heappop(self._heap)
            msg = self.src.store.look_message_by_offset(phy)
            out.append((qoff, None if msg is None else self._real(msg)))
        return out

    def delivered(self, queue_offset: int) -> None:
        self._pending.discard(queue_offset)
        progress = min(self._pending) if self._pending else self._scanned
        self.src.offsets.commit(TIMER_GROUP, TIMER_TOPIC, 0, progress)

    def _real(self, msg: MessageExt) -> MessageExtBrokerInner:
        props = dict(msg.properties)
        topic = props.pop(Prop.REAL_TOPIC, msg.topic)
        try:
            queue_id = int(props.pop(Prop.REAL_QID, "0"))
        except ValueError:
            queue_id = 0
        props[Prop.WAIT] = "false"
        props.pop(Prop.CLUSTER, None)
        return MessageExtBrokerInner(topic=topic, body=msg.body, queue_id=queue_id, flag=msg.flag, properties=props,
                                     sys_flag=msg.sys_flag & ~(L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6),
                                     born_timestamp=msg.born_timestamp,
                                     born_host=pack_host(*parse_host_port(msg.born_host)),
                                     store_host=self.src.store_host(), reconsume_times=msg.reconsume_times)


def _deliver_ms(msg: MessageExt) -> int:
    try:
        return int(msg.properties.get(PROP_TIMER_DELIVER_MS, "0"))
    except ValueError:
        return 0
