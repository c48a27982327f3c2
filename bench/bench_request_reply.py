"""Request-reply round trips next to plain sync sends, on mqbroker and on Apache RocketMQ 4.9.7
(Java), in the same run, interleaved round by round so both see the same machine load.

Workloads (100 B bodies, one requester, one request at a time, fresh topic per round):

* ``plain sync send``: ``Producer.send``, each waiting for the broker (the floor);
* ``request-reply``: ``Producer.request`` answered by a push consumer with ``send_reply``: the
  request's send, its delivery to the consumer (long polling), the reply's SEND_REPLY_MESSAGE_V2,
  the broker's push to the requester (and the reply's put) and the hand-over to the waiting call.
  Per-request latency percentiles are reported for it.

    python bench/bench_request_reply.py              # 3 rounds, 1,000 requests per workload
    python bench/bench_request_reply.py --quick      # 2 rounds, 300

Prints one JSON line per round and workload, then a table of medians with the load average.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_reference import both_brokers, interleaved, loadavg  # noqa: E402
from mqcore.client import Message, Producer, PushConsumer  # noqa: E402
from tests.client.integration.helpers import create_topic  # noqa: E402

WORKLOADS = ("plain sync send", "request-reply")
SYSTEMS = ("mqbroker", "rocketmq-4.9.7")


def plain(ns: str, topic: str, body: bytes, n: int) -> tuple[float, list[float]]:
    with Producer("bench-plain", namesrv_addr=ns) as p:
        p.send(Message(topic, body))  # route lookup and connection outside the timing
        lat = []
        t0 = time.perf_counter()
        for _ in range(n):
            t = time.perf_counter()
            p.send(Message(topic, body))
            lat.append(time.perf_counter() - t)
        return time.perf_counter() - t0, lat


def request_reply(ns: str, topic: str, body: bytes, n: int) -> tuple[float, list[float]]:
    with Producer("bench-replier", namesrv_addr=ns) as replier, Producer("bench-requester", namesrv_addr=ns) as p:
        consumer = PushConsumer(f"bench-rr-{topic}", namesrv_addr=ns, consume_from_where="first")
        consumer.subscribe(topic)

        @consumer.listener
        def answer(msgs, ctx):
            for m in msgs:
                replier.send_reply(m, m.body)

        with consumer:
            deadline = time.monotonic() + 60
            while len(consumer.assigned_queues(topic)) < 1:
                if time.monotonic() > deadline:
                    raise SystemExit("bench_request_reply: the replier never got a queue")
                time.sleep(0.05)
            p.request(Message(topic, body), timeout_ms=30_000)  # heartbeat, connections, first pull outside
            lat = []
            t0 = time.perf_counter()
            for _ in range(n):
                t = time.perf_counter()
                p.request(Message(topic, body), timeout_ms=30_000)
                lat.append(time.perf_counter() - t)
            return time.perf_counter() - t0, lat


def _ms(values: list[float], q: float) -> float:
    return round(sorted(values)[min(len(values) - 1, int(q * len(values)))] * 1000, 2)


def run_round(ns: str, broker: str, system: str, rnd: int, body: bytes, n: int) -> list[dict]:
    rows = []
    for workload, fn in (("plain sync send", plain), ("request-reply", request_reply)):
        topic = f"BenchRr{rnd}{'P' if fn is plain else 'R'}"
        create_topic(broker, ns, topic, 1)
        secs, lat = fn(ns, topic, body, n)
        row = {"bench": "request_reply", "system": system, "round": rnd, "workload": workload, "requests": n,
               "size": len(body), "seconds": round(secs, 3), "per_s": round(n / secs), "p50_ms": _ms(lat, 0.5),
               "p99_ms": _ms(lat, 0.99), "loadavg_1m": loadavg()}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=1_000, help="requests per workload and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=100, help="body size in bytes")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 300 requests")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.rounds = 300, 2
    body = b"x" * args.size
    rows: list[dict] = []
    with both_brokers("bench-rr-") as systems:
        for rnd, system in interleaved(args.rounds, SYSTEMS):
            rows.extend(run_round(*systems[system], system, rnd, body, args.n))
    print(f"\nload average (1 min) at the end: {loadavg()}")
    print("| workload | mqbroker /s (p50, p99 ms) | Apache RocketMQ 4.9.7 /s (p50, p99 ms) | mqbroker / RocketMQ |")
    print("|---|---|---|---|")
    for workload in WORKLOADS:
        med = {}
        for s in SYSTEMS:
            mine = [r for r in rows if r["workload"] == workload and r["system"] == s]
            med[s] = (statistics.median(r["per_s"] for r in mine),
                      round(statistics.median(r["p50_ms"] for r in mine), 2),
                      round(statistics.median(r["p99_ms"] for r in mine), 1))
        a, b = med["mqbroker"], med["rocketmq-4.9.7"]
        print(f"| {workload} | {int(a[0]):,} ({a[1]}, {a[2]}) | {int(b[0]):,} ({b[1]}, {b[2]}) | {a[0] / b[0]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
