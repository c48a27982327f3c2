"""Message sizes from 100 B to 4 MiB (issue 34): mqbroker next to Apache RocketMQ 4.9.7's broker.

Per round, size and broker (the order alternating between rounds): ``--conns`` connections,
one thread each, send raw SEND_MESSAGE_V2 frames built beforehand (so the client's cost is a
socket write and an answer count) to one topic's 8 queues with a window of requests in flight
per connection that keeps about ``--inflight-bytes`` of bodies unanswered; msg/s, MB/s of bodies
and the broker process's CPU per message (user + system from ``/proc``, over the timed part).

Both brokers run ASYNC_FLUSH on throw-away stores with ``maxMessageSize`` raised to 5 MiB so the
4 MiB row fits next to its properties; the Java broker's JVM is started as bin/runbroker.sh does
(G1, 16 MiB regions, a fixed pre-touched heap: 4 GiB here, where runbroker.sh takes 8). Prints one JSON line per measurement, then the medians
with the 1-minute load average.

    python bench/bench_sizes.py                            # 3 rounds, 100 B .. 4 MiB
    python bench/bench_sizes.py --sizes 1048576 --rounds 5
    python bench/bench_sizes.py --only mqbroker --sizes 1048576 --seconds 5   # for a profiler
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_reference import JAVA_CONF, ensure_jars, loadavg  # noqa: E402
from bench.bench_topics import _send_request, create_topics, pump  # noqa: E402
from mqcore.remoting.command import encode_frame  # noqa: E402
from tests.support.processes import BrokerProcess  # noqa: E402
from tests.support.reference import RUNBROKER_JVM, JavaBroker, JavaNamesrv  # noqa: E402

SYSTEMS = ("mqbroker", "rocketmq-4.9.7")
SIZES = (100, 4096, 65536, 262144, 1048576, 4194304)
MAX_MESSAGE = 5 * 1024 * 1024
TOPIC = "SizesT"
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its threads so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def measure(addr: str, pid: int, size: int, args) -> dict:
    host, port = addr.rsplit(":", 1)
    body = os.urandom(size)
    window = max(1, min(32, args.inflight_bytes // args.conns // size))
    # enough messages for ~``seconds`` at a rough 300 MB/s, at least 4 windows per connection
    per = max(4 * window, int(args.seconds * 300e6 / size / args.conns), 20)
    per = min(per, 20_000)
    frames = [[encode_frame(_send_request(TOPIC, q % 8, body)) for q in range(8)] for _ in range(args.conns)]
    work = [[f[i % 8] for i in range(per)] for f in frames]
    counts: dict = {}
    threads = [threading.Thread(target=pump, args=(host, int(port), w, window, counts)) for w in work]
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds, cpu = time.perf_counter() - t0, cpu_seconds(pid) - c0
    if counts.get("errors"):
        raise RuntimeError(f"{len(counts['errors'])} sends failed, e.g. {counts['errors'][0]!r}")
    n = counts["ok"]
    return {"size": size, "messages": n, "busy": counts["busy"], "window": window, "msgs_per_s": round(n / seconds, 1),
            "mb_per_s": round(n * size / seconds / 1e6, 1), "broker_cpu_us_per_msg": round(cpu / n * 1e6, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=list(SIZES))
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=2.0, help="rough length of one measurement")
    ap.add_argument("--inflight-bytes", type=int, default=64 << 20, help="bodies unanswered, over all connections")
    ap.add_argument("--only", choices=SYSTEMS, action="append")
    ap.add_argument("--mq-conf", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    systems = tuple(args.only or SYSTEMS)
    if "rocketmq-4.9.7" in systems:
        ensure_jars()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-sizes-") as tmp:
        work = Path(tmp)
        brokers: dict[str, tuple[str, int]] = {}
        stack = []
        try:
            if "mqbroker" in systems:
                conf = {"flushDiskType": "ASYNC_FLUSH", "maxMessageSize": MAX_MESSAGE,
                        **dict(kv.split("=", 1) for kv in args.mq_conf)}
                mq = BrokerProcess(work / "mq", conf=conf).__enter__()
                stack.append(mq)
                brokers["mqbroker"] = (mq.broker_addr, mq.proc.pid)
            if "rocketmq-4.9.7" in systems:
                jns = JavaNamesrv(work / "ns").__enter__()
                stack.append(jns)
                jb = JavaBroker(work / "java", jns.addr, conf={**JAVA_CONF, "maxMessageSize": MAX_MESSAGE},
                                jvm_opts=RUNBROKER_JVM).__enter__()
                stack.append(jb)
                brokers["rocketmq-4.9.7"] = (jb.addr, jb.proc.pid)
            for addr, _ in brokers.values():
                create_topics(addr, [TOPIC])
            for rnd in range(args.rounds):
                for size in args.sizes:
                    for system in systems if rnd % 2 == 0 else systems[::-1]:
                        addr, pid = brokers[system]
                        r = {"bench": "sizes", "round": rnd, "system": system, **measure(addr, pid, size, args),
                             "loadavg_1m": loadavg()}
                        print(json.dumps(r), flush=True)
                        rows.append(r)
        finally:
            for p in reversed(stack):
                p.__exit__(None, None, None)

    def med(system: str, size: int, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["system"] == system and r["size"] == size)

    head = " | ".join(f"{s} msg/s | {s} MB/s | {s} CPU µs/msg" for s in systems)
    print(f"\n| size | {head} |" + (" mqbroker ÷ Java (goal ≥ 1.0) |" if len(systems) == 2 else ""))
    print("|---" * (1 + 3 * len(systems) + (len(systems) == 2)) + "|")
    for size in args.sizes:
        cells = " | ".join(f"{med(s, size, 'msgs_per_s'):,.0f} | {med(s, size, 'mb_per_s'):,.0f} | "
                           f"{med(s, size, 'broker_cpu_us_per_msg'):,.0f}" for s in systems)
        ratio = ""
        if len(systems) == 2:
            ratio = f" {med(systems[0], size, 'msgs_per_s') / med(systems[1], size, 'msgs_per_s'):.2f} |"
        print(f"| {size:,} B | {cells} |{ratio}")
    print(f"load average (1 min) at the end: {loadavg()}; {args.rounds} rounds, {args.conns} connections")
    return 0


if __name__ == "__main__":
    sys.exit(main())
