"""mqcore.testing: a real mqbroker whose clock the test advances.

The scenarios a user writes (a delay level of 2 h, a timer a day out, 16 retries to the
dead-letter queue, a transaction check-back, clients alive through skipped days) live in a
project of their own, ``examples/pytest-project``, which has no conftest.py: it runs here in a
temp copy with ``python -m pytest``, so it sees only what installing mqcore gives pytest (the
plugin's entry point). Each scenario would wait the real delay, and time out, without the
virtual clock reaching the broker's services."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mqcore.errors import IllegalStateError
from mqcore.testing import TestBroker

pytestmark = pytest.mark.timeout(300)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pytest-project"


def test_the_example_project_runs_hours_of_broker_time_in_seconds(tmp_path):
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    assert not list(project.rglob("conftest.py"))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0", "."],
                       cwd=project, capture_output=True, text=True, timeout=240, env=dict(os.environ))
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "5 passed" in p.stdout, p.stdout[-2000:]
    assert elapsed < 120, f"the example project took {elapsed:.0f} s"


def test_the_clock_never_moves_back_and_a_stop_removes_the_temp_store():
    with TestBroker() as b:
        with pytest.raises(ValueError):
            b.advance(-1)
        before = b.now_ms()
        assert b.advance(minutes=5) >= before + 300_000
        store = b.store_dir
    assert not os.path.exists(store)


def test_a_broker_that_dies_during_a_test_is_reported_at_stop():
    b = TestBroker().start()
    b._failure = RuntimeError("the loop died")  # what _run records when the broker's loop raises
    with pytest.raises(IllegalStateError, match="the loop died"):
        b.stop()
    assert not os.path.exists(b.store_dir)


def test_the_fixture_takes_broker_conf_from_a_mark(tmp_path):
    (tmp_path / "test_conf.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.rocketmq_conf(messageDelayLevel='1s 2s')\n"
        "def test_levels(rocketmq_broker):\n"
        "    assert tuple(rocketmq_broker.broker.store.config.delay_levels_ms) == (1000, 2000)\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_conf.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout[-3000:] + p.stderr[-2000:]
