"""Consume offsets: where a group continues after a restart or a rebalance.

* ``RemoteBrokerOffsetStore`` (clustering): offsets live on the broker that owns
  the queue. Consume threads update the in-memory table; the consumer persists it
  every ``persist_consumer_offset_interval_ms`` (UPDATE_CONSUMER_OFFSET, oneway) and
  once more, synchronously, at shutdown.
* ``LocalFileOffsetStore`` (broadcasting): every consumer keeps its own offsets in
  ``<dir>/<clientId>/<group>/offsets.json`` (written as Java's fastjson writes
  ``OffsetSerializeWrapper``, with a ``.bak`` of the previous version).

Offsets given to ``update_offset`` from consumption use ``increase_only=True`` so a
late consume thread can never move a queue backwards; explicit resets (offset moved,
seek) pass False.

Thread model: ``update_offset``/``read_offset_memory``/``remove_offset`` are
thread-safe (consume threads); the ``async`` methods run on the client's event loop.
"""
from __future__ import annotations

import enum
import logging
import os
import threading
from collections.abc import Collection
from typing import Any, Protocol

from mqcore.errors import BrokerError, ConsumerGroupNotFoundError, MQError, ProtocolError, RemotingError
from mqcore.jsonutil import loads_lenient
from mqcore.remoting.bodies import MessageQueue

log = logging.getLogger(__name__)

__all__ = ["ReadOffsetType", "OffsetStore", "RemoteBrokerOffsetStore", "LocalFileOffsetStore", "OffsetBrokerAccess"]

#: ``readOffset`` result when the broker could not be asked (network error)
OFFSET_UNKNOWN = -2


class ReadOffsetType(enum.Enum):
    READ_FROM_MEMORY = 1
    READ_FROM_STORE = 2
    MEMORY_FIRST_THEN_STORE = 3


class OffsetBrokerAccess(Protocol):
    """What the remote store needs from the client instance."""

    async def query_consumer_offset(self, group: str, mq: MessageQueue) -> int: ...

    async def update_consumer_offset(self, group: str, mq: MessageQueue, offset: int, oneway: bool) -> None: ...


class OffsetStore:
    """In-memory table shared by both stores."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._table: dict[MessageQueue, int] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        """Read persisted offsets, if the store keeps any locally."""

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool) -> None:
        with self._lock:
            old = self._table.get(mq)
            if old is None or not increase_only or offset > old:
                self._table[mq] = offset

    def read_offset_memory(self, mq: MessageQueue) -> int:
        with self._lock:
            return self._table.get(mq, -1)

    def remove_offset(self, mq: MessageQueue) -> None:
        with self._lock:
            self._table.pop(mq, None)

    def snapshot(self, topic: str | None = None) -> dict[MessageQueue, int]:
        with self._lock:
            return {mq: off for mq, off in self._table.items() if topic is None or mq.topic == topic}

    async def read_offset_store(self, mq: MessageQueue) -> int:
        raise NotImplementedError

    async def read_offset(self, mq: MessageQueue, kind: ReadOffsetType) -> int:
        """-1: no offset stored; -2: the store could not be read (try later)."""
        if kind in (ReadOffsetType.READ_FROM_MEMORY, ReadOffsetType.MEMORY_FIRST_THEN_STORE):
            offset = self.read_offset_memory(mq)
            if offset >= 0 or kind is ReadOffsetType.READ_FROM_MEMORY:
                return offset
        return await self.read_offset_store(mq)

    async def persist(self, mq: MessageQueue) -> None:
        """Persist one queue's offset (before giving the queue up)."""

    async def persist_all(self, mqs: Collection[MessageQueue], *, oneway: bool = True) -> None:
        raise NotImplementedError

    async def commit_all(self, mqs: Collection[MessageQueue]) -> None:
        """``persist_all`` waiting for each answer, for a caller that asked to commit: every queue
        is tried, then the first failure is raised (a broker's refusal, or no answer)."""
        await self.persist_all(mqs, oneway=False)


class RemoteBrokerOffsetStore(OffsetStore):
    """Clustering: offsets kept by the broker (``RemoteBrokerOffsetStore.java``)."""

    def __init__(self, group: str, access: OffsetBrokerAccess) -> None:
        super().__init__(group)
        self._access = access

    async def read_offset_store(self, mq: MessageQueue) -> int:
        try:
            offset = await self._access.query_consumer_offset(self.group, mq)
        except BrokerError as e:
            log.debug("no stored offset for %s in group %s: %s", mq, self.group, e.remark)
            return -1
        except (RemotingError, MQError) as e:
            log.warning("cannot read the offset of %s for group %s: %s", mq, self.group, e)
            return OFFSET_UNKNOWN
        self.update_offset(mq, offset, increase_only=False)
        return offset

    async def persist(self, mq: MessageQueue) -> None:
        offset = self.read_offset_memory(mq)
        if offset < 0:
            return
        try:
            await self._access.update_consumer_offset(self.group, mq, offset, True)
        except (RemotingError, BrokerError) as e:
            log.info("persisting offset %d of %s for group %s failed: %s", offset, mq, self.group, e)

    async def persist_all(self, mqs: Collection[MessageQueue], *, oneway: bool = True) -> None:
        """Send the offsets of ``mqs``; forget offsets of queues no longer owned. Failures are
        logged (the offsets stay in memory and go again with the next persist)."""
        await self._send_all(mqs, oneway)

    async def commit_all(self, mqs: Collection[MessageQueue]) -> None:
        failed = await self._send_all(mqs, False)
        if failed is not None:
            raise failed

    async def _send_all(self, mqs: Collection[MessageQueue], oneway: bool) -> MQError | None:
        """Send the offsets of ``mqs``; the first failure (each one logged), or None."""
        wanted = set(mqs)
        table = self.snapshot()
        first: MQError | None = None
        for mq, offset in table.items():
            if mq not in wanted:
                self.remove_offset(mq)
                continue
            try:
                await self._access.update_consumer_offset(self.group, mq, offset, oneway)
            except ConsumerGroupNotFoundError as e:  # no later persist can land: said loudly
                log.warning("persisting offset %d of %s failed: %s", offset, mq, e)
                first = first or e
            except (RemotingError, BrokerError) as e:
                log.info("persisting offset %d of %s for group %s failed: %s", offset, mq, self.group, e)
                first = first or e
        return first


class LocalFileOffsetStore(OffsetStore):
    """Broadcasting: offsets in a local JSON file (``LocalFileOffsetStore.java``)."""

    def __init__(self, group: str, directory: str, client_id: str) -> None:
        super().__init__(group)
        self.path = os.path.join(directory, client_id, group, "offsets.json")

    def load(self) -> None:
        table = self._read_file()
        with self._lock:
            self._table.update(table)
        if table:
            log.info("loaded %d local offsets of group %s from %s", len(table), self.group, self.path)

    def _read_file(self) -> dict[MessageQueue, int]:
        for path in (self.path, self.path + ".bak"):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            if not data.strip():
                continue
            try:
                return _decode_offset_table(data)
            except ProtocolError as e:
                log.warning("offset file %s is unreadable (%s); trying its backup", path, e)
        return {}

    async def read_offset_store(self, mq: MessageQueue) -> int:
        offset = self._read_file().get(mq)
        if offset is None:
            return -1
        self.update_offset(mq, offset, increase_only=False)
        return offset

    async def persist_all(self, mqs: Collection[MessageQueue], *, oneway: bool = True) -> None:
        wanted = set(mqs)
        table = {mq: off for mq, off in self.snapshot().items() if mq in wanted}
        if table:
            self.write_file(table)

    def write_file(self, table: dict[MessageQueue, int]) -> None:
        """Write ``table`` atomically (tmp + rename), keeping the old file as ``.bak``."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(_encode_offset_table(table))
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(self.path):
            os.replace(self.path, self.path + ".bak")
        os.replace(tmp, self.path)


def _encode_offset_table(table: dict[MessageQueue, int]) -> bytes:
    """``{"offsetTable":{{"brokerName":..,"queueId":..,"topic":..}:12,...}}`` (fastjson's
    rendering of ``Map<MessageQueue, AtomicLong>``, readable by a Java client)."""
    import json

    entries = []
    for mq in sorted(table):
        key = json.dumps(mq.to_json_obj(), separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        entries.append(f"{key}:{int(table[mq])}")
    return ("{\"offsetTable\":{" + ",".join(entries) + "}}").encode("utf-8")


def _decode_offset_table(data: bytes) -> dict[MessageQueue, int]:
    obj: Any = loads_lenient(data)
    raw = obj.get("offsetTable") if isinstance(obj, dict) else None
    if not isinstance(raw, dict):
        raise ProtocolError("offset file has no offsetTable object")
    out: dict[MessageQueue, int] = {}
    for key, value in raw.items():
        fields = dict(key) if isinstance(key, tuple) else None
        if fields is None or not isinstance(value, int):
            raise ProtocolError(f"offset entry {key!r}: {value!r} is not <MessageQueue>: <int>")
        out[MessageQueue.from_json_obj(fields)] = value
    return out
