"""End-to-end client benchmark over loopback: mqcore.client + mqbroker, next to NATS
JetStream (nats-py) and Redis Streams (redis-py) when their servers are installed.

Workloads, for 100 B and 1 KiB bodies, N messages each (default 200,000):

* sync send: one message at a time, each waiting for the server's acknowledgement
  (mqcore ``Producer.send``; JetStream ``await js.publish``; Redis ``XADD``);
* async send: mqcore ``send_async`` with auto-batching (and, for reference, plain
  pipelining with 256 in flight); JetStream ``publish_async`` (its pending window);
  Redis ``XADD`` pipelines of 1000;
* push consume with offset commit: everything already stored is consumed by a fresh
  group and acknowledged/committed (mqcore ``PushConsumer``, offsets committed by the
  consumer and persisted at shutdown; JetStream pull consumer, fetch 1000, AckAll;
  Redis ``XREADGROUP COUNT 1000`` + ``XACK``).

    python bench/bench_client.py              # full run
    python bench/bench_client.py --quick      # 20,000 messages per workload
    python bench/bench_client.py --only mqcore,redis

Servers are started on free loopback ports with throw-away data directories and
stopped at the end: ``mqbroker`` (ASYNC_FLUSH, the default), ``nats-server -js``
(file storage, defaults) and ``redis-server --save "" --appendonly no`` (in memory).
Prints one JSON line per figure and a Markdown table.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.client import Message, Producer, PushConsumer  # noqa: E402

RESULTS: list[dict] = []


def emit(workload: str, system: str, size: int, n: int, seconds: float, note: str = "") -> None:
    row = {"workload": workload, "system": system, "size": size, "messages": n, "seconds": round(seconds, 3),
           "msgs_per_s": int(n / seconds) if seconds > 0 else 0}
    if note:
        row["note"] = note
    RESULTS.append(row)
    print(json.dumps(row), flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 20) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


# ======================================================================================
# servers
# ======================================================================================
class Server:
    def __init__(self, argv: list[str], port: int | None = None, ready_line: str | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.line = ""
        if ready_line:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.startswith(ready_line):
                    self.line = line.strip()
                    break
            else:
                raise RuntimeError(f"{argv[0]} did not start")
            threading.Thread(target=self._drain, daemon=True).start()
        elif port:
            threading.Thread(target=self._drain, daemon=True).start()
            wait_port(port)

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def start_mqbroker(tmp: str) -> tuple[Server, str]:
    s = Server([sys.executable, "-m", "mqcore.broker.cli", "--store", os.path.join(tmp, "mq"), "--listen-port", "0",
                "--namesrv-port", "0", "--log-level", "WARNING", "--log-dir", os.path.join(tmp, "logs")],
               ready_line="READY")
    fields = dict(part.split("=", 1) for part in s.line.split()[1:])
    return s, fields["namesrv"]


# ======================================================================================
# mqcore
# ======================================================================================
def mq_sync(ns: str, topic: str, body: bytes, n: int) -> float:
    with Producer("bench-sync", namesrv_addr=ns) as p:
        p.send(Message(topic, body))
        t0 = time.perf_counter()
        for _ in range(n):
            p.send(Message(topic, body))
        return time.perf_counter() - t0


def mq_async(ns: str, topic: str, body: bytes, n: int, *, auto_batch: bool, window: int = 256) -> float:
    with Producer("bench-async", namesrv_addr=ns, auto_batch=auto_batch, send_msg_timeout_ms=30_000) as p:
        p.send(Message(topic, body))
        sem = threading.BoundedSemaphore(window) if not auto_batch else None
        failures: list[BaseException] = []

        def done(result, error):
            if error is not None:
                failures.append(error)
            if sem is not None:
                sem.release()

        t0 = time.perf_counter()
        futures = []
        for _ in range(n):
            if sem is not None:
                sem.acquire()
            futures.append(p.send_async(Message(topic, body), callback=done if sem is not None else None))
        for f in futures:
            f.result(60)
        elapsed = time.perf_counter() - t0
        if failures:
            raise failures[0]
        return elapsed


def mq_fill(ns: str, topic: str, body: bytes, n: int) -> None:
    with Producer("bench-fill", namesrv_addr=ns) as p:
        for start in range(0, n, 256):
            p.send_batch([Message(topic, body) for _ in range(min(256, n - start))])


def mq_consume(ns: str, topic: str, n: int, group: str, batch: int) -> float:
    count = [0]
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs, ctx):
        with lock:
            count[0] += len(msgs)
            if count[0] >= n:
                done.set()

    c = PushConsumer(group, namesrv_addr=ns, consume_from_where="first", consume_message_batch_max_size=batch)
    c.subscribe(topic)
    c.register_listener(listener)
    t0 = time.perf_counter()
    c.start()
    if not done.wait(600):
        raise RuntimeError(f"consumed only {count[0]} of {n}")
    c.shutdown()  # includes the final synchronous offset commit
    return time.perf_counter() - t0


def bench_mqcore(tmp: str, sizes: list[int], n: int) -> None:
    server, ns = start_mqbroker(tmp)
    try:
        for size in sizes:
            body = b"x" * size
            emit("sync send", "mqcore", size, n, mq_sync(ns, f"Sync{size}", body, n))
            emit("async send", "mqcore", size, n, mq_async(ns, f"Auto{size}", body, n, auto_batch=True),
                 "auto-batching")
            pn = min(n, 50_000)
            emit("async send (plain pipelining)", "mqcore", size, pn,
                 mq_async(ns, f"Pipe{size}", body, pn, auto_batch=False), "256 in flight, no batching")
            topic = f"Consume{size}"
            mq_fill(ns, topic, body, n)
            emit("push consume + commit", "mqcore", size, n, mq_consume(ns, topic, n, f"cg{size}b32", 32),
                 "consume_message_batch_max_size=32")
            emit("push consume + commit (batch 1)", "mqcore", size, n,
                 mq_consume(ns, topic, n, f"cg{size}b1", 1), "default consume_message_batch_max_size=1")
    finally:
        server.stop()


# ======================================================================================
# NATS JetStream
# ======================================================================================
async def nats_run(port: int, sizes: list[int], n: int) -> None:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType

    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    js = nc.jetstream()
    try:
        for size in sizes:
            body = b"x" * size
            for name in ("SYNC", "ASYNC", "CONS"):
                await js.add_stream(name=f"{name}{size}", subjects=[f"{name.lower()}{size}"],
                                    storage=StorageType.FILE)
            t0 = time.perf_counter()
            for _ in range(n):
                await js.publish(f"sync{size}", body)
            emit("sync send", "nats-jetstream", size, n, time.perf_counter() - t0)
            for subject, name in ((f"async{size}", "async send"), (f"cons{size}", None)):
                t0 = time.perf_counter()
                for _ in range(n):
                    await js.publish_async(subject, body)
                await js.publish_async_completed()
                if name:
                    emit(name, "nats-jetstream", size, n, time.perf_counter() - t0, "publish_async")
            t0 = time.perf_counter()
            sub = await js.pull_subscribe(f"cons{size}", durable=f"bench{size}",
                                          config=ConsumerConfig(ack_policy=AckPolicy.ALL))
            got = 0
            while got < n:
                msgs = await sub.fetch(batch=1000, timeout=10)
                got += len(msgs)
                await msgs[-1].ack_sync()
            emit("push consume + commit", "nats-jetstream", size, n, time.perf_counter() - t0,
                 "pull consumer, fetch 1000, AckAll")
    finally:
        await nc.close()


def bench_nats(tmp: str, sizes: list[int], n: int) -> None:
    exe = shutil.which("nats-server")
    if exe is None:
        print(json.dumps({"skipped": "nats-jetstream", "why": "nats-server is not installed"}), flush=True)
        return
    try:
        import nats  # noqa: F401
    except ImportError:
        print(json.dumps({"skipped": "nats-jetstream", "why": "nats-py is not installed"}), flush=True)
        return
    port = free_port()
    server = Server([exe, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", os.path.join(tmp, "nats")], port=port)
    try:
        asyncio.run(nats_run(port, sizes, n))
    finally:
        server.stop()


# ======================================================================================
# Redis Streams
# ======================================================================================
def bench_redis(tmp: str, sizes: list[int], n: int) -> None:
    exe = shutil.which("redis-server")
    if exe is None:
        print(json.dumps({"skipped": "redis-streams", "why": "redis-server is not installed"}), flush=True)
        return
    try:
        import redis
    except ImportError:
        print(json.dumps({"skipped": "redis-streams", "why": "redis (redis-py) is not installed"}), flush=True)
        return
    port = free_port()
    server = Server([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                     "--dir", tmp], port=port)
    try:
        r = redis.Redis(port=port)
        for size in sizes:
            body = b"x" * size
            t0 = time.perf_counter()
            for _ in range(n):
                r.xadd(f"sync{size}", {"b": body})
            emit("sync send", "redis-streams", size, n, time.perf_counter() - t0)
            for key, name in ((f"async{size}", "async send"), (f"cons{size}", None)):
                t0 = time.perf_counter()
                for start in range(0, n, 1000):
                    pipe = r.pipeline(transaction=False)
                    for _ in range(min(1000, n - start)):
                        pipe.xadd(key, {"b": body})
                    pipe.execute()
                if name:
                    emit(name, "redis-streams", size, n, time.perf_counter() - t0, "pipelines of 1000")
            t0 = time.perf_counter()
            r.xgroup_create(f"cons{size}", "g", id="0")
            got = 0
            while got < n:
                resp = r.xreadgroup("g", "c1", {f"cons{size}": ">"}, count=1000, block=1000)
                ids = [mid for _stream, entries in resp for mid, _fields in entries]
                got += len(ids)
                if ids:
                    r.xack(f"cons{size}", "g", *ids)
            emit("push consume + commit", "redis-streams", size, n, time.perf_counter() - t0,
                 "XREADGROUP COUNT 1000 + XACK")
    finally:
        server.stop()


# ======================================================================================
def table(results: list[dict]) -> str:
    workloads = ["sync send", "async send", "push consume + commit"]
    lines = ["| workload | size | mqcore | NATS JetStream | Redis Streams | mqcore / best peer |",
             "|---|---|---|---|---|---|"]
    for w in workloads:
        for size in sorted({r["size"] for r in results}):
            cell = {r["system"]: r["msgs_per_s"] for r in results if r["workload"] == w and r["size"] == size}
            peers = [v for k, v in cell.items() if k != "mqcore"]
            ratio = f"{cell['mqcore'] / max(peers):.2f}x" if peers and "mqcore" in cell else "n/a"
            lines.append(f"| {w} | {size} B | {cell.get('mqcore', '-'):,} | {cell.get('nats-jetstream', '-'):,} | "
                         f"{cell.get('redis-streams', '-'):,} | {ratio} |".replace("'-'", "-"))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=200_000, help="messages per workload")
    ap.add_argument("--quick", action="store_true", help="20,000 messages per workload")
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--only", default="mqcore,nats,redis")
    args = ap.parse_args()
    n = 20_000 if args.quick else args.n
    sizes = [int(s) for s in args.sizes.split(",")]
    only = set(args.only.split(","))
    tmp = tempfile.mkdtemp(prefix="bench-client-")
    try:
        if "mqcore" in only:
            bench_mqcore(tmp, sizes, n)
        if "nats" in only:
            bench_nats(tmp, sizes, n)
        if "redis" in only:
            bench_redis(tmp, sizes, n)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"summary": RESULTS}), flush=True)
    print(table(RESULTS))


if __name__ == "__main__":
    main()
