"""Replication (issue 35), mqbroker pairs only so far (WORK IN PROGRESS: the Apache 4.9.7
slave / Apache SYNC_MASTER pair and the Java-client driver are not wired in yet).

Per round, interleaved, fresh stores:

* ``single``: one mqbroker, no slave;
* ``async+slave``: mqbroker ASYNC_MASTER with an mqbroker slave (brokerId=1);
* ``sync+slave``: mqbroker SYNC_MASTER with an mqbroker slave.

Load: ``send_async`` unbatched, 1000 in flight (the Java client's async window), 100 B bodies.
Lag: a sampler thread polls ``commitLogMaxOffset`` of master and slave (GET_BROKER_RUNTIME_INFO)
every few ms; for each master sample (t, offset) the lag is the first time the slave reports an
offset >= it, minus t.  p50/p99 over the run.

    python bench/bench_ha.py --rounds 2 -n 20000
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mqcore.admin import MQAdmin  # noqa: E402
from mqcore.client import Message, Producer  # noqa: E402
from tests.support.processes import BrokerProcess  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402


def send(ns: str, topic: str, n: int, inflight: int) -> float:
    with Producer("ha-bench", namesrv_addr=ns, auto_batch=False, max_async_inflight=inflight,
                  send_msg_timeout_ms=30_000) as p:
        p.send(Message(topic, b"x" * 100))
        t0 = time.perf_counter()
        futures = [p.send_async(Message(topic, b"x" * 100)) for _ in range(n)]
        for f in futures:
            if not f.result(120).ok:
                raise RuntimeError("a send was not SEND_OK")
        return time.perf_counter() - t0


def offset(admin: MQAdmin, addr: str) -> int:
    return int(admin.broker_runtime_stats(addr)["commitLogMaxOffset"])


def run(kind: str, n: int, inflight: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp:
        work = Path(tmp)
        role = {"single": "ASYNC_MASTER", "async+slave": "ASYNC_MASTER", "sync+slave": "SYNC_MASTER"}[kind]
        with BrokerProcess(work / "m", conf={"flushDiskType": "ASYNC_FLUSH", "brokerRole": role}) as m, \
                MQAdmin(m.namesrv_addr) as admin:
            topic = "HaBench"
            admin.create_topic(m.broker_addr, topic)
            if kind == "single":
                return {"kind": kind, "msgs_per_s": round(n / send(m.namesrv_addr, topic, n, inflight))}
            with BrokerProcess(work / "s", namesrv=m.namesrv_addr, broker_name="broker-a",
                               conf={"brokerId": 1, "brokerRole": "SLAVE"}) as s:
                wait_for(lambda: offset(admin, s.broker_addr) == offset(admin, m.broker_addr), timeout=60)
                samples_m, samples_s, stop = [], [], threading.Event()

                def sampler():
                    while not stop.is_set():
                        samples_m.append((time.perf_counter(), offset(admin, m.broker_addr)))
                        samples_s.append((time.perf_counter(), offset(admin, s.broker_addr)))
                th = threading.Thread(target=sampler, daemon=True)
                th.start()
                seconds = send(m.namesrv_addr, topic, n, inflight)
                end = offset(admin, m.broker_addr)
                wait_for(lambda: samples_s and samples_s[-1][1] >= end, timeout=60)
                stop.set()
                th.join()
                lags, j = [], 0
                for t, o in samples_m:
                    while j < len(samples_s) and samples_s[j][1] < o:
                        j += 1
                    if j < len(samples_s):
                        lags.append(max(0.0, samples_s[j][0] - t) * 1000)
                lags.sort()
                return {"kind": kind, "msgs_per_s": round(n / seconds),
                        "lag_p50_ms": round(lags[len(lags) // 2], 1),
                        "lag_p99_ms": round(lags[int(len(lags) * 0.99)], 1), "samples": len(lags)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("--inflight", type=int, default=1000)
    a = ap.parse_args(argv)
    kinds = ("single", "async+slave", "sync+slave")
    for rnd in range(a.rounds):
        for kind in kinds if rnd % 2 == 0 else kinds[::-1]:
            r = run(kind, a.n, a.inflight)
            print({"round": rnd, **r, "load": round(os.getloadavg()[0], 2)}, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
