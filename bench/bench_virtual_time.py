"""Virtual time (``mqcore.testing``): 16 failures of one message to the dead-letter queue.

    python bench/bench_virtual_time.py --rounds 5

Each round starts a ``TestBroker``, sends one message to a push consumer whose listener always
raises, and advances the broker's clock past each step of the retry ladder (10 s ... 2 h, about
4 h 46 min in all) as soon as the retry is parked, until the message is in ``%DLQ%<group>``:
the wall time from the first failure to the dead letter. The floor beside it, in the same run:
the same scenario on a broker whose 18 delay levels are all 1 s, in real time (the fastest a
test could go without virtual time, with its levels changed). Goal: < 2 s. One JSON line per
round and a summary.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.client import Message, Producer, PushConsumer  # noqa: E402
from mqcore.testing import TestBroker, wait_for  # noqa: E402


def one_round(virtual: bool) -> float:
    conf = None if virtual else {"messageDelayLevel": " ".join(["1s"] * 18)}
    attempts: list[int] = []

    def fails(msgs, ctx):
        attempts.extend(m.reconsume_times for m in msgs)
        raise RuntimeError("always")

    with TestBroker(conf) as b, Producer("bench-vt-p", namesrv_addr=b.namesrv_addr) as p:
        store = b.broker.store
        dead = lambda: store.get_max_offset_in_queue("%DLQ%bench-vt", 0) > 0  # noqa: E731
        p.send(Message("BenchVt", b"poison"))
        c = PushConsumer("bench-vt", namesrv_addr=b.namesrv_addr, consume_from_where="first")
        c.subscribe("BenchVt")
        c.register_listener(fails)
        with c:
            assert wait_for(lambda: len(attempts) == 1, 30, step=0.001)
            t0 = time.monotonic()
            while not dead() and time.monotonic() - t0 < 120:
                if virtual:
                    seen = len(attempts)
                    if not wait_for(lambda: b.waiting() == 1 or dead(), 5, step=0.001) or dead():
                        break
                    b.advance(hours=2)
                    wait_for(lambda: len(attempts) > seen or dead(), 5, step=0.001)
                else:
                    time.sleep(0.01)
            elapsed = time.monotonic() - t0
        assert dead() and len(attempts) == 17, (dead(), attempts)
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    # each attempt's failure is logged with its traceback by the consumer: 17 per round
    logging.getLogger("mqcore.client").setLevel(logging.CRITICAL)
    virtual, floor = [], []
    for r in range(a.rounds):
        load = os.getloadavg()[0]
        v = one_round(True)
        virtual.append(v)
        print(json.dumps({"bench": "virtual_time_dlq", "round": r, "virtual_s": round(v, 3), "load1": load}),
              flush=True)
    f = one_round(False)  # one round: it takes ~17 s of real time by construction
    floor.append(f)
    print(json.dumps({"bench": "virtual_time_dlq", "summary": True, "virtual_median_s": round(statistics.median(virtual), 3),
                      "virtual_max_s": round(max(virtual), 3), "real_time_1s_levels_s": round(f, 3),
                      "real_time_default_levels_s": 4 * 3600 + 46 * 60 + 10, "goal_s": 2,
                      "load1": os.getloadavg()[0]}), flush=True)


if __name__ == "__main__":
    main()
