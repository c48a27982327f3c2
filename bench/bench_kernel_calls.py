#!/usr/bin/env python
"""Per-call cost of the kernels that return several values (named results). NOT a test.

    python bench/bench_kernel_calls.py          # one JSON line: ns per call, minimum of 7 x 20,000

Each call is made on a tiny input so that what is timed is the call and its result object,
not the byte work. To compare two trees, run the script in each, alternating: it imports the
tree it sits in.
"""
from __future__ import annotations

import json
import os
import sys
import timeit

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore import _store as S  # noqa: E402
from mqcore._compat import default_column_kernels  # noqa: E402


def main() -> None:
    c = default_column_kernels()
    units = np.zeros(20 * 64, np.uint8)
    rec = bytearray(4096)
    n = S.encode_record(rec, 0, b"T", 0, 0, 0, 0, 0, 1, b"\x7f\x00\x00\x01\x00\x00\x00\x01", 2,
                        b"\x7f\x00\x00\x01\x00\x00\x00\x02", 0, 0, b"x" * 100, b"TAGS\x01A")
    buf = bytes(rec[:n])
    items = S.encode_batch_items([(0, b"x" * 100, b"TAGS\x01A")] * 4)
    cases = {
        "cq_read(1 unit)": lambda: S.cq_read(units, 0, 1),
        "cq_select(64 units)": lambda: S.cq_select(units, 0, 64, None, 32, 1 << 20),
        "measure_batch(4 items)": lambda: S.measure_batch(items, 1, 0, 0),
        "scan_records(1 record)": lambda: S.scan_records(buf, 0, n, 0, False, (1000,), 16),
        "walk_records(1 record)": lambda: c.walk_records(buf, 0, n, False),
    }
    row = {"bench": "kernel_calls", "unit": "ns per call"}
    for name, fn in cases.items():
        row[name] = round(min(timeit.repeat(fn, number=20000, repeat=7)) / 20000 * 1e9, 1)
    row["loadavg_1m"] = os.getloadavg()[0]
    print(json.dumps(row))


if __name__ == "__main__":
    main()
