"""The wheel a release would put on PyPI, built as a packager builds it (``python -m build``) and
installed into a bare venv as a user installs it (``pip install mqcore-*.whl``): it carries the
four compiled extensions and the typing marker, its metadata is complete, and the installed
``mqbroker`` runs a broker on uvloop that the installed ``mqcore.client`` sends to and pulls
from. Nothing of this checkout is on that venv's path."""
from __future__ import annotations

import email.parser
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.support.processes import BrokerProcess

ROOT = Path(__file__).resolve().parent.parent
EXTENSIONS = ("_store", "_columns", "_pipeline", "_wire_client")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # a copy of the sources only (what git would ship: tracked and new files, nothing ignored), so
    # this checkout's built extensions, generated C and build/ neither leak in nor get written;
    # then an sdist and the wheel built from it, as `python -m build` does by default
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    r = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(src)],
                       capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    [whl] = out.glob("mqcore-*.whl")
    return whl


def test_the_wheel_carries_the_extensions_and_complete_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(meta_name).decode())
        entry = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    for ext in EXTENSIONS:
        assert any(n.startswith(f"mqcore/{ext}.") and n.endswith(".so") for n in names), ext
    assert "mqcore/py.typed" in names and "pyspark_rocketmq.py" in names
    assert any(n.startswith("mqcore/dashboard/templates/") for n in names)
    assert not any(n.endswith(".c") for n in names), "generated C sources do not belong in a wheel"
    assert meta["Name"] == "mqcore" and meta["License-Expression"] == "Apache-2.0"
    assert meta["Requires-Python"] == ">=3.11" and meta["Summary"]
    classifiers = meta.get_all("Classifier")
    assert "Programming Language :: Python :: 3.11" in classifiers and "Typing :: Typed" in classifiers
    requires = meta.get_all("Requires-Dist")
    assert any(r.startswith("uvloop") and "win32" in r and "extra" not in r for r in requires), requires
    assert {"spark", "grpc", "plots", "test"} <= set(meta.get_all("Provides-Extra"))
    assert "mqcore" in (meta.get_payload() or "")  # the README as the long description
    for command in ("mqbroker", "mqnamesrv", "mqadmin", "mqstore", "mqcore-analytics"):
        assert f"{command} = " in entry


def test_the_wheel_installs_into_a_bare_venv_and_runs_a_broker(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
                       capture_output=True, text=True, timeout=900, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    where = subprocess.run([str(py), "-c", "import mqcore, mqcore._store as s; print(mqcore.__file__, s.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert where.returncode == 0 and str(ROOT) not in where.stdout, where.stdout + where.stderr
    assert str(venv) in where.stdout

    class InstalledBroker(BrokerProcess):
        def _argv(self) -> list[str]:
            return [str(venv / "bin" / "mqbroker"), *super()._argv()[3:]]

    with InstalledBroker(tmp_path / "store") as b:
        assert "event loop uvloop" in b.output(), b.output()
        script = textwrap.dedent(f"""
            from mqcore.client import Message, Producer, PullConsumer, PullStatus
            with Producer("wheel-pg", namesrv_addr="{b.namesrv_addr}") as p:
                sent = p.send(Message("WheelTopic", b"from the wheel"))
            with PullConsumer("wheel-cg", namesrv_addr="{b.namesrv_addr}") as c:
                r = c.pull(sent.message_queue, "*", 0, 32)
            assert r.status is PullStatus.FOUND, r
            print("GOT", r.messages[0].body.decode())
        """)
        run = subprocess.run([str(py), "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path,
                             timeout=120)
        assert run.returncode == 0 and "GOT from the wheel" in run.stdout, run.stdout + run.stderr
