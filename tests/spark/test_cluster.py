"""The reader and every analytics job on a real Spark standalone cluster (master + worker on
loopback, started and stopped by PID), submitted with ``spark-submit`` the way a user would:
the executors' Python is a PEX file the job ships (``--files``), built from this project, so
nothing is installed on the workers by hand. Results must equal a local run's."""
from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(PROJECT_ROOT, "tests", "spark", "cluster_job.py")
PEX_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "mqcore", "pex")
START_TIMEOUT_S = 240


def _spark_home() -> str:
    import pyspark
    return os.path.dirname(pyspark.__file__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sources_digest() -> str:
    h = hashlib.sha256()
    for pattern in ("mqcore/**/*.py", "mqcore/*.pyx", "mqcore/*.pxd", "mqcore/*.pxi", "mqcore/*.h",
                    "pyproject.toml", "setup.py", "pyspark_rocketmq.py"):
        for path in sorted(glob.glob(os.path.join(PROJECT_ROOT, pattern), recursive=True)):
            h.update(path.encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.hexdigest()[:16]


@pytest.fixture(scope="module")
def mqcore_pex():
    """mqcore (compiled extension included) and its runtime dependencies in one PEX file,
    rebuilt only when the sources change. ``--inherit-path=fallback`` lets the workers'
    pyspark (which Spark puts on PYTHONPATH) be found."""
    os.makedirs(PEX_CACHE, exist_ok=True)
    out = os.path.join(PEX_CACHE, f"mqcore-{_sources_digest()}.pex")
    if not os.path.exists(out):
        for old in glob.glob(os.path.join(PEX_CACHE, "mqcore-*.pex")):
            os.unlink(old)
        tmp = out + ".tmp"
        r = subprocess.run([sys.executable, "-m", "pex", PROJECT_ROOT, "pyarrow", "--inherit-path=fallback",
                            "--python", sys.executable, "-o", tmp], capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, f"building the PEX failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        os.replace(tmp, out)
    return out


class _Daemon:
    def __init__(self, argv: list[str], log: str, ready: str, env: dict):
        self.log = log
        self.ready = re.compile(ready)
        self.f = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=self.f, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)

    def wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            with open(self.log) as f:
                if self.ready.search(f.read()):
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        with open(self.log) as f:
            raise RuntimeError(f"{self.log} did not become ready:\n{f.read()[-3000:]}")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.f.close()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory, spark):  # spark: the same Java/pyspark checks as every Spark test
    work = tmp_path_factory.mktemp("standalone")
    home = _spark_home()
    env = dict(os.environ, SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(work),
               SPARK_WORKER_DIR=str(work / "work"))
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    webui = _free_port()
    env["MQCORE_TEST_MASTER_WEBUI"] = f"http://127.0.0.1:{webui}"  # the master's JSON: /json/
    spark_class = os.path.join(home, "bin", "spark-class")
    master = _Daemon([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                      "--port", str(port), "--webui-port", str(webui)],
                     str(work / "master.log"), r"New state: ALIVE", env)
    worker = None
    try:
        master.wait_ready()
        worker = _Daemon([spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                          "--cores", "2", "--memory", "1g", "--webui-port", str(_free_port()),
                          "--work-dir", str(work / "work")],
                         str(work / "worker.log"), r"Successfully registered with master", env)
        worker.wait_ready()
        yield url, env
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


def _rows(path: str) -> list:
    """A job's --out directory as sorted rows (CSV or Parquet part files)."""
    rows = []
    for part in sorted(glob.glob(os.path.join(path, "part-*"))):
        if part.endswith(".csv"):
            with open(part, newline="") as f:
                rows += [tuple(r) for r in csv.reader(f)]
        elif part.endswith(".parquet"):
            t = pq.read_table(part)
            t = t.drop([c for c in t.column_names if c in ("body",)])
            rows += [tuple(str(v) for v in r.values()) for r in t.to_pylist()]
    return sorted(rows)


def _master_apps(env: dict) -> list[dict]:
    """Every application the standalone master knows (running and completed), from its JSON UI."""
    import urllib.request
    with urllib.request.urlopen(env["MQCORE_TEST_MASTER_WEBUI"] + "/json/", timeout=10) as r:
        state = json.load(r)
    return state.get("activeapps", []) + state.get("completedapps", [])


def _result(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError("the job printed no RESULT line:\n" + stdout[-3000:])


# The PEX build (first run on a machine: minutes) and two spark-submits under a loaded CI
# machine do not fit the suite's 300 s default; the subprocess timeouts above bound each step.
@pytest.mark.timeout(2400)
def test_reader_and_every_job_on_a_standalone_cluster(standalone, mqcore_pex, store_dir, tmp_path):
    url, env = standalone
    before = {a["id"] for a in _master_apps(env)}
    local = subprocess.run([sys.executable, JOB, store_dir, str(tmp_path / "local"), "--master", "local[2]"],
                           capture_output=True, text=True, timeout=900,
                           env=dict(os.environ, PYTHONPATH=PROJECT_ROOT, SPARK_LOCAL_IP="127.0.0.1"))
    assert local.returncode == 0, local.stderr[-3000:]

    # the driver runs in the submit directory, next to the PEX it ships to the executors
    submit_dir = tmp_path / "submit"
    submit_dir.mkdir()
    shutil.copy(mqcore_pex, submit_dir / "mqcore.pex")
    submit = [os.path.join(env["SPARK_HOME"], "bin", "spark-submit"), "--master", url,
              "--files", "mqcore.pex",
              "--conf", "spark.pyspark.python=./mqcore.pex",
              "--conf", "spark.pyspark.driver.python=./mqcore.pex",
              "--conf", "spark.executorEnv.PEX_INHERIT_PATH=fallback",
              "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
              "--conf", "spark.executor.memory=512m", JOB, store_dir, str(tmp_path / "cluster")]
    clean_env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "VIRTUAL_ENV")}
    cluster = subprocess.run(submit, capture_output=True, text=True, timeout=1200, cwd=submit_dir,
                             env=dict(clean_env, PEX_INHERIT_PATH="fallback"))
    assert cluster.returncode == 0, cluster.stderr[-5000:]

    assert [a["name"] for a in _master_apps(env) if a["id"] not in before] == ["mqcore-cluster-test"]
    want, got = _result(local.stdout), _result(cluster.stdout)
    assert got["counts"] == want["counts"] and got["checksum"] == want["checksum"]
    assert sum(want["counts"].values()) > 1000
    # the executors ran the shipped PEX (compiled kernels included), not the project's checkout
    for path, kernels in got["executors"]:
        assert not path.startswith(PROJECT_ROOT) and "pex" in path, path
        assert kernels == "mqcore._store"
    for job in ("volume", "lag", "retries", "lookup", "sizes", "export"):
        expected = _rows(str(tmp_path / "local" / job))
        assert expected, job
        assert _rows(str(tmp_path / "cluster" / job)) == expected, job


@pytest.mark.timeout(900)
def test_analytics_script_submitted_to_the_master_runs_there(standalone, store_dir, tmp_path):
    """``spark-submit --master spark://... scripts/mqcore_analytics.py volume STORE``, as
    mqcore/spark/README.md writes it: the application must be registered with the master (a job
    that falls back to local[*] on the submitting machine never is) and its executors must have
    done the work. mqcore is on the workers through PYTHONPATH and this venv's Python."""
    url, env = standalone
    before = {a["id"] for a in _master_apps(env)}
    submit = [os.path.join(env["SPARK_HOME"], "bin", "spark-submit"), "--master", url,
              "--conf", f"spark.pyspark.python={sys.executable}",
              "--conf", f"spark.executorEnv.PYTHONPATH={PROJECT_ROOT}",
              "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
              "--conf", "spark.executor.memory=512m",
              os.path.join(PROJECT_ROOT, "scripts", "mqcore_analytics.py"), "volume", store_dir,
              "--bucket", "1h", "--out", str(tmp_path / "volume")]
    clean_env = {k: v for k, v in env.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    r = subprocess.run(submit, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                       env=dict(clean_env, PYTHONPATH=PROJECT_ROOT))
    assert r.returncode == 0, r.stderr[-5000:]
    assert "== volume" in r.stdout, r.stdout[-3000:]
    assert _rows(str(tmp_path / "volume"))
    new = [a for a in _master_apps(env) if a["id"] not in before]
    assert [a["name"] for a in new] == ["mqcore-analytics volume"], new
