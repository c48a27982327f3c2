"""The kernel interface is typed: mypy checks that the Cython module (through mqcore/_store.pyi)
and the pure-Python twin both satisfy ``mqcore.kernel_api.StoreKernels``."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import mqcore

ROOT = os.path.dirname(os.path.dirname(mqcore.__file__))
CHECK = os.path.join(ROOT, "tests", "typing", "kernels_conform.py")


def _mypy(*paths: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="mypy is in the test extra: pip install -e .[test]")
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
                           "--ignore-missing-imports", "--no-error-summary", "--hide-error-context",
                           "--python-version", "3.11", *paths],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_both_kernel_modules_satisfy_the_protocol():
    r = _mypy(CHECK, os.path.join(ROOT, "mqcore", "kernel_api.py"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_check_fails_when_a_kernel_is_missing(tmp_path):
    """The check can fail: a module without ``index_put`` does not satisfy the Protocol."""
    from mqcore.kernel_api import StoreKernels
    members = sorted(n for n in vars(StoreKernels) if not n.startswith("_") and n != "index_put")
    assert "index_query" in members and len(members) > 25
    stub = tmp_path / "broken_kernels.py"
    # "name as name": an explicit re-export, which mypy --strict (pyproject.toml) requires
    stub.write_text("from mqcore._store_py import (%s)\n" % ", ".join(f"{m} as {m}" for m in members))
    check = tmp_path / "check_broken.py"
    check.write_text("import broken_kernels\nfrom mqcore.kernel_api import StoreKernels\n"
                     "k: StoreKernels = broken_kernels\n")
    env_path = f"{tmp_path}{os.pathsep}{ROOT}"
    pytest.importorskip("mypy")
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent",
                        "--ignore-missing-imports", "--python-version", "3.11", str(check)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "MYPYPATH": env_path})
    assert r.returncode != 0 and "index_put" in r.stdout, r.stdout + r.stderr


def test_multi_value_kernels_return_their_named_type(kernels, column_kernels):
    """Both implementations return the NamedTuples of format.scans, so callers read fields by name."""
    import numpy as np

    from mqcore.format import scans

    units = np.zeros(3 * 20, np.uint8)
    assert type(kernels.cq_read(units, 0, 3)) is scans.QueueUnits
    assert type(kernels.cq_select(units, 0, 3, None, 3, 1 << 20)) is scans.QueueSelection
    assert type(kernels.measure_batch(b"", 1, 0, 0)) is scans.BatchMeasure
    scan = kernels.scan_records(bytes(64), 0, 64, 0, False, (1000,), 10)
    assert type(scan) is scans.RecordScan and scan.stop == 0 and scan.reason == 2  # NO_DATA
    assert type(kernels.index_keys(b"", scan.table, scan.topics)) is scans.IndexKeys
    walk = column_kernels.walk_records(bytes(64), 0, 64, False)
    assert type(walk) is scans.RecordWalk and walk == (0, 0, 2, -1, -1)
    batch = column_kernels.decode_columns(bytes(64), 0, 64, 64, 0, 10, 1024, None, -(1 << 62), 1 << 62, 0)
    assert type(batch) is scans.ColumnBatch and batch.rows == 0 and batch.reason == 2
    at = column_kernels.decode_columns_at(bytes(64), np.zeros(0, np.int64), 0, 64, 0, 10, 1024, None,
                                          -(1 << 62), 1 << 62, 0)
    assert type(at) is scans.ColumnBatch
