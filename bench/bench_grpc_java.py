"""mqbroker's 5.x gRPC endpoint next to Apache RocketMQ 5.3.3's proxy (local mode: broker and
proxy in one JVM), both driven by the official Java 5.x client (rocketmq-client-java 5.0.8), in
the same run, rounds interleaved so both see the same machine load (issue 34). The Python 5.x
client spends ~600 us of its own CPU per send and would hide both brokers; the Java one ~100 us.

Workloads (100 B bodies, plaintext, a fresh topic with 8 queues and a fresh group per round),
all in one run of ``bench/drivers/JavaGrpcBench.java``:

* ``sync send``: ``Producer.send`` one at a time;
* ``async send``: ``Producer.sendAsync`` with at most ``--inflight`` (default 256) unanswered;
* ``receive + ack``: a ``SimpleConsumer`` receives batches of up to 32 and acks each message
  (``ackAsync``, a batch's acks answered before the next receive) until it has every message
  the two send phases stored.

    python bench/bench_grpc_java.py                      # 3 rounds, 5,000 sync + 20,000 async
    python bench/bench_grpc_java.py --quick              # 2 rounds, 2,000 + 10,000
    python bench/bench_grpc_java.py --tls-mode disabled  # mqbroker without its TLS relay

mqbroker runs with ``grpcServerTlsMode=permissive`` (its default and the proxy's: one port for
TLS and plaintext; mqbroker puts a relay in front of grpcio for that, see docs/grpc.md) unless
``--tls-mode`` says otherwise. The proxy JVM gets Apache's runbroker.sh heap and collector (G1,
4 GiB fixed) and the send-queue wait limit of bench_reference.py (1 s); its name server runs in a
JVM of its own, mqbroker's in its process. Needs the jars scripts/test fetches (the 5.3.3 server,
``MQCORE_ROCKETMQ5_LIB``; the Java 5.x client, ``MQCORE_GRPC_JAVA_CLIENT_LIB``; both default to
the cache) and mqcore's ``grpc`` extra. Prints one JSON line per round, workload and system (with
the client's and the broker's CPU per message and the 1-minute load average), then a table of
medians and ratios.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_reference import broker_cpu, interleaved, loadavg  # noqa: E402
from tests.grpc.conftest import grpc_addr  # noqa: E402
from tests.support.processes import BrokerProcess  # noqa: E402
from tests.support.reference import RUNBROKER_JVM  # noqa: E402
from tests.support.reference5 import LIB5_ENV, Java5Namesrv, Java5Proxy, mqadmin5, mqadmin5_batch  # noqa: E402

CACHE = Path.home() / ".cache" / "mqcore"
CLIENT_ENV = "MQCORE_GRPC_JAVA_CLIENT_LIB"
DRIVER = Path(__file__).resolve().parent / "drivers" / "JavaGrpcBench.java"
CLASSES = CACHE / "bench-java5"
WORKLOADS = {"sync": "sync send", "async": "async send", "receive": "receive + ack"}
SYSTEMS = ("mqbroker", "rocketmq-5.3.3-proxy")
JAVA_CONF = {"waitTimeMillsInSendQueue": 1000}


def ensure_jars() -> None:
    for env, sub in ((LIB5_ENV, "rocketmq/server-5.3.3/lib"), (CLIENT_ENV, "java5-client/lib")):
        if not os.environ.get(env) and (CACHE / sub).is_dir():
            os.environ[env] = str(CACHE / sub)
        if not os.environ.get(env):
            sys.exit(f"bench_grpc_java: ${env} is unset and {CACHE / sub} is missing: run scripts/test once "
                     "(it fetches the jars from Maven Central)")


def client_jars() -> str:
    return os.pathsep.join(str(p) for p in sorted(Path(os.environ[CLIENT_ENV]).glob("*.jar")))


def driver_classes() -> Path:
    """JavaGrpcBench compiled against the client jar, once per source version."""
    out = CLASSES / hashlib.sha256(DRIVER.read_bytes()).hexdigest()[:16]
    if not (out / "JavaGrpcBench.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["javac", "-nowarn", "-J-Xmx512m", "-d", str(out), "-cp", client_jars(), str(DRIVER)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"javac failed:\n{r.stdout}\n{r.stderr}")
    return out


def run_driver(endpoint: str, topic: str, group: str, args, home: Path) -> dict[str, dict]:
    """One JavaGrpcBench run; its RESULT facts by phase."""
    argv = ["java", "-Xms512m", "-Xmx512m", f"-Duser.home={home}", f"-Dmq.ssl={str(args.ssl).lower()}",
            "-cp", f"{driver_classes()}{os.pathsep}{client_jars()}", "JavaGrpcBench", endpoint, topic, group,
            str(args.sync), str(args.n), str(args.inflight), str(args.size)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    phases = {}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            facts = dict(w.split("=", 1) for w in line.split()[1:] if "=" in w)
            phases[facts["phase"]] = facts
    if r.returncode != 0 or set(phases) != set(WORKLOADS) or any("seconds" not in f for f in phases.values()):
        raise RuntimeError(f"JavaGrpcBench failed ({r.returncode}): {r.stdout[-3000:]}{r.stderr[-3000:]}")
    return phases


def warm_up(endpoint: str, topic: str, group: str, args, home: Path) -> None:
    """An untimed short run per broker first (the proxy's JIT, both brokers' caches); tried three
    times, since a just-started proxy may answer its first client before its route cache and
    settings are in sync."""
    small = argparse.Namespace(**{**vars(args), "sync": 200, "n": 2000})
    for attempt in range(3):
        try:
            run_driver(endpoint, topic if attempt == 0 else f"{topic}{attempt}", group, small, home)
            return
        except RuntimeError as e:
            print(f"warm-up on {endpoint} failed (attempt {attempt + 1}): {str(e)[-500:]}", file=sys.stderr)
            time.sleep(5)
    raise RuntimeError(f"warm-up on {endpoint} failed three times")


def create_topics(ns: str, target: list[str], topics: list[str], home: Path) -> None:
    """8 read and write queues each (updateTopic's default), before any client asks for a route:
    the proxy would cache a missing topic's answer for a while."""
    outs = mqadmin5_batch([["updateTopic", "-n", ns, *target, "-t", t, "-r", "8", "-w", "8"] for t in topics],
                          home=home)
    bad = [o for o in outs if "success" not in o]
    if bad:
        raise RuntimeError(f"updateTopic failed: {bad[0][-2000:]}")


def wait_until(cond, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(1)
    raise RuntimeError(f"timed out waiting for {what}")


@contextlib.contextmanager
def brokers(work: Path, tls_mode: str, inflight: int):
    """{system: (gRPC endpoint, pid, namesrv, updateTopic target)} for mqbroker and the 5.3.3 proxy."""
    # the proxy caps no connection's streams; mqbroker's cap (grpcMaxConcurrentStreams, 100) would
    # queue part of the async window in the client's own library: raised to the window here
    conf = {"flushDiskType": "ASYNC_FLUSH", "grpcServerEnable": "true", "grpcServerPort": "0",
            "grpcServerTlsMode": tls_mode, "grpcMaxConcurrentStreams": str(max(100, inflight + 16))}
    with BrokerProcess(work / "mq", conf=conf) as mq, Java5Namesrv(work / "ns") as ns:
        proxy = Java5Proxy(work / "java5", ns.addr, conf=JAVA_CONF)
        proxy.jvm_opts = RUNBROKER_JVM  # what Apache's start scripts give the broker's JVM
        with proxy:
            yield {"mqbroker": (grpc_addr(mq), mq.proc.pid, mq.namesrv_addr, ["-b", mq.broker_addr]),
                   "rocketmq-5.3.3-proxy": (proxy.grpc_addr, proxy.proc.pid, ns.addr, ["-c", "DefaultCluster"])}


@contextlib.contextmanager
def profiled(pid: int | None, out: str):
    """py-spy (the venv's) sampling ``pid`` at 100 Hz with native frames while the block runs."""
    if pid is None:
        yield
        return
    spy = Path(sys.executable).with_name("py-spy")
    p = subprocess.Popen([str(spy), "record", "--native", "-r", "100", "-f", "raw", "-o", out, "-p", str(pid)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield
    finally:
        p.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        p.wait(60)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=20_000, help="async sends per round (and so messages received)")
    ap.add_argument("--sync", type=int, default=5_000, help="sync sends per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--inflight", type=int, default=256, help="async send: sends unanswered at most")
    ap.add_argument("--size", type=int, default=100, help="body size in bytes")
    ap.add_argument("--quick", action="store_true", help="2 rounds of 2,000 sync + 10,000 async")
    ap.add_argument("--tls-mode", default="permissive", choices=("permissive", "disabled"),
                    help="mqbroker's grpcServerTlsMode (the proxy is permissive, its default)")
    ap.add_argument("--ssl", action="store_true", help="the client speaks TLS (its default) instead of plaintext")
    ap.add_argument("--py-spy", metavar="PREFIX",
                    help="profile mqbroker during its runs: py-spy record --native -f raw at 100 Hz into PREFIX.r<round>")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.sync, args.n = 2, 2_000, 10_000
    ensure_jars()
    driver_classes()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-grpc-java-") as tmp:
        work = Path(tmp)
        with brokers(work, args.tls_mode, args.inflight) as systems:
            jns = systems["rocketmq-5.3.3-proxy"][2]
            wait_until(lambda: "broker-java5" in mqadmin5(["clusterList", "-n", jns], home=work).stdout, 120,
                       "the 5.3.3 broker's registration")
            topics = {s: [f"GJ{s[:2]}{r}" for r in range(args.rounds)] + [f"GJ{s[:2]}warm{i or ''}" for i in range(3)]
                      for s in SYSTEMS}
            for s, (_, _, ns, target) in systems.items():
                create_topics(ns, target, topics[s], work)
            for s, (_, _, ns, _) in systems.items():
                wait_until(lambda: topics[s][-1] in mqadmin5(["topicList", "-n", ns], home=work).stdout, 60,
                           f"{s}'s topics")
            for system, (endpoint, _, _, _) in systems.items():
                warm_up(endpoint, topics[system][args.rounds], f"GJg{system[:2]}warm", args, work / "client")
            for rnd, system in interleaved(args.rounds, SYSTEMS):
                endpoint, pid, _, _ = systems[system]
                cpu0 = broker_cpu(pid)
                with profiled(pid if system == "mqbroker" and args.py_spy else None, f"{args.py_spy}.r{rnd}"):
                    phases = run_driver(endpoint, topics[system][rnd], f"GJg{system[:2]}{rnd}", args, work / "client")
                # the driver's client start-up and its untimed first send are in this figure too
                broker_cpu_per_msg = (broker_cpu(pid) - cpu0) / (2 * (args.sync + args.n)) * 1e6
                for phase, facts in phases.items():
                    n = args.sync if phase == "sync" else args.n if phase == "async" else int(facts["ok"])
                    if int(facts["failed"]) or int(facts["ok"]) < n:
                        raise RuntimeError(f"{system} {phase}: not every message went through: {facts}")
                    seconds = float(facts["seconds"])
                    row = {"bench": "grpc-java", "round": rnd, "workload": WORKLOADS[phase], "system": system,
                           "size": args.size, "messages": n, "seconds": round(seconds, 3),
                           "msgs_per_s": int(n / seconds),
                           "client_cpu_us_per_msg": round(float(facts["cpu_seconds"]) / n * 1e6, 1),
                           "loadavg_1m": loadavg()}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                print(json.dumps({"bench": "grpc-java", "round": rnd, "system": system,
                                  "broker_cpu_us_per_msg_all_phases": round(broker_cpu_per_msg, 1),
                                  "loadavg_1m": loadavg()}), flush=True)
    print(f"\n{args.rounds} rounds, {args.sync} sync + {args.n} async sends of {args.size} B, "
          f"{args.inflight} in flight, mqbroker TLS {args.tls_mode}, load {loadavg()}")
    print("| workload | mqbroker msg/s | Apache 5.3.3 proxy msg/s | mqbroker / proxy | client CPU/msg mq / proxy |")
    print("|---|---:|---:|---:|---:|")
    for workload in WORKLOADS.values():
        med = {s: statistics.median(r["msgs_per_s"] for r in rows if r["workload"] == workload and r["system"] == s)
               for s in SYSTEMS}
        cpu = {s: statistics.median(r["client_cpu_us_per_msg"] for r in rows
                                    if r["workload"] == workload and r["system"] == s) for s in SYSTEMS}
        ratio = round(med["mqbroker"] / med["rocketmq-5.3.3-proxy"], 2)
        print(json.dumps({"bench": "grpc-java-summary", "workload": workload, "rounds": args.rounds,
                          **{f"{s}_median_msgs_per_s": int(v) for s, v in med.items()}, "ratio": ratio,
                          "loadavg_1m": loadavg()}), file=sys.stderr)
        print(f"| {workload} | {int(med['mqbroker']):,} | {int(med['rocketmq-5.3.3-proxy']):,} | {ratio} | "
              f"{cpu['mqbroker']:.0f} / {cpu['rocketmq-5.3.3-proxy']:.0f} µs |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
