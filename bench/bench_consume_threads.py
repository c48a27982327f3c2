"""Where a default push consumer's CPU goes, per thread: the event-loop thread (pulling and
decoding) against the consume threads (listener calls and settling).

One ``mqbroker`` child at its defaults on free ports, store in a temp dir removed at the
end. Each round stores ``--n`` messages per size, then a fresh ``PushConsumer`` group with
every setting at its default (one message per listener call) consumes them. Printed per
round and size: msg/s from ``start()`` to the last message, this process's CPU per message,
and each thread's CPU per message (read from its own CPU clock), with the load average.

    python bench/bench_consume_threads.py                       # 20,000 x 100 B and 1 KiB, 3 rounds
    python bench/bench_consume_threads.py --n 100000 --sizes 1024 --rounds 1
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


def thread_cpu() -> dict[str, float]:
    out = {}
    for t in threading.enumerate():
        try:
            out[t.name] = time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (OSError, TypeError):  # a thread that just ended
            pass
    return out


def kind(name: str) -> str:
    if name.startswith("mqcore-client"):
        return "loop thread"
    if name.startswith("mqcore-consume-watch"):
        return "watchdog"
    if name.startswith("mqcore-consume"):
        return "consume threads"
    return "other"


def consume(ns: str, topic: str, n: int, group: str) -> dict[str, object]:
    count = [0]
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs, ctx):
        with lock:
            count[0] += len(msgs)
            if count[0] >= n:
                done.set()

    c = PushConsumer(group, namesrv_addr=ns, consume_from_where="first")
    c.subscribe(topic)
    c.register_listener(listener)
    before = thread_cpu()
    t0, p0 = time.perf_counter(), time.process_time()
    c.start()
    if not done.wait(600):
        raise RuntimeError(f"consumed only {count[0]} of {n}")
    after = thread_cpu()
    t1, p1 = time.perf_counter(), time.process_time()
    c.shutdown()
    per: dict[str, float] = {}
    for name, cpu in after.items():
        per[kind(name)] = per.get(kind(name), 0.0) + (cpu - before.get(name, 0.0)) / n * 1e6
    return {"msg_s": round(n / (t1 - t0)), "cpu_us_per_msg": round((p1 - p0) / n * 1e6, 2),
            "threads_us_per_msg": {k: round(v, 2) for k, v in sorted(per.items()) if v >= 0.01}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-consume-threads-")
    server, ns = bc.start_mqbroker(tmp, "mq")
    try:
        for r in range(args.rounds):
            for size in (int(s) for s in args.sizes.split(",")):
                topic = f"Threads{size}r{r}"
                bc.mq_fill(ns, topic, b"x" * size, args.n)
                row = consume(ns, topic, args.n, f"threads{size}r{r}")
                print(json.dumps({"size": size, "round": r, **row, "loadavg_1m": round(os.getloadavg()[0], 2)}),
                      flush=True)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
