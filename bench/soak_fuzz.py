"""Soak a live broker with hostile requests; report its memory and log rate as it goes.

    python bench/soak_fuzz.py                      # 400,000 fuzzed frames, about 8 minutes at load 30
    python bench/soak_fuzz.py --frames 1000000     # the issue's 10^6, ~4 minutes at load 3
    python bench/soak_fuzz.py --frames 40000       # a quick look

Starts ``mqcore.broker.cli`` on loopback with a temp store (its log, at INFO, goes to a
file), then sends rounds of well-framed requests with hostile fields (the generator of
tests/support/abuse.py: real request codes, names such as ``../../x``, ``SCHEDULE_TOPIC_XXXX``,
``||``, 300-character groups, random JSON bodies) pipelined over 4 connections. The
baseline, in the same run and on the same broker, is an equal number of well-formed
GET_MAX_OFFSET requests: RSS growth and log bytes per request of the fuzz are compared
with it. One JSON object per line on stdout; every row carries the 1-minute load average; the
summary counts the tracebacks in the broker's log and its most frequent kinds of line.
Exits non-zero if the broker dies.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore.remoting import RequestCode, create_request  # noqa: E402
from mqcore.remoting.command import encode_frame  # noqa: E402
from tests.support import abuse  # noqa: E402

CONNS = 4


def start_broker(store: str, log_path: str) -> tuple[subprocess.Popen, str]:
    log = open(log_path, "w")
    p = subprocess.Popen([sys.executable, "-m", "mqcore.broker.cli", "--store", store, "--listen-port", "0",
                          "--namesrv-port", "0", "--log-level", "INFO",
                          "--log-dir", os.path.join(os.path.dirname(store), "logs")],
                         stdout=subprocess.PIPE, stderr=log, text=True)
    for line in p.stdout:
        if line.startswith("READY"):
            fields = dict(part.split("=", 1) for part in line.split()[1:])
            return p, fields["broker"]
    raise RuntimeError(f"the broker did not start; see {log_path}")


def row(kind: str, rnd: int, frames_done: int, answered: int, secs: float, proc: psutil.Process,
        log_path: str, log_before: int, rss0: int, frames_in_round: int) -> dict:
    rss = proc.memory_info().rss
    log_bytes = os.path.getsize(log_path)
    return {"bench": "soak_fuzz", "phase": kind, "round": rnd, "frames": frames_done, "answered": answered,
            "frames_per_s": round(frames_in_round / secs) if secs else None,
            "rss_mb": round(rss / 2**20, 1), "rss_growth_mb": round((rss - rss0) / 2**20, 1),
            "log_bytes_per_frame": round((log_bytes - log_before) / max(frames_in_round, 1), 2),
            "log_kb_per_s": round((log_bytes - log_before) / 1024 / secs, 1) if secs else None,
            "loadavg_1m": os.getloadavg()[0]}


def log_summary(log_path: str) -> dict:
    """Tracebacks in the broker's log, and its most frequent kinds of line (the message with
    digits and quoted values blanked, so one kind of refusal counts as one)."""
    kinds: Counter = Counter()
    tracebacks = 0
    with open(log_path, errors="replace") as f:
        for line in f:
            if line.startswith("Traceback"):
                tracebacks += 1
            kinds[re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "#", line.split(" - ", 1)[-1].strip())[:100]] += 1
    return {"tracebacks": tracebacks, "log_lines": sum(kinds.values()), "top_log_lines": kinds.most_common(5)}


def run_phase(kind: str, addr: str, proc: psutil.Process, log_path: str, total: int, per_round: int,
              make_frames, rss0: int) -> dict:
    done = 0
    rnd = 0
    last = {}
    while done < total:
        n = min(per_round, total - done)
        frames = [make_frames(n // CONNS) for _ in range(CONNS)]
        log_before = os.path.getsize(log_path)
        t0 = time.monotonic()
        answered = abuse.blast(addr, frames, CONNS, timeout_s=300)
        secs = time.monotonic() - t0
        done += n
        rnd += 1
        if proc.status() == psutil.STATUS_ZOMBIE or not proc.is_running():
            raise SystemExit(f"the broker died during {kind} round {rnd}; see {log_path}")
        last = row(kind, rnd, done, answered, secs, proc, log_path, log_before, rss0, n)
        print(json.dumps(last), flush=True)
    return last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=400_000, help="fuzzed frames in all (default 400000)")
    ap.add_argument("--round", type=int, default=40_000, help="frames per round (one report line each)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as d:
        log_path = os.path.join(d, "broker.log")
        broker, addr = start_broker(os.path.join(d, "store"), log_path)
        proc = psutil.Process(broker.pid)
        try:
            rss0 = proc.memory_info().rss
            valid = encode_frame(create_request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"}))
            base = run_phase("baseline", addr, proc, log_path, min(args.frames, 2 * args.round), args.round,
                             lambda n: [valid] * n, rss0)
            fuzz = run_phase("fuzz", addr, proc, log_path, args.frames, args.round,
                             lambda n: list(abuse.fuzz_frames(rng, n)), rss0)
            print(json.dumps({"bench": "soak_fuzz", "phase": "summary", "frames": args.frames,
                              "broker_alive": broker.poll() is None,
                              "rss_mb_after_baseline": base["rss_mb"], "rss_mb_after_fuzz": fuzz["rss_mb"],
                              "log_bytes_per_frame_baseline": base["log_bytes_per_frame"],
                              "log_bytes_per_frame_fuzz": fuzz["log_bytes_per_frame"],
                              "log_total_mb": round(os.path.getsize(log_path) / 2**20, 2),
                              **log_summary(log_path),
                              "loadavg_1m": os.getloadavg()[0]}), flush=True)
        finally:
            broker.terminate()
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                broker.kill()
                broker.wait()


if __name__ == "__main__":
    main()
