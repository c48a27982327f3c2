"""The asyncio consumers against mqbroker, Apache RocketMQ 4.9.7 and 5.3.3: everything produced is
consumed at least once, a second consumer of the group takes its share (rebalance), and what
the first one yielded but did not acknowledge when it left comes back."""
from __future__ import annotations

import asyncio
import os

import pytest

from mqcore.client import AsyncLitePullConsumer, AsyncPushConsumer

from .helpers import FAST, create_topic, produce

pytestmark = pytest.mark.timeout(300)

N = 40


async def _until(cond, timeout: float = 90.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_two_async_push_consumers_share_a_group_and_lose_nothing(any_broker):
    ns = any_broker.namesrv_addr
    topic, group = f"AioTopic{os.getpid()}", f"aio-cg-{os.getpid()}"
    create_topic(any_broker.broker_addr, ns, topic)
    produce(ns, topic, N)

    async def main() -> None:
        seen_a: list[bytes] = []
        seen_b: list[bytes] = []
        a = AsyncPushConsumer(group, namesrv_addr=ns, consume_from_where="first", **FAST)
        a.subscribe(topic)

        @a.listener
        async def on_a(msgs, ctx):
            seen_a.extend(m.body for m in msgs)

        b = AsyncPushConsumer(group, namesrv_addr=ns, consume_from_where="first", **FAST)
        b.subscribe(topic)

        @b.listener
        async def on_b(msgs, ctx):
            seen_b.extend(m.body for m in msgs)

        async with a, b:
            await _until(lambda: len(a.assigned_queues(topic)) + len(b.assigned_queues(topic)) == 4
                         and a.assigned_queues(topic) and b.assigned_queues(topic))
            await _until(lambda: len(set(seen_a) | set(seen_b)) >= N)
            produce(ns, topic, N, start=1000)  # after the rebalance: both take their queues' share
            await _until(lambda: len(set(seen_a) | set(seen_b)) >= 2 * N)
        everything = {f"m{i}".encode() for i in (*range(N), *range(1000, 1000 + N))}
        assert set(seen_a) | set(seen_b) == everything
        late = {f"m{i}".encode() for i in range(1000, 1000 + N)}
        assert set(seen_a) & late and set(seen_b) & late  # each consumer got part of the new messages

    asyncio.run(main())


def test_an_async_lite_pull_consumer_polls_everything(any_broker):
    ns = any_broker.namesrv_addr
    topic, group = f"AioPoll{os.getpid()}", f"aio-poll-{os.getpid()}"
    create_topic(any_broker.broker_addr, ns, topic)
    produce(ns, topic, N)

    async def main() -> set[bytes]:
        got: set[bytes] = set()
        c = AsyncLitePullConsumer(group, namesrv_addr=ns, consume_from_where="first", **FAST)
        c.subscribe(topic)
        async with c:
            deadline = asyncio.get_running_loop().time() + 90
            while len(got) < N and asyncio.get_running_loop().time() < deadline:
                got.update(m.body for m in await c.poll())
            await c.commit_sync()
        return got

    assert asyncio.run(main()) == {f"m{i}".encode() for i in range(N)}
