"""AsyncPushConsumer (``async for``, ack-on-next) against the threaded PushConsumer, same run.

One ``mqbroker`` child on free ports, store in a temp dir removed at the end. Each round
stores ``--n`` messages in two fresh topics, then consumes one with a threaded
``PushConsumer`` and one with an ``AsyncPushConsumer`` (alternating which goes first), both at
their defaults, and measures msg/s from ``start`` to the last message plus the offsets'
commit (``shutdown`` persists them). Printed per round with the load average, then the ratio
of the medians.

    python bench/bench_async_consumer.py                # 20,000 x 100 B, 3 rounds
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_client as bc  # noqa: E402

from mqcore.client import AsyncPushConsumer  # noqa: E402


def threaded(ns: str, topic: str, n: int) -> float:
    """bench_client's threaded consume + commit row (a fresh group's PushConsumer at its defaults)."""
    seconds, _cpu = bc.mq_consume(ns, topic, n, f"g-{topic}")
    return n / seconds


def asynchronous(ns: str, topic: str, n: int) -> float:
    async def run() -> float:
        c = AsyncPushConsumer(f"g-{topic}", namesrv_addr=ns, consume_from_where="first")
        c.subscribe(topic)
        t0 = time.perf_counter()
        seen = 0
        async with c:
            async for _ in c:
                seen += 1
                if seen >= n:
                    await c.ack()
                    break
        return n / (time.perf_counter() - t0)
    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-async-consumer-")
    server, ns = bc.start_mqbroker(tmp, "mq")
    rates: dict[str, list[float]] = {"threaded": [], "async": []}
    try:
        for r in range(args.rounds):
            order = [("threaded", threaded), ("async", asynchronous)]
            if r % 2:
                order.reverse()
            for name, fn in order:
                topic = f"Async{name}r{r}"
                bc.mq_fill(ns, topic, b"x" * args.size, args.n)
                rate = fn(ns, topic, args.n)
                rates[name].append(rate)
                print(json.dumps({"round": r, "consumer": name, "msg_s": round(rate),
                                  "loadavg_1m": round(os.getloadavg()[0], 2)}), flush=True)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    a, t = statistics.median(rates["async"]), statistics.median(rates["threaded"])
    print(json.dumps({"async_median": round(a), "threaded_median": round(t), "ratio": round(a / t, 3)}))


if __name__ == "__main__":
    main()
