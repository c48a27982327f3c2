"""Timer messages: broker memory with many pending timers, and how late they arrive.

    python bench/bench_timer.py                  # 100,000 timers, ~2 min
    python bench/bench_timer.py --count 20000    # quicker

A real mqbroker process (temp store, loopback) is sent ``--count`` single SEND_MESSAGE_V2
timers (``TIMER_DELIVER_MS`` spread over ``--spread`` seconds, starting ``--lead`` seconds
ahead) over 8 connections. Memory: the broker's VmRSS and RssAnon (its heap; RSS also counts
the touched pages of the mapped commitlog, consume queue and timer files) before the first
send, once every timer is in the wheel, and — the peer — the same for the same count of plain
messages of the same size sent to another fresh broker. Lateness: every delivered message's
store time minus its TIMER_DELIVER_MS (the broker side: when it was put to its topic), as
percentiles. One JSON object per line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.remoting import ResponseCode, SyncRemotingClient  # noqa: E402
from tests.support.processes import BrokerProcess  # noqa: E402
from tests.support.protocol import decode, pull, send_many  # noqa: E402


def _mem(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) // 1024  # MiB
    return out


def _settle(pid: int, seconds: float = 3.0) -> dict:
    time.sleep(seconds)
    return _mem(pid)


def run(count: int, lead_s: float, spread_s: float) -> None:
    load = os.getloadavg()[0]
    root = tempfile.mkdtemp(prefix="bench-timer-")
    try:
        # the peer: plain messages
        with BrokerProcess(os.path.join(root, "plain")) as b:
            before = _settle(b.proc.pid)
            secs = send_many(b, "BenchTimer", count, lambda i: {"UNIQ_KEY": "P%08d" % i})
            after = _settle(b.proc.pid)
            print(json.dumps({"bench": "timer_rss", "kind": "plain", "count": count, "send_s": round(secs, 1),
                              "before_mib": before, "after_mib": after, "load1": load}), flush=True)
        with BrokerProcess(os.path.join(root, "timer")) as b:
            before = _settle(b.proc.pid)
            first_due = int(time.time() * 1000 + lead_s * 1000)
            due = {i: first_due + int(i * spread_s * 1000 / count) for i in range(count)}
            secs = send_many(b, "BenchTimer", count,
                             lambda i: {"UNIQ_KEY": "T%08d" % i, "TIMER_DELIVER_MS": str(due[i])})
            after = _settle(b.proc.pid)
            print(json.dumps({"bench": "timer_rss", "kind": "timer", "count": count, "send_s": round(secs, 1),
                              "before_mib": before, "pending_mib": after,
                              "sent_before_first_due_s": round(first_due / 1000 - time.time(), 1),
                              "load1": load}), flush=True)
            late = []
            deadline = time.time() + lead_s + spread_s + 60
            offsets = [0, 0, 0, 0]
            with SyncRemotingClient() as rc:
                while len(late) < count and time.time() < deadline:
                    progressed = False
                    for q in range(4):
                        r = pull(rc, b, "BenchTimer", offsets[q], queue_id=q, sub="*")
                        if r.code == ResponseCode.SUCCESS:
                            for m in decode(r.body):
                                late.append(m.store_timestamp - int(m.properties["TIMER_DELIVER_MS"]))
                            offsets[q] = int(r.ext_fields["nextBeginOffset"])
                            progressed = True
                    if not progressed:
                        time.sleep(0.2)
            done = _mem(b.proc.pid)
            late.sort()
            pct = {f"p{p}": late[min(len(late) - 1, len(late) * p // 100)] for p in (0, 50, 90, 99)} if late else {}
            print(json.dumps({"bench": "timer_lateness_ms", "delivered": len(late), "count": count, **pct,
                              "max": late[-1] if late else None, "early": sum(1 for x in late if x < 0),
                              "after_delivery_mib": done, "load1": os.getloadavg()[0]}), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--lead", type=float, default=60.0, help="seconds from the start until the first due time")
    ap.add_argument("--spread", type=float, default=30.0, help="seconds the due times spread over")
    a = ap.parse_args()
    run(a.count, a.lead, a.spread)


if __name__ == "__main__":
    main()
