"""FrameReceiver's cost per frame: this tree's receiver next to another tree's (the floor to
compare with, e.g. the main checkout before a change), interleaved in one process.

Each round pushes pipelined 200-byte request frames through ``get_buffer`` / ``received`` /
``next_frame`` the way the event loop does (reads of up to 64 KiB), decoding each into a
RemotingCommand; rounds alternate between the two receivers and the best of each is kept.

    python bench/bench_framing.py --other /work/main [--frames 200000] [--rounds 7]

Prints one JSON line per receiver and the load average.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from mqcore.remoting import RequestCode, create_request  # noqa: E402
from mqcore.remoting.command import encode_frame  # noqa: E402


def load_framing(tree: str, name: str):
    """``mqcore/remoting/framing.py`` of ``tree`` as a module of its own (same command codec)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(tree, "mqcore", "remoting", "framing.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def one_round(framing, data: bytes, read: int) -> tuple[float, int]:
    r = framing.FrameReceiver(16 << 20, framing.FrameBudget())
    pos, n = 0, 0
    t0 = time.perf_counter()
    while pos < len(data):
        buf = r.get_buffer()
        k = min(len(buf), read, len(data) - pos)
        buf[:k] = data[pos:pos + k]
        r.received(k)
        pos += k
        while True:
            cmd = r.next_frame()
            if cmd is None:
                break
            n += 1
    return time.perf_counter() - t0, n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", required=True, help="another checkout whose receiver is the floor")
    ap.add_argument("--frames", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--read", type=int, default=64 * 1024, help="bytes per simulated recv")
    a = ap.parse_args()
    frame = encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, {"a": "PG", "b": "T", "c": "TBW102"}, b"x" * 100))
    data = frame * a.frames
    mods = {"this tree": load_framing(HERE, "framing_this"), "other tree": load_framing(a.other, "framing_other")}
    best = {k: float("inf") for k in mods}
    for _ in range(a.rounds):
        for name, mod in mods.items():
            s, n = one_round(mod, data, a.read)
            assert n == a.frames
            best[name] = min(best[name], s)
    for name, s in best.items():
        print(json.dumps({"bench": "framing", "receiver": name, "frames": a.frames, "frame_bytes": len(frame),
                          "best_s": round(s, 4), "ns_per_frame": round(s / a.frames * 1e9), "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
