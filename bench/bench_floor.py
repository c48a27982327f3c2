"""The floor ladder: what one request/response round trip costs at each layer, one
request in flight, over loopback.

Each rung runs its server in a child process (so the two sides' CPU can be told apart)
and a client in this process that sends the same ~200-byte remoting frame and waits
for the answer, N times:

1. ``blocking``: plain sockets, ``recv``/``sendall`` on both sides, no event loop;
   ``blocking-slow``: the same with the server spinning 50 µs before each answer, so the
   client waits about as long as for a broker's send (on a VM a longer wait costs the
   waiting side more CPU: its core goes idle and is woken);
2. ``asyncio``: an asyncio ``Protocol`` echo server and client (default loop);
3. ``uvloop``: the same code on uvloop (skipped when uvloop is not installed);
4. ``remoting``: mqcore's ``RemotingServer`` with a processor that answers at once,
   driven by ``RemotingClient.invoke`` on the client's loop;
5. ``remoting-sync``: the same server driven by ``SyncRemotingClient.invoke`` from a
   plain thread (what a blocking caller paid: a hand-off to the loop thread and back);
6. ``remoting-blocking``: the same server driven by ``RemotingClient.invoke_blocking``
   (the blocking socket path ``Producer.send`` takes, no event loop involved);
7. ``mqbroker-loop``: a real ``mqbroker`` process and ``Producer.send_async(msg).result()``
   of a 100 B message (the path through the client's loop thread ``send`` took before);
8. ``mqbroker``: the same broker and ``Producer.send``;
9. ``mqbroker-stub``: ``Producer.send`` as in ``mqbroker`` with the socket stubbed after the
   warm-up (a canned answer, no system call, no wait): the client's own CPU per send;
10. ``mqbroker-pull``: the same broker answering ``PullConsumer.pull`` of 32 stored 100 B
   messages per request (the queue filled before timing); server CPU per pull.

The floors of ``Producer.send``'s client CPU (issue 22): a "canned" server answers every
frame with a broker's usual SEND answer (SUCCESS, its opaque and queue id, a msgId and
offset) after spinning ``--answer-delay-us``, by default fitted round by round so that the
rung's round trip takes as long as ``mqbroker``'s (the client then sleeps as long as on the
broker, which on a VM changes what the wake-up costs; list ``mqbroker`` first):

* ``template-canned``: the very kernel call ``Producer.send`` makes (``SendTemplate.send``
  on a ``BlockingConnection``'s socket: fill the frame, write, wait in recv with the GIL
  released, read, the SendResult), in a bare loop: the floor of the kernel path;
* ``blocking-canned``: a plain blocking-socket client (``sendall``/``recv``) of the same
  server: the floor of any Python client that sleeps for its answer;
* ``mqbroker`` minus these is what ``Producer.send`` adds (Message, checks, queue choice, the
  pool) plus the broker's own answer time difference (printed as ``us_per_trip``).

Pipelined rungs (one-in-flight figures are dominated by the cost of waking a process up;
with many requests in flight wake-ups amortize and what is left is each request's own work):

10. ``uvloop-burst``: a uvloop echo server that answers every complete frame of a receive
    buffer in one write (the floor of a Python server per pipelined request);
11. ``mqbroker-burst``: a raw-socket client keeps ``--window`` (256) pre-encoded 100 B
    SEND_MESSAGE_V2 frames in flight, written in chunks of a quarter window, and reads the
    answers; server CPU per SEND (the goal: <= 15 µs);
``uvloop-one`` and ``mqbroker-one`` are the same clients with one request in flight (the
broker's one-in-flight cost with raw frames, next to its echo floor).

12. ``redis-burst``: the same client shape sending pipelined ``XADD`` of a 100 B field to a
    ``redis-server`` (appendonly yes, appendfsync everysec, temp dir): a C server's cost per
    pipelined append (skipped when redis-server is not installed);
13. ``mqbroker-pull-burst``: ``--window`` PULL_MESSAGE requests of 32 stored messages each in
    flight on one connection (each window written in one ``sendall``, every answer checked:
    FOUND, its body the size of 32 records); server CPU per PULL (the goal: <= 20 µs).
    ``mqbroker-pull-one``: the same raw frames one in flight (the broker's one-in-flight PULL
    without ``PullConsumer``'s ~120 µs of client work between pulls, which leaves the
    broker's caches colder: next to ``uvloop-one``). The PULL rungs fill the queue first and
    wait (``settle``) until the broker has written that fill back before timing: otherwise a
    flush of the fill (every 500 ms) fell inside the short timed run, or not, by chance.

Placement (``--placement``): on a VM a one-in-flight round trip costs each side several
times more CPU when the two processes run on different CPUs (every wake-up then wakes an idle
virtual CPU) than when they share one (the woken side runs as the other goes to sleep), and
the kernel picks one or the other per connection, by load. The burst-shaped rungs (``*-one``,
``*-burst``, ``redis-burst``) and the pull rungs print ``same_cpu_share``: the share of the client's context
switches that were preemptions by the server woken on its CPU (about 1 when they share a
CPU, about 0 when each has its own). ``--placement same`` pins the server's threads and the
client to one CPU, ``split`` to two, so a figure can be compared with its floor in the same
placement; ``free`` (the default) lets the kernel choose. ``mqbroker-pull``'s client has a loop
thread of its own (``PullConsumer``): every thread of the client process is pinned, and its
share counts the whole process's switches.

With ``--baseline-tree DIR`` the two ``mqbroker`` send rungs and the pull rung are also run
against the broker of another checkout (``DIR`` on PYTHONPATH, its extensions built), as
``*-baseline`` rungs interleaved with ours: a before/after in one run.

Rungs are interleaved round by round (``--rounds``) and the median is printed, with
the 1-minute load average, because the machine is shared. A regression in one layer
shows as a jump between two rungs.

    python bench/bench_floor.py                  # 3 rounds of 20,000 round trips
    python bench/bench_floor.py --n 5000 --rounds 1 --only asyncio,remoting
    python bench/bench_floor.py --only uvloop,mqbroker,mqbroker-pull --baseline-tree /tmp/base
    python bench/bench_floor.py --only uvloop,mqbroker,uvloop-burst,mqbroker-burst,redis-burst --n 5000
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.remoting import RequestCode, create_request, create_response  # noqa: E402
from mqcore.remoting.command import encode_frame  # noqa: E402

RUNGS = ["blocking", "blocking-slow", "asyncio", "uvloop", "remoting", "remoting-sync", "remoting-blocking",
         "mqbroker-loop", "mqbroker", "mqbroker-stub", "mqbroker-pull", "uvloop-one", "mqbroker-one", "uvloop-burst",
         "mqbroker-burst", "redis-burst", "mqbroker-pull-burst", "mqbroker-pull-one", "template-canned",
         "blocking-canned"]
#: requests in flight in the burst rungs (``--window``)
BURST_WINDOW = 256
#: messages per PULL in the pull rung
PULL_BATCH = 32
#: pulls per pull-burst round at most (each reads PULL_BATCH messages stored for it)
PULL_BURST_MAX = 8000
_CLK_TCK = os.sysconf("SC_CLK_TCK")
#: ``--placement``: (the server's CPU, the client's CPU), or None to let the kernel choose
PLACEMENTS: dict[str, tuple[int, int] | None] = {"free": None, "same": (1, 1), "split": (1, 0)}


def sample_frame(topic: str = "BenchTopic", body_bytes: int = 100) -> bytes:
    """A send-like request: a JSON header with the usual fields and a 100 B body."""
    cmd = create_request(RequestCode.SEND_MESSAGE_V2,
                         {"a": "ProducerGroup", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
                          "g": "1700000000000", "h": "0", "i": "UNIQ_KEY\x01ABCDEF0123456789\x02", "j": "0",
                          "k": "false", "m": "false"}, body=b"x" * body_bytes, opaque=1)
    return encode_frame(cmd)


def have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


# ======================================================================================
# servers (child processes)
# ======================================================================================
#: how long the ``blocking-slow`` echo server spins before each answer: about a broker's send
SLOW_ECHO_S = 50e-6


#: how long the canned server spins before each answer until the rounds have measured ``mqbroker``
#: (``--answer-delay-us auto``, the default: see ``CannedDelay``)
ANSWER_DELAY_US = 8.0


class CannedDelay:
    """The canned server's spin per rung, fitted round by round so that its round trip takes as
    long as ``mqbroker``'s in the same run (how long the client sleeps changes what its wake-up
    costs on a VM: a floor that answers sooner than the broker is not the broker's floor). Put
    ``mqbroker`` before the ``*-canned`` rungs in ``--only``; ``fixed``: a set delay instead."""

    def __init__(self, fixed: float | None) -> None:
        self.fixed = fixed
        self.broker_trips: list[float] = []
        self.last: dict[str, tuple[float, float]] = {}  # rung -> (delay used, µs per trip)

    def delay_for(self, rung: str) -> float:
        if self.fixed is not None:
            return self.fixed
        if not self.broker_trips:
            return ANSWER_DELAY_US
        if rung not in self.last:
            return round(max(0.0, ANSWER_DELAY_US + statistics.median(self.broker_trips) - 20.0), 1)
        delay, trip = self.last[rung]  # the trip is the server's spin plus the rest, which stays
        return round(max(0.0, delay + statistics.median(self.broker_trips) - trip), 1)

    def saw(self, rung: str, row: dict) -> None:
        if rung == "mqbroker":
            self.broker_trips.append(row["us_per_trip"])
        elif rung.endswith("-canned"):
            self.last[rung] = (row["answer_delay_us"], row["us_per_trip"])
#: the canned server's answer: a broker's usual SEND_MESSAGE_V2 answer (fields filled per request)
CANNED_ANSWER = (b'{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000000000","queueId":"%d",'
                 b'"queueOffset":"123","MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":1,'
                 b'"language":"JAVA","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":399}')
_OPAQUE_RE = re.compile(rb'"opaque":(\d+)')
_QUEUE_RE = re.compile(rb'"e":"(\d+)"')


def canned_answer(request: bytes) -> bytes:
    """The canned SEND answer frame to ``request`` (its opaque and queue id; 0 when absent)."""
    header = request[8:8 + (int.from_bytes(request[4:8], "big") & 0xFFFFFF)]
    opaque, queue = _OPAQUE_RE.search(header), _QUEUE_RE.search(header)
    answer = CANNED_ANSWER % (int(queue.group(1)) if queue else 0, int(opaque.group(1)) if opaque else 0)
    return (4 + len(answer)).to_bytes(4, "big") + len(answer).to_bytes(4, "big") + answer


def serve_blocking(sock: socket.socket, delay_s: float = 0.0, answer=None) -> None:
    """Answer each frame with itself, or with ``answer(frame)``, after spinning ``delay_s``;
    one connection after the other."""
    while True:
        conn, _ = sock.accept()
        with conn:
            _serve_connection(conn, delay_s, answer)


def _serve_connection(conn: socket.socket, delay_s: float, answer) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    while True:
        data = conn.recv(65536)
        if not data:
            return
        buf += data
        while len(buf) >= 4:
            length = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 + length:
                break
            if delay_s:  # spin, not sleep: the client waits as long, the server pays no wake-up
                end = time.perf_counter() + delay_s
                while time.perf_counter() < end:
                    pass
            request = bytes(buf[:4 + length])
            conn.sendall(answer(request) if answer is not None else request)
            del buf[:4 + length]


class EchoProtocol(asyncio.Protocol):
    """Frame-aware echo: answers each complete frame with itself."""

    def connection_made(self, transport):
        self.transport = transport
        self.buf = bytearray()
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data):
        buf = self.buf
        buf += data
        while len(buf) >= 4:
            length = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 + length:
                break
            self.transport.write(bytes(buf[:4 + length]))
            del buf[:4 + length]


class BurstEchoProtocol(EchoProtocol):
    """Frame-aware echo answering all the complete frames of a receive buffer in one write."""

    def data_received(self, data):
        buf = self.buf
        buf += data
        pos, n = 0, len(buf)
        while n - pos >= 4:
            length = int.from_bytes(buf[pos:pos + 4], "big")
            if n - pos < 4 + length:
                break
            pos += 4 + length
        if pos:
            self.transport.write(bytes(buf[:pos]))
            del buf[:pos]


async def serve_async(sock: socket.socket, protocol=EchoProtocol) -> None:
    server = await asyncio.get_running_loop().create_server(protocol, sock=sock)
    await server.serve_forever()


async def serve_remoting(port: int) -> None:
    from mqcore.remoting import RemotingServer

    server = RemotingServer(idle_timeout_s=None, name="floor")
    server.register_processor(RequestCode.SEND_MESSAGE_V2, lambda ch, req: create_response(req))
    await server.start("127.0.0.1", port)
    print("READY", flush=True)
    await asyncio.Event().wait()


def child_main(kind: str, port: int) -> None:
    if kind == "remoting":
        try:
            from mqcore.remoting.eventloop import new_event_loop
        except ImportError:  # an older tree measured as a baseline (--compare)
            from mqcore.remoting.client import new_event_loop
        new_event_loop().run_until_complete(serve_remoting(port))
        return
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(16)
    print("READY", flush=True)
    if kind == "blocking":
        serve_blocking(sock)
    elif kind == "blocking-slow":
        serve_blocking(sock, SLOW_ECHO_S)
    elif kind.startswith("canned:"):
        serve_blocking(sock, float(kind.split(":", 1)[1]) * 1e-6, canned_answer)
    elif kind == "asyncio":
        asyncio.run(serve_async(sock))
    elif kind == "uvloop":
        import uvloop
        uvloop.run(serve_async(sock))
    elif kind == "uvloop-burst":
        import uvloop
        uvloop.run(serve_async(sock, BurstEchoProtocol))
    else:
        raise SystemExit(f"unknown server kind {kind}")


# ======================================================================================
# clients
# ======================================================================================
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_of(pid: int) -> float:
    """CPU seconds a process has run, all its threads (nanosecond schedstat where the kernel
    has it: the tick counts of /proc/PID/stat are 10 ms coarse, as much as a burst rung's whole
    difference)."""
    total, seen = 0, False
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
                    seen = True
            except (FileNotFoundError, ProcessLookupError):
                continue  # a thread that ended meanwhile
    except FileNotFoundError:
        pass
    if seen:
        return total / 1e9
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime + stime


class Child:
    def __init__(self, argv: list[str], ready: str = "READY", env: dict | None = None,
                 cwd: str | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(ready):
                self.line = line.strip()
                return
        raise RuntimeError(f"{argv} did not start")

    store: str | None = None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.store is not None:
            shutil.rmtree(self.store, ignore_errors=True)


def client_blocking(port: int, frame: bytes, n: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        want = len(frame)
        for _ in range(n):
            s.sendall(frame)
            got = 0
            while got < want:
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError("server closed")
                got += len(chunk)


def client_blocking_frames(port: int, frame: bytes, n: int) -> None:
    """``client_blocking`` reading whole answer frames of any length (the canned server's)."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(n):
            s.sendall(frame)
            got = s.recv(65536)
            while len(got) < 4 or len(got) < 4 + int.from_bytes(got[:4], "big"):
                chunk = s.recv(65536)
                if not chunk:
                    raise RuntimeError("server closed")
                got += chunk


def client_template(port: int, n: int, size: int = 100) -> None:
    """``n`` calls of the kernel ``Producer.send`` makes (``SendTemplate.send``) on a
    ``BlockingConnection``'s socket (blocking, one wait slice as SO_RCVTIMEO), each answer
    checked to be the SendResult; nothing else per send."""
    from mqcore._compat import default_wire_client_kernels
    from mqcore.client.message import SendResult, SendStatus
    from mqcore.remoting.bodies import MessageQueue
    from mqcore.remoting.blocking import BlockingConnection
    k = default_wire_client_kernels()
    mq = MessageQueue("FloorTopic", "broker-a", 1)
    template = k.send_template(int(RequestCode.SEND_MESSAGE_V2), "PYTHON", 399, "floor", "FloorTopic", "TBW102", 4,
                               1, "broker-a", mq, SendResult, SendStatus.SEND_OK)
    conn = BlockingConnection.connect(f"127.0.0.1:{port}", 3.0)
    try:
        fd, body = conn._sock.fileno(), b"x" * size
        props = {"WAIT": "true", "UNIQ_KEY": "7F00000166E26A7CE87182E70E4B1A80"}
        send, monotonic = template.send, time.monotonic
        for opaque in range(1, n + 1):
            result = send(fd, opaque, 1_700_000_000_000, 0, props, body, monotonic() + 3.0, "U")
            if type(result) is not SendResult:
                raise RuntimeError(f"the canned answer came back as {result!r}")
    finally:
        conn.close()


async def client_async(port: int, frame: bytes, n: int) -> None:
    loop = asyncio.get_running_loop()
    want = len(frame)

    class Client(asyncio.Protocol):
        def __init__(self):
            self.got = 0
            self.waiter = None

        def connection_made(self, transport):
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def data_received(self, data):
            self.got += len(data)
            if self.got >= want:
                self.got -= want
                self.waiter.set_result(None)

    transport, proto = await loop.create_connection(Client, "127.0.0.1", port)
    try:
        for _ in range(n):
            proto.waiter = loop.create_future()
            transport.write(frame)
            await proto.waiter
    finally:
        transport.close()


async def client_remoting(port: int, n: int) -> None:
    from mqcore.remoting import RemotingClient
    addr = f"127.0.0.1:{port}"
    async with RemotingClient() as client:
        for _ in range(n):
            cmd = create_request(RequestCode.SEND_MESSAGE_V2, {"b": "BenchTopic"}, body=b"x" * 100)
            await client.invoke(addr, cmd, 3000)


def client_remoting_sync(port: int, n: int) -> None:
    from mqcore.remoting.client import SyncRemotingClient
    addr = f"127.0.0.1:{port}"
    with SyncRemotingClient() as client:
        for _ in range(n):
            cmd = create_request(RequestCode.SEND_MESSAGE_V2, {"b": "BenchTopic"}, body=b"x" * 100)
            client.invoke(addr, cmd, 3000)


def client_remoting_blocking(port: int, n: int) -> None:
    from mqcore.remoting.blocking import BlockingPool
    addr = f"127.0.0.1:{port}"
    pool = BlockingPool()
    try:
        for _ in range(n):
            cmd = create_request(RequestCode.SEND_MESSAGE_V2, {"b": "BenchTopic"}, body=b"x" * 100)
            pool.invoke(addr, cmd, 3000)
    finally:
        pool.close()


def run_loop(coro_fn, use_uvloop: bool):
    if use_uvloop:
        import uvloop
        return uvloop.run(coro_fn())
    return asyncio.run(coro_fn())


def measure(rung: str, n: int, frame: bytes, tmp: str, baseline_tree: str | None = None,
            window: int = BURST_WINDOW, baseline_client: bool = False, placement: str = "free",
            answer_delay_us: float = ANSWER_DELAY_US, body_bytes: int = 100) -> dict:
    """One rung: start its server, warm up, time n round trips; µs and CPU µs per trip."""
    if rung.startswith("mqbroker"):
        tree = baseline_tree if rung.endswith("-baseline") else None
        name = rung.removesuffix("-baseline")
        if name in ("mqbroker-burst", "mqbroker-one"):
            row = measure_broker_burst(n, tmp, tree, window if name == "mqbroker-burst" else 1, placement)
        elif name in ("mqbroker-pull-burst", "mqbroker-pull-one"):
            # every pull reads 32 fresh messages: cap the fill (at 50,000 pulls it is 1.6 M messages)
            row = measure_pull_burst(min(n, PULL_BURST_MAX), tmp, tree,
                                     window if name == "mqbroker-pull-burst" else 1, placement)
        elif name in ("mqbroker", "mqbroker-stub") and (baseline_client or name == "mqbroker-stub"):
            here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
            client_tree = tree if (tree is not None and baseline_client) else here
            row = measure_broker_child(n, tmp, stub=name == "mqbroker-stub", tree=tree, client_tree=client_tree,
                                       body_bytes=body_bytes)
        elif name == "mqbroker-pull":
            row = measure_pull(max(1, n // 4), tmp, tree, placement)
        else:
            row = measure_broker(n, tmp, via_loop=name == "mqbroker-loop", tree=tree, body_bytes=body_bytes)
        row["rung"] = rung
        return row
    if rung == "redis-burst":
        return measure_redis_burst(n, tmp, window, placement)
    if rung in ("uvloop-burst", "uvloop-one"):
        return {**measure_echo_burst(n, frame, window if rung == "uvloop-burst" else 1, placement), "rung": rung}
    port = free_port()
    kind = "remoting" if rung.startswith("remoting") else rung
    extra: dict = {}
    if rung.endswith("-canned"):
        kind = f"canned:{answer_delay_us}"
        extra = {"answer_delay_us": answer_delay_us}
    child = Child([sys.executable, os.path.abspath(__file__), "--serve", kind, str(port)])
    try:
        # one connection per timed run (the blocking server serves exactly one)
        def once(count: int) -> None:
            if rung in ("blocking", "blocking-slow"):
                client_blocking(port, frame, count)
            elif rung == "blocking-canned":
                client_blocking_frames(port, sample_frame(body_bytes=body_bytes), count)
            elif rung == "template-canned":
                client_template(port, count, body_bytes)
            elif rung in ("asyncio", "uvloop"):
                run_loop(lambda: client_async(port, frame, count), rung == "uvloop")
            elif rung == "remoting":
                run_loop(lambda: client_remoting(port, count), have_uvloop())
            elif rung == "remoting-blocking":
                client_remoting_blocking(port, count)
            else:
                client_remoting_sync(port, count)

        if rung not in ("blocking", "blocking-slow"):
            once(min(2000, n))  # warm-up (imports, first connection)
        srv0, cli0, t0 = cpu_of(child.proc.pid), time.process_time(), time.perf_counter()
        once(n)
        wall = time.perf_counter() - t0
        cli = time.process_time() - cli0
        srv = cpu_of(child.proc.pid) - srv0
    finally:
        child.stop()
    return {"rung": rung, "n": n, "us_per_trip": round(wall / n * 1e6, 1),
            "client_cpu_us": round(cli / n * 1e6, 1), "server_cpu_us": round(srv / n * 1e6, 1), **extra}


# --- pipelined (burst) rungs ---------------------------------------------------------
def count_frames(buf: bytearray) -> int:
    """Complete remoting frames at the head of ``buf``, removed from it."""
    pos, n, count = 0, len(buf), 0
    while n - pos >= 4:
        length = int.from_bytes(buf[pos:pos + 4], "big")
        if n - pos < 4 + length:
            break
        pos += 4 + length
        count += 1
    del buf[:pos]
    return count


def burst(port: int, request: bytes, n: int, window: int, answers, check=None) -> None:
    """Send ``n`` copies of ``request`` over one connection keeping at most ``window`` in
    flight (written in chunks of a quarter window), until all ``n`` answers arrived.
    ``answers(buf)`` counts and removes the complete answers at the head of ``buf``;
    ``check(buf)`` (optional) looks at a received chunk before that."""
    chunk = max(1, window // 4)
    block = request * chunk
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = done = 0
        buf = bytearray()
        while done < n:
            while sent < n and sent - done + chunk <= window:
                k = min(chunk, n - sent)
                s.sendall(block if k == chunk else request * k)
                sent += k
            data = s.recv(1 << 20)
            if not data:
                raise RuntimeError("server closed the connection")
            buf += data
            if check is not None:
                check(buf)
            done += answers(buf)


def _check_ok(buf: bytearray) -> None:
    """Fail on a remoting answer whose code is not 0 (SUCCESS) at the head of ``buf``."""
    if len(buf) >= 8:
        header_len = int.from_bytes(buf[4:8], "big") & 0xFFFFFF
        head = bytes(buf[8:8 + min(header_len, 12)])
        if len(head) == 12 and not head.startswith(b'{"code":0,'):
            raise RuntimeError(f"the broker answered {bytes(buf[8:8 + header_len])[:200]!r}")


def place(pid: int, placement: str) -> set[int] | None:
    """Pin the server's threads (and so those it starts later) and this thread as
    ``placement`` says; the client's CPUs before, to put back (None: nothing pinned)."""
    cpus = PLACEMENTS[placement]
    if cpus is None:
        return None
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {cpus[0]})
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpus[1]})
    return before


def settle(pid: int, quiet_s: float = 0.6, max_cpu_s: float = 0.003, timeout_s: float = 10.0) -> bool:
    """Wait until the server has been quiet for ``quiet_s`` (at most ``max_cpu_s`` of CPU in
    that window): a PULL rung fills the queue first, and the broker's flush thread writes that
    fill back (every 500 ms, the commitlog's flush interval). Timed right away, a one-in-flight
    PULL rung's few tens of milliseconds caught that writeback or not, by chance: a store's flush
    of data sent before the timing, not work a pull does. ``quiet_s`` spans one flush tick.
    False when the server never went quiet within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = cpu_of(pid)
        time.sleep(quiet_s)
        if cpu_of(pid) - before <= max_cpu_s:
            return True
    return False


def _switches(who: int = resource.RUSAGE_THREAD) -> tuple[int, int]:
    """This thread's (or process's: ``RUSAGE_SELF``) voluntary and involuntary context
    switches so far."""
    usage = resource.getrusage(who)
    return usage.ru_nvcsw, usage.ru_nivcsw


def place_all(pid: int, placement: str) -> dict[int, set[int]] | None:
    """``place`` for a client with threads of its own (a ``PullConsumer``'s loop thread): the
    server's threads and every thread of this process pinned; their CPUs before, to put back
    with ``unplace_all`` (None: nothing pinned)."""
    cpus = PLACEMENTS[placement]
    if cpus is None:
        return None
    before = {}
    for tid in os.listdir("/proc/self/task"):  # read before anything is pinned
        try:
            before[int(tid)] = os.sched_getaffinity(int(tid))
        except ProcessLookupError:
            continue
    place(pid, placement)
    for tid in before:
        try:
            os.sched_setaffinity(tid, {cpus[1]})
        except ProcessLookupError:
            continue
    return before


def unplace_all(before: dict[int, set[int]] | None) -> None:
    for tid, cpus in (before or {}).items():
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            continue


def _share(switches0: tuple[int, int], who: int) -> float:
    """The share of involuntary context switches since ``switches0`` (see ``timed_burst``)."""
    vol, invol = (now - then for now, then in zip(_switches(who), switches0))
    return round(invol / max(1, vol + invol), 2)


def timed_burst(pid: int, port: int, request: bytes, n: int, window: int, answers, check=None,
                placement: str = "free") -> dict:
    before = place(pid, placement)
    try:
        burst(port, request, min(n, 2000), window, answers, check)  # warm-up (first connection, topic route)
        (vol0, invol0), srv0, cli0, t0 = _switches(), cpu_of(pid), time.process_time(), time.perf_counter()
        burst(port, request, n, window, answers, check)
        wall = time.perf_counter() - t0
        cli, srv = time.process_time() - cli0, cpu_of(pid) - srv0
        vol, invol = (now - then for now, then in zip(_switches(), (vol0, invol0)))
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
    return {"n": n, "window": window, "us_per_trip": round(wall / n * 1e6, 2),
            "client_cpu_us": round(cli / n * 1e6, 2), "server_cpu_us": round(srv / n * 1e6, 2),
            "same_cpu_share": round(invol / max(1, vol + invol), 2), "placement": placement}


def measure_echo_burst(n: int, frame: bytes, window: int, placement: str = "free") -> dict:
    port = free_port()
    child = Child([sys.executable, os.path.abspath(__file__), "--serve", "uvloop-burst", str(port)])
    try:
        row = timed_burst(child.proc.pid, port, frame, n, window, count_frames, placement=placement)
    finally:
        child.stop()
    return {"rung": "uvloop-burst", **row}


def measure_broker_burst(n: int, tmp: str, tree: str | None, window: int, placement: str = "free") -> dict:
    child = start_broker(tmp, tree)
    try:
        port = int(dict(part.split("=", 1) for part in child.line.split()[1:])["broker"].rsplit(":", 1)[1])
        frame = sample_frame("FloorBurst")
        burst(port, frame, 1, 1, count_frames, _check_ok)  # the topic is created (general path)
        row = timed_burst(child.proc.pid, port, frame, n, window, count_frames, _check_ok, placement)
    finally:
        child.stop()
    return {"rung": "mqbroker-burst", **row}


def measure_redis_burst(n: int, tmp: str, window: int, placement: str = "free") -> dict:
    """Server CPU per pipelined XADD of a 100 B field on redis-server (AOF, fsync every second)."""
    server = shutil.which("redis-server")
    assert server is not None  # main() drops the rung otherwise
    port = free_port()
    data = tempfile.mkdtemp(dir=tmp)
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--dir", data, "--save", "",
                             "--appendonly", "yes", "--appendfsync", "everysec", "--daemonize", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)
        body = b"x" * 100
        request = b"*5\r\n$4\r\nXADD\r\n$10\r\nFloorBurst\r\n$1\r\n*\r\n$1\r\nf\r\n$%d\r\n%s\r\n" % (len(body), body)

        def answers(buf: bytearray) -> int:
            # each answer is a bulk string "$<len>\r\n<id>\r\n"; an id holds digits and '-'
            if buf.startswith(b"-"):
                raise RuntimeError(f"redis answered {bytes(buf[:200])!r}")
            end = buf.rfind(b"\r\n")
            if end < 0:
                return 0
            count = buf.count(b"\r\n", 0, end + 2) // 2
            cut = 0
            for _ in range(2 * count):
                cut = buf.index(b"\r\n", cut) + 2
            del buf[:cut]
            return count

        row = timed_burst(proc.pid, port, request, n, window, answers, placement=placement)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data, ignore_errors=True)
    return {"rung": "redis-burst", **row}


def client_burst(port: int, frame_of, n: int, window: int, check=None) -> None:
    """``n`` requests (``frame_of(i)``), ``window`` in flight: each window written in one
    ``sendall``, its answers read back (``check(i, frame)`` on each) before the next."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray()
        for first in range(0, n, window):
            count = min(window, n - first)
            s.sendall(b"".join(frame_of(first + j) for j in range(count)))
            got = 0
            while got < count:
                while len(buf) < 4 or len(buf) < 4 + int.from_bytes(buf[:4], "big"):
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        raise RuntimeError("the server closed the connection")
                    buf += chunk
                length = 4 + int.from_bytes(buf[:4], "big")
                if check is not None:
                    check(first + got, bytes(buf[:length]))
                del buf[:length]
                got += 1


def measure_pull_burst(n: int, tmp: str, tree: str | None, window: int, placement: str = "free") -> dict:
    """Server CPU per PULL_MESSAGE of PULL_BATCH stored messages, ``window`` pulls in flight
    on one connection (each pull at its own offset, every answer checked)."""
    from mqcore.client import Message, Producer
    from mqcore.remoting.headers import PullMessageRequestHeader
    child = start_broker(tmp, tree)
    try:
        fields = dict(part.split("=", 1) for part in child.line.split()[1:])
        port = int(fields["broker"].rsplit(":", 1)[1])
        body = b"x" * 100
        warm = max(2 * window, 200)
        with Producer("floor-fill", namesrv_addr=fields["namesrv"]) as p:
            r = p.send(Message("FloorPullBurst", body))
            mq, first = r.message_queue, r.queue_offset + 1
            total = (n + warm) * PULL_BATCH
            for start in range(0, total, 256):
                p.send_batch([Message("FloorPullBurst", body) for _ in range(min(256, total - start))], queue=mq)

        def frame_of(i: int) -> bytes:
            h = PullMessageRequestHeader(consumer_group="floor-burst", topic="FloorPullBurst", queue_id=mq.queue_id,
                                         queue_offset=first + i * PULL_BATCH, max_msg_nums=PULL_BATCH, sys_flag=0,
                                         commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription="*",
                                         expression_type="TAG")
            return encode_frame(create_request(RequestCode.PULL_MESSAGE, h.to_ext(), opaque=i + 1))

        sizes: set[int] = set()

        def check(i: int, answer: bytes) -> None:
            hlen = int.from_bytes(answer[4:8], "big") & 0xFFFFFF
            header = answer[8:8 + hlen]
            if not header.startswith(b'{"code":0,') or b'"remark":"FOUND"' not in header:
                raise RuntimeError(f"pull {i} was not answered FOUND: {header[:200]!r}")
            sizes.add(len(answer) - 8 - hlen)

        frames = [frame_of(i) for i in range(n + warm)]
        before = place_all(child.proc.pid, placement)
        try:
            client_burst(port, lambda i: frames[n + i], warm, window, check)  # warm-up: the last offsets
            settled = settle(child.proc.pid)  # the fill's writeback is not a pull's work
            sw0, srv0, cli0, t0 = _switches(), cpu_of(child.proc.pid), time.process_time(), time.perf_counter()
            client_burst(port, frames.__getitem__, n, window, check)
            wall = time.perf_counter() - t0
            cli = time.process_time() - cli0
            srv = cpu_of(child.proc.pid) - srv0
            share = _share(sw0, resource.RUSAGE_THREAD)
        finally:
            unplace_all(before)
        if len(sizes) != 1:
            raise RuntimeError(f"pull answers of different body sizes: {sorted(sizes)}")
    finally:
        child.stop()
    return {"rung": "mqbroker-pull-burst", "n": n, "window": window, "us_per_trip": round(wall / n * 1e6, 1),
            "client_cpu_us": round(cli / n * 1e6, 1), "server_cpu_us": round(srv / n * 1e6, 1),
            "same_cpu_share": share, "placement": placement, "settled": settled}


def start_broker(tmp: str, tree: str | None) -> Child:
    """An mqbroker child (with its name server); ``tree``: another checkout's broker."""
    store = tempfile.mkdtemp(dir=tmp)
    env = cwd = None
    if tree is not None:
        # ``python -m`` puts the working directory first on sys.path: start in the tree itself
        cwd = os.path.abspath(tree)
        env = {**os.environ, "PYTHONPATH": cwd}
    child = Child([sys.executable, "-m", "mqcore.broker.cli", "--store", store, "--listen-port", "0",
                   "--namesrv-port", "0", "--log-level", "WARNING"], env=env, cwd=cwd)
    child.store = store  # removed when the child stops: 1 GiB commitlog files add up over rounds
    return child


def measure_pull(n: int, tmp: str, tree: str | None, placement: str = "free") -> dict:
    """Server CPU per PULL answering PULL_BATCH stored messages, one pull in flight."""
    from mqcore.client import Message, Producer
    from mqcore.client.consumer.pull import PullConsumer
    child = start_broker(tmp, tree)
    try:
        fields = dict(part.split("=", 1) for part in child.line.split()[1:])
        body = b"x" * 100
        with Producer("floor-fill", namesrv_addr=fields["namesrv"]) as p:
            r = p.send(Message("FloorPull", body))
            mq, first = r.message_queue, r.queue_offset + 1
            total = (n + 200) * PULL_BATCH
            for start in range(0, total, 256):
                p.send_batch([Message("FloorPull", body) for _ in range(min(256, total - start))], queue=mq)
        c = PullConsumer("floor-pull", namesrv_addr=fields["namesrv"]).start()
        before = place_all(child.proc.pid, placement)  # the consumer's own threads too
        try:
            offset = first
            for _ in range(200):  # warm-up
                offset = c.pull(mq, "*", offset, PULL_BATCH).next_begin_offset
            settle(child.proc.pid)  # the fill's writeback is not a pull's work
            # the whole client process's switches: the consumer may answer on a thread of its own
            sw0 = _switches(resource.RUSAGE_SELF)
            srv0, cli0, t0 = cpu_of(child.proc.pid), time.process_time(), time.perf_counter()
            for _ in range(n):
                r = c.pull(mq, "*", offset, PULL_BATCH)
                if len(r.messages) != PULL_BATCH:
                    raise RuntimeError(f"a pull found {len(r.messages)} messages, not {PULL_BATCH}")
                offset = r.next_begin_offset
            wall = time.perf_counter() - t0
            cli = time.process_time() - cli0
            srv = cpu_of(child.proc.pid) - srv0
            share = _share(sw0, resource.RUSAGE_SELF)
        finally:
            unplace_all(before)
            c.shutdown()
    finally:
        child.stop()
    return {"rung": "mqbroker-pull", "n": n, "us_per_trip": round(wall / n * 1e6, 1),
            "client_cpu_us": round(cli / n * 1e6, 1), "server_cpu_us": round(srv / n * 1e6, 1),
            "same_cpu_share": share, "placement": placement}


def measure_broker(n: int, tmp: str, *, via_loop: bool, tree: str | None = None, body_bytes: int = 100) -> dict:
    from mqcore.client import Message, Producer
    child = start_broker(tmp, tree)
    try:
        fields = dict(part.split("=", 1) for part in child.line.split()[1:])
        body = b"x" * body_bytes
        with Producer("floor", namesrv_addr=fields["namesrv"]) as p:
            def send(msg: Message) -> object:
                return p.send_async(msg).result() if via_loop else p.send(msg)
            for _ in range(min(2000, n)):
                send(Message("FloorTopic", body))
            srv0, cli0, t0 = cpu_of(child.proc.pid), time.process_time(), time.perf_counter()
            for _ in range(n):
                send(Message("FloorTopic", body))
            wall = time.perf_counter() - t0
            cli = time.process_time() - cli0
            srv = cpu_of(child.proc.pid) - srv0
    finally:
        child.stop()
    return {"rung": "mqbroker-loop" if via_loop else "mqbroker", "n": n, "us_per_trip": round(wall / n * 1e6, 1),
            "client_cpu_us": round(cli / n * 1e6, 1), "server_cpu_us": round(srv / n * 1e6, 1)}


#: the timed part of the ``mqbroker`` / ``mqbroker-stub`` rungs, run in a child on another checkout's
#: client with ``--baseline-client`` (and then on ours too, so both sides are measured the same way).
#: ``stub``: the socket is stubbed after the warm-up: each send still runs every Python step and the
#: client's encode and answer-decode kernels, but no system call and no wait (a canned answer), so
#: the figure is the client's own CPU per send. A tree with send templates (``_templates``) is
#: stubbed at the template's ``send``; an older one at its connection's ``exchange`` kernel.
CLIENT_CHILD = r"""
import json, sys, time
from mqcore.client import Message, Producer
from mqcore import _compat
namesrv, n, stub = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "stub"
size = int(sys.argv[4]) if len(sys.argv) > 4 else 100
K = _compat.default_wire_client_kernels()
ANSWER = (b'{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000000000","queueId":"%d","queueOffset":"123",'
          b'"MSG_REGION":"DefaultRegion","TRACE_ON":"true"},"flag":1,"language":"JAVA","opaque":%d,'
          b'"serializeTypeCurrentRPC":"JSON","version":399}')
class StubTemplate:
    def __init__(self, t):
        self.t, self.mq = t, t.mq
    def frame(self, *args):
        return self.t.frame(*args)
    def send(self, fd, opaque, born, flag, props, body, deadline, uniq):
        t = self.t
        t.frame(opaque, born, flag, props, body)
        return t.read_answer(ANSWER % (t.queue_id, opaque), opaque, uniq)
def stub_exchange(fd, frame, opaque, deadline):
    return K.decode_json_answer(ANSWER % (1, opaque))
body = b"x" * size
with Producer("floor", namesrv_addr=namesrv) as p:
    for _ in range(min(2000, n)):
        p.send(Message("FloorTopic", body))
    if stub:
        templates = getattr(p._impl, "_templates", None)
        if templates is not None:
            for k, t in list(templates.items()):
                templates[k] = StubTemplate(t)
            p._impl._send_template = lambda mq, make=p._impl._send_template: StubTemplate(make(mq))
        else:
            for conns in p._instance.api.remoting.blocking._idle.values():
                for c in conns:
                    c._kernel_exchange = stub_exchange
    cli0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        p.send(Message("FloorTopic", body))
    print(json.dumps({"wall": time.perf_counter() - t0, "cpu": time.process_time() - cli0}), flush=True)
"""


def measure_broker_child(n: int, tmp: str, *, stub: bool, tree: str | None, client_tree: str,
                         body_bytes: int = 100) -> dict:
    """The ``mqbroker`` rung (``stub``: ``mqbroker-stub``) with the client of ``client_tree``
    in a child process (CLIENT_CHILD); the broker of ``tree`` (None: ours)."""
    child = start_broker(tmp, tree)
    try:
        fields = dict(part.split("=", 1) for part in child.line.split()[1:])
        cwd = os.path.abspath(client_tree)
        srv0 = cpu_of(child.proc.pid)
        out = subprocess.run([sys.executable, "-c", CLIENT_CHILD, fields["namesrv"], str(n), "stub" if stub else "real",
                              str(body_bytes)],
                             cwd=cwd, env={**os.environ, "PYTHONPATH": cwd}, capture_output=True, text=True,
                             timeout=600, check=True)
        srv = cpu_of(child.proc.pid) - srv0  # includes the child's warm-up: read only the real rung's client side
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        child.stop()
    return {"rung": "mqbroker-stub" if stub else "mqbroker", "n": n, "us_per_trip": round(got["wall"] / n * 1e6, 1),
            "client_cpu_us": round(got["cpu"] / n * 1e6, 1), "server_cpu_us": round(srv / n * 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000, help="round trips per rung and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=int, default=BURST_WINDOW, help="requests in flight in the burst rungs")
    ap.add_argument("--only", default="", help="comma-separated rungs")
    ap.add_argument("--burst-n", type=int, default=200_000, help="requests per burst rung and round")
    ap.add_argument("--placement", choices=list(PLACEMENTS), default="free",
                    help="the burst-shaped rungs: server and client on one CPU (same), on two (split), or as "
                         "the kernel chooses (free)")
    ap.add_argument("--serve", nargs=2, metavar=("KIND", "PORT"), help=argparse.SUPPRESS)
    ap.add_argument("--baseline-tree", metavar="DIR",
                    help="also run the mqbroker rungs against the broker of this checkout (before/after)")
    ap.add_argument("--baseline-client", action="store_true",
                    help="with --baseline-tree: the baseline send rungs also use that checkout's client (run in a "
                         "child process, as ours then is): a before/after of the client")
    ap.add_argument("--answer-delay-us", default="auto",
                    help="the canned server's spin before each answer (the *-canned rungs), µs; 'auto': fitted so "
                         "their round trip takes as long as mqbroker's (list mqbroker first)")
    ap.add_argument("--body-bytes", type=int, default=100,
                    help="the message body of the client rungs (mqbroker, mqbroker-stub, mqbroker-loop, *-canned)")
    args = ap.parse_args()
    if args.serve:
        child_main(args.serve[0], int(args.serve[1]))
        return
    rungs = [r for r in (args.only.split(",") if args.only else RUNGS) if r]
    if "uvloop" in rungs and not have_uvloop():
        print(json.dumps({"rung": "uvloop", "skipped": "uvloop is not installed"}), flush=True)
        rungs.remove("uvloop")
    if "redis-burst" in rungs and shutil.which("redis-server") is None:
        print(json.dumps({"rung": "redis-burst", "skipped": "redis-server is not installed"}), flush=True)
        rungs.remove("redis-burst")
    if args.baseline_tree:
        rungs = [x for r in rungs for x in ((r, f"{r}-baseline") if r.startswith("mqbroker") else (r,))]
    frame = sample_frame()
    rows: dict[str, list[dict]] = {r: [] for r in rungs}
    loads = []
    delays = CannedDelay(None if args.answer_delay_us == "auto" else float(args.answer_delay_us))
    with tempfile.TemporaryDirectory(prefix="mqfloor") as tmp:
        for rnd in range(args.rounds):
            for rung in rungs:  # interleaved: every rung sees the same background load
                n = args.burst_n if rung.endswith(("-burst", "-burst-baseline")) else args.n
                row = measure(rung, n, frame, tmp, args.baseline_tree, args.window, args.baseline_client,
                              args.placement, delays.delay_for(rung), args.body_bytes)
                delays.saw(rung, row)
                row["round"] = rnd
                row["loadavg_1m"] = os.getloadavg()[0]
                loads.append(row["loadavg_1m"])
                rows[rung].append(row)
                print(json.dumps(row), flush=True)
    print(f"\n| floor (median of {args.rounds}, {args.n} round trips, bursts {args.burst_n} requests "
          f"{args.window} in flight, client rungs' body {args.body_bytes} B, canned answers after "
          f"{args.answer_delay_us} µs, load {min(loads):.1f}-{max(loads):.1f}, placement {args.placement}) "
          f"| µs per trip | client CPU µs | server CPU µs | same-CPU share per round |")
    print("|---|---:|---:|---:|---|")
    for rung, rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("us_per_trip", "client_cpu_us", "server_cpu_us")}
        shares = " ".join(f"{r['same_cpu_share']:.2f}" for r in rs if "same_cpu_share" in r)
        print(f"| {rung} | {med['us_per_trip']:.1f} | {med['client_cpu_us']:.1f} | {med['server_cpu_us']:.1f} "
              f"| {shares} |")
    for rung, rs in rows.items():
        if rung.endswith("-canned") and rs:
            print(f"{rung}: the server spun {[r['answer_delay_us'] for r in rs]} µs per answer, round by round")
    for floor in ("blocking", "blocking-slow", "blocking-canned", "template-canned"):
        if not rows.get(floor):
            continue
        # a send's client CPU past what a plain blocking echo client pays for a round trip
        # (its wake-up and two system calls): the share of the client's own work
        echo = statistics.median(r["client_cpu_us"] for r in rows[floor])
        for rung, rs in rows.items():
            if rung.removesuffix("-baseline") in ("mqbroker", "mqbroker-loop", "remoting", "remoting-sync",
                                                  "remoting-blocking") and rs:
                cpu = statistics.median(r["client_cpu_us"] for r in rs)
                print(f"{rung}: client CPU {cpu:.1f} µs per send - {floor} echo {echo:.1f} µs = {cpu - echo:.1f} µs")
    print(json.dumps({"summary": {r: statistics.median(x["us_per_trip"] for x in rs) for r, rs in rows.items()},
                      "loadavg_1m": os.getloadavg()[0], "uvloop": have_uvloop()}))


if __name__ == "__main__":
    main()
