"""The venv the README's set-up commands build (``scripts/_venv.sh``: an editable install), used
as a user uses it: its Python run by path, not activated, nothing else on PYTHONPATH.

* mypy run from that venv sees ``mqcore`` (setuptools' default editable mode installs an import
  hook that mypy cannot follow, so ``mqcore.client`` was "missing library stubs");
* ``spark.read.format("rocketmq")`` works without ``register()``: PySpark finds data sources by
  listing ``pyspark_*`` modules on sys.path in a Python worker, which needs this checkout on
  sys.path (editable compat mode) and a worker started with this venv's Python (the venv's
  ``mqcore-spark-python.pth``), not the system's ``python3``.

The suite runs in that venv (``scripts/test``), so ``sys.executable`` is it.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import storegen

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _as_a_user(tmp_path) -> dict:
    """No PYTHONPATH, no PYSPARK_PYTHON, the venv's bin not on PATH (not activated)."""
    venv_bin = os.path.realpath(os.path.dirname(sys.executable))
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "MYPYPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.realpath(p) != venv_bin)
    env["HOME"] = os.environ.get("HOME", str(tmp_path))
    return env


def test_mypy_from_the_venv_sees_mqcore(tmp_path):
    (tmp_path / "app.py").write_text(
        "from mqcore.client import Message, Producer\n"
        "def send(p: Producer) -> None:\n"
        "    p.send(Message('T', b'x'))\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--strict", "app.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600, env=_as_a_user(tmp_path))
    assert "Cannot find implementation or library stub" not in r.stdout, r.stdout
    assert "missing library stubs" not in r.stdout, r.stdout
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_format_rocketmq_without_register(tmp_path):
    store_dir = str(tmp_path / "store")
    storegen.build(store_dir, n=50)
    (tmp_path / "job.py").write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')\n"
        "         .config('spark.driver.host', '127.0.0.1').getOrCreate())\n"
        f"print('ROWS', spark.read.format('rocketmq').load({store_dir!r}).count())\n"
        "spark.stop()\n")
    env = dict(_as_a_user(tmp_path), SPARK_LOCAL_IP="127.0.0.1")
    r = subprocess.run([sys.executable, "job.py"], cwd=tmp_path, capture_output=True, text=True, timeout=840, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "ROWS 50" in r.stdout, r.stdout
