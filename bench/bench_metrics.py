"""What the broker's metrics cost: the per-request counter updates on the send and pull
paths, and one scrape of a broker with many topics, queues and groups.

    python bench/bench_metrics.py            # about 20 s

Prints one JSON object per line. The per-request rows compare ``BrokerStats.on_put`` +
the put-latency histogram (what a send request pays) with a baseline of the same loop
calling an empty method, in the same run; ``loadavg_1m`` is recorded on each row.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.broker.broker import Broker  # noqa: E402
from mqcore.broker.config import BrokerConfig  # noqa: E402
from mqcore.broker.metrics import MetricsServer  # noqa: E402
from mqcore.broker.stats import BrokerStats  # noqa: E402
from mqcore.config import StoreConfig  # noqa: E402
from mqcore.message import MessageExtBrokerInner  # noqa: E402
from mqcore.store.results import PutMessageResult, PutMessageStatus  # noqa: E402

N = 1_000_000


def emit(**row) -> None:
    row["loadavg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(row), flush=True)


class _Empty:
    def on_put(self, topic, result):
        pass


def per_request() -> None:
    result = PutMessageResult(PutMessageStatus.PUT_OK, wrote_bytes=200, message_count=1)
    topics = [f"T{i}" for i in range(16)]
    for label, stats in (("baseline: empty method", _Empty()), ("on_put + latency observe", BrokerStats())):
        best = None
        for _round in range(3):
            t0 = time.perf_counter()
            for i in range(N):
                stats.on_put(topics[i & 15], result)
                if label != "baseline: empty method":
                    stats.put_latency.observe(0.00002)
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        emit(bench="per_request", case=label, calls=N, ns_per_call=round(best / N * 1e9, 1))


async def scrape(topics: int = 200, queues: int = 8, groups: int = 50) -> None:
    with tempfile.TemporaryDirectory() as d:
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="bench"),
                        StoreConfig(store_path=d, commitlog_file_size_bytes=64 << 20, index_slots=1000,
                                    index_entries=4000, prefault_window_bytes=0))
        await broker.start()
        try:
            for t in range(topics):
                for q in range(queues):
                    broker.store.put_message(MessageExtBrokerInner(topic=f"T{t}", body=b"x", queue_id=q))
            for g in range(groups):
                for t in range(0, topics, 10):
                    for q in range(queues):
                        broker.offsets.commit(f"G{g}", f"T{t}", q, 0)
            server = MetricsServer(broker, "127.0.0.1", 0)
            best, size = None, 0
            for _round in range(5):
                t0 = time.perf_counter()
                size = len(server.render())
                dt = time.perf_counter() - t0
                best = dt if best is None else min(best, dt)
            emit(bench="scrape", topics=topics, queues=queues, groups=groups,
                 group_topic_pairs=groups * topics // 10, ms=round(best * 1000, 1), bytes=size)
        finally:
            await broker.shutdown()


if __name__ == "__main__":
    per_request()
    asyncio.run(scrape())
