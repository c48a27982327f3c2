"""What plain ACL costs: the same raw SEND_MESSAGE_V2 load against two mqbroker processes
started side by side, one with ``aclEnable=false`` (the baseline) and one with
``aclEnable=true`` (the client signs every request, the broker checks every signature and
permission), plus the in-process cost of signing and checking one request.

    python bench/bench_acl.py            # full run (~1 min)
    python bench/bench_acl.py --quick

Prints one JSON line per figure (with the 1-minute load average) and a summary line.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
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
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in p.stdout:
        if line.startswith("READY"):
            return p, line.split()[1].split("=")[1]
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


async def wire(plain_addr: str, acl_addr: str, n: int) -> list[dict]:
    out = []
    plain = RemotingClient()
    signed = RemotingClient(before_request=SessionCredentials(*ACCOUNT).sign)
    for name, body, total, inflight in (("sync send 100B", b"x" * 100, n, 1),
                                        ("pipelined send 100B (64 in flight)", b"x" * 100, n * 4, 64),
                                        ("send 256KiB (8 in flight)", b"x" * (256 << 10), max(n // 20, 50), 8)):
        for client, addr, label in ((plain, plain_addr, "aclEnable=false"), (signed, acl_addr, "aclEnable=true")):
            await run_load(client, addr, body, min(200, total), inflight)  # warm up
            secs = await run_load(client, addr, body, total, inflight)
            out.append({"workload": name, "broker": label, "requests": total, "seconds": round(secs, 3),
                        "msgs_per_s": round(total / secs), "loadavg_1m": os.getloadavg()[0]})
            print(json.dumps(out[-1]), flush=True)
    await plain.shutdown()
    await signed.shutdown()
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
        out.append({"in_process": f"body {size} B", "build_request_us": round(build * 1e6, 2),
                    "sign_us": round(sign * 1e6, 2), "check_us": round(check * 1e6, 2),
                    "loadavg_1m": os.getloadavg()[0]})
        print(json.dumps(out[-1]), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 1000 if args.quick else 5000
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
            results = asyncio.run(wire(brokers[0][1], brokers[1][1], n))
        finally:
            for p, _addr in brokers:
                p.terminate()
                p.wait(30)
    summary = {f"{r['workload']} / {r['broker']}": r["msgs_per_s"] for r in results}
    summary.update({f"{m['in_process']}: sign+check us": round(m["sign_us"] + m["check_us"], 1) for m in micro})
    print(json.dumps({"summary": summary}))


if __name__ == "__main__":
    main()
