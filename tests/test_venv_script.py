"""scripts/_venv.sh, which scripts/mqbroker sources before the first start: the minutes of pip
and Cython a first start takes are announced on the console before they begin (the console
used to stay silent for ~2 minutes and the start looked hung), and a start with nothing changed
says nothing and installs nothing. The venv's python is a stand-in that logs its calls."""
from __future__ import annotations

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# the venv's python: logs each call, and answers spark_uses_this_python's sysconfig question
STUB = """#!/bin/sh
if [ "$1" = "-c" ]; then echo "{site}"; exit 0; fi
echo "python $*" >> "{log}"
exit 0
"""


def _start(venv: str, log: str) -> str:
    # each stderr line goes to the same log as the stand-in's calls, so their order is kept
    script = (f'. scripts/_venv.sh; ensure_venv "" 2> >(while IFS= read -r l; do echo "say $l" >> "{log}"; done); '
              "wait")
    subprocess.run(["bash", "-c", script], cwd=ROOT, check=True, timeout=60,
                   env={**os.environ, "MQCORE_VENV": venv})
    with open(log) as f:
        return f.read()


def test_a_first_start_says_it_installs_before_it_does_and_a_second_says_nothing(tmp_path):
    venv, log, site = tmp_path / "venv", tmp_path / "calls.log", tmp_path / "site"
    (venv / "bin").mkdir(parents=True)
    site.mkdir()
    py = venv / "bin" / "python"
    py.write_text(STUB.format(site=site, log=log))
    py.chmod(0o755)
    log.write_text("")
    lines = _start(str(venv), str(log)).splitlines()
    pips = [i for i, line in enumerate(lines) if line.startswith("python -m pip")]
    said = [i for i, line in enumerate(lines) if line.startswith("say installing mqcore into") and "a first start takes" in line]
    assert pips and said and said[0] < pips[0], lines
    assert lines[-1] == f"say mqcore installed in {venv}", lines
    if not any(n.startswith("_store") and n.endswith(".so") for n in os.listdir(os.path.join(ROOT, "mqcore"))):
        return  # a checkout never built installs again each time (the extension is what the stamp needs)
    log.write_text("")
    assert _start(str(venv), str(log)) == "", "nothing changed: no install and nothing said"
