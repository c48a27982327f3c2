"""mqbroker next to the system it replaces: the same client (``mqcore.client``) against mqbroker
and against Apache RocketMQ's own broker (4.9.7, Java), in the same run, interleaved round by
round so both see the same machine load.

Workloads (100 B bodies by default, fresh topic and group per round):

* ``sync send``: ``Producer.send`` one message at a time, each waiting for the broker;
* ``async send``: ``send_async`` with auto-batching (what a throughput-minded user runs);
* ``unbatched async send``: ``send_async`` with ``auto_batch=False``, one request per message and
  at most ``--inflight`` unanswered: what the Java client's async send does, next to it;
* ``push consume + commit``: a fresh group consumes everything already stored (filled with
  ``send_batch``) with ``consume_message_batch_max_size=32``; offsets committed at shutdown;
* ``java async send``: the official Java client 4.9.8, ``send(msg, callback)`` with at most
  1000 requests in flight (``--inflight``), one message per request - how every client but
  ours sends;
* ``java sync send``: the official Java client's ``send(msg)``, one at a time;
* ``java push consume + commit``: the official Java client's ``DefaultMQPushConsumer`` with its
  default settings consumes everything already stored, from the first offset; offsets are
  committed at its shutdown, which the timing includes.

The Java workloads run ``bench/drivers/JavaClientBench.java`` (compiled with ``javac`` on first
use into ``~/.cache/mqcore/bench-java/``; needs the client jars, ``MQCORE_ROCKETMQ_CLIENT_LIB``);
their rows also record the Java client's own CPU per message.

    python bench/bench_reference.py                 # 3 rounds, 20,000 messages per workload
    python bench/bench_reference.py --quick         # 2 rounds, 5,000 messages
    python bench/bench_reference.py --rounds 5 -n 50000 --size 1024
    python bench/bench_reference.py --only "java async send" --size 1024

Both brokers run on free loopback ports with throw-away stores (ASYNC_FLUSH, the default of
both) and are stopped at the end; the Java broker's send-queue wait limit is raised from 200 ms
to 1 s (``JAVA_CONF``) so a loaded machine does not turn into SYSTEM_BUSY failures. The Java broker needs the jars ``scripts/test`` fetches
(``MQCORE_ROCKETMQ_SERVER_LIB``; the script finds the default cache itself) and a JDK 17.
Prints one JSON line per round and workload, then the median of each with the load average.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.client import Message, Producer, PushConsumer  # noqa: E402
from tests.support.processes import BrokerProcess  # noqa: E402
from tests.support.reference import (  # noqa: E402
    CLIENT_LIB_ENV,
    JDK17_FLAGS,
    SERVER_LIB_ENV,
    JavaBroker,
    JavaNamesrv,
    client_classpath,
)

DEFAULT_CACHE = Path.home() / ".cache" / "mqcore" / "rocketmq"
#: RocketMQ's broker sheds sends that waited over 200 ms in its queue (SYSTEM_BUSY, which the client,
#: like the Java one, does not retry); on a busy shared 2-core machine that fails a run, so allow 1 s
JAVA_CONF = {"waitTimeMillsInSendQueue": 1000}
WORKLOADS = ("sync send", "async send", "unbatched async send", "push consume + commit", "java async send",
             "java sync send", "java push consume + commit")
JAVA_DRIVER = Path(__file__).resolve().parent / "drivers" / "JavaClientBench.java"
JAVA_CACHE = Path.home() / ".cache" / "mqcore" / "bench-java"


def loadavg() -> float:
    return round(os.getloadavg()[0], 2)


# --------------------------------------------------------------------------------------------
# workloads: the same code against either broker (only the name server address differs)
# --------------------------------------------------------------------------------------------
def sync_send(ns: str, topic: str, body: bytes, n: int) -> float:
    with Producer("ref-sync", namesrv_addr=ns) as p:
        p.send(Message(topic, body))  # route lookup and connection outside the timing
        t0 = time.perf_counter()
        for _ in range(n):
            p.send(Message(topic, body))
        return time.perf_counter() - t0


def async_send(ns: str, topic: str, body: bytes, n: int) -> float:
    with Producer("ref-async", namesrv_addr=ns, auto_batch=True, send_msg_timeout_ms=30_000) as p:
        p.send(Message(topic, body))
        t0 = time.perf_counter()
        futures = [p.send_async(Message(topic, body)) for _ in range(n)]
        for f in futures:
            if not f.result(120).ok:
                raise RuntimeError("a send was not SEND_OK")
        return time.perf_counter() - t0


def unbatched_async_send(ns: str, topic: str, body: bytes, n: int, inflight: int, extra: dict) -> float:
    """``send_async`` with auto-batching off: one SEND_MESSAGE_V2 per message, ``inflight`` (the
    Java driver's window) unanswered at most, as the Java client's ``send(msg, callback)``."""
    with Producer("ref-async-unbatched", namesrv_addr=ns, auto_batch=False, max_async_inflight=inflight,
                  send_msg_timeout_ms=30_000) as p:
        p.send(Message(topic, body))
        cpu0, t0 = time.process_time(), time.perf_counter()
        futures = [p.send_async(Message(topic, body)) for _ in range(n)]
        for f in futures:
            if not f.result(120).ok:
                raise RuntimeError("a send was not SEND_OK")
        seconds = time.perf_counter() - t0
        extra["client_cpu_us_per_msg"] = round((time.process_time() - cpu0) / n * 1e6, 1)
        return seconds


def fill(ns: str, topic: str, body: bytes, n: int) -> None:
    with Producer("ref-fill", namesrv_addr=ns) as p:
        for start in range(0, n, 256):
            p.send_batch([Message(topic, body) for _ in range(min(256, n - start))])


def consume(ns: str, topic: str, group: str, n: int) -> float:
    count = [0]
    lock = threading.Lock()
    done = threading.Event()

    def listener(msgs, ctx):
        with lock:
            count[0] += len(msgs)
            if count[0] >= n:
                done.set()

    c = PushConsumer(group, namesrv_addr=ns, consume_from_where="first", consume_message_batch_max_size=32)
    c.subscribe(topic)
    c.register_listener(listener)
    t0 = time.perf_counter()
    c.start()
    try:
        if not done.wait(600):
            raise RuntimeError(f"consumed only {count[0]} of {n}")
    finally:
        c.shutdown()  # includes the final offset commit
    return time.perf_counter() - t0


def java_classes() -> Path:
    """JavaClientBench compiled against the client jars, once per source version."""
    digest = hashlib.sha256(JAVA_DRIVER.read_bytes()).hexdigest()[:16]
    out = JAVA_CACHE / digest
    if not (out / "JavaClientBench.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["javac", "-nowarn", "-J-Xmx512m", "-d", str(out), "-cp", client_classpath(),
                            str(JAVA_DRIVER)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"javac failed:\n{r.stdout}\n{r.stderr}")
    return out


def java_client(mode: str, ns: str, topic: str, n: int, args: list[str], extra: dict) -> float:
    """Run JavaClientBench in ``mode`` (async, sync, consume); the wall seconds it timed, and its
    own CPU per message into ``extra``."""
    classes = java_classes()
    logroot = Path(os.environ.get("TMPDIR", "/tmp")) / "java-client-logs"
    argv = ["java", "-Xmx512m", *JDK17_FLAGS, f"-Drocketmq.client.logRoot={logroot}",
            "-Drocketmq.client.logLevel=WARN", "-cp", f"{classes}{os.pathsep}{client_classpath()}",
            "JavaClientBench", mode, ns, topic, str(n), *args]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
    if r.returncode != 0 or line is None or "seconds=" not in line:
        raise RuntimeError(f"JavaClientBench {mode} failed ({r.returncode}): {r.stdout[-2000:]}{r.stderr[-2000:]}")
    facts = dict(word.split("=", 1) for word in line.split()[1:])
    # a consumer may be handed a message twice (at least once); a producer's sends are exact
    if int(facts["failed"]) or int(facts["ok"]) < n or (mode != "consume" and int(facts["ok"]) != n):
        raise RuntimeError(f"JavaClientBench {mode}: not every message went through: {line}")
    extra["client_cpu_us_per_msg"] = round(float(facts["cpu_seconds"]) / n * 1e6, 1)
    return float(facts["seconds"])


def run_round(ns: str, system: str, rnd: int, body: bytes, n: int, only: tuple[str, ...] = WORKLOADS,
              inflight: int = 1000, pid: int | None = None) -> list[dict]:
    rows = []
    tag = f"{len(body)}r{rnd}"
    if "push consume + commit" in only:
        fill(ns, f"RefConsume{tag}", body, n)
    if "java push consume + commit" in only:
        fill(ns, f"RefJavaConsume{tag}", body, n)
    extra: dict = {}
    for workload, run in (("sync send", lambda: sync_send(ns, f"RefSync{tag}", body, n)),
                          ("async send", lambda: async_send(ns, f"RefAsync{tag}", body, n)),
                          ("unbatched async send",
                           lambda: unbatched_async_send(ns, f"RefAsyncU{tag}", body, n, inflight, extra)),
                          ("push consume + commit", lambda: consume(ns, f"RefConsume{tag}", f"ref-cg{tag}", n)),
                          ("java async send", lambda: java_client("async", ns, f"RefJavaAsync{tag}", n,
                                                                  [str(len(body)), str(inflight)], extra)),
                          ("java sync send",
                           lambda: java_client("sync", ns, f"RefJavaSync{tag}", n, [str(len(body))], extra)),
                          ("java push consume + commit",
                           lambda: java_client("consume", ns, f"RefJavaConsume{tag}", n, [f"ref-jcg{tag}"], extra))):
        if workload not in only:
            continue
        extra.clear()
        cpu0 = broker_cpu(pid)
        seconds = run()
        row = {"bench": "reference", "round": rnd, "workload": workload, "system": system, "size": len(body),
               "messages": n, "seconds": round(seconds, 3), "msgs_per_s": int(n / seconds), **extra,
               "broker_cpu_us_per_msg": round((broker_cpu(pid) - cpu0) / n * 1e6, 1) if pid else None,
               "loadavg_1m": loadavg()}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def broker_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of a broker process so far (0 without one)."""
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------------------
@contextlib.contextmanager
def both_brokers(prefix: str):
    """mqbroker (ASYNC_FLUSH, its embedded name server) and Apache RocketMQ 4.9.7 (name server and
    broker) on loopback in one temp dir, for the benchmarks that compare the two:
    yields ``{system: (namesrv address, broker address)}``."""
    ensure_jars()
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = Path(tmp)
        with BrokerProcess(work / "mq", conf={"flushDiskType": "ASYNC_FLUSH"}) as mq, \
                JavaNamesrv(work / "ns") as jns, \
                JavaBroker(work / "java", jns.addr, conf=JAVA_CONF) as jb:
            yield {"mqbroker": (mq.namesrv_addr, mq.broker_addr), "rocketmq-4.9.7": (jns.addr, jb.addr)}


def interleaved(rounds: int, systems: tuple[str, ...]):
    """(round, system) in run order: who goes first alternates, so neither always gets the warmer
    (or busier) slot."""
    for rnd in range(rounds):
        for system in systems if rnd % 2 == 0 else systems[::-1]:
            yield rnd, system


def ensure_jars() -> None:
    for env, sub in ((SERVER_LIB_ENV, "server-4.9.7/lib"), (CLIENT_LIB_ENV, "client-4.9.8/lib")):
        if not os.environ.get(env) and (DEFAULT_CACHE / sub).is_dir():
            os.environ[env] = str(DEFAULT_CACHE / sub)
    if not os.environ.get(SERVER_LIB_ENV):
        sys.exit(f"bench_reference: the Apache RocketMQ jars are missing; run scripts/test once (it fetches them "
                 f"from Maven Central) or set ${SERVER_LIB_ENV}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20_000, help="messages per workload and round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=100, help="body size in bytes")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 5,000 messages")
    ap.add_argument("--only", action="append", choices=WORKLOADS, help="run only this workload (repeatable)")
    ap.add_argument("--inflight", type=int, default=1000, help="java async send: requests in flight")
    ap.add_argument("--baseline-tree", metavar="DIR",
                    help="also run mqbroker from this checkout (its extensions built) as 'mqbroker-baseline'")
    args = ap.parse_args(argv)
    only = tuple(args.only or WORKLOADS)
    if args.quick:
        args.n, args.rounds = 5_000, 2
    ensure_jars()
    body = b"x" * args.size
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-ref-") as tmp:
        work = Path(tmp)
        with BrokerProcess(work / "mq", conf={"flushDiskType": "ASYNC_FLUSH"}) as mq, \
                JavaNamesrv(work / "ns") as jns, \
                JavaBroker(work / "java", jns.addr, conf=JAVA_CONF) as jb, contextlib.ExitStack() as stack:
            systems = {"mqbroker": mq.namesrv_addr, "rocketmq-4.9.7": jns.addr}
            pids = {"mqbroker": _pid(mq), "rocketmq-4.9.7": _pid(jb)}
            if args.baseline_tree:
                base = stack.enter_context(_baseline_broker(work / "mq-base", args.baseline_tree))
                systems["mqbroker-baseline"], pids["mqbroker-baseline"] = base.namesrv_addr, _pid(base)
            order = list(systems)
            for rnd in range(args.rounds):
                # alternate who goes first, so neither always gets the warmer (or busier) slot
                for system in order if rnd % 2 == 0 else order[::-1]:
                    rows.extend(run_round(systems[system], system, rnd, body, args.n, only, args.inflight,
                                          pids[system]))
    names = ["mqbroker", "rocketmq-4.9.7"] + (["mqbroker-baseline"] if args.baseline_tree else [])
    print(f"\n| workload | mqbroker msg/s | Apache RocketMQ 4.9.7 msg/s | mqbroker / RocketMQ |"
          f"{' baseline msg/s | baseline / RocketMQ |' if args.baseline_tree else ''}")
    print("|---|---|---|---|" + ("---|---|" if args.baseline_tree else ""))
    for workload in only:
        med = {s: statistics.median(r["msgs_per_s"] for r in rows if r["workload"] == workload and r["system"] == s)
               for s in names}
        summary = {"bench": "reference-summary", "workload": workload, "size": args.size, "messages": args.n,
                   "rounds": args.rounds, **{f"{s}_median_msgs_per_s": int(v) for s, v in med.items()},
                   "ratio": round(med["mqbroker"] / med["rocketmq-4.9.7"], 2), "loadavg_1m": loadavg()}
        print(json.dumps(summary), file=sys.stderr)
        extra = ""
        if args.baseline_tree:
            extra = (f" {int(med['mqbroker-baseline']):,} |"
                     f" {round(med['mqbroker-baseline'] / med['rocketmq-4.9.7'], 2)} |")
        print(f"| {workload} | {int(med['mqbroker']):,} | {int(med['rocketmq-4.9.7']):,} | {summary['ratio']} |"
              + extra)
    if "unbatched async send" in only and "java async send" in only:
        # the client against the client: one message per request, the same window, the same broker
        for s in ("mqbroker", "rocketmq-4.9.7"):
            ours, java = (statistics.median(r["msgs_per_s"] for r in rows if r["workload"] == w and r["system"] == s)
                          for w in ("unbatched async send", "java async send"))
            print(f"unbatched send_async / the Java client's async send, on {s}: {ours:,.0f} / {java:,.0f} = "
                  f"{ours / java:.2f} (goal >= 1.0)")
    return 0


@contextlib.contextmanager
def _baseline_broker(store: Path, tree: str):
    """An mqbroker started from another checkout (``tree`` first on its PYTHONPATH)."""
    old, here = os.environ.get("PYTHONPATH"), os.getcwd()
    os.environ["PYTHONPATH"] = os.path.abspath(tree)
    os.chdir(tree)  # ``python -m`` puts the working directory first on sys.path
    try:
        broker = BrokerProcess(store, conf={"flushDiskType": "ASYNC_FLUSH"}).__enter__()
    finally:
        os.chdir(here)
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    try:
        yield broker
    finally:
        broker.__exit__(None, None, None)


def _pid(process) -> int | None:
    """The broker's process id, when the support class exposes its process."""
    proc = getattr(process, "proc", None) or getattr(process, "process", None)
    return getattr(proc, "pid", None)


if __name__ == "__main__":
    sys.exit(main())
