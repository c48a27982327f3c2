"""The examples of docs/mqadmin.md and of the README's mqadmin section run as written, in order,
against a live mqbroker started as the docs say (``--broker-name broker-a``). The only change:
the broker runs on free ports, so its name server address replaces ``127.0.0.1:9876`` (the
shell examples read it from ``$NAMESRV_ADDR``, as RocketMQ's mqadmin does)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import BrokerProcess

# ~40 mqadmin processes: about 30 s on a quiet machine. Each one starts a Python that imports
# mqcore (~0.5 s of CPU); on a loaded 2-core CI box those starts alone took near 200 s, so the
# bounds below are machine-speed allowances, not a claim about the examples
SCRIPT_TIMEOUT_S = 420
pytestmark = [pytest.mark.timeout(SCRIPT_TIMEOUT_S + 60), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_NAMESRV = "127.0.0.1:9876"


def blocks(markdown: str) -> list[tuple[str, str]]:
    """(language, code) of the ```sh and ```python blocks, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(sh|python)\n(.*?)^```$", markdown, re.M | re.S)]


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("## Administering it: `mqadmin`")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def activation() -> str:
    """The README's quick start line that puts the tools on the PATH (run from the checkout)."""
    text = (ROOT / "README.md").read_text()
    quick = text[text.index("## Quick start"):text.index("\n## ", text.index("## Quick start") + 1)]
    lines = [code.strip() for lang, code in blocks(quick) if lang == "sh"]
    assert lines == [". .venv/bin/activate"], lines
    return lines[0]


def _venv_dir() -> Path:
    """The checkout's .venv, as the README's set-up commands make it (CI: scripts/test);
    a worktree without one borrows the running suite's venv through a .venv link."""
    venv = ROOT / ".venv"
    if not venv.exists():
        venv.symlink_to(Path(sys.executable).parent.parent)
    return venv


def test_docs_examples_run_as_written(tmp_path):
    mqadmin = shutil.which("mqadmin", path=str(Path(sys.executable).parent))
    assert mqadmin, "the mqadmin console script is not installed next to this Python (pip install -e .)"
    doc = blocks((ROOT / "docs" / "mqadmin.md").read_text())
    readme = blocks(readme_section())
    assert len(doc) >= 8 and readme, "the docs lost their examples"
    # as the README says after the quick start: the venv activated from the checkout, then the
    # commands by their bare names (the venv's bin is NOT put on the PATH by this test)
    _venv_dir()
    script = ["set -euo pipefail", f"cd {ROOT}", activation(), f"cd {tmp_path}",
              "mqstore --help >/dev/null", "mqcore-analytics --help >/dev/null"]
    for i, (lang, code) in enumerate(doc + readme):
        if lang == "python":
            path = tmp_path / f"example_{i}.py"
            # the one change: the name server address comes from the environment
            path.write_text("import os\n" + code.replace(f'"{DEFAULT_NAMESRV}"', 'os.environ["NAMESRV_ADDR"]'))
            script.append(f"python3 {path}")
        else:
            assert DEFAULT_NAMESRV not in code, "shell examples take the name server from $NAMESRV_ADDR"
            script.append(code)
        script.append(f"echo '@@@ block {i} done'")
    with BrokerProcess(tmp_path / "store", broker_name="broker-a") as b:
        venv_bin = os.path.realpath(Path(sys.executable).parent)
        path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                               if p and os.path.realpath(p) != venv_bin)
        env = dict(os.environ, NAMESRV_ADDR=b.namesrv_addr, TMPDIR=str(tmp_path), PATH=path)
        p = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, env=env,
                           timeout=SCRIPT_TIMEOUT_S, cwd=tmp_path)
    assert p.returncode == 0, f"an example failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    assert p.stdout.count("@@@ block") == len(doc) + len(readme)
    out = p.stdout
    assert "create topic to" in out and "broker-a" in out
    assert "Keys:                [order-3]" in out  # queryMsgById printed the message
    # after the consumer caught up the backlog is 0; after the reset to time 0 it is all 3 messages
    assert "Diff Total: 0" in out and "Diff Total: 3" in out
    assert "order-workers has no consumer online" in out
    assert "delete topic [Orders] from cluster [DefaultCluster] success." in out
