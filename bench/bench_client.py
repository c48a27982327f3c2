"""End-to-end client benchmark over loopback: mqcore.client + mqbroker next to Redis
Streams (redis-py + hiredis), RabbitMQ streams (rstream) and NATS JetStream (nats-py),
whichever of their servers are installed (Debian: redis-server, rabbitmq-server,
nats-server).

Workloads, for 100 B and 1 KiB bodies, N messages each (default 50,000):

* ``sync send``: one message at a time, each waiting for the server's acknowledgement
  (mqcore ``Producer.send``; Redis ``XADD``; RabbitMQ ``send_wait``; JetStream
  ``await js.publish``);
* ``async send, 1000 in flight``: single-message sends with up to 1000 unacknowledged
  (mqcore ``send_async`` with auto-batching, the window held by the producer's own
  ``max_async_inflight``, a future per send, every other setting at its default; Redis pipelines of 1000; JetStream
  ``publish_async``); also on a second mqbroker with SYNC_FLUSH (fsync before the ack);
* ``send_batch 1000``: explicit batches of 1000, ``--batch-n`` messages (default 200,000)
  after a warm-up batch outside the timer (mqcore ``send_batch``, each returning after the
  broker's answer; RabbitMQ ``send_batch`` pipelined, the timer stopping when every
  message's publish confirm has arrived);
* ``consume + commit``: everything stored is consumed by a fresh group and its offsets
  committed (mqcore ``PushConsumer`` and broker with their default settings; Redis
  ``XREADGROUP COUNT 1000`` + ``XACK``; JetStream pull consumer, fetch 1000, AckAll).

Redis runs as a user would for durable data: ``appendonly yes``, ``appendfsync everysec``.

Each row also has the client's CPU per message (``client_cpu_us``: this process's CPU time,
every thread of it, over the timed section; the servers run in their own processes), printed
as a second table.

Servers start once on free loopback ports with throw-away data directories; then each
round runs every system in turn (interleaved, so background load hits all of them
alike) and the table shows medians over rounds, the ratio rows of issue 10 and the
load average. The machine this runs on is shared: compare ratios, not absolute rates.

    python bench/bench_client.py                       # 3 rounds of 50,000 messages
    python bench/bench_client.py --quick               # 1 round of 10,000
    python bench/bench_client.py --only mqcore,redis --rounds 5
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.client import Message, Producer, PushConsumer  # noqa: E402

RESULTS: list[dict] = []


ROUND = [0]


class Clock:
    """Wall time and this process's CPU time (every thread: the client's caller, loop and
    callback threads; the servers run in other processes) since it was made."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def emit(workload: str, system: str, size: int, n: int, timing: tuple[float, float], note: str = "") -> None:
    """One result row; ``timing`` is ``Clock.read()``: seconds and the client's CPU seconds."""
    seconds, cpu = timing
    row = {"workload": workload, "system": system, "size": size, "messages": n, "seconds": round(seconds, 3),
           "msgs_per_s": int(n / seconds) if seconds > 0 else 0, "client_cpu_us": round(cpu / n * 1e6, 2),
           "round": ROUND[0], "loadavg_1m": round(os.getloadavg()[0], 2)}
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


def start_mqbroker(tmp: str, name: str = "mq", conf: dict | None = None) -> tuple[Server, str]:
    argv = [sys.executable, "-m", "mqcore.broker.cli", "--store", os.path.join(tmp, name), "--listen-port", "0",
            "--namesrv-port", "0", "--log-level", "WARNING", "--log-dir", os.path.join(tmp, f"{name}-logs")]
    if conf:
        path = os.path.join(tmp, f"{name}.conf")
        with open(path, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in conf.items())
        argv += ["-c", path]
    s = Server(argv, ready_line="READY")
    fields = dict(part.split("=", 1) for part in s.line.split()[1:])
    return s, fields["namesrv"]


# ======================================================================================
# mqcore
# ======================================================================================
#: workloads to run (``--workloads``; the RabbitMQ peer runs its two: sync, batch)
WORKLOADS = {"sync", "async", "batch", "consume"}
#: messages per ``send_batch 1000`` row (``--batch-n``): enough that the first and last
#: batch's round trips are a small part of the timed section (issue 34)
BATCH_N = [200_000]


#: client CPU of the sync rows: (system, size, µs per send), printed next to the echo floor
SYNC_CPU: list[tuple[str, int, float]] = []


def sync_cpu(system: str, size: int, n: int, cpu_s: float) -> None:
    """Record (and print) a sync row's client CPU per send (this process's, all threads)."""
    SYNC_CPU.append((system, size, cpu_s / n * 1e6))
    print(json.dumps({"client_cpu": "sync send", "system": system, "size": size,
                      "us_per_send": round(cpu_s / n * 1e6, 1), "round": ROUND[0],
                      "loadavg_1m": round(os.getloadavg()[0], 2)}), flush=True)


def echo_floor(size: int, n: int) -> None:
    """The floor of a sync send's client CPU, measured in the same round: a plain
    blocking-socket client (sendall + recv, no event loop) echoing a send-like frame of
    this body size off bench_floor.py's blocking echo server."""
    import bench_floor
    from mqcore.remoting import RequestCode, create_request
    from mqcore.remoting.command import encode_frame
    frame = encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, {"a": "bench-sync", "b": "Sync", "i": "x" * 60},
                                        body=b"x" * size, opaque=1))
    port = bench_floor.free_port()
    child = bench_floor.Child([sys.executable, bench_floor.__file__, "--serve", "blocking", str(port)])
    try:
        cpu0 = time.process_time()
        bench_floor.client_blocking(port, frame, n)
        sync_cpu("blocking echo (floor)", size, n, time.process_time() - cpu0)
    finally:
        child.stop()


def mq_sync(ns: str, topic: str, body: bytes, n: int, *, via_loop: bool = False) -> tuple[float, float]:
    """``Producer.send`` one at a time; ``via_loop`` waits on ``send_async`` instead, which
    crosses to the client's loop thread and back per message as ``send`` used to."""
    with Producer("bench-sync", namesrv_addr=ns) as p:
        def send(msg: Message) -> object:
            return p.send_async(msg).result() if via_loop else p.send(msg)
        send(Message(topic, body))
        clock = Clock()
        for _ in range(n):
            send(Message(topic, body))
        timing = clock.read()
        sync_cpu("mqcore via loop" if via_loop else "mqcore", len(body), n, timing[1])
        return timing


def mq_async(ns: str, topic: str, body: bytes, n: int, window: int = 1000) -> tuple[float, float]:
    """Single-message sends, auto-batched, at most ``window`` unacknowledged: the
    producer's own back-pressure (``max_async_inflight``) holds the window, and every
    send gets its own future (its own ``SendResult``), as a user would write it. Every
    other setting is the producer's default (issue 22: what a user who changes nothing gets)."""
    with Producer("bench-async", namesrv_addr=ns, auto_batch=True, max_async_inflight=window) as p:
        p.send(Message(topic, body))
        clock = Clock()
        futures = [p.send_async(Message(topic, body)) for _ in range(n)]
        for f in futures:
            f.result(60)
        return clock.read()


def mq_batch(ns: str, topic: str, body: bytes, n: int, batch: int = 1000) -> tuple[float, float]:
    """``send_batch`` of 1000, each returning after the broker's answer; a warm-up batch
    before the timer (route, connection, first batch), as the RabbitMQ peer's."""
    with Producer("bench-batch", namesrv_addr=ns, send_msg_timeout_ms=30_000) as p:
        p.send_batch([Message(topic, body) for _ in range(batch)])
        clock = Clock()
        for start in range(0, n, batch):
            p.send_batch([Message(topic, body) for _ in range(min(batch, n - start))])
        return clock.read()


def mq_fill(ns: str, topic: str, body: bytes, n: int) -> None:
    with Producer("bench-fill", namesrv_addr=ns) as p:
        for start in range(0, n, 256):
            p.send_batch([Message(topic, body) for _ in range(min(256, n - start))])


def mq_consume(ns: str, topic: str, n: int, group: str) -> tuple[float, float]:
    """A fresh group's ``PushConsumer`` with every setting at its default (only
    ``consume_from_where``: the messages are already stored), on a broker at its defaults."""
    count = [0]
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs, ctx):
        with lock:
            count[0] += len(msgs)
            if count[0] >= n:
                done.set()

    c = PushConsumer(group, namesrv_addr=ns, consume_from_where="first")
    c.subscribe(topic)
    c.register_listener(listener)
    clock = Clock()
    c.start()
    if not done.wait(600):
        raise RuntimeError(f"consumed only {count[0]} of {n}")
    c.shutdown()  # includes the final synchronous offset commit
    return clock.read()


class MqcoreSystem:
    name = "mqcore"

    def start(self, tmp: str) -> bool:
        self.server, self.ns = start_mqbroker(tmp, "mq")
        self.sync_server, self.sync_ns = start_mqbroker(tmp, "mqsync", {"flushDiskType": "SYNC_FLUSH"})
        return True

    def run(self, sizes: list[int], n: int) -> None:
        r = ROUND[0]
        for size in sizes:
            body = b"x" * size
            if "sync" in WORKLOADS:
                emit("sync send", "mqcore", size, n, mq_sync(self.ns, f"Sync{size}r{r}", body, n))
                emit("sync send", "mqcore via loop", size, n,
                     mq_sync(self.ns, f"SyncL{size}r{r}", body, n, via_loop=True),
                     "send_async(msg).result(): the caller -> loop thread -> caller path send took before")
                echo_floor(size, n)
            if "async" in WORKLOADS:
                emit("async send, 1000 in flight", "mqcore", size, n, mq_async(self.ns, f"Auto{size}r{r}", body, n),
                     "send_async, auto-batching")
                emit("async send, 1000 in flight", "mqcore SYNC_FLUSH", size, n,
                     mq_async(self.sync_ns, f"Auto{size}r{r}", body, n), "send_async, auto-batching, fsync before ack")
            if "batch" in WORKLOADS:
                emit("send_batch 1000", "mqcore", size, BATCH_N[0],
                     mq_batch(self.ns, f"Batch{size}r{r}", body, BATCH_N[0]))
            if "consume" in WORKLOADS:
                topic = f"Consume{size}r{r}"
                mq_fill(self.ns, topic, body, n)
                emit("consume + commit", "mqcore", size, n, mq_consume(self.ns, topic, n, f"cg{size}r{r}"),
                     "PushConsumer, default settings")

    def stop(self) -> None:
        self.server.stop()
        self.sync_server.stop()


# ======================================================================================
# NATS JetStream
# ======================================================================================
async def nats_round(port: int, sizes: list[int], n: int) -> None:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, StorageType

    nc = await nats.connect(f"nats://127.0.0.1:{port}")
    js = nc.jetstream()
    r = ROUND[0]
    try:
        for size in sizes:
            body = b"x" * size
            for name in ("SYNC", "ASYNC", "CONS"):
                await js.add_stream(name=f"{name}{size}R{r}", subjects=[f"{name.lower()}{size}r{r}"],
                                    storage=StorageType.FILE)
            clock = Clock()
            for _ in range(n):
                await js.publish(f"sync{size}r{r}", body)
            emit("sync send", "nats-jetstream", size, n, clock.read())
            for subject, name in ((f"async{size}r{r}", "async send, 1000 in flight"), (f"cons{size}r{r}", None)):
                clock = Clock()
                for _ in range(n):
                    await js.publish_async(subject, body)
                await js.publish_async_completed()
                if name:
                    emit(name, "nats-jetstream", size, n, clock.read(), "publish_async")
            clock = Clock()
            sub = await js.pull_subscribe(f"cons{size}r{r}", durable=f"bench{size}r{r}",
                                          config=ConsumerConfig(ack_policy=AckPolicy.ALL))
            got = 0
            while got < n:
                msgs = await sub.fetch(batch=1000, timeout=10)
                got += len(msgs)
                await msgs[-1].ack_sync()
            emit("consume + commit", "nats-jetstream", size, n, clock.read(), "pull consumer, fetch 1000, AckAll")
    finally:
        await nc.close()


class NatsSystem:
    name = "nats"

    def start(self, tmp: str) -> bool:
        exe = shutil.which("nats-server")
        if exe is None:
            return skipped("nats-jetstream", "nats-server is not installed")
        try:
            import nats  # noqa: F401
        except ImportError:
            return skipped("nats-jetstream", "nats-py is not installed")
        self.port = free_port()
        self.server = Server([exe, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", os.path.join(tmp, "nats")],
                             port=self.port)
        return True

    def run(self, sizes: list[int], n: int) -> None:
        asyncio.run(nats_round(self.port, sizes, n))

    def stop(self) -> None:
        self.server.stop()


# ======================================================================================
# Redis Streams
# ======================================================================================
class RedisSystem:
    name = "redis"

    def start(self, tmp: str) -> bool:
        exe = shutil.which("redis-server")
        if exe is None:
            return skipped("redis-streams", "redis-server is not installed")
        try:
            import redis
        except ImportError:
            return skipped("redis-streams", "redis (redis-py) is not installed")
        self.port = free_port()
        # what a user runs: the append-only file on, fsynced once a second (Redis's recommended
        # persistence, the durability our ASYNC_FLUSH broker gives), no RDB snapshots mid-run
        self.server = Server([exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "yes", "--appendfsync", "everysec", "--dir", tmp], port=self.port)
        self.r = redis.Redis(port=self.port)
        return True

    def run(self, sizes: list[int], n: int) -> None:
        r, rnd = self.r, ROUND[0]
        for size in sizes:
            body = b"x" * size
            clock = Clock()
            for _ in range(n):
                r.xadd(f"sync{size}r{rnd}", {"b": body})
            timing = clock.read()
            emit("sync send", "redis-streams", size, n, timing)
            sync_cpu("redis-streams", size, n, timing[1])
            for key, name in ((f"async{size}r{rnd}", "async send, 1000 in flight"), (f"cons{size}r{rnd}", None)):
                clock = Clock()
                for start in range(0, n, 1000):
                    pipe = r.pipeline(transaction=False)
                    for _ in range(min(1000, n - start)):
                        pipe.xadd(key, {"b": body})
                    pipe.execute()
                if name:
                    emit(name, "redis-streams", size, n, clock.read(), "pipelines of 1000")
            clock = Clock()
            r.xgroup_create(f"cons{size}r{rnd}", "g", id="0")
            got = 0
            while got < n:
                resp = r.xreadgroup("g", "c1", {f"cons{size}r{rnd}": ">"}, count=1000, block=1000)
                ids = [mid for _stream, entries in resp for mid, _fields in entries]
                got += len(ids)
                if ids:
                    r.xack(f"cons{size}r{rnd}", "g", *ids)
            emit("consume + commit", "redis-streams", size, n, clock.read(), "XREADGROUP COUNT 1000 + XACK")
            for key in (f"sync{size}r{rnd}", f"async{size}r{rnd}", f"cons{size}r{rnd}"):
                r.delete(key)  # in memory: keep the server small across rounds

    def stop(self) -> None:
        self.server.stop()


# ======================================================================================
# RabbitMQ streams
# ======================================================================================
class RabbitSystem:
    """rabbitmq-server (Debian) with only the stream plugin, as root, in a temp dir."""

    name = "rabbitmq"
    _SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"

    def start(self, tmp: str) -> bool:
        if not os.path.exists(self._SERVER):
            return skipped("rabbitmq-streams", "rabbitmq-server is not installed")
        try:
            import rstream  # noqa: F401
        except ImportError:
            return skipped("rabbitmq-streams", "rstream is not installed")
        home = os.path.join(tmp, "rabbitmq")
        os.makedirs(home)
        self.port, amqp, dist = free_port(), free_port(), free_port()
        with open(os.path.join(home, "enabled_plugins"), "w") as f:
            f.write("[rabbitmq_stream].\n")
        with open(os.path.join(home, "rabbitmq.conf"), "w") as f:
            f.write(f"listeners.tcp.default = 127.0.0.1:{amqp}\nstream.listeners.tcp.1 = 127.0.0.1:{self.port}\n"
                    "loopback_users = none\n")
        env = dict(os.environ, HOME=home, RABBITMQ_NODENAME=f"mqbench{self.port}@localhost",
                   RABBITMQ_MNESIA_BASE=os.path.join(home, "mnesia"), RABBITMQ_LOG_BASE=os.path.join(home, "log"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(home, "enabled_plugins"),
                   RABBITMQ_CONFIG_FILE=os.path.join(home, "rabbitmq"), RABBITMQ_DIST_PORT=str(dist))
        self.epmd_before = _epmd_pids()
        self.proc = subprocess.Popen([self._SERVER], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        wait_port(self.port, timeout=180)  # Erlang boots slowly on a busy machine
        return True

    def run(self, sizes: list[int], n: int) -> None:
        asyncio.run(self._round(sizes, n))

    async def _round(self, sizes: list[int], n: int) -> None:
        from rstream import Producer as RProducer

        rnd = ROUND[0]
        async with RProducer("127.0.0.1", self.port, username="guest", password="guest") as p:
            for size in sizes:
                body = b"x" * size
                if "sync" in WORKLOADS:
                    sync = f"sync{size}r{rnd}"
                    await p.create_stream(sync, exists_ok=True)
                    await p.send_wait(sync, body)  # declares the publisher: outside the timer, as mqcore's warm-up send
                    sn = min(n, 20_000)  # confirmed one by one it is slow; fewer keep the round short
                    clock = Clock()
                    for _ in range(sn):
                        await p.send_wait(sync, body)
                    emit("sync send", "rabbitmq-streams", size, sn, clock.read(), "send_wait")
                    await p.delete_stream(sync)
                if "batch" in WORKLOADS:
                    stream = f"batch{size}r{rnd}"
                    await p.create_stream(stream, exists_ok=True)
                    emit("send_batch 1000", "rabbitmq-streams", size, BATCH_N[0],
                         await rabbit_batch(p, stream, body, BATCH_N[0]), "send_batch, every publish confirm awaited")
                    await p.delete_stream(stream)
                    stream = f"nowait{size}r{rnd}"
                    await p.create_stream(stream, exists_ok=True)
                    emit("send_batch 1000", "rabbitmq unconfirmed", size, BATCH_N[0],
                         await rabbit_batch(p, stream, body, BATCH_N[0], confirm=False),
                         "send_batch, timer stops at the last write: confirms not awaited (informative)")
                    await asyncio.sleep(1)  # let the confirms drain before the stream goes
                    await p.delete_stream(stream)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the script, its Erlang VM and epmd it started
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for pid in _epmd_pids() - self.epmd_before:  # the Erlang port mapper it daemonised
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


async def rabbit_batch(p, stream: str, body: bytes, n: int, batch: int = 1000,
                       confirm: bool = True) -> tuple[float, float]:
    """rstream ``send_batch`` of 1000, as its users run it for throughput (issue 34): the
    publisher is declared by a warm-up batch before the timer (rstream declares it on a
    stream's first send), batches are pipelined (rstream does not wait between them) and
    the timer stops once every message's publish confirm has arrived, the contract of
    mqcore's ``send_batch``. rstream reports confirms only per message, through the callback
    (it decodes every confirmed id in Python whether or not one is given): the callback is
    ``list.append``, a C call with no Python frame per message; the caller polls the count.
    ``confirm=False`` (an informative row, not the contract) stops the timer when the last
    frame is written and registers no callback."""
    statuses: list = []

    async def confirmed(count: int) -> None:
        deadline = time.monotonic() + 300
        while len(statuses) < count:
            if time.monotonic() > deadline:
                raise RuntimeError(f"rstream confirmed {len(statuses)} of {count}")
            await asyncio.sleep(0.0005)

    await p.send_batch(stream, [body] * batch, on_publish_confirm=statuses.append)
    await confirmed(batch)
    statuses.clear()
    callback = statuses.append if confirm else None
    clock = Clock()
    for start in range(0, n, batch):
        await p.send_batch(stream, [body] * min(batch, n - start), on_publish_confirm=callback)
    if not confirm:
        return clock.read()
    await confirmed(n)
    timing = clock.read()
    failed = sum(1 for s in statuses if not s.is_confirmed)
    if failed:
        raise RuntimeError(f"rstream: {failed} of {n} publishes failed")
    return timing


def _epmd_pids() -> set[int]:
    import psutil
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "epmd"}


def skipped(system: str, why: str) -> bool:
    print(json.dumps({"skipped": system, "why": why}), flush=True)
    return False


# ======================================================================================
# report
# ======================================================================================
#: (label, workload, ours, theirs, goal): the ratio rows of issue 10
RATIOS = [
    ("send one at a time ÷ Redis XADD", "sync send", "mqcore", "redis-streams", 1.0),
    ("1000 in flight ÷ Redis pipelines of 1000", "async send, 1000 in flight", "mqcore", "redis-streams", 1.0),
    ("send_batch 1000 ÷ RabbitMQ streams send_batch", "send_batch 1000", "mqcore", "rabbitmq-streams", 1.0),
    ("consume + commit ÷ Redis XREADGROUP + XACK", "consume + commit", "mqcore", "redis-streams", 1.0),
    ("SYNC_FLUSH 1000 in flight ÷ our ASYNC_FLUSH", "async send, 1000 in flight", "mqcore SYNC_FLUSH", "mqcore", 0.5),
]
#: informative rows (no goal): what the blocking send path gained over the loop hand-off
GAINS = [("send one at a time: blocking path ÷ loop hand-off", "sync send", "mqcore", "mqcore via loop")]
SYSTEMS = ["mqcore", "mqcore via loop", "mqcore SYNC_FLUSH", "redis-streams", "rabbitmq-streams", "rabbitmq unconfirmed",
           "nats-jetstream"]


def medians(results: list[dict], field: str = "msgs_per_s") -> dict[tuple[str, str, int], float]:
    cells: dict[tuple[str, str, int], list[float]] = {}
    for r in results:
        cells.setdefault((r["workload"], r["system"], r["size"]), []).append(r[field])
    return {k: statistics.median(v) for k, v in cells.items()}


def table(results: list[dict], rounds: int) -> str:
    med = medians(results)
    sizes = sorted({r["size"] for r in results})
    workloads = list(dict.fromkeys(r["workload"] for r in results))
    loads = [r["loadavg_1m"] for r in results]
    lines = [f"msg/s, median of {rounds} round(s); load average {min(loads):.1f}-{max(loads):.1f}", "",
             "| workload | size | " + " | ".join(SYSTEMS) + " |", "|---|---|" + "---:|" * len(SYSTEMS)]
    for w in workloads:
        for size in sizes:
            cells = [med.get((w, s, size)) for s in SYSTEMS]
            if not any(cells):
                continue
            lines.append(f"| {w} | {size} B | " + " | ".join(f"{int(c):,}" if c else "-" for c in cells) + " |")
    cpu = medians(results, "client_cpu_us")
    lines += ["", "client CPU µs per message (this process, every thread), median", "",
              "| workload | size | " + " | ".join(SYSTEMS) + " |", "|---|---|" + "---:|" * len(SYSTEMS)]
    for w in workloads:
        for size in sizes:
            cells = [cpu.get((w, s, size)) for s in SYSTEMS]
            if any(c is not None for c in cells):
                lines.append(f"| {w} | {size} B | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
    lines += ["", "| ratio (goal) | size | ratio | status |", "|---|---|---:|---|"]
    for label, w, ours, theirs, goal in RATIOS:
        for size in sizes:
            a, b = med.get((w, ours, size)), med.get((w, theirs, size))
            if not a or not b:
                lines.append(f"| {label} (≥ {goal}) | {size} B | n/a | not measured |")
                continue
            ratio = a / b
            status = "met" if ratio >= goal else f"missed by {(1 - ratio / goal) * 100:.0f} %"
            lines.append(f"| {label} (≥ {goal}) | {size} B | {ratio:.2f} | {status} |")
    for label, w, ours, theirs in GAINS:
        for size in sizes:
            a, b = med.get((w, ours, size)), med.get((w, theirs, size))
            if a and b:
                lines.append(f"| {label} | {size} B | {a / b:.2f} | (no goal) |")
    if SYNC_CPU:
        lines += sync_cpu_table()
    return "\n".join(lines)


def sync_cpu_table() -> list[str]:
    """Client CPU per sync send (median over rounds) next to the blocking echo floor of
    the same run, and the send's CPU past that floor (goal: mqcore ≤ 15 µs)."""
    cells: dict[tuple[str, int], list[float]] = {}
    for system, size, us in SYNC_CPU:
        cells.setdefault((system, size), []).append(us)
    med = {k: statistics.median(v) for k, v in cells.items()}
    systems = list(dict.fromkeys(system for system, _size, _us in SYNC_CPU))
    lines = ["", "| client CPU µs per sync send | size | " + " | ".join(systems) + " | mqcore − echo floor |",
             "|---|---|" + "---:|" * (len(systems) + 1)]
    for size in sorted({size for _system, size, _us in SYNC_CPU}):
        row = [med.get((s, size)) for s in systems]
        ours, floor = med.get(("mqcore", size)), med.get(("blocking echo (floor)", size))
        marginal = f"{ours - floor:.1f}" if ours is not None and floor is not None else "-"
        lines.append(f"| one at a time | {size} B | " + " | ".join("-" if c is None else f"{c:.1f}" for c in row)
                     + f" | {marginal} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=50_000, help="messages per workload and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 round of 10,000 messages")
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--only", default="mqcore,redis,rabbitmq,nats")
    ap.add_argument("--batch-n", type=int, default=200_000, help="messages per send_batch 1000 row and round")
    ap.add_argument("--workloads", default="sync,async,batch,consume",
                    help="workloads to run (e.g. 'async,consume' for a quick A/B of two trees)")
    args = ap.parse_args()
    WORKLOADS.clear()
    WORKLOADS.update(args.workloads.split(","))
    n, rounds = (10_000, 1) if args.quick else (args.n, args.rounds)
    BATCH_N[0] = 20_000 if args.quick else args.batch_n
    sizes = [int(s) for s in args.sizes.split(",")]
    only = args.only.split(",")
    tmp = tempfile.mkdtemp(prefix="bench-client-")
    systems = []
    try:
        for cls in (MqcoreSystem, RedisSystem, RabbitSystem, NatsSystem):
            if cls.name in only:
                system = cls()
                if system.start(tmp):
                    systems.append(system)
        for rnd in range(rounds):
            ROUND[0] = rnd
            for system in systems:  # interleaved: every system sees every phase of the background load
                system.run(sizes, n)
    finally:
        for system in systems:
            system.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"summary": RESULTS}), flush=True)
    print(table(RESULTS, rounds))


if __name__ == "__main__":
    main()
