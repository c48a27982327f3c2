"""What plain ACL costs: the same raw SEND_MESSAGE_V2 load against two mqbroker processes
started side by side, one with ``aclEnable=false`` (the baseline) and one with
``aclEnable=true`` (the client signs every request, the broker checks every signature and
permission), plus the in-process cost of signing and checking one request.

    python bench/bench_acl.py            # full run (9 interleaved rounds, ~2 min)
    python bench/bench_acl.py --quick    # 3 rounds, fewer requests

Prints one JSON line per round and broker (with the 1-minute load average) and a summary
line: each workload's median msg/s with ACL off and on, and the median of the rounds' ratios
(goal: >= 0.9).
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.acl import PlainAccessValidator, SessionCredentials, parse_plain_acl  # noqa: E402
from mqcore.remoting import RemotingClient, RequestCode, create_request  # noqa: E402
from mqcore.remoting.headers import SendMessageRequestHeader  # noqa: E402

ACCOUNT = ("benchUser", "benchSecret1")
ADMIN = ("benchAdmin", "benchAdmin1")
PLAIN_ACL = f"""\
accounts:
  - accessKey: {ACCOUNT[0]}
    secretKey: {ACCOUNT[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [BenchAcl=PUB|SUB, Other1=SUB, Other2=DENY]
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""


def start(argv):
    """The broker process, its address and its embedded name server's."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if line.startswith("READY"):
            fields = dict(f.split("=", 1) for f in line.split()[1:])
            return p, fields["broker"], fields["namesrv"]
    raise RuntimeError("broker did not start")


def send_request(body: bytes):
    h = SendMessageRequestHeader(producer_group="PG", topic="BenchAcl", default_topic="TBW102",
                                 default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                 born_timestamp=int(time.time() * 1000), flag=0,
                                 properties="UNIQ_KEY\x01ABCDEF0123456789ABCDEF0123456789")
    return create_request(RequestCode.SEND_MESSAGE_V2, h.to_ext(RequestCode.SEND_MESSAGE_V2), body)


async def run_load(client, addr, body, total, inflight) -> float:
    sem = asyncio.Semaphore(inflight)

    async def one():
        async with sem:
            r = await client.invoke(addr, send_request(body), 30000)
            if r.code != 0:
                raise RuntimeError(f"send failed: {r.code} {r.remark}")

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(total)))
    return time.perf_counter() - t0


WORKLOADS = (  # name, body, requests (x n / 1000), in flight
    ("sync send 100B", b"x" * 100, 1.0, 1),
    ("pipelined send 100B (64 in flight)", b"x" * 100, 4.0, 64),
    ("send 256KiB (8 in flight)", b"x" * (256 << 10), 0.1, 8),
    ("send 1MiB (4 in flight)", b"x" * (1 << 20), 0.05, 4),
)


def cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


async def wire(plain_addr: str, acl_addr: str, n: int, rounds: int, pids: tuple[int, int]) -> list[dict]:
    """Each workload in ``rounds`` rounds, the two brokers interleaved (which goes first
    alternates), each round's figure printed; the summary takes the medians."""
    out = []
    plain = RemotingClient()
    signed = RemotingClient(before_request=SessionCredentials(*ACCOUNT).sign)
    pair = ((plain, plain_addr, "aclEnable=false", pids[0]), (signed, acl_addr, "aclEnable=true", pids[1]))
    for name, body, scale, inflight in WORKLOADS:
        total = max(int(n * scale), 40)
        for client, addr, _label, _pid in pair:
            await run_load(client, addr, body, min(200, total), inflight)  # warm up
        for r in range(rounds):
            for client, addr, label, pid in (pair if r % 2 == 0 else pair[::-1]):
                broker0, client0 = cpu_s(pid), time.process_time()
                secs = await run_load(client, addr, body, total, inflight)
                broker_us = (cpu_s(pid) - broker0) / total * 1e6
                client_us = (time.process_time() - client0) / total * 1e6
                out.append({"workload": name, "broker": label, "round": r, "requests": total,
                            "seconds": round(secs, 3), "msgs_per_s": round(total / secs),
                            "broker_cpu_us_per_msg": round(broker_us, 1), "client_cpu_us_per_msg": round(client_us, 1),
                            "loadavg_1m": round(os.getloadavg()[0], 2)})
                print(json.dumps(out[-1]), flush=True)
    await plain.shutdown()
    await signed.shutdown()
    return out


def producer_sync(plain_ns: str, acl_ns: str, n: int, rounds: int) -> list[dict]:
    """``mqcore.client.Producer.send`` one at a time (what an application runs), unsigned and
    signed, interleaved as ``wire``."""
    from mqcore.client import Message, Producer
    producers = [(Producer("PG_plain", namesrv_addr=plain_ns).start(), "aclEnable=false"),
                 (Producer("PG_acl", namesrv_addr=acl_ns, access_key=ACCOUNT[0], secret_key=ACCOUNT[1]).start(),
                  "aclEnable=true")]
    name, out = "Producer.send 100B (mqcore.client, sync)", []
    try:
        for producer, _label in producers:
            for _ in range(200):  # warm up (and create the topic)
                producer.send(Message("BenchAcl", b"x" * 100))
        for r in range(rounds):
            for producer, label in (producers if r % 2 == 0 else producers[::-1]):
                t0, client0 = time.perf_counter(), time.process_time()
                for _ in range(n):
                    producer.send(Message("BenchAcl", b"x" * 100))
                secs = time.perf_counter() - t0
                out.append({"workload": name, "broker": label, "round": r, "requests": n, "seconds": round(secs, 3),
                            "msgs_per_s": round(n / secs), "broker_cpu_us_per_msg": 0.0,
                            "client_cpu_us_per_msg": round((time.process_time() - client0) / n * 1e6, 1),
                            "loadavg_1m": round(os.getloadavg()[0], 2)})
                print(json.dumps(out[-1]), flush=True)
    finally:
        for producer, _label in producers:
            producer.shutdown()
    return out


def in_process() -> list[dict]:
    """Sign + check of one request, next to building the request (the baseline every send pays)."""
    cfg = parse_plain_acl(PLAIN_ACL)
    validator = PlainAccessValidator(lambda: cfg)
    creds = SessionCredentials(*ACCOUNT)
    out = []
    for size in (100, 1 << 20):
        body = b"x" * size
        signed = send_request(body)
        creds.sign(signed)
        assert validator.check(signed, "127.0.0.1") is None
        runs = 20000 if size <= 4096 else 200
        build = min(timeit.repeat(lambda: send_request(body), number=runs, repeat=3)) / runs
        sign = min(timeit.repeat(lambda: creds.sign(signed), number=runs, repeat=3)) / runs
        check = min(timeit.repeat(lambda: validator.check(signed, "127.0.0.1"), number=runs, repeat=3)) / runs
        # the floor: SHA-1 over the body alone (an HMAC is that plus two blocks)
        sha1 = min(timeit.repeat(lambda: hashlib.sha1(body).digest(), number=runs, repeat=3)) / runs
        out.append({"in_process": f"body {size} B", "build_request_us": round(build * 1e6, 2),
                    "sign_us": round(sign * 1e6, 2), "check_us": round(check * 1e6, 2),
                    "sha1_of_body_us": round(sha1 * 1e6, 2),
                    "loadavg_1m": os.getloadavg()[0]})
        print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    n = 1000 if args.quick else 3000
    rounds = 3 if args.quick else args.rounds
    micro = in_process()
    with tempfile.TemporaryDirectory() as d:
        acl_file = os.path.join(d, "plain_acl.yml")
        with open(acl_file, "w") as f:
            f.write(PLAIN_ACL)
        conf = os.path.join(d, "acl.conf")
        with open(conf, "w") as f:
            f.write(f"aclEnable=true\nplainAclFile={acl_file}\nbrokerAccessKey={ADMIN[0]}\nbrokerSecretKey={ADMIN[1]}\n")
        common = ["--listen-port", "0", "--namesrv-port", "0", "--log-level", "WARNING"]
        brokers = []
        try:
            brokers.append(start([sys.executable, "-m", "mqcore.broker.cli", "--store", os.path.join(d, "plain"),
                                  "--log-dir", os.path.join(d, "plain-logs"), *common]))
            brokers.append(start([sys.executable, "-m", "mqcore.broker.cli", "-c", conf, "--store",
                                  os.path.join(d, "acl"), "--log-dir", os.path.join(d, "acl-logs"), *common]))
            results = asyncio.run(wire(brokers[0][1], brokers[1][1], n, rounds, (brokers[0][0].pid, brokers[1][0].pid)))
            results += producer_sync(brokers[0][2], brokers[1][2], n // 3, rounds)
        finally:
            for p, _addr, _ns in brokers:
                p.terminate()
                p.wait(30)
    summary: dict[str, object] = {}
    for name in [w[0] for w in WORKLOADS] + ["Producer.send 100B (mqcore.client, sync)"]:
        med = {label: statistics.median(r["msgs_per_s"] for r in results
                                        if r["workload"] == name and r["broker"] == label)
               for label in ("aclEnable=false", "aclEnable=true")}
        # each round's two runs are back to back: their ratio is the least disturbed by the
        # machine's other load, which drifts from round to round
        by_round: dict[int, dict[str, int]] = {}
        for r in results:
            if r["workload"] == name:
                by_round.setdefault(r["round"], {})[r["broker"]] = r["msgs_per_s"]
        ratios = [v["aclEnable=true"] / v["aclEnable=false"] for v in by_round.values()]
        cpu = {label: statistics.median(r["broker_cpu_us_per_msg"] for r in results
                                        if r["workload"] == name and r["broker"] == label)
               for label in ("aclEnable=false", "aclEnable=true")}
        summary[name] = {"acl_off": med["aclEnable=false"], "acl_on": med["aclEnable=true"],
                         "ratio_of_medians": round(med["aclEnable=true"] / med["aclEnable=false"], 3),
                         "median_round_ratio": round(statistics.median(ratios), 3),
                         "broker_cpu_us_off_on": [cpu["aclEnable=false"], cpu["aclEnable=true"]]}
    summary.update({f"{m['in_process']}: sign+check us": round(m["sign_us"] + m["check_us"], 1) for m in micro})
    loads = [r["loadavg_1m"] for r in results]
    summary["loadavg_1m"] = f"{min(loads)}-{max(loads)}"
    print(json.dumps({"summary": summary}))


if __name__ == "__main__":
    main()
