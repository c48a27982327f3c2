"""Timer messages: broker memory with many pending timers, and how late they arrive.

    python bench/bench_timer.py                          # 100,000 timers, ~4 min
    python bench/bench_timer.py --count 20000            # quicker
    python bench/bench_timer.py --apache 100000          # and the same on Apache RocketMQ 5.3.3

A real mqbroker process (temp store, loopback) is sent ``--count`` single SEND_MESSAGE_V2
timers (``TIMER_DELIVER_MS`` spread over ``--spread`` seconds, starting ``--lead`` seconds
ahead) over 8 connections. Memory: the broker's VmRSS and RssAnon (its heap; RSS also counts
the mapped pages of the commitlog, consume queue and timer files still resident) after a
warm-up of 1,000 plain messages and once every timer is in the wheel; the peer is the same
count of plain messages of the same size sent to another fresh broker. Lateness: every
delivered message's store time minus its TIMER_DELIVER_MS (the broker side: when it was put
to its topic), as percentiles, for mqbroker and (``--apache N``) for an Apache RocketMQ 5.3.3
broker sent N timers the same way in the same run. One JSON object per line.
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
from pathlib import Path

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


def _warm(b) -> None:
    """1,000 plain messages first, on both brokers: the first put maps the commitlog's first
    file and faults in the prefault window ahead of it (32 MiB, whatever is stored), a cost of
    starting to write, not of what is stored; "before" is measured after it."""
    send_many(b, "BenchWarm", 1000, lambda i: {"UNIQ_KEY": "W%08d" % i})


def _lateness(b, count: int, lead_s: float, spread_s: float, first_due: int) -> list[int]:
    """Pull the topic until every timer arrived (or a minute after the last is due): each
    message's store time minus its TIMER_DELIVER_MS, sorted."""
    late = []
    deadline = first_due / 1000 + spread_s + 60
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
    late.sort()
    return late


def _send_timers(b, count: int, lead_s: float, spread_s: float) -> tuple[int, float]:
    first_due = int(time.time() * 1000 + lead_s * 1000)
    due = {i: first_due + int(i * spread_s * 1000 / count) for i in range(count)}
    secs = send_many(b, "BenchTimer", count, lambda i: {"UNIQ_KEY": "T%08d" % i, "TIMER_DELIVER_MS": str(due[i])})
    return first_due, secs


def _report_lateness(broker: str, late: list[int], count: int, **extra) -> None:
    pct = {f"p{p}": late[min(len(late) - 1, len(late) * p // 100)] for p in (0, 50, 90, 99)} if late else {}
    print(json.dumps({"bench": "timer_lateness_ms", "broker": broker, "delivered": len(late), "count": count,
                      **pct, "max": late[-1] if late else None, "early": sum(1 for x in late if x < 0),
                      "goal_ms": 1000, **extra, "load1": round(os.getloadavg()[0], 2)}), flush=True)


def run(count: int, lead_s: float, spread_s: float, apache_count: int) -> None:
    load = os.getloadavg()[0]
    root = tempfile.mkdtemp(prefix="bench-timer-")
    try:
        # the peer: plain messages
        with BrokerProcess(os.path.join(root, "plain")) as b:
            _warm(b)
            before = _settle(b.proc.pid)
            secs = send_many(b, "BenchTimer", count, lambda i: {"UNIQ_KEY": "P%08d" % i})
            after = _settle(b.proc.pid)
            print(json.dumps({"bench": "timer_rss", "kind": "plain", "count": count, "send_s": round(secs, 1),
                              "before_mib": before, "after_mib": after, "load1": load}), flush=True)
        with BrokerProcess(os.path.join(root, "timer")) as b:
            _warm(b)
            before = _settle(b.proc.pid)
            first_due, secs = _send_timers(b, count, lead_s, spread_s)
            after = _settle(b.proc.pid)
            print(json.dumps({"bench": "timer_rss", "kind": "timer", "count": count, "send_s": round(secs, 1),
                              "before_mib": before, "pending_mib": after,
                              "grown_vmrss_mib": after["VmRSS"] - before["VmRSS"], "goal_mib": 20,
                              "sent_before_first_due_s": round(first_due / 1000 - time.time(), 1),
                              "load1": load}), flush=True)
            late = _lateness(b, count, lead_s, spread_s, first_due)
            _report_lateness("mqbroker", late, count, after_delivery_mib=_mem(b.proc.pid))
        if apache_count:
            # the same sends to Apache RocketMQ 5.3.3 (its broker's timer wheel), measured the same way
            from tests.support.reference5 import Java5Broker, Java5Namesrv

            with Java5Namesrv(Path(root) / "ns5") as ns, Java5Broker(Path(root) / "b5", ns.addr) as b:
                _warm(b)
                first_due, secs = _send_timers(b, apache_count, lead_s, spread_s)
                late = _lateness(b, apache_count, lead_s, spread_s, first_due)
                _report_lateness("apache-5.3.3", late, apache_count, send_s=round(secs, 1))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=100_000)
    ap.add_argument("--lead", type=float, default=60.0, help="seconds from the start until the first due time")
    ap.add_argument("--spread", type=float, default=30.0, help="seconds the due times spread over")
    ap.add_argument("--apache", type=int, default=0, metavar="N",
                    help="also send N timers to an Apache RocketMQ 5.3.3 broker ($MQCORE_ROCKETMQ5_LIB) "
                         "and report its lateness the same way")
    a = ap.parse_args()
    run(a.count, a.lead, a.spread, a.apache)


if __name__ == "__main__":
    main()
