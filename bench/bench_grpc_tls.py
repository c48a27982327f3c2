"""What TLS on the 5.x port costs: sync sends (one in flight, 100 B) to two brokers started side
by side, interleaved batch by batch in one run:

* plaintext straight to grpcio (``grpcServerTlsMode=disabled``): the floor;
* plaintext through the permissive relay (the default mode: the relay reads the first bytes
  and passes everything on to grpcio's loopback listener);
* TLS through the permissive relay (the Java client's default).

    python bench/bench_grpc_tls.py            # 10 rounds of 300 sends per column
    python bench/bench_grpc_tls.py --quick    # 4 rounds

Prints one JSON line per column (median and spread of the rounds, load average) and a summary.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc  # noqa: E402

from bench.bench_grpc import BODY, META, d, g, s, start_broker  # noqa: E402


def _stub(addr: str, root_cert: bytes | None):
    if root_cert is None:
        channel = grpc.aio.insecure_channel(addr)
    else:
        channel = grpc.aio.secure_channel(addr, grpc.ssl_channel_credentials(root_cert),
                                          options=[("grpc.ssl_target_name_override", "localhost")])
    return channel, g.MessagingServiceStub(channel)


async def run(columns: dict, rounds: int, batch: int) -> dict[str, list[float]]:
    seq = iter(range(1 << 40))
    stubs = {name: _stub(addr, cert) for name, (addr, cert) in columns.items()}

    async def send(stub) -> None:
        m = d.Message(topic=d.Resource(name="BenchTls"), body=BODY)
        m.system_properties.message_id = f"01{next(seq):032X}"
        r = await stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=META, timeout=30)
        assert r.status.code == d.OK, r.status

    for _, stub in stubs.values():  # warm up: connections, the topic, TLS handshakes
        for _ in range(100):
            await send(stub)
    rates: dict[str, list[float]] = {name: [] for name in columns}
    for _ in range(rounds):
        for name, (_, stub) in stubs.items():
            t0 = time.perf_counter()
            for _ in range(batch):
                await send(stub)
            rates[name].append(batch / (time.perf_counter() - t0))
    for channel, _ in stubs.values():
        await channel.close()
    return rates


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rounds, batch = (4, 300) if args.quick else (10, 300)
    with tempfile.TemporaryDirectory() as tmp:
        brokers = {}
        try:
            for mode in ("disabled", "permissive"):
                conf = os.path.join(tmp, f"{mode}.conf")
                with open(conf, "w") as f:
                    f.write(f"grpcServerEnable=true\ngrpcServerPort=0\ngrpcServerTlsMode={mode}\n")
                brokers[mode] = start_broker(os.path.join(tmp, mode), conf)
            cert = (Path(tmp) / "permissive" / "grpc-tls" / "cert.pem").read_bytes()
            columns = {"plaintext, direct (disabled)": (brokers["disabled"][2], None),
                       "plaintext, through the relay (permissive)": (brokers["permissive"][2], None),
                       "TLS, through the relay (permissive)": (brokers["permissive"][2], cert)}
            rates = asyncio.run(run(columns, rounds, batch))
        finally:
            for p, _, _ in brokers.values():
                p.terminate()
                p.wait(30)
    summary = {}
    for name, values in rates.items():
        summary[name] = round(statistics.median(values))
        print(json.dumps({"workload": "sync send 100B", "path": name, "rounds": rounds, "per_round": batch,
                          "median_msgs_per_s": summary[name], "min": round(min(values)), "max": round(max(values)),
                          "loadavg_1m": round(os.getloadavg()[0], 2)}), flush=True)
    print(json.dumps({"summary": summary}))


if __name__ == "__main__":
    main()
