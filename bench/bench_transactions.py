"""Transactional sends next to plain sends, on mqbroker and on Apache RocketMQ 4.9.7 (Java), in the
same run, interleaved round by round so all four see the same machine load.

Workloads (100 B bodies, one producer, one message at a time, fresh topic per round):

* ``plain sync send``: ``Producer.send``, each waiting for the broker (the floor a transactional
  send is built on);
* ``transactional send``: ``TransactionProducer.send_message_in_transaction`` with a local
  transaction that commits at once: the half message (a send waited for), then END_TRANSACTION
  (oneway). The round ends when every committed message is readable in its topic, so the broker's
  commit work (the real record and the op record) is inside the timing.

    python bench/bench_transactions.py              # 3 rounds, 3,000 messages per workload
    python bench/bench_transactions.py --quick      # 2 rounds, 1,000 messages

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
from mqcore.client import LocalTransactionState, Message, Producer, TransactionProducer  # noqa: E402
from mqcore.remoting import RequestCode, SyncRemotingClient, create_request  # noqa: E402
from tests.client.integration.helpers import create_topic  # noqa: E402

WORKLOADS = ("plain sync send", "transactional send")
SYSTEMS = ("mqbroker", "rocketmq-4.9.7")


def plain(ns: str, topic: str, body: bytes, n: int, _broker: str) -> float:
    with Producer("bench-plain", namesrv_addr=ns) as p:
        p.send(Message(topic, body))  # route lookup and connection outside the timing
        t0 = time.perf_counter()
        for _ in range(n):
            p.send(Message(topic, body))
        return time.perf_counter() - t0


def _readable(broker: str, topic: str) -> int:
    with SyncRemotingClient() as rc:
        r = rc.invoke(broker, create_request(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": "0"}), 5000)
    return int(r.ext_fields["offset"])


def transactional(ns: str, topic: str, body: bytes, n: int, broker: str) -> float:
    def commit(msg, arg):
        return LocalTransactionState.COMMIT_MESSAGE

    with TransactionProducer("bench-tx", checker=lambda m: LocalTransactionState.COMMIT_MESSAGE,
                             namesrv_addr=ns) as p:
        p.send_message_in_transaction(Message(topic, body), commit)
        t0 = time.perf_counter()
        for _ in range(n):
            p.send_message_in_transaction(Message(topic, body), commit)
        deadline = time.monotonic() + 60
        while _readable(broker, topic) < n + 1:  # every commit applied (the ends are oneway)
            if time.monotonic() > deadline:
                raise SystemExit(f"bench_transactions: only {_readable(broker, topic)} of {n + 1} commits "
                                 f"arrived on {broker}")
            time.sleep(0.001)
        return time.perf_counter() - t0


def run_round(ns: str, broker: str, system: str, rnd: int, body: bytes, n: int) -> list[dict]:
    rows = []
    for workload, fn in (("plain sync send", plain), ("transactional send", transactional)):
        topic = f"BenchTx{rnd}{'P' if fn is plain else 'T'}"
        create_topic(broker, ns, topic, 1)
        secs = fn(ns, topic, body, n, broker)
        row = {"bench": "transactions", "system": system, "round": rnd, "workload": workload, "messages": n,
               "size": len(body), "seconds": round(secs, 3), "msgs_per_s": round(n / secs), "loadavg_1m": loadavg()}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=3_000, help="messages per workload and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=100, help="body size in bytes")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 1,000 messages")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.rounds = 1_000, 2
    body = b"x" * args.size
    rows: list[dict] = []
    with both_brokers("bench-tx-") as systems:
        for rnd, system in interleaved(args.rounds, SYSTEMS):
            rows.extend(run_round(*systems[system], system, rnd, body, args.n))
    print(f"\nload average (1 min) at the end: {loadavg()}")
    print("| workload | mqbroker msg/s | Apache RocketMQ 4.9.7 msg/s | mqbroker / RocketMQ |")
    print("|---|---|---|---|")
    for workload in WORKLOADS:
        med = {s: statistics.median(r["msgs_per_s"] for r in rows if r["workload"] == workload and r["system"] == s)
               for s in SYSTEMS}
        print(f"| {workload} | {int(med['mqbroker']):,} | {int(med['rocketmq-4.9.7']):,} | "
              f"{med['mqbroker'] / med['rocketmq-4.9.7']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
