"""AsyncPushConsumer / AsyncLitePullConsumer against a real in-process mqbroker (TestBroker)."""
from __future__ import annotations

import asyncio

import pytest

from mqcore.client import (AsyncLitePullConsumer, AsyncPushConsumer, ConsumeOrderlyStatus, Message, Producer,
                           select_by_hash)
from mqcore.testing import TestBroker

pytestmark = pytest.mark.timeout(120)

FAST = dict(rebalance_interval_ms=300, heartbeat_broker_interval_ms=300, poll_name_server_interval_ms=300,
            persist_consumer_offset_interval_ms=200)


@pytest.fixture
def broker():
    with TestBroker() as b:
        yield b


def produce(addr, topic, n, *, orderly_keys=None):
    with Producer("pg", namesrv_addr=addr) as p:
        for i in range(n):
            if orderly_keys:
                p.send(Message(topic, f"{i % orderly_keys}:{i}"), selector=select_by_hash, arg=str(i % orderly_keys))
            else:
                p.send(Message(topic, f"m{i}"))


async def until(cond, timeout=30.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_async_listener_consumes_everything(broker):
    produce(broker.namesrv_addr, "AT", 50)

    async def main():
        got = []
        c = AsyncPushConsumer("ag", namesrv_addr=broker.namesrv_addr, consume_from_where="first", **FAST)
        c.subscribe("AT")

        @c.listener
        async def handle(msgs, ctx):
            await asyncio.sleep(0)
            got.extend(m.body for m in msgs)

        async with c:
            await until(lambda: len(set(got)) >= 50)
        return got

    got = asyncio.run(main())
    assert set(got) == {f"m{i}".encode() for i in range(50)}


def test_async_for_cancellation_redelivers(broker):
    """A task iterating the consumer is cancelled mid-stream; a second consumer of the group
    gets every message that the first did not acknowledge (nothing is lost)."""
    produce(broker.namesrv_addr, "AC", 40)

    async def first():
        acked = []
        c = AsyncPushConsumer("acg", namesrv_addr=broker.namesrv_addr, consume_from_where="first", **FAST)
        c.subscribe("AC")
        async with c:
            async def run():
                async for m in c:
                    acked.append(m.body)  # counts only once the loop asks for the next one
                    if len(acked) == 10:
                        await asyncio.Event().wait()  # parked: this one is not acknowledged
            t = asyncio.create_task(run())
            await until(lambda: len(acked) >= 10)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
        return acked[:-1]  # the last one was never acknowledged

    async def second():
        got = []
        c = AsyncPushConsumer("acg", namesrv_addr=broker.namesrv_addr, consume_from_where="first", **FAST)
        c.subscribe("AC")
        async with c:
            async def run():
                async for m in c:
                    got.append(m.body)
            t = asyncio.create_task(run())
            await until(lambda: len(set(got)) + len(set(acked)) >= 40 and
                        set(got) | set(acked) >= {f"m{i}".encode() for i in range(40)})
            t.cancel()
        return got

    acked = asyncio.run(first())
    got = asyncio.run(second())
    assert set(got) | set(acked) == {f"m{i}".encode() for i in range(40)}


def test_orderly_async_listener_keeps_queue_order(broker):
    produce(broker.namesrv_addr, "AO", 60, orderly_keys=4)

    async def main():
        seen: dict[str, list[int]] = {}
        c = AsyncPushConsumer("aog", namesrv_addr=broker.namesrv_addr, consume_from_where="first", **FAST)
        c.subscribe("AO")

        @c.orderly_listener
        async def handle(msgs, ctx):
            for m in msgs:
                k, i = m.body.decode().split(":")
                seen.setdefault(k, []).append(int(i))
                await asyncio.sleep(0)
            return ConsumeOrderlyStatus.SUCCESS

        async with c:
            await until(lambda: sum(len(v) for v in seen.values()) >= 60)
        return seen

    seen = asyncio.run(main())
    for v in seen.values():
        assert v == sorted(v)
    assert sum(len(v) for v in seen.values()) == 60


def test_lite_pull_poll_and_commit(broker):
    produce(broker.namesrv_addr, "AL", 30)

    async def main():
        got = []
        c = AsyncLitePullConsumer("alg", namesrv_addr=broker.namesrv_addr, consume_from_where="first",
                                  auto_commit=False, rebalance_interval_ms=300)
        c.subscribe("AL")
        async with c:
            while len(got) < 30:
                got.extend(await asyncio.wait_for(c.poll(timeout_ms=200), 30))
            await c.commit_sync()
        return got

    got = asyncio.run(main())
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(30))
