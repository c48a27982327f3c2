"""Run the Apache RocketMQ C++ client (rocketmq==0.4.4) in its own venv from tests."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

DRIVER = os.path.join(os.path.dirname(__file__), "cpp_driver.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpp_python() -> str:
    """The C++ client's interpreter: $MQCORE_CPP_PYTHON (set by scripts/test) or .venv-cpp."""
    path = os.environ.get("MQCORE_CPP_PYTHON") or os.path.join(ROOT, ".venv-cpp", "bin", "python")
    if not os.path.exists(path):
        pytest.fail("the Apache C++ client is not installed: run scripts/test (it creates .venv-cpp with "
                    "rocketmq==0.4.4), or set MQCORE_CPP_PYTHON")
    return path


#: what the C++ library (rocketmq-client-cpp 2.x under rocketmq==0.4.4) prints when its own
#: push consumer shutdown aborts: a rebalance thread interrupted by the shutdown rethrows
#: ``boost::thread_interrupted`` out of its thread function. It happens rarely, on a loaded
#: machine, inside ``PushConsumer.shutdown()`` after everything asked for was received.
SHUTDOWN_ABORT = "terminate called after throwing an instance of 'boost::thread_interrupted'"


def _aborted_in_shutdown(returncode: int, stderr: str, events: list[dict]) -> bool:
    """The driver got as far as shutting the consumer down (its last event) and the library
    aborted there with SHUTDOWN_ABORT: the run's events stand, and the test's own checks
    decide (a consumer whose offsets were not persisted shows as redelivery in the next run)."""
    return returncode == -6 and bool(events) and "shutting_down" in events[-1] and SHUTDOWN_ABORT in stderr


def run_cpp(command: dict, home, timeout: float = 90) -> list[dict]:
    """Run one driver command; returns its JSON events. HOME is redirected (the client logs there)."""
    env = dict(os.environ, HOME=str(home))
    p = subprocess.run([cpp_python(), DRIVER, json.dumps(command)], capture_output=True, text=True,
                       timeout=timeout, env=env)
    events = []
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            events.append(json.loads(line))
    errors = [e["error"] for e in events if "error" in e]
    if (p.returncode != 0 and not _aborted_in_shutdown(p.returncode, p.stderr, events)) or errors:
        raise AssertionError(f"C++ client failed ({p.returncode}): {errors}\nstdout:{p.stdout[-3000:]}\n"
                             f"stderr:{p.stderr[-3000:]}")
    return events


def start_cpp(command: dict, home) -> subprocess.Popen:
    """Start a long-running driver command (a consumer) in the background."""
    env = dict(os.environ, HOME=str(home))
    return subprocess.Popen([cpp_python(), DRIVER, json.dumps(command)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def collect(proc: subprocess.Popen, timeout: float = 90) -> list[dict]:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        raise AssertionError(f"C++ client did not finish:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    events = [json.loads(line) for line in stdout.splitlines() if line.strip().startswith("{")]
    errors = [e["error"] for e in events if "error" in e]
    if (proc.returncode != 0 and not _aborted_in_shutdown(proc.returncode, stderr, events)) or errors:
        raise AssertionError(f"C++ client failed ({proc.returncode}): {errors}\n{stderr[-3000:]}")
    return events
