"""Producer throughput with message traces on vs off, in the same run (issue #38).

Interleaved rounds against one in-process TestBroker: each round times N one-at-a-time sync
sends and N send_async (then waits for all) on a producer without traces, then on one with
``enable_msg_trace=True``. Prints msgs/s per mode and round, the traced/untraced ratio and
the 1-minute load average.

    python bench/bench_trace.py [--n 5000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from mqcore.client import Message, Producer
from mqcore.testing import TestBroker


def _run(p: Producer, mode: str, n: int) -> float:
    body = b"x" * 256
    t0 = time.perf_counter()
    if mode == "sync":
        for _ in range(n):
            p.send(Message("BenchTraceT", body))
    else:
        futures = [p.send_async(Message("BenchTraceT", body)) for _ in range(n)]
        for f in futures:
            f.result(60)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with TestBroker({"autoCreateTopicEnable": "true"}) as broker:
        producers = {False: Producer("bench-untraced", namesrv_addr=broker.namesrv_addr).start(),
                     True: Producer("bench-traced", namesrv_addr=broker.namesrv_addr, enable_msg_trace=True).start()}
        try:
            for p in producers.values():
                _run(p, "sync", 200)  # warm: routes, connections
            rates: dict[tuple[str, bool], list[float]] = {}
            for r in range(args.rounds):
                for mode in ("sync", "async"):
                    for traced in (False, True):
                        rate = _run(producers[traced], mode, args.n)
                        rates.setdefault((mode, traced), []).append(rate)
                        print(f"round {r} {mode:5} traces={'on ' if traced else 'off'} {rate:9.0f} msg/s "
                              f"load {os.getloadavg()[0]:.2f}", flush=True)
            for mode in ("sync", "async"):
                off, on = (statistics.median(rates[(mode, t)]) for t in (False, True))
                print(f"{mode:5} median off {off:.0f} on {on:.0f} msg/s: traces cost {100 * (1 - on / off):.1f} %")
        finally:
            for p in producers.values():
                p.shutdown()


if __name__ == "__main__":
    main()
