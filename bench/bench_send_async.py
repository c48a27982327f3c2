"""CPU per message of auto-batched ``send_async`` with 1000 in flight, client and broker apart.

One ``mqbroker`` child process on free ports (store in a temp dir, removed at the end) and one
``Producer(auto_batch=True, max_async_inflight=1000)`` in this process sending ``--n``
messages, ``--rounds`` times. Each round prints msg/s, the client's CPU per message
(``time.process_time``: the caller's thread, the loop thread and the callback thread together)
and the caller's thread alone (``time.thread_time``), and the broker's (``/proc/<pid>/stat``).
Two floors next to it, measured in the same run: the same messages through ``send_batch`` of
1000 (no per-message futures, no accumulator), the most the broker and the batch codec allow;
and ``objects``: nothing sent at all, only what ``send_async`` must make for every message
whatever the transport (the ``Message`` the caller builds, its ``UNIQ_KEY``, its encoded batch
item and the future it returns), the most a Python ``send_async`` could reach.

Meant for A/B runs of two trees (the script imports the tree it sits in: copy it into the
old checkout and alternate):

    python bench/bench_send_async.py                       # 30,000 x 100 B, 3 rounds
    python bench/bench_send_async.py --size 1024 --batch-bytes 32768
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_floor import Child, cpu_of  # noqa: E402

from mqcore._compat import default_kernels  # noqa: E402
from mqcore.client import Message, Producer  # noqa: E402
from mqcore.client.loop import SiblingFuture  # noqa: E402
from mqcore.uniq_id import UniqIdGenerator  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=30_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-gc", action="store_true",
                    help="turn Python's cyclic garbage collector off in this process (what it costs)")
    ap.add_argument("--batch-bytes", type=int, default=1024 * 1024, help="batch_max_bytes (RocketMQ's default: 32768)")
    args = ap.parse_args()
    if args.no_gc:
        gc.disable()
    tmp = tempfile.mkdtemp(prefix="bench-send-async-")
    child = Child([sys.executable, "-m", "mqcore.broker.cli", "--store", os.path.join(tmp, "store"),
                   "--listen-port", "0", "--namesrv-port", "0", "--log-level", "WARNING"])
    try:
        ns = dict(part.split("=", 1) for part in child.line.split()[1:])["namesrv"]
        body = b"x" * args.size
        with Producer("bench-send-async", namesrv_addr=ns, auto_batch=True, max_async_inflight=1000,
                      batch_max_bytes=args.batch_bytes, send_msg_timeout_ms=30_000) as p:
            condition, ids, kernels = threading.Condition(), UniqIdGenerator("127.0.0.1"), default_kernels()
            for r in range(args.rounds):
                for case in ("send_async", "send_batch", "objects"):
                    topic = f"{case}{r}"
                    p.send(Message(topic, body))
                    broker0, proc0, thread0, t0 = cpu_of(child.proc.pid), time.process_time(), time.thread_time(), \
                        time.perf_counter()
                    if case == "send_async":
                        futures = [p.send_async(Message(topic, body)) for _ in range(args.n)]
                        caller = time.thread_time() - thread0
                        for f in futures:
                            f.result(60)
                    elif case == "objects":
                        made = [(m, SiblingFuture(condition), ids.next_id(),
                                 kernels.encode_batch_message(m.flag, m.body, m.properties))
                                for m in (Message(topic, body) for _ in range(args.n))]
                        caller = time.thread_time() - thread0
                        del made
                    else:
                        for start in range(0, args.n, 1000):
                            p.send_batch([Message(topic, body) for _ in range(min(1000, args.n - start))])
                        caller = time.thread_time() - thread0
                    wall = time.perf_counter() - t0
                    print(json.dumps({
                        "case": case, "size": args.size, "round": r, "msgs_per_s": round(args.n / wall),
                        "client_cpu_us": round((time.process_time() - proc0) / args.n * 1e6, 1),
                        "caller_thread_cpu_us": round(caller / args.n * 1e6, 1),
                        "broker_cpu_us": round((cpu_of(child.proc.pid) - broker0) / args.n * 1e6, 1),
                        "batch_max_bytes": args.batch_bytes, "gc": gc.isenabled(), "loadavg_1m": os.getloadavg()[0]}), flush=True)
    finally:
        child.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
