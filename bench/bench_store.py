#!/usr/bin/env python
"""Store engine benchmarks. Prints one JSON object per line on stdout; NOT a test.

    python bench/bench_store.py            # full run (~3-4 minutes on 2 cores)
    python bench/bench_store.py --quick    # short run (~30 s), smaller counts

What is measured, each next to a baseline taken in the same run (see bench/README.md):

* append (ASYNC_FLUSH): 100 B / 1 KiB / 4 KiB bodies, one ``put_message`` per message and
  ``put_batch`` (one call = one SEND_BATCH of ``--batch-size`` messages), as msg/s and MB/s
  of body; peer, measured in each round: numpy copies of the same record bytes into a fresh
  mmap'ed file (``mmap_copy``, ``host_back``);
* SYNC_FLUSH with 4 writer threads (group commit), and 1 thread for comparison;
* index: ``IndexService`` put of 10 M keys (keys/s) and query latency on that index;
* a store of 10 M messages (one key each) written by a child process that then dies
  without shutdown: abnormal recovery (``load()``) as the checkpoint leaves it and with a
  cleared checkpoint (every file scanned with CRC), 32-message ``get_message`` reads, and
  key queries through the store (``query_message``, ``messages_by_key``).

Messages carry ``TAGS`` and a 32-char ``UNIQ_KEY`` (what a Java producer always sends),
so the put path builds one consume-queue unit and one index entry per message.
Everything happens in a temp dir under /tmp that is deleted at the end.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore._compat import kernels as K
from mqcore.config import FlushDiskType, StoreConfig
from mqcore.format import layout as L
from mqcore.message import MessageExtBrokerInner, pack_host, properties_to_bytes
from mqcore.store.index import IndexService
from mqcore.store.message_store import MessageStore

BORN = pack_host("10.0.0.7", 40000)
STORE_HOST = pack_host("127.0.0.1", 10911)
TOPIC = "BenchTopic"
QUEUES = 4
ROUNDS = 3
TARGETS = {"batch_100B_msg_per_s": 1.5e6, "batch_4KiB_body_MB_per_s": 2000.0, "read_msg_per_s": 2e6,
           "key_query_p99_us": 100.0, "abnormal_recovery_MB_per_s": 500.0}


#: every row emitted in this process, for the summary
ROWS: list[dict] = []


def emit(**row) -> dict:
    """Print one result row; the 1-minute load average says how busy the shared machine was."""
    row["loadavg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(row), flush=True)
    ROWS.append(row)
    return row


def uniq_key(i: int) -> str:
    return "C0A8000A30391B6D%016X" % i


def props(i: int, key: bool = False) -> dict[str, str]:
    p = {"TAGS": "TagA", "UNIQ_KEY": uniq_key(i)}
    if key:
        p = {"TAGS": "TagA", "KEYS": "key-%010d" % i}
    return p


def batch_items(body_bytes: int, n: int, first: int = 0, key: bool = False) -> bytes:
    body = os.urandom(body_bytes)
    return K.encode_batch_items([(0, body, properties_to_bytes(props(first + i, key))) for i in range(n)])


# --- append ----------------------------------------------------------------------------------------------
def host_back(nbytes: int) -> None:
    """Touch and free ``nbytes`` of anonymous memory, so the next ``nbytes`` of new page-cache
    pages come from memory the hypervisor already backs. On this VM (virtio-balloon free page
    reporting) a page free for ~2 s goes back to the host and its next first touch costs a host
    fault: 100-600 MB/s instead of ~8 GB/s, whoever touches it. Done before every measured
    phase of the store and of its peer alike, so neither inherits the other's freed pages."""
    a = np.ones(max(nbytes, 1 << 20), np.uint8)
    del a


def bench_append(root: str, body_bytes: int, mode: str, seconds: float, batch: int, index: bool = True) -> dict:
    """Append for ``seconds`` in ``ROUNDS`` rounds; each round is paired with the peer
    (``mmap_copy``: the same record bytes into a fresh mapped file), the two in alternating
    order, each after ``host_back`` of what it will write."""
    path = tempfile.mkdtemp(dir=root, prefix=f"append-{mode}-{body_bytes}-")
    cfg = StoreConfig(store_path=path, message_index_enable=index)
    with MessageStore(cfg) as store:
        items = batch_items(body_bytes, batch)
        body = os.urandom(body_bytes)
        msgs = [MessageExtBrokerInner(topic=TOPIC, body=body, queue_id=i % QUEUES, properties=props(i),
                                      born_host=BORN, store_host=STORE_HOST) for i in range(batch)]

        def put_calls(n_calls: int) -> int:
            if mode == "batch":
                for c in range(n_calls):
                    store.put_batch(TOPIC, c % QUEUES, items, born_host=BORN, store_host=STORE_HOST)
                return n_calls * batch
            for c in range(n_calls):
                store.put_message(msgs[c % batch])
            return n_calls

        first_offset = store.get_max_phy_offset()
        put_calls(1 if mode == "batch" else batch)  # the peer's chunk: one batch's (``batch`` messages') records
        chunk = bytes(store.commitlog.view(first_offset, store.get_max_phy_offset() - first_offset))
        put_calls(20)
        rounds = []  # (messages, seconds, record bytes, peer MB/s) per round; the machine is shared
        expect = 256 << 20
        for r in range(ROUNDS):
            if r % 2:
                peer = mmap_copy(root, chunk, expect)
            host_back(int(expect * 1.25))
            start_offset = store.get_max_phy_offset()
            n = 0
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds / ROUNDS:
                n += put_calls(8 if mode == "batch" else 256)
            dt = time.perf_counter() - t0
            wrote = store.get_max_phy_offset() - start_offset
            expect = wrote
            if r % 2 == 0:
                peer = mmap_copy(root, chunk, wrote)
            rounds.append((n, dt, wrote, peer))
    shutil.rmtree(path)
    n, dt, wrote, _ = max(rounds, key=lambda r: r[0] / r[1])
    ratios = sorted(r[2] / r[1] / 1e6 / r[3] for r in rounds)
    return emit(bench="append", mode=mode, body_bytes=body_bytes, flush="ASYNC_FLUSH", index=index,
                batch_size=batch if mode == "batch" else 1, messages=n, seconds=round(dt, 3),
                msg_per_s=round(n / dt), median_msg_per_s=round(sorted(r[0] / r[1] for r in rounds)[ROUNDS // 2]),
                body_MB_per_s=round(n * body_bytes / dt / 1e6, 1),
                record_MB_per_s=round(wrote / dt / 1e6, 1), record_bytes=wrote // n,
                memcpy_MB_per_s=round(max(r[3] for r in rounds), 1),
                ratio_to_memcpy=round(ratios[ROUNDS // 2], 3), ratios=[round(x, 3) for x in ratios])


def mmap_copy(root: str, chunk: bytes, total: int) -> float:
    """The peer: numpy copies of ``chunk`` (the store's record bytes) into a fresh file mapped
    as a commitlog is (reserved whole with ``posix_fallocate``, untimed), ``total`` bytes, page
    faults included as the store's fresh commitlog pages have them, after ``host_back``.
    Returns MB/s."""
    src = np.frombuffer(chunk, np.uint8)
    step = len(src)
    total = max(total - total % step, step)
    path = os.path.join(root, "memcpy.bin")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, total)
        mm = mmap.mmap(fd, total)
        dst = np.frombuffer(mm, np.uint8)
        host_back(int(total * 1.25))
        t0 = time.perf_counter()
        for off in range(0, total, step):
            np.copyto(dst[off:off + step], src)
        rate = total / (time.perf_counter() - t0) / 1e6
        del dst
        mm.close()
    finally:
        os.close(fd)
        os.unlink(path)
    return rate


# --- SYNC_FLUSH group commit -------------------------------------------------------------------------------
def bench_sync(root: str, threads: int, mode: str, seconds: float, batch: int, body_bytes: int = 1024) -> dict:
    path = tempfile.mkdtemp(dir=root, prefix=f"sync-{threads}-")
    cfg = StoreConfig(store_path=path, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    lat: list[list[float]] = [[] for _ in range(threads)]
    counts = [0] * threads
    timeouts = [0] * threads
    with MessageStore(cfg) as store:
        items = batch_items(body_bytes, batch)
        body = os.urandom(body_bytes)
        stop = time.perf_counter() + seconds
        barrier = threading.Barrier(threads + 1)

        def writer(w: int) -> None:
            msg = MessageExtBrokerInner(topic=TOPIC, body=body, queue_id=w % QUEUES, properties=props(w),
                                        born_host=BORN, store_host=STORE_HOST)
            barrier.wait()
            while time.perf_counter() < stop:
                t = time.perf_counter()
                if mode == "batch":
                    r = store.put_batch(TOPIC, w % QUEUES, items, born_host=BORN, store_host=STORE_HOST)
                    counts[w] += batch
                else:
                    r = store.put_message(msg)
                    counts[w] += 1
                lat[w].append(time.perf_counter() - t)
                timeouts[w] += not r.ok

        ts = [threading.Thread(target=writer, args=(w,)) for w in range(threads)]
        for t in ts:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        dt = time.perf_counter() - t0
    shutil.rmtree(path)
    all_lat = np.array([x for per in lat for x in per]) * 1e6
    n = sum(counts)
    return emit(bench="sync_append", mode=mode, threads=threads, body_bytes=body_bytes, flush="SYNC_FLUSH",
                batch_size=batch if mode == "batch" else 1, messages=n, seconds=round(dt, 3),
                msg_per_s=round(n / dt), body_MB_per_s=round(n * body_bytes / dt / 1e6, 1),
                put_p50_us=round(float(np.percentile(all_lat, 50)), 1),
                put_p99_us=round(float(np.percentile(all_lat, 99)), 1), not_ok=sum(timeouts))


# --- index ---------------------------------------------------------------------------------------------------
def java_hashes_of_keys(topic: str, n: int) -> np.ndarray:
    """``index_hash(java_hash(f"{topic}#key-%010d" % i))`` for i < n, vectorised (ASCII keys)."""
    h = np.zeros(n, np.uint32)
    for c in f"{topic}#key-".encode():
        h = h * np.uint32(31) + np.uint32(c)
    i = np.arange(n, dtype=np.int64)
    for d in range(9, -1, -1):
        h = h * np.uint32(31) + ((i // 10 ** d) % 10 + 48).astype(np.uint32)
    s = h.view(np.int32).astype(np.int64)
    out = np.abs(s)
    out[s == -(1 << 31)] = 0
    for j in (0, 1, n // 2, n - 1):  # spot-check against the kernel
        assert out[j] == K.index_hash(K.java_hash(f"{topic}#key-%010d" % j))
    return out.astype(np.int32)


def latency(fn, args: list, warm: int = 200) -> dict:
    for a in args[:warm]:
        fn(a)
    samples = np.empty(len(args))
    for j, a in enumerate(args):
        t = time.perf_counter()
        fn(a)
        samples[j] = time.perf_counter() - t
    us = samples * 1e6
    return {"p50_us": round(float(np.percentile(us, 50)), 1), "p99_us": round(float(np.percentile(us, 99)), 1),
            "p999_us": round(float(np.percentile(us, 99.9)), 1), "queries": len(args)}


def bench_index(root: str, n: int, per_call: int, queries: int) -> None:
    path = tempfile.mkdtemp(dir=root, prefix="index-")
    hashes = java_hashes_of_keys(TOPIC, n)
    phys = np.arange(n, dtype=np.int64) * 200
    now = int(time.time() * 1000)
    tss = now + np.arange(n, dtype=np.int64) // 1000
    svc = IndexService(path, L.DEFAULT_INDEX_SLOTS, L.DEFAULT_INDEX_ENTRIES, K, lambda: now)
    t0 = time.perf_counter()
    for lo in range(0, n, per_call):
        svc.build_locked(hashes[lo:lo + per_call], phys[lo:lo + per_call], tss[lo:lo + per_call])
    dt = time.perf_counter() - t0
    emit(bench="index_put", keys=n, keys_per_call=per_call, seconds=round(dt, 3), keys_per_s=round(n / dt),
         index_files=len(svc.files))
    rng = np.random.default_rng(1)
    picks = [int(hashes[i]) for i in rng.integers(0, n, queries)]
    end = int(tss[-1]) + 1000
    found = [0]

    def query(h: int) -> None:
        found[0] += bool(svc.query(h, 32, 0, end)[0])

    lat = latency(query, picks)
    emit(bench="index_query", entries=n, level="IndexService.query", found=found[0] == len(picks) + 200, **lat)
    svc.close()
    shutil.rmtree(path)


# --- a big store: crash, recovery, reads, key queries ------------------------------------------------------
class KeyedBatches:
    """Batches of 100 B messages keyed ``key-%010d``: one template whose key digits are
    rewritten per batch with numpy, so building millions of messages costs little."""

    def __init__(self, batch: int, body_bytes: int = 100):
        self.batch = batch
        self.template = bytearray(batch_items(body_bytes, batch, 0, key=True))
        marks = [i for i in range(len(self.template)) if self.template.startswith(b"key-0000000", i)]
        assert len(marks) == batch
        self.digits_at = np.array(marks, np.int64)[:, None] + 4 + np.arange(10)
        self.view = np.frombuffer(self.template, np.uint8)
        self.powers = 10 ** np.arange(9, -1, -1, dtype=np.int64)

    def items(self, first: int) -> bytearray:
        values = first + np.arange(self.batch, dtype=np.int64)
        self.view[self.digits_at] = ((values[:, None] // self.powers) % 10 + 48).astype(np.uint8)
        return self.template


def build_store_child(path: str, n: int, batch: int, body_bytes: int) -> None:
    """Runs in a child process: write ``n`` messages with one key each, then die."""
    cfg = StoreConfig(store_path=path)
    store = MessageStore(cfg)
    store.load()
    store.start()
    batches = KeyedBatches(batch, body_bytes)
    n -= n % batch
    t0 = time.perf_counter()
    for first in range(0, n, batch):
        store.put_batch(TOPIC, (first // batch) % QUEUES, batches.items(first), born_host=BORN,
                        store_host=STORE_HOST)
    dt = time.perf_counter() - t0
    time.sleep(1.2)  # let the flush thread write a checkpoint, as a running broker would have
    emit(bench="append_long_run", mode="batch", body_bytes=body_bytes, batch_size=batch, messages=n, seconds=round(dt, 3),
         msg_per_s=round(n / dt), record_MB_per_s=round(store.get_max_phy_offset() / dt / 1e6, 1),
         keys_in_index=n)
    os._exit(0)  # crash: no shutdown, the abort file stays


def recover(path: str, label: str) -> MessageStore:
    store = MessageStore(StoreConfig(store_path=path))
    t0 = time.perf_counter()
    report = store.load()
    dt = time.perf_counter() - t0
    emit(bench="abnormal_recovery", case=label, abnormal=report.abnormal, seconds=round(dt, 3),
         scanned_MB=round(report.bytes_scanned / 1e6, 1), scanned_records=report.records_scanned,
         redispatched=report.records_redispatched, commitlog_MB=round(report.commitlog_max_offset / 1e6, 1),
         MB_per_s=round(report.bytes_scanned / dt / 1e6, 1), clean=report.clean)
    return store


def build_and_crash(path: str, n: int, batch: int, body_bytes: int) -> None:
    """Write a store in a child process that exits without shutdown (the abort file stays)."""
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--_build-store", path, str(n), str(batch),
                           str(body_bytes)], stdout=subprocess.PIPE, text=True, check=False)
    sys.stdout.write(proc.stdout)
    ROWS.extend(json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))
    if not os.path.exists(os.path.join(path, "abort")):
        raise SystemExit(f"the store builder failed (exit {proc.returncode})")


def crash_without_checkpoint(path: str) -> None:
    open(os.path.join(path, "abort"), "w").close()
    with open(os.path.join(path, "checkpoint"), "r+b") as f:
        f.write(bytes(L.CHECKPOINT_FILE_SIZE))


def bench_big_store(root: str, n: int, batch: int, seconds: float, queries: int) -> None:
    path = os.path.join(root, "big")
    n -= n % batch  # the builder writes whole batches
    build_and_crash(path, n, batch, 100)
    store = recover(path, "100 B bodies, checkpoint as the crashed broker left it")
    store.shutdown()
    crash_without_checkpoint(path)
    store = recover(path, "100 B bodies, checkpoint cleared: every file scanned with CRC")
    store.start()
    try:
        bench_reads(store, seconds)
        bench_store_queries(store, n, queries)
    finally:
        store.shutdown()
    shutil.rmtree(path)


def bench_recovery_1k(root: str, total_bytes: int, batch: int) -> None:
    path = os.path.join(root, "recovery-1k")
    n = total_bytes // 1200
    build_and_crash(path, n - n % batch, batch, 1024)
    crash_without_checkpoint(path)
    recover(path, "1 KiB bodies, checkpoint cleared: every file scanned with CRC").shutdown()
    shutil.rmtree(path)


def bench_reads(store: MessageStore, seconds: float) -> None:
    tops = [store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)]
    offsets = [0] * QUEUES
    rounds = []
    for _ in range(ROUNDS):  # best of 3 rounds: the machine is shared
        n = calls = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds / ROUNDS:
            for q in range(QUEUES):
                r = store.get_message(TOPIC, q, offsets[q], 32)
                n += r.message_count
                calls += 1
                offsets[q] = r.next_begin_offset if r.next_begin_offset < tops[q] else 0
        rounds.append((n, calls, time.perf_counter() - t0))
    n, calls, dt = max(rounds, key=lambda r: r[0] / r[2])
    emit(bench="read", api="get_message(max 32)", messages=n, calls=calls, seconds=round(dt, 3),
         msg_per_s=round(n / dt), median_msg_per_s=round(sorted(r[0] / r[2] for r in rounds)[1]),
         msgs_per_call=round(n / calls, 1))
    t0 = time.perf_counter()
    n = 0
    for q in range(QUEUES):
        for off in range(0, min(tops[q], 20000), 32):
            r = store.get_message(TOPIC, q, off, 32)
            for buf in r.buffers:
                n += len(store.k.decode_records(buf, 0, len(buf), 1 << 20, False))
    dt = time.perf_counter() - t0
    emit(bench="read", api="get_message + decode_records", messages=n, seconds=round(dt, 3), msg_per_s=round(n / dt))


def bench_store_queries(store: MessageStore, n: int, queries: int) -> None:
    rng = np.random.default_rng(2)
    keys = ["key-%010d" % i for i in rng.integers(0, n, queries)]
    end = int(time.time() * 1000) + 60_000
    hits = [0]

    def query(key: str) -> None:
        hits[0] += len(store.query_message(TOPIC, key, 32, 0, end).buffers) > 0

    lat = latency(query, keys)
    emit(bench="key_query", entries=n, level="MessageStore.query_message", all_found=hits[0] == len(keys) + 200,
         **lat)

    def by_key(key: str) -> None:
        assert len(store.messages_by_key(TOPIC, key, 32, 0, end)) == 1

    emit(bench="key_query", entries=n, level="MessageStore.messages_by_key (decode + filter)",
         **latency(by_key, keys[: max(1000, queries // 4)]))


# --- main ------------------------------------------------------------------------------------------------------
def summarize(rows: list[dict]) -> None:
    def pick(**want):
        return next((r for r in rows if all(r.get(k) == v for k, v in want.items())), None)

    got = {
        "batch_100B_msg_per_s": (pick(bench="append", mode="batch", body_bytes=100, index=True) or {}).get("msg_per_s"),
        "batch_4KiB_body_MB_per_s": (pick(bench="append", mode="batch", body_bytes=4096) or {}).get("body_MB_per_s"),
        "read_msg_per_s": (pick(bench="read", api="get_message(max 32)") or {}).get("msg_per_s"),
        "key_query_p99_us": (pick(bench="key_query", level="MessageStore.query_message") or {}).get("p99_us"),
        "abnormal_recovery_MB_per_s (100 B bodies)": (pick(
            bench="abnormal_recovery", case="100 B bodies, checkpoint cleared: every file scanned with CRC") or {}).get(
            "MB_per_s"),
        "abnormal_recovery_MB_per_s (1 KiB bodies)": (pick(
            bench="abnormal_recovery", case="1 KiB bodies, checkpoint cleared: every file scanned with CRC") or {}).get(
            "MB_per_s"),
    }
    out = {}
    for name, value in got.items():
        target = TARGETS[name.split(" ")[0]]
        if value is None:
            continue
        met = value <= target if name.endswith("_us") else value >= target
        out[name] = {"value": value, "target": target, "met": met, "of_target": round(value / target, 2)}
    emit(bench="summary", kernels=K.IMPLEMENTATION, cpus=os.cpu_count(), targets=out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short run with smaller counts")
    p.add_argument("--batch-size", type=int, default=128, help="messages per put_batch (one SEND_BATCH)")
    p.add_argument("--dir", default="/tmp", help="parent of the temp dir (default /tmp)")
    p.add_argument("--only", nargs="*", choices=("append", "sync", "index", "big"), help="run only these groups")
    p.add_argument("--_build-store", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._build_store:
        path, n, batch, body = args._build_store
        build_store_child(path, int(n), int(batch), int(body))
        return 0
    quick = args.quick
    secs = 1.0 if quick else 2.5
    groups = set(args.only or ("append", "sync", "index", "big"))
    root = tempfile.mkdtemp(dir=args.dir, prefix="mqcore-bench-")
    try:
        emit(bench="env", kernels=K.IMPLEMENTATION, cpus=os.cpu_count(), python=sys.version.split()[0],
             quick=quick, batch_size=args.batch_size, dir=root)
        if "append" in groups:
            for body in (100, 1024, 4096):
                for mode in ("batch", "single"):
                    bench_append(root, body, mode, secs, args.batch_size)
            bench_append(root, 100, "batch", secs, args.batch_size, index=False)
        if "sync" in groups:
            bench_sync(root, 1, "single", secs, args.batch_size)
            bench_sync(root, 4, "single", secs, args.batch_size)
            bench_sync(root, 4, "batch", secs, args.batch_size)
        if "index" in groups:
            bench_index(root, 1_000_000 if quick else 10_000_000, 256, 5_000 if quick else 20_000)
        if "big" in groups:
            bench_big_store(root, 1_000_000 if quick else 10_000_000, args.batch_size, secs,
                            5_000 if quick else 20_000)
            bench_recovery_1k(root, (256 if quick else 1024) << 20, args.batch_size)
        summarize(ROWS)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
