"""Idempotent consumption keyed on business keys (seed 004).

RocketMQ delivers at least once: a message can come twice (a producer retry after a
lost answer, a rebalance before the offset was committed, a send-back). The fix is an
*idempotence token* — a business key the producer puts in ``keys`` (order number,
payment id), not the message id — and a record of which tokens were processed::

    store = MemoryIdempotentStore(ttl_ms=24 * 3600_000)     # or SqliteIdempotentStore(path)

    @consumer.listener
    @idempotent(store)
    def handle(messages, context):
        ...                                                  # runs once per key

For each message the wrapper claims its key (``try_begin``): new keys are processed,
keys already done are skipped (acknowledged), keys another thread is processing right
now make the batch fail so it is retried later. When the listener succeeds the keys
are marked done; when it fails they are released so the retry can claim them again.
For exactly-once effects, keep the store in the same database transaction as the
listener's own writes (implement ``IdempotentStore`` over it).

Thread model: the stores are thread-safe; the wrapper runs on consume threads.
"""
from __future__ import annotations

import enum
import functools
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from mqcore.client.consumer.listener import ConsumeConcurrentlyStatus, ConsumeOrderlyStatus
from mqcore.client.message import MessageExt
from mqcore.errors import ClientError

log = logging.getLogger(__name__)

__all__ = [
    "Claim",
    "IdempotentStore",
    "MemoryIdempotentStore",
    "SqliteIdempotentStore",
    "DuplicateInProgressError",
    "idempotent",
    "default_key",
]


class Claim(enum.Enum):
    NEW = "new"
    DONE = "done"
    IN_PROGRESS = "in_progress"


class DuplicateInProgressError(ClientError):
    """Another consumer thread is processing the same key right now; retry later."""

    retriable = True


class IdempotentStore(Protocol):
    def try_begin(self, key: str) -> Claim: ...

    def mark_done(self, key: str) -> None: ...

    def release(self, key: str) -> None: ...


def default_key(msg: MessageExt) -> str:
    """The first business key, else the producer's message id (``UNIQ_KEY``)."""
    keys = msg.keys
    return keys[0] if keys else msg.msg_id


class MemoryIdempotentStore:
    """In-process store: done keys kept ``ttl_ms`` (at most ``max_keys``, oldest
    evicted); a claim not finished within ``processing_timeout_ms`` can be retaken."""

    def __init__(self, ttl_ms: int = 24 * 3600 * 1000, max_keys: int = 1_000_000,
                 processing_timeout_ms: int = 15 * 60 * 1000, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl_ms / 1000.0
        self._processing_timeout = processing_timeout_ms / 1000.0
        self._max_keys = max_keys
        self._clock = clock
        self._done: OrderedDict[str, float] = OrderedDict()
        self._processing: dict[str, float] = {}
        self._lock = threading.Lock()

    def try_begin(self, key: str) -> Claim:
        now = self._clock()
        with self._lock:
            done_at = self._done.get(key)
            if done_at is not None and now - done_at <= self._ttl:
                return Claim.DONE
            started = self._processing.get(key)
            if started is not None and now - started <= self._processing_timeout:
                return Claim.IN_PROGRESS
            self._processing[key] = now
            return Claim.NEW

    def mark_done(self, key: str) -> None:
        with self._lock:
            self._processing.pop(key, None)
            self._done[key] = self._clock()
            self._done.move_to_end(key)
            while len(self._done) > self._max_keys:
                self._done.popitem(last=False)

    def release(self, key: str) -> None:
        with self._lock:
            self._processing.pop(key, None)


class SqliteIdempotentStore:
    """Durable store in one SQLite file (survives consumer restarts)."""

    def __init__(self, path: str, processing_timeout_ms: int = 15 * 60 * 1000) -> None:
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("CREATE TABLE IF NOT EXISTS consumed (key TEXT PRIMARY KEY, state TEXT NOT NULL, "
                           "updated_ms INTEGER NOT NULL)")
        self._timeout_ms = processing_timeout_ms
        self._lock = threading.Lock()

    def try_begin(self, key: str) -> Claim:
        now = int(time.time() * 1000)
        with self._lock:
            row = self._conn.execute("SELECT state, updated_ms FROM consumed WHERE key = ?", (key,)).fetchone()
            if row is not None:
                if row[0] == "done":
                    return Claim.DONE
                if now - row[1] <= self._timeout_ms:
                    return Claim.IN_PROGRESS
            self._conn.execute("INSERT OR REPLACE INTO consumed (key, state, updated_ms) VALUES (?, 'processing', ?)",
                               (key, now))
            return Claim.NEW

    def mark_done(self, key: str) -> None:
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO consumed (key, state, updated_ms) VALUES (?, 'done', ?)",
                               (key, int(time.time() * 1000)))

    def release(self, key: str) -> None:
        with self._lock:
            self._conn.execute("DELETE FROM consumed WHERE key = ? AND state = 'processing'", (key,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()


_FAILURES = (ConsumeConcurrentlyStatus.RECONSUME_LATER, ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT)


def idempotent(store: IdempotentStore, key: Callable[[MessageExt], str] = default_key
               ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for a listener ``fn(messages, context)``: see the module docstring."""

    def wrap(listener: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(listener)
        def run(messages: list[MessageExt], context: Any) -> Any:
            claimed: list[str] = []
            fresh: list[MessageExt] = []
            for msg in messages:
                k = key(msg)
                claim = store.try_begin(k)
                if claim is Claim.NEW:
                    claimed.append(k)
                    fresh.append(msg)
                elif claim is Claim.IN_PROGRESS:
                    for c in claimed:
                        store.release(c)
                    raise DuplicateInProgressError(f"key {k!r} is being processed by another thread")
                else:
                    log.info("skipping duplicate message %s (key %r already processed)", msg.msg_id, k)
            if not fresh:
                return None
            try:
                status = listener(fresh, context)
            except BaseException:
                for c in claimed:
                    store.release(c)
                raise
            if status in _FAILURES:
                for c in claimed:
                    store.release(c)
                return status
            ack = getattr(context, "ack_index", None)
            done = len(fresh) if ack is None else max(min(ack, len(fresh) - 1) + 1, 0)
            for c in claimed[:done]:
                store.mark_done(c)
            for c in claimed[done:]:
                store.release(c)
            if done < len(fresh):  # partial ack: translate the index to the caller's list
                context.ack_index = next(i for i, m in enumerate(messages) if m is fresh[done]) - 1
            return status
        return run
    return wrap
