"""Malformed requests against the 5.x gRPC endpoint, next to valid ones in the same run.

One mqbroker process (gRPC on, plaintext); first a baseline of valid requests (SendMessage
and QueryRoute), then malformed ones: random bytes, truncated and bit-flipped encodings of
valid requests, sent as requests of every served RPC, 64 in flight over 4 channels.
Reports requests per second of each phase, answers by gRPC status, whether the broker
process is still alive (crashes), the tracebacks and lines the malformed phase added to
broker.log and to the process output (the refusals' own lines apart), and the broker's VmRSS before and after each phase.

    python bench/bench_grpc_fuzz.py               # 10^5 malformed requests, ~3 min on 2 cores
    python bench/bench_grpc_fuzz.py --n 10000     # quicker

Prints one JSON line per phase and a summary line (with the 1-minute load average).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc  # noqa: E402

from mqcore.grpc.protocol import load_protocol  # noqa: E402
from tests.grpc.conftest import grpc_addr  # noqa: E402
from tests.support.processes import BrokerProcess  # noqa: E402

d, s, _ = load_protocol()
SERVICE = "/apache.rocketmq.v2.MessagingService/"
UNARY = ("QueryRoute", "Heartbeat", "SendMessage", "EndTransaction", "QueryAssignment", "AckMessage",
         "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue", "UpdateOffset", "GetOffset", "QueryOffset",
         "NotifyClientTermination", "RecallMessage")
META = [("x-mq-client-id", "fuzz@1")]


def vm_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def valid_send(i: int) -> bytes:
    m = d.Message(topic=d.Resource(name="FuzzTopic"), body=b"x" * 100)
    m.system_properties.message_id = f"01FUZZ{i:028d}"
    return s.SendMessageRequest(messages=[m]).SerializeToString()


def malformed(rng: random.Random, seed: bytes) -> bytes:
    """Bytes that do not parse as a request (each is checked to fail the parse of SendMessageRequest)."""
    while True:
        kind = rng.randrange(3)
        if kind == 0:
            raw = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
        elif kind == 1:
            raw = seed[:rng.randrange(1, len(seed))]
        else:
            b = bytearray(seed)
            for _ in range(rng.randrange(1, 8)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            raw = bytes(b)
        try:
            s.SendMessageRequest.FromString(raw)
        except Exception:  # noqa: BLE001 - any parse failure will do: that is what is sent
            return raw


async def run(addr: str, requests: list[tuple[str, bytes]], inflight: int) -> tuple[float, Counter]:
    channels = [grpc.aio.insecure_channel(addr) for _ in range(4)]
    calls = {(i, name): channels[i].unary_unary(SERVICE + name, request_serializer=lambda b: b,
                                                 response_deserializer=lambda b: b)
             for i in range(4) for name in UNARY}
    codes: Counter = Counter()
    it = iter(enumerate(requests))

    async def worker() -> None:
        for i, (name, raw) in it:
            try:
                await calls[(i % 4, name)](raw, metadata=META, timeout=30)
                codes["OK"] += 1
            except grpc.aio.AioRpcError as e:
                codes[e.code().name] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    secs = time.perf_counter() - t0
    for ch in channels:
        await ch.close()
    return secs, codes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000, help="malformed requests")
    ap.add_argument("--baseline", type=int, default=20_000, help="valid requests before them")
    ap.add_argument("--inflight", type=int, default=64)
    args = ap.parse_args()
    rng = random.Random(36)
    seeds = [valid_send(i) for i in range(16)]
    with tempfile.TemporaryDirectory() as tmp:
        conf = {"grpcServerEnable": "true", "grpcServerPort": "0", "grpcServerTlsMode": "disabled"}
        with BrokerProcess(os.path.join(tmp, "store"), conf=conf) as b:
            addr = grpc_addr(b)
            log_path = os.path.join(b.log_dir, "broker.log")
            out = []
            valid = [("SendMessage" if i % 2 else "QueryRoute",
                      valid_send(i) if i % 2 else s.QueryRouteRequest(topic=d.Resource(name="FuzzTopic")).SerializeToString())
                     for i in range(args.baseline)]
            bad = [(UNARY[i % len(UNARY)], malformed(rng, seeds[i % len(seeds)])) for i in range(args.n)]
            for phase, requests in (("valid", valid), ("malformed", bad)):
                log_at = os.path.getsize(log_path) if os.path.exists(log_path) else 0
                lines_at = len(b.lines)
                rss0 = vm_rss_mib(b.proc.pid)
                secs, codes = asyncio.run(run(addr, requests, args.inflight))
                rss1 = vm_rss_mib(b.proc.pid)
                grown = open(log_path, errors="replace").read()[log_at:] if os.path.exists(log_path) else ""
                output = "\n".join(list(b.lines)[lines_at:])
                row = {"phase": phase, "requests": len(requests), "secs": round(secs, 2),
                       "requests_per_s": round(len(requests) / secs), "codes": dict(codes),
                       "alive": b.proc.poll() is None, "tracebacks": grown.count("Traceback") + output.count("Traceback"),
                       "log_lines": len(grown.splitlines()), "log_bytes": len(grown),
                       # the refusals' own lines; the others come from fuzzed bytes that parsed as valid
                       # requests (a Heartbeat then a NotifyClientTermination, a topic auto-created)
                       "malformed_lines": grown.count("malformed gRPC"), "output_lines": len(output.splitlines()),
                       "vmrss_before_mib": round(rss0, 1), "vmrss_after_mib": round(rss1, 1),
                       "load_1m": os.getloadavg()[0]}
                out.append(row)
                print(json.dumps(row), flush=True)
            crashes = sum(not r["alive"] for r in out)
            m = out[1]
            print(json.dumps({"summary": True, "crashes": crashes, "tracebacks": m["tracebacks"],
                              "malformed_lines": m["malformed_lines"],
                              "log_lines": m["log_lines"],
                              "vmrss_mib": [out[0]["vmrss_before_mib"], out[0]["vmrss_after_mib"], m["vmrss_after_mib"]],
                              "load_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
