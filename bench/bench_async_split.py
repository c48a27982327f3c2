"""Auto-batched ``send_async`` at the defaults, client CPU per message split by thread, next to a baseline tree.

One ``mqbroker`` child (this tree, store in a temp dir removed at the end). Each round runs,
for every size, one client child per tree, alternating (ours, then the baseline checkout
given by ``--baseline-tree``, then ours...), so both see the same phases of the machine's
load. A client child is what ``bench_client.py``'s "1000 in flight" row does:
``Producer(auto_batch=True, max_async_inflight=1000)``, every other setting at its default,
one ``send`` first (route, topic), then ``--n`` ``send_async`` calls as fast as the window
allows and every future's ``result()``. Over that timed section it reports its CPU per
message: the whole process (``time.process_time``, as bench_client's ``client_cpu_us``), the
caller's thread, the client's loop thread (schedstat, ns) and the rest; the broker's CPU per
message (its threads' schedstat); and how many batches carried the messages.

    python bench/bench_async_split.py --baseline-tree /tmp/base --n 20000 --rounds 5

The baseline checkout needs its extensions built (``python setup.py build_ext --inplace``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.dirname(HERE)


def _thread_ns(tid: int) -> int:
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except FileNotFoundError:
        return 0


def _process_ns(pid: int) -> int:
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def client(ns: str, size: int, n: int, topic: str, broker_pid: int) -> None:
    """One client child: the timed burst, one JSON line on stdout."""
    from mqcore.client import Message, Producer

    body = b"x" * size
    caller = threading.get_native_id()
    with Producer("bench-async-split", namesrv_addr=ns, auto_batch=True, max_async_inflight=1000) as p:
        p.send(Message(topic, body))
        loop_tid = p._instance.loop_thread._thread.native_id
        acc = p._accumulator
        assert acc is not None
        batches0 = acc.batches_sent
        c0, l0, b0 = _thread_ns(caller), _thread_ns(loop_tid), _process_ns(broker_pid)
        p0, w0 = time.process_time(), time.perf_counter()
        futures = [p.send_async(Message(topic, body)) for _ in range(n)]
        for f in futures:
            f.result(60)
        wall, proc = time.perf_counter() - w0, time.process_time() - p0
        c1, l1, b1 = _thread_ns(caller), _thread_ns(loop_tid), _process_ns(broker_pid)
        batches = acc.batches_sent - batches0
    per = 1e3 * n  # ns -> µs per message
    print(json.dumps({"msgs_per_s": round(n / wall), "client_cpu_us": round(proc * 1e9 / per, 2),
                      "caller_us": round((c1 - c0) / per, 2), "loop_us": round((l1 - l0) / per, 2),
                      "other_us": round(max(0.0, proc * 1e9 - (c1 - c0 + l1 - l0)) / per, 2),
                      "broker_us": round((b1 - b0) / per, 2), "batches": batches}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--baseline-tree", metavar="DIR", help="a checkout to run as the baseline client, interleaved")
    ap.add_argument("--client", nargs=4, metavar=("NS", "SIZE", "TOPIC", "BROKER_PID"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.client:
        ns, size, topic, pid = args.client
        client(ns, int(size), args.n, topic, int(pid))
        return
    sys.path.insert(0, HERE)
    sys.path.insert(0, TREE)
    from bench_floor import Child

    trees = [("ours", TREE)] + ([("baseline", os.path.abspath(args.baseline_tree))] if args.baseline_tree else [])
    sizes = [int(s) for s in args.sizes.split(",")]
    tmp = tempfile.mkdtemp(prefix="bench-async-split-")
    broker = Child([sys.executable, "-m", "mqcore.broker.cli", "--store", os.path.join(tmp, "store"),
                    "--listen-port", "0", "--namesrv-port", "0", "--log-level", "WARNING"],
                   env={**os.environ, "PYTHONPATH": TREE})
    rows: dict[tuple[str, int], list[dict]] = {}
    loads = []
    try:
        ns = dict(part.split("=", 1) for part in broker.line.split()[1:])["namesrv"]
        for r in range(args.rounds):
            for size in sizes:
                for name, tree in (trees if r % 2 == 0 else trees[::-1]):
                    out = subprocess.run(
                        [sys.executable, os.path.abspath(__file__), "--n", str(args.n), "--client", ns, str(size),
                         f"Split{name}{size}r{r}", str(broker.proc.pid)],
                        env={**os.environ, "PYTHONPATH": tree}, cwd=tree, capture_output=True, text=True, timeout=600)
                    if out.returncode:
                        raise RuntimeError(f"{name} client failed:\n{out.stderr}")
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    row.update(tree=name, size=size, round=r, loadavg_1m=round(os.getloadavg()[0], 2))
                    loads.append(row["loadavg_1m"])
                    print(json.dumps(row), flush=True)
                    rows.setdefault((name, size), []).append(row)
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    cols = ("msgs_per_s", "client_cpu_us", "caller_us", "loop_us", "other_us", "broker_us", "batches")
    print(f"\nmedians of {args.rounds} interleaved rounds, {args.n} messages each, load {min(loads)}-{max(loads)}\n")
    print("| tree | size | " + " | ".join(cols) + " |")
    print("|---|---|" + "---:|" * len(cols))
    for size in sizes:
        for name, _ in trees:
            got = rows[(name, size)]
            cells = [statistics.median(x[c] for x in got) for c in cols]
            print(f"| {name} | {size} B | " + " | ".join(f"{v:,.0f}" if c in ("msgs_per_s", "batches") else f"{v:.2f}"
                                                    for c, v in zip(cols, cells)) + " |")


if __name__ == "__main__":
    main()
