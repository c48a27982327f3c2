"""Idempotent consumption helper (seed 004)."""
from __future__ import annotations

import pytest

from mqcore.client.consumer.idempotent import (
    Claim,
    DuplicateInProgressError,
    MemoryIdempotentStore,
    SqliteIdempotentStore,
    idempotent,
)
from mqcore.client.consumer.listener import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
)
from mqcore.client.message import MessageExt
from mqcore.remoting.bodies import MessageQueue


def msg(key: str) -> MessageExt:
    m = MessageExt("T", b"x", f"KEYS\x01{key}\x02UNIQ_KEY\x01U-{key}".encode(), "b")
    return m


def ctx() -> ConsumeConcurrentlyContext:
    return ConsumeConcurrentlyContext(MessageQueue("T", "b", 0))


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        return MemoryIdempotentStore()
    return SqliteIdempotentStore(str(tmp_path / "ids.db"))


def test_duplicates_are_processed_once(store):
    seen = []

    @idempotent(store)
    def handle(msgs, context):
        seen.extend(m.keys[0] for m in msgs)

    handle([msg("o-1"), msg("o-2")], ctx())
    handle([msg("o-1")], ctx())
    handle([msg("o-2"), msg("o-3")], ctx())
    assert seen == ["o-1", "o-2", "o-3"]


def test_failures_release_keys(store):
    calls = []

    @idempotent(store)
    def handle(msgs, context):
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("db down")
        if len(calls) == 2:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return None

    with pytest.raises(RuntimeError):
        handle([msg("k")], ctx())
    assert handle([msg("k")], ctx()) is ConsumeConcurrentlyStatus.RECONSUME_LATER
    assert handle([msg("k")], ctx()) is None
    handle([msg("k")], ctx())
    assert len(calls) == 3


def test_in_progress_duplicate_fails_the_batch(store):
    assert store.try_begin("busy") is Claim.NEW

    @idempotent(store)
    def handle(msgs, context):
        raise AssertionError("must not run")

    with pytest.raises(DuplicateInProgressError):
        handle([msg("free"), msg("busy")], ctx())
    assert store.try_begin("free") is Claim.NEW  # released again


def test_partial_ack_marks_only_acked_keys():
    store = MemoryIdempotentStore()

    @idempotent(store)
    def handle(msgs, context):
        context.ack_index = 0
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = ctx()
    batch = [msg("dup"), msg("a"), msg("b")]
    store.try_begin("dup")
    store.mark_done("dup")
    handle(batch, c)
    assert store.try_begin("a") is Claim.DONE
    assert store.try_begin("b") is Claim.NEW
    assert c.ack_index == 1  # "a" (index 1 of the original batch) is the last acked


def test_memory_store_expiry_and_capacity():
    now = [0.0]
    store = MemoryIdempotentStore(ttl_ms=1000, max_keys=2, processing_timeout_ms=500, clock=lambda: now[0])
    assert store.try_begin("a") is Claim.NEW
    assert store.try_begin("a") is Claim.IN_PROGRESS
    now[0] = 0.6
    assert store.try_begin("a") is Claim.NEW  # abandoned claim retaken
    store.mark_done("a")
    assert store.try_begin("a") is Claim.DONE
    now[0] = 2.0
    assert store.try_begin("a") is Claim.NEW  # expired
    for k in ("x", "y", "z"):
        store.try_begin(k)
        store.mark_done(k)
    assert store.try_begin("x") is Claim.NEW  # evicted (capacity 2)
