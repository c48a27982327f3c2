#!/usr/bin/env python
"""Broker services benchmarks. Prints one JSON object per line on stdout; NOT a test.

    python bench/bench_services.py            # full run (~1-2 minutes on 2 cores)
    python bench/bench_services.py --quick    # short run, smaller counts

What is measured (see the "Broker services" section of bench/README.md):

* delay delivery: 100,000 messages parked on one delay level (10 s) and delivered by
  ``ScheduleMessageService``'s thread with the real clock, produced either in a burst
  (``put_message`` as fast as one thread can) or at a steady rate; lateness of each
  delivery (delivered store time minus due time) as p50/p99/max, and the delivery rate.
  A message is never delivered early (checked). "backlog": the service starts only when
  all 100,000 are overdue, which measures how fast it delivers.
* disk cleanup: a store with many files (commitlog, one consume queue per 200 queues,
  index), one pass that finds nothing to do (the every-10-s case), passes deleting
  ``delete_files_batch_max`` commitlog files plus the consume-queue/index files that
  follow, and a drain to the last file; the 100 ms pause between deletions is off so the
  work itself is timed.

Everything happens in a temp dir under /tmp that is deleted at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore._compat import kernels as K
from mqcore.broker.metadata import DelayOffsetTable
from mqcore.broker.schedule import ScheduleMessageService
from mqcore.config import StoreConfig
from mqcore.message import SCHEDULE_TOPIC, MessageExtBrokerInner, pack_host
from mqcore.store.cleanup import HOUR_MS, CleanupService, psutil_disk_usage
from mqcore.store.message_store import MessageStore

BORN = pack_host("10.0.0.7", 40000)
STORE_HOST = pack_host("127.0.0.1", 10911)
LEVEL = 3  # "10s" in the levels below
LEVELS = "1s 5s 10s 30s"


def emit(**row) -> dict:
    row["loadavg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(row), flush=True)
    return row


def pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


# --- delay delivery -------------------------------------------------------------------------------
def bench_delay(root: str, n: int, rate: float | None, backlog: bool = False, body_bytes: int = 100) -> dict:
    """Park ``n`` messages on one level (``rate`` msg/s, or a burst when None) with the
    service running; wait until all are delivered; lateness from the schedule queue's
    deliver times and the delivered records' store times (one level is FIFO).

    ``backlog``: the service starts only once every message is overdue (a broker back
    from downtime): what counts then is the delivery rate, lateness is mostly the wait.
    """
    level = 1 if backlog else LEVEL
    path = tempfile.mkdtemp(dir=root, prefix="delay-")
    cfg = StoreConfig(store_path=path, message_delay_level=LEVELS, commitlog_file_size_bytes=256 << 20)
    with MessageStore(cfg) as store:
        svc = ScheduleMessageService(store, DelayOffsetTable.in_dir(cfg.config_dir), first_delay_ms=0)
        if not backlog:
            svc.start()
        body = os.urandom(body_bytes)
        t0 = time.perf_counter()
        try:
            for i in range(n):
                if rate is not None:
                    lag = t0 + i / rate - time.perf_counter()
                    if lag > 0:
                        time.sleep(lag)
                store.put_message(MessageExtBrokerInner(
                    topic="DelayBench", body=body, queue_id=0, born_host=BORN, store_host=STORE_HOST,
                    properties={"TAGS": "TagA", "UNIQ_KEY": "%032X" % i, "DELAY": str(level)}))
            produce_s = time.perf_counter() - t0
            if backlog:
                time.sleep(1.2)
                svc.start()
            deadline = time.monotonic() + 120 + n / 2000
            while store.get_max_offset_in_queue("DelayBench", 0) < n and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            svc.shutdown()
        due = _deliver_times(store, n, level)
        done = _store_times(store, "DelayBench", n)
    shutil.rmtree(path)
    late = done - due
    span_s = (done.max() - done.min()) / 1000 if len(done) > 1 else 0.0
    mode = "backlog" if backlog else "burst" if rate is None else f"steady_{int(rate)}_per_s"
    return emit(bench="delay_delivery", mode=mode,
                messages=n, level_delay_s=1 if backlog else 10, produce_msg_per_s=round(n / produce_s),
                delivered=int(len(done)), early=int((late < 0).sum()),
                lateness_p50_ms=round(pct(late, 50), 1), lateness_p99_ms=round(pct(late, 99), 1),
                lateness_max_ms=int(late.max()) if len(late) else None,
                deliver_msg_per_s=round(len(done) / span_s) if span_s else None)


def _deliver_times(store, n: int, level: int) -> np.ndarray:
    out, off = [], 0
    while off < n:
        units = store.get_consume_queue_units(SCHEDULE_TOPIC, level - 1, off, 4096)
        if units is None:
            break
        out.append(units[2])
        off += len(units[2])
    return np.concatenate(out)[:n]


def _store_times(store, topic: str, n: int) -> np.ndarray:
    out, off = [], 0
    while off < n:
        got = store.get_message(topic, 0, off, 32)
        if not got.message_count:
            break
        for buf in got.buffers:
            out.extend(t.store_timestamp for t in K.decode_records(buf, 0, len(buf), 1000, False))
        off = got.next_begin_offset
    return np.array(out, dtype=np.int64)


# --- disk cleanup ---------------------------------------------------------------------------------
def bench_cleanup(root: str, commitlog_files: int, queues: int) -> None:
    path = tempfile.mkdtemp(dir=root, prefix="cleanup-")
    file_size = 256 * 1024
    cfg = StoreConfig(store_path=path, commitlog_file_size_bytes=file_size, consume_queue_file_size_bytes=20 * 100,
                      index_slots=1009, index_entries=4000)
    body = os.urandom(1000)
    now = int(time.time() * 1000)
    with MessageStore(cfg) as store:
        t0 = time.perf_counter()
        i = 0
        while len(store.commitlog.queue.files) <= commitlog_files:
            store.put_message(MessageExtBrokerInner(topic=f"T{i % queues}", body=body, queue_id=0,
                                                    born_host=BORN, store_host=STORE_HOST,
                                                    properties={"TAGS": "a", "UNIQ_KEY": "%032X" % i}))
            i += 1
        build_s = time.perf_counter() - t0
        cq_files = sum(len(cq.queue.files) for cq in store.queues)
        state = {"hour": 12}
        svc = CleanupService(store, clock=lambda: now, disk_usage=lambda p: 30.0,
                             last_modified_ms=lambda mf: now - 100 * HOUR_MS, hour_of=lambda t: state["hour"],
                             delete_interval_ms=0)
        emit(bench="cleanup_store", messages=i, commitlog_files=len(store.commitlog.queue.files),
             consume_queues=queues, consume_queue_files=cq_files, index_files=len(store.index.files),
             build_s=round(build_s, 1))
        idle = []
        svc.disk_usage = psutil_disk_usage  # the real measurement (two statvfs); this disk is far from 75 %
        for _ in range(20):
            t = time.perf_counter()
            svc.run_once()
            idle.append(time.perf_counter() - t)
        emit(bench="cleanup_pass_idle", disk_used_percent=psutil_disk_usage(path), passes=len(idle), p50_ms=round(statistics.median(idle) * 1000, 2),
             max_ms=round(max(idle) * 1000, 2))
        svc.disk_usage = lambda p: 30.0
        state["hour"] = 4
        passes, deleted = [], {"commitlog": 0, "consumequeue": 0, "index": 0}
        t_all = time.perf_counter()
        while True:
            t = time.perf_counter()
            r = svc.run_once()
            dt = time.perf_counter() - t
            if not r.deleted:
                break
            passes.append(dt)
            for d in r.deleted:
                deleted[d.kind] += 1
        total = time.perf_counter() - t_all
        emit(bench="cleanup_pass_deleting", passes=len(passes), files_per_pass=cfg.delete_files_batch_max,
             p50_ms=round(statistics.median(passes) * 1000, 1), max_ms=round(max(passes) * 1000, 1),
             drain_s=round(total, 2), deleted_commitlog=deleted["commitlog"],
             deleted_consumequeue=deleted["consumequeue"], deleted_index=deleted["index"],
             files_left=len(store.commitlog.queue.files))
    shutil.rmtree(path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short run with smaller counts")
    p.add_argument("--dir", default="/tmp", help="parent of the temp dir (default /tmp)")
    p.add_argument("--only", nargs="*", choices=("delay", "cleanup"), help="run only these groups")
    args = p.parse_args(argv)
    groups = set(args.only or ("delay", "cleanup"))
    root = tempfile.mkdtemp(dir=args.dir, prefix="mqcore-bench-services-")
    try:
        emit(bench="env", kernels=K.IMPLEMENTATION, cpus=os.cpu_count(), python=sys.version.split()[0],
             quick=args.quick)
        if "delay" in groups:
            n = 20_000 if args.quick else 100_000
            bench_delay(root, n, None)
            bench_delay(root, n, 10_000.0)
            bench_delay(root, n, None, backlog=True)
        if "cleanup" in groups:
            bench_cleanup(root, 100 if args.quick else 500, 200)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
