"""Producer throughput with message traces on vs off, in the same run (issue #38).

One ``mqbroker`` child process (its own store in a temp dir, removed at the end). Each round
runs, for every mode, the untraced producer and the traced one (``enable_msg_trace=True``),
in alternating order, so both see the same phases of the machine's load:

* ``sync``: ``--n`` one-at-a-time ``send``;
* ``async``: ``--n`` ``send_async`` (auto-batching off: one request per message) then every
  future's ``result()``;
* ``batched``: the same with ``auto_batch=True``.

The traced producers' dispatchers send their records to ``RMQ_SYS_TRACE_TOPIC`` on the same
broker, as a deployment does; the traced figure includes that: a run ends when its records
are sent (all but a last partly filled trace message). Prints msg/s per mode, round
and producer, the traced / untraced ratio of the medians (goal: cost <= 10 %) and the
1-minute load average.

    python bench/bench_trace.py [--n 5000] [--rounds 5] [--modes async,batched]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.client import Message, Producer  # noqa: E402
from tests.support.processes import BrokerProcess  # noqa: E402

MODES = ("sync", "async", "batched")


def _run(p: Producer, mode: str, n: int, topic: str) -> float:
    body = b"x" * 256
    t0 = time.perf_counter()
    if mode == "sync":
        for _ in range(n):
            p.send(Message(topic, body))
    else:
        futures = [p.send_async(Message(topic, body)) for _ in range(n)]
        for f in futures:
            f.result(60)
    # the run's trace records sent too (but a last partial trace message, which waits for the
    # dispatcher's interval): otherwise a dispatcher behind its producer would leave its work
    # to the next measurement
    tracer = p._tracer
    while tracer is not None and not tracer.catch_up():
        time.sleep(0.0005)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ", ".join(MODES))
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES):
        ap.error(f"--modes takes some of {', '.join(MODES)}")
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp, \
            BrokerProcess(os.path.join(tmp, "store"), conf={"flushDiskType": "ASYNC_FLUSH"}) as broker:
        producers = {}
        for mode in modes:
            for traced in (False, True):
                producers[mode, traced] = Producer(
                    f"bench-trace-{mode}-{int(traced)}", namesrv_addr=broker.namesrv_addr,
                    enable_msg_trace=traced, auto_batch=mode == "batched", max_async_inflight=1000).start()
        try:
            for (mode, _t), p in producers.items():  # warm: routes, connections, the trace topic
                _run(p, mode, 500, "BenchTraceT")
            rates: dict[tuple[str, bool], list[float]] = {}
            for r in range(args.rounds):
                for mode in modes:
                    for traced in ((False, True) if r % 2 == 0 else (True, False)):
                        rate = _run(producers[mode, traced], mode, args.n, "BenchTraceT")
                        rates.setdefault((mode, traced), []).append(rate)
                        print(f"round {r} {mode:7} traces={'on ' if traced else 'off'} {rate:9.0f} msg/s "
                              f"load {os.getloadavg()[0]:.2f}", flush=True)
            for mode in modes:
                off, on = (statistics.median(rates[(mode, t)]) for t in (False, True))
                print(f"{mode:7} median off {off:.0f} on {on:.0f} msg/s: traced / untraced {on / off:.2f} "
                      f"(cost {100 * (1 - on / off):.1f} %, goal <= 10 %)  load {os.getloadavg()[0]:.2f}")
        finally:
            for p in producers.values():
                p.shutdown()


if __name__ == "__main__":
    main()
