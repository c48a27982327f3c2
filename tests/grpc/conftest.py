"""Fixtures for the 5.x gRPC endpoint: a real mqbroker process with the endpoint on a free
port, and the official 5.x clients (Python in its own venv, Node.js in a scratch directory)
that ``scripts/setup.d/20-grpc.sh`` installs. A missing client fails the test with the
command that installs it: the interoperability tests are never skipped."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.processes import BrokerProcess

DRIVERS = Path(__file__).parent / "drivers"
GRPC_LINE = re.compile(r"gRPC endpoint \(RocketMQ 5\.x\) serving on ([\d.]+:\d+)")
#: short invisible durations keep the retry tests quick (the proxy's own minimum is 10 s)
TEST_CONF = {"grpcServerEnable": "true", "grpcServerPort": "0", "grpcMinInvisibleTimeMillis": "1000",
             "flushConsumerOffsetInterval": "500"}


def grpc_addr(broker: BrokerProcess) -> str:
    for line in broker.lines:
        m = GRPC_LINE.search(line)
        if m:
            return m.group(1)
    raise AssertionError("the broker did not report its gRPC endpoint:\n" + broker.output())


@pytest.fixture
def grpc_broker(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=TEST_CONF) as b:
        b.grpc_addr = grpc_addr(b)
        yield b


@pytest.fixture(scope="module")
def module_grpc_broker(tmp_path_factory):
    """One broker for a module whose tests use topics of their own."""
    with BrokerProcess(tmp_path_factory.mktemp("grpc") / "store", conf=TEST_CONF) as b:
        b.grpc_addr = grpc_addr(b)
        yield b


def _need(env: str, what: str) -> str:
    value = os.environ.get(env)
    if not value:
        pytest.fail(f"{env} is not set: {what} is installed by scripts/setup.d/20-grpc.sh (run the suite "
                    f"with scripts/test)")
    return value


@pytest.fixture(scope="session")
def py5_python() -> str:
    return _need("MQCORE_GRPC_PY_CLIENT", "the official Python 5.x client (rocketmq-python-client)")


@pytest.fixture(scope="session")
def node5_dir() -> str:
    return _need("MQCORE_GRPC_NODE_CLIENT_DIR", "the official Node.js 5.x client (rocketmq-client-nodejs)")


def _results(proc: subprocess.CompletedProcess, what: str) -> list[dict]:
    out = []
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            out.append(json.loads(line[7:]))
        elif line.startswith("ERROR "):
            raise AssertionError(f"{what} failed at step {len(out)}: {line[6:]}\n{proc.stderr[-3000:]}")
    if proc.returncode != 0:
        raise AssertionError(f"{what} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return out


def run_py5(python: str, endpoint: str, steps: list[dict], timeout_s: float = 120) -> list[dict]:
    """Run steps with the official Python 5.x client; one result per step."""
    return _results(run_py5_raw(python, endpoint, steps, timeout_s), "the Python 5.x client")


def run_py5_raw(python: str, endpoint: str, steps: list[dict], timeout_s: float = 120,
                credentials: tuple[str, str] | None = None) -> subprocess.CompletedProcess:
    """The driver's process, however it ended; ``credentials`` (access key, secret key) sign."""
    # the client logs to ~/logs/rocketmq_python (up to 1 GB): keep that out of the real home
    home = os.path.join(tempfile.gettempdir(), "mqcore-grpc-client-home")
    os.makedirs(home, exist_ok=True)
    env = dict(os.environ, HOME=home)
    if credentials is not None:
        env.update(MQCORE_PY5_AK=credentials[0], MQCORE_PY5_SK=credentials[1])
    return subprocess.run([python, str(DRIVERS / "py5_driver.py"), endpoint, json.dumps(steps)],
                          capture_output=True, text=True, timeout=timeout_s, env=env)


def run_node5(node_dir: str, endpoint: str, steps: list[dict], timeout_s: float = 120) -> list[dict]:
    """Run steps with the official Node.js 5.x client; one result per step."""
    proc = subprocess.run(["node", str(DRIVERS / "node5_driver.js"), endpoint, json.dumps(steps)],
                          capture_output=True, text=True, timeout=timeout_s,
                          env=dict(os.environ, NODE_PATH=str(Path(node_dir) / "node_modules"),
                                   MQCORE_NODE_DRIVER_WATCHDOG_MS=str(int((timeout_s - 15) * 1000))))
    return _results(proc, "the Node.js 5.x client")


__all__ = ["run_py5", "run_node5", "grpc_addr", "TEST_CONF", "sys"]
