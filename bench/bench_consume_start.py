"""Where a consume run's time goes: the consumer's start against its steady state.

One ``mqbroker`` child (the consume throughput knobs of ``bench_client.py``) on free ports,
store in a temp dir removed at the end. Each round stores ``--n`` messages with
``send_batch``, then a fresh ``PushConsumer`` group (``pull_batch_size=1000``, listener
batches of 32) consumes them from the start. Printed per round: ``start()``'s own time, the
time until the first message reaches the listener, the whole run (to the last message,
then shutdown with its offset commit), and the steady rate from the first message to the
last: the floor the whole-run figure would reach if the consumer started instantly.

    python bench/bench_consume_start.py                 # 20,000 x 1 KiB, 3 rounds
    python bench/bench_consume_start.py --size 100 --rounds 5
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_client as bc  # noqa: E402

from mqcore.client import PushConsumer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-consume-start-")
    server, ns = bc.start_mqbroker(tmp, "mq", bc.CONSUME_THROUGHPUT_CONF)
    try:
        for r in range(args.rounds):
            topic = f"Start{args.size}r{r}"
            bc.mq_fill(ns, topic, b"x" * args.size, args.n)
            count, first = [0], [0.0]
            lock, done = threading.Lock(), threading.Event()

            def listener(msgs, ctx):
                with lock:
                    if not first[0]:
                        first[0] = time.perf_counter()
                    count[0] += len(msgs)
                    if count[0] >= args.n:
                        done.set()

            c = PushConsumer(f"start-g{r}", namesrv_addr=ns, consume_from_where="first",
                             consume_message_batch_max_size=32, pull_batch_size=bc.PULL_BATCH)
            c.subscribe(topic)
            c.register_listener(listener)
            t0 = time.perf_counter()
            c.start()
            started = time.perf_counter()
            if not done.wait(120):
                raise RuntimeError(f"consumed only {count[0]} of {args.n}")
            last = time.perf_counter()
            c.shutdown()
            end = time.perf_counter()
            print(json.dumps({
                "size": args.size, "round": r, "n": args.n,
                "start_ms": round((started - t0) * 1e3, 1), "first_message_ms": round((first[0] - t0) * 1e3, 1),
                "whole_run_msgs_per_s": round(args.n / (end - t0)),
                "steady_msgs_per_s": round(args.n / (last - first[0])),
                "loadavg_1m": os.getloadavg()[0]}), flush=True)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
