"""Replication (issue 35): mqbroker master-slave pairs next to Apache RocketMQ 4.9.7, same client load.

Configurations (``--kinds``), each on fresh stores, interleaved round by round (the order
reversed every other round so no configuration always gets the warmer or busier slot):

* ``single``: one mqbroker, no slave (throughput only);
* ``mq-async+mq-slave``: mqbroker ASYNC_MASTER with an mqbroker slave (brokerId=1);
* ``mq-sync+mq-slave``: mqbroker SYNC_MASTER with an mqbroker slave;
* ``mq-async+apache-slave``: mqbroker ASYNC_MASTER with an Apache 4.9.7 slave pointed at its HA port;
* ``apache-sync+apache-slave``: Apache 4.9.7 SYNC_MASTER with an Apache slave (Apache name server);
* ``apache-async+apache-slave`` (not in the default set): Apache's own ASYNC pair, for its lag.

The Java brokers run with bin/runbroker.sh's JVM (``RUNBROKER_JVM``); every commitlog file is
16 MiB (the Java test broker's size: master and slave geometries must match).

Load, with ``mqcore.client.Producer`` against every configuration: ``burst``, ``-n`` unbatched
``send_async`` of 100 B bodies with at most 1000 in flight (the Java client's async window), as
fast as it goes (msg/s); then ``steady``, ``--rate`` msg/s for ``--steady-seconds`` (same sends,
paced), where the slave is not saturated and lag means delay rather than backlog.

Lag per message: a sampler in its own process (no GIL shared with the producer), on a dedicated
connection (``SyncRemotingClient``), asks the slave for GET_MAX_OFFSET of queue 0 of the topic
every ``--poll-ms`` and keeps (receive time, offset) whenever the offset moved. Each acknowledged
send records (ack time in its future's done callback, queue, queue offset); a queue-0 message
at offset q is on the slave at the first sample with offset > q, and its lag is that sample's
time minus its ack time (0 when the slave had it before the producer saw the ack: SYNC_MASTER).
GET_MAX_OFFSET counts what the slave has dispatched into its consume queue, so this is the lag
until a reader of the slave can see the message (the commitlog copy plus the slave's dispatch).
The sampler's mean poll interval (``poll_ms``) is printed with each row: the resolution, the
floor under every lag figure. Both processes read CLOCK_MONOTONIC (``time.monotonic``).

Prints one JSON line per round, configuration and phase, then a summary (medians over rounds)
with the SYNC_MASTER throughput ratio mqbroker / Apache and the 1-minute load average (figures:
bench/README.md, "Replication"; a round takes about 1.5 min with the default sizes).

    python bench/bench_ha.py --rounds 2 -n 20000
    python bench/bench_ha.py --rounds 1 --kinds mq-async+mq-slave,mq-async+apache-slave --rate 2000
"""
from __future__ import annotations

import argparse
import array
import bisect
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_reference import JAVA_CONF, ensure_jars  # noqa: E402
from mqcore.admin import MQAdmin  # noqa: E402
from mqcore.client import Message, Producer  # noqa: E402
from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request  # noqa: E402
from tests.support.processes import BrokerProcess  # noqa: E402
from tests.support.reference import RUNBROKER_JVM, JavaBroker, JavaNamesrv, free_port_block  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

KINDS = ("single", "mq-async+mq-slave", "mq-sync+mq-slave", "mq-async+apache-slave", "apache-sync+apache-slave",
         "apache-async+apache-slave")
DEFAULT_KINDS = KINDS[:5]
FILE = 16 * 1024 * 1024  # the Java test broker's commitlog file size
TOPIC = "HaBench"
QUEUES = 4
BODY = b"x" * 100
BROKER_NAME = "broker-ha"


# --- the sampler (a child process) ------------------------------------------------------------

def _sampler(addr: str, topic: str, queue: int, poll_s: float, ready, stop_at, conn) -> None:
    """Polls ``addr``'s GET_MAX_OFFSET of (topic, queue), ``ready`` set after the first answer,
    until it has seen ``stop_at`` (once the parent sets it >= 0); sends back the samples where
    the offset moved, the poll count, the span and the longest gap between polls."""
    times, offsets = array.array("d"), array.array("q")
    polls, last, worst = 0, -1, 0.0
    header = {"topic": topic, "queueId": str(queue)}
    with SyncRemotingClient() as rc:
        first = prev = time.monotonic()
        nxt = first
        while True:
            r = rc.invoke(addr, create_request(RequestCode.GET_MAX_OFFSET, dict(header)), 5000)
            now = time.monotonic()
            polls += 1
            worst, prev = max(worst, now - prev), now
            if r.code == ResponseCode.SUCCESS:
                off = int(r.ext_fields["offset"])
                if off != last:
                    times.append(now)
                    offsets.append(off)
                    last = off
                ready.set()
            target = stop_at.value
            if 0 <= target <= last:
                break
            nxt += poll_s
            if nxt > now:
                time.sleep(nxt - now)
            else:
                nxt = now  # fell behind (a slow answer): no catch-up burst
        span = time.monotonic() - first
    conn.send((times.tobytes(), offsets.tobytes(), polls, span, worst))
    conn.close()


class Sampler:
    def __init__(self, addr: str, poll_ms: float):
        ctx = multiprocessing.get_context("spawn")  # the parent has threads: never fork it
        ready, self._stop_at = ctx.Event(), ctx.Value("q", -1, lock=False)
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_sampler, args=(addr, TOPIC, 0, poll_ms / 1000, ready, self._stop_at, send),
                                 daemon=True)
        self._proc.start()
        send.close()
        if not ready.wait(60):  # acks before its first answer would count from a late first sample
            self.kill()
            raise RuntimeError(f"the sampler got no GET_MAX_OFFSET answer from {addr}")
        self.times: list[float] = []
        self.offsets: list[int] = []
        self.poll_ms = self.worst_ms = 0.0

    def finish(self, end: int) -> None:
        """Stops once the slave's queue 0 reached ``end`` (the master's, every send answered)."""
        self._stop_at.value = end
        if not self._recv.poll(120):
            raise RuntimeError(f"the slave's queue 0 never reached {end}")
        t, o, polls, span, worst = self._recv.recv()
        self._proc.join(30)
        self.times = array.array("d", t).tolist()
        self.offsets = array.array("q", o).tolist()
        self.poll_ms = span / max(polls, 1) * 1000
        self.worst_ms = worst * 1000

    def kill(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)


def lags_ms(acks: list[tuple[float, int]], times: list[float], offsets: list[int]) -> tuple[list[float], int]:
    """Lag of each queue-0 ack (ack time, queue offset): the first sample with offset > q, minus
    the ack time; clamped at 0. Returns the sorted lags and how many the slave had before the ack."""
    out, before = [], 0
    for t_ack, q in acks:
        i = bisect.bisect_right(offsets, q)  # offsets rise: the first sample holding offset q
        if i == len(offsets):
            raise RuntimeError(f"the sampler never saw queue offset {q} on the slave")
        lag = times[i] - t_ack
        if lag < 0:
            before += 1
        out.append(max(0.0, lag) * 1000)
    out.sort()
    return out, before


def pct(xs: list[float], p: float) -> float:
    return round(xs[min(len(xs) - 1, int(len(xs) * p))], 2) if xs else float("nan")


# --- the configurations -----------------------------------------------------------------------

def max_offset(rc: SyncRemotingClient, addr: str, queue: int = 0) -> int:
    r = rc.invoke(addr, create_request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(queue)}), 5000)
    return int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else -1


@contextlib.contextmanager
def pair(kind: str, work: Path):
    """Starts ``kind``; yields (name server, master address, slave address or None)."""
    mq_master = kind.startswith("mq-") or kind == "single"
    role = "SYNC_MASTER" if "-sync+" in kind else "ASYNC_MASTER"
    with contextlib.ExitStack() as st:
        if mq_master:
            ha_port = free_port_block(1)
            m = st.enter_context(BrokerProcess(work / "m", broker_name=BROKER_NAME, conf={
                "flushDiskType": "ASYNC_FLUSH", "brokerRole": role, "mappedFileSizeCommitLog": FILE,
                "haListenPort": ha_port}))
            ns, maddr, ha_addr = m.namesrv_addr, m.broker_addr, f"127.0.0.1:{ha_port}"
        else:
            ns = st.enter_context(JavaNamesrv(work / "ns")).addr
            jm = st.enter_context(JavaBroker(work / "m", ns, broker_name=BROKER_NAME,
                                             conf={**JAVA_CONF, "brokerRole": role}, jvm_opts=RUNBROKER_JVM))
            maddr, ha_addr = jm.addr, f"127.0.0.1:{jm.port + 1}"  # BrokerStartup: haListenPort = listenPort + 1
        with MQAdmin(ns) as admin:
            admin.create_topic(maddr, TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        saddr = None
        if kind.endswith("+mq-slave"):
            saddr = st.enter_context(BrokerProcess(work / "s", namesrv=ns, broker_name=BROKER_NAME, conf={
                "brokerId": 1, "brokerRole": "SLAVE", "mappedFileSizeCommitLog": FILE})).broker_addr
        elif kind.endswith("+apache-slave"):
            saddr = st.enter_context(JavaBroker(work / "s", ns, broker_name=BROKER_NAME, jvm_opts=RUNBROKER_JVM, conf={
                "brokerId": 1, "brokerRole": "SLAVE", "haMasterAddress": ha_addr})).addr
        yield ns, maddr, saddr


def warm_up(p: Producer, rc: SyncRemotingClient, maddr: str, saddr: str | None) -> None:
    """Sends until every queue holds a message and the slave serves queue 0 as the master does
    (a SYNC_MASTER answers SLAVE_NOT_AVAILABLE until its slave connects)."""
    deadline = time.monotonic() + 120
    while True:
        try:  # the route may not be at the name server yet
            ok = [p.send(Message(TOPIC, BODY)).ok for _ in range(2 * QUEUES)]
        except Exception as e:  # noqa: BLE001 - retried until the deadline, then reported
            ok, last = [False], e
        else:
            last = ok
        if all(ok) and min(max_offset(rc, maddr, q) for q in range(QUEUES)) > 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"warm-up sends never succeeded: {last!r}")
        time.sleep(0.5)
    if saddr is not None:
        catch_up(rc, maddr, saddr)


def catch_up(rc: SyncRemotingClient, maddr: str, saddr: str) -> None:
    if not wait_for(lambda: max_offset(rc, saddr) == max_offset(rc, maddr), timeout=120):
        raise RuntimeError(f"the slave never caught up: {max_offset(rc, saddr)} of {max_offset(rc, maddr)}")


def send_phase(p: Producer, n: int, rate: float | None) -> tuple[float, list[tuple[float, int]]]:
    """``n`` unbatched send_async (paced at ``rate`` msg/s if given); returns the seconds until the
    last answer and the queue-0 acks (ack time, queue offset)."""
    acks: list[tuple[float, int]] = []
    bad: list[object] = []

    def done(f) -> None:
        t = time.monotonic()
        if f.cancelled() or f.exception() is not None or not f.result().ok:
            bad.append(f)
            return
        r = f.result()
        if r.message_queue.queue_id == 0:
            acks.append((t, r.queue_offset))

    futures = []
    t0 = time.monotonic()
    if rate is None:
        for _ in range(n):
            f = p.send_async(Message(TOPIC, BODY))
            f.add_done_callback(done)
            futures.append(f)
    else:
        sent = 0
        while sent < n:
            due = min(n, int((time.monotonic() - t0) * rate) + 1)
            while sent < due:
                f = p.send_async(Message(TOPIC, BODY))
                f.add_done_callback(done)
                futures.append(f)
                sent += 1
            ahead = t0 + sent / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    for f in futures:
        f.result(120)
    seconds = time.monotonic() - t0
    if bad:
        f = bad[0]
        raise RuntimeError(f"{len(bad)} sends failed, e.g. {f.exception() or f.result()}")  # type: ignore[attr-defined]
    return seconds, acks


def run(kind: str, args) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp, pair(kind, Path(tmp)) as (ns, maddr, saddr), \
            SyncRemotingClient() as rc, \
            Producer("ha-bench", namesrv_addr=ns, auto_batch=False, max_async_inflight=args.inflight,
                     send_msg_timeout_ms=30_000) as p:
        warm_up(p, rc, maddr, saddr)
        phases = [("burst", args.n, None)]
        if saddr is not None and args.steady_seconds > 0:
            phases.append(("steady", int(args.rate * args.steady_seconds), args.rate))
        for phase, n, rate in phases:
            sampler = Sampler(saddr, args.poll_ms) if saddr is not None else None
            try:
                seconds, acks = send_phase(p, n, rate)
                row = {"kind": kind, "phase": phase, "messages": n, "msgs_per_s": round(n / seconds)}
                if sampler is not None:
                    sampler.finish(max_offset(rc, maddr))
                    lags, before = lags_ms(acks, sampler.times, sampler.offsets)
                    row.update({"lag_p50_ms": pct(lags, 0.5), "lag_p99_ms": pct(lags, 0.99),
                                "lag_max_ms": round(lags[-1], 2), "lagged": len(lags), "before_ack": before,
                                "poll_ms": round(sampler.poll_ms, 3), "poll_worst_ms": round(sampler.worst_ms, 1)})
            finally:
                if sampler is not None:
                    sampler.kill()
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-n", type=int, default=20000, help="burst: messages per configuration and round")
    ap.add_argument("--inflight", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=5000, help="steady: msg/s")
    ap.add_argument("--steady-seconds", type=float, default=4, help="steady: seconds (0: no steady phase)")
    ap.add_argument("--poll-ms", type=float, default=1.0, help="sampler: target poll interval")
    ap.add_argument("--kinds", type=lambda s: s.split(","), default=list(DEFAULT_KINDS))
    a = ap.parse_args(argv)
    for k in a.kinds:
        if k not in KINDS:
            ap.error(f"unknown kind {k!r}: one of {', '.join(KINDS)}")
    if any("apache" in k for k in a.kinds):
        ensure_jars()
    rows: list[dict] = []
    t_start = time.monotonic()
    for rnd in range(a.rounds):
        for kind in a.kinds if rnd % 2 == 0 else a.kinds[::-1]:
            for r in run(kind, a):
                r = {"round": rnd, **r, "load": round(os.getloadavg()[0], 2)}
                rows.append(r)
                print(json.dumps(r), flush=True)
    print(f"\nsummary: medians over {a.rounds} rounds, -n {a.n}, steady {a.rate:g} msg/s x {a.steady_seconds:g} s, "
          f"{(time.monotonic() - t_start) / 60:.1f} min")
    med: dict[tuple[str, str], dict] = {}
    for kind in a.kinds:
        for phase in ("burst", "steady"):
            rs = [r for r in rows if r["kind"] == kind and r["phase"] == phase]
            if not rs:
                continue
            m = {key: round(statistics.median(r[key] for r in rs), 2) for key in rs[0]
                 if key not in ("round", "kind", "phase") and isinstance(rs[0][key], (int, float))}
            med[(kind, phase)] = m
            print(json.dumps({"summary": kind, "phase": phase, **m}))
    sync = {s: med.get((f"{s}-sync+{s}-slave", "burst"), {}).get("msgs_per_s") for s in ("mq", "apache")}
    if sync["mq"] and sync["apache"]:
        print(json.dumps({"summary": "SYNC_MASTER burst msg/s mqbroker / Apache", "mqbroker": sync["mq"],
                          "apache": sync["apache"], "ratio": round(sync["mq"] / sync["apache"], 2)}))
    print(json.dumps({"loadavg_1m": round(os.getloadavg()[0], 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
