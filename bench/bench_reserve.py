"""What reserving a store file's blocks costs: sparse file vs ``posix_fallocate``, side by side.

    python bench/bench_reserve.py                  # 1 GiB files, 3 rounds (about a minute)
    python bench/bench_reserve.py --mib 256        # smaller files

Since issue 12 every new mapped file is reserved with ``posix_fallocate`` (a write into a
hole on a full disk is a SIGBUS). Per round and mode this creates one file in a temp dir
(``--dir``, default /tmp), maps it, fills it with 4 KiB copies (what appends do) and
fdatasyncs it, timing creation and filling separately. The baseline is the sparse file,
as before the change. One JSON line per measurement, with the 1-minute load average.
"""
from __future__ import annotations

import argparse
import json
import mmap
import os
import tempfile
import time

import numpy as np


def one(directory: str, size: int, reserve: bool) -> dict:
    path = os.path.join(directory, "reserve" if reserve else "sparse")
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.ftruncate(fd, size)
    if reserve:
        os.posix_fallocate(fd, 0, size)
    mm = mmap.mmap(fd, size)
    t1 = time.perf_counter()
    view = np.frombuffer(mm, dtype=np.uint8)
    chunk = np.frombuffer(os.urandom(4096), dtype=np.uint8)
    for pos in range(0, size, 4096):
        view[pos:pos + 4096] = chunk
    t2 = time.perf_counter()
    os.fdatasync(fd)
    t3 = time.perf_counter()
    del view
    mm.close()
    os.close(fd)
    os.unlink(path)
    return {"bench": "reserve", "mode": "fallocate" if reserve else "sparse (baseline)", "file_mib": size >> 20,
            "create_ms": round((t1 - t0) * 1000, 2), "fill_mb_per_s": round(size / (t2 - t1) / 1e6),
            "fdatasync_ms": round((t3 - t2) * 1000, 1), "loadavg_1m": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for _ in range(args.rounds):
            for reserve in (False, True):
                print(json.dumps(one(d, args.mib << 20, reserve)), flush=True)


if __name__ == "__main__":
    main()
