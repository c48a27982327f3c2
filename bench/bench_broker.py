"""Broker throughput over loopback with raw protocol frames (no client library).

Workloads, each next to the same request shape answered by a do-nothing remoting
server (the "floor": frame codec + asyncio + loopback, no store), measured in the
same run:

* sync send: one SEND_MESSAGE_V2 in flight at a time (100 B bodies)
* pipelined send: 64 in flight on one connection
* batch send: SEND_BATCH_MESSAGE with 64 x 100 B per request, 8 in flight
* pull: 32-message PULL_MESSAGE requests over what was sent, 8 in flight

    python bench/bench_broker.py            # full run (~1 min)
    python bench/bench_broker.py --quick

Prints one JSON line per figure.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore._compat import kernels  # noqa: E402
from mqcore.remoting import RemotingClient, RequestCode, create_request  # noqa: E402
from mqcore.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader  # noqa: E402

FLOOR_SERVER = """
import asyncio, sys
from mqcore.remoting import RemotingServer, create_response
async def main():
    s = RemotingServer(name="floor")
    s.register_default_processor(lambda ch, req: create_response(req, 0, ext_fields={"msgId": "X", "queueId": "0", "queueOffset": "0"}))
    port = await s.start("127.0.0.1", 0)
    print("READY", port, flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def start(argv, env=None):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    for line in p.stdout:
        if line.startswith("READY"):
            return p, line.split()
    raise RuntimeError("server did not start")


def send_request(topic: str, body: bytes, code=RequestCode.SEND_MESSAGE_V2, batch=False):
    h = SendMessageRequestHeader(producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
                                 queue_id=0, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
                                 properties="UNIQ_KEY\x01ABCDEF0123456789ABCDEF0123456789", batch=batch)
    return create_request(code, h.to_ext(code), body)


async def run_load(client, addr, make, total, inflight):
    sem = asyncio.Semaphore(inflight)
    done = 0

    async def one(i):
        nonlocal done
        async with sem:
            r = await client.invoke(addr, make(i), 30000)
            if r.code not in (0, 19, 20):
                raise RuntimeError(f"request failed: {r.code} {r.remark}")
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(total)))
    return time.perf_counter() - t0


async def bench(addr: str, floor: str, n: int) -> list[dict]:
    out = []
    client = RemotingClient()
    body = b"x" * 100
    items = kernels.encode_batch_items([(0, body, b"UNIQ_KEY\x01ABCDEF0123456789ABCDEF01234567%02d" % i)
                                        for i in range(64)])

    async def measure(name, make, total, inflight, msgs_per_req):
        for target, label in ((addr, "mqbroker"), (floor, "remoting floor")):
            await run_load(client, target, make, min(200, total), inflight)  # warm up
            secs = await run_load(client, target, make, total, inflight)
            out.append({"workload": name, "server": label, "requests": total, "seconds": round(secs, 3),
                        "msgs_per_s": round(total * msgs_per_req / secs)})
            print(json.dumps(out[-1]), flush=True)

    await measure("sync send 100B", lambda i: send_request("BenchSync", body), n, 1, 1)
    await measure("pipelined send 100B (64 in flight)", lambda i: send_request("BenchPipe", body), n * 4, 64, 1)
    await measure("batch send 64x100B (8 in flight)",
                  lambda i: send_request("BenchBatch", items, RequestCode.SEND_BATCH_MESSAGE, True), n // 8, 8, 64)

    def pull_req(i, total=n * 4):
        h = PullMessageRequestHeader(consumer_group="g", topic="BenchPipe", queue_id=0,
                                     queue_offset=(i * 32) % max(total - 32, 1), max_msg_nums=32, sys_flag=0x4,
                                     commit_offset=0, suspend_timeout_millis=0, sub_version=0, subscription="*")
        return create_request(RequestCode.PULL_MESSAGE, h.to_ext())
    await measure("pull 32 msgs (8 in flight)", pull_req, n // 2, 8, 32)
    await client.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    n = 2000 if args.quick else 20000
    with tempfile.TemporaryDirectory() as d:
        broker, ready = start([sys.executable, "-m", "mqcore.broker.cli", "--store", os.path.join(d, "store"),
                               "--listen-port", "0", "--namesrv-port", "0", "--log-level", "WARNING",
                               "--log-dir", os.path.join(d, "logs")])
        floor, fready = start([sys.executable, "-c", FLOOR_SERVER])
        try:
            addr = ready[1].split("=")[1]
            results = asyncio.run(bench(addr, f"127.0.0.1:{fready[1]}", n))
        finally:
            for p in (broker, floor):
                p.terminate()
                p.wait(30)
    print(json.dumps({"summary": {f"{r['workload']} / {r['server']}": r["msgs_per_s"] for r in results}}))


if __name__ == "__main__":
    main()
