"""Every ```python block of every README.md (and docs/*.md) runs as written.

A block runs as its own Python program (``sys.executable``, a temp working directory,
stdin holding one empty line so an ``input()`` returns). A block that needs something
says so on the line just before it, in an HTML comment that Markdown does not show::

    <!-- example: broker -->

Words (any combination):

``broker``
    a live mqbroker runs; the address ``127.0.0.1:9876`` in the block is replaced by its
    name server (the port the block names may be taken on a shared machine).
``store``
    the path ``/data/rocketmq/store`` in the block is replaced by that broker's store, which
    holds a few messages of topic ``Orders`` (implies ``broker``).
``spark``
    the block starts a SparkSession (pyspark and Java): a longer time limit.
``cpp-client``
    the block uses the Apache RocketMQ C++ client (PyPI ``rocketmq``), which lives in its own
    interpreter (``MQCORE_CPP_PYTHON``, set up by ``scripts/test``).
``grpc-client``
    the block uses the official RocketMQ 5.x Python client against a broker with the gRPC
    endpoint on: ``127.0.0.1:8081`` is replaced by that endpoint, and the block runs in the
    client's own interpreter (``MQCORE_GRPC_PY_CLIENT``, set up by ``scripts/test``).

``pytest``
    the block is a test file of a project of its own: it runs as ``python -m pytest`` in a
    fresh directory with no conftest.py, so its fixtures come from the installed plugin
    (``mqcore.testing``), and every test in it must pass.

``tls``
    a live mqbroker with ``tls.server.mode=permissive`` runs; ``127.0.0.1:9876`` is replaced
    by its name server.

An unknown word fails the test, so a typo cannot turn a block into one that never runs.
New README sections are picked up without changing this file.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mqcore.client import Message, Producer
from tests.support.processes import BrokerProcess

ROOT = Path(__file__).resolve().parent.parent
WORDS = {"broker", "store", "spark", "cpp-client", "grpc-client", "tls", "pytest"}
GRPC_IN_DOCS = "127.0.0.1:8081"
NAMESRV_IN_DOCS = "127.0.0.1:9876"
STORE_IN_DOCS = "/data/rocketmq/store"
SKIP_DIRS = {"build", "dist", "node_modules", "__pycache__"}

_BLOCK = re.compile(r"(?:<!--\s*example:\s*(?P<words>[^>]*?)\s*-->\s*\n)?```python[ \t]*\n(?P<code>.*?)^```",
                    re.S | re.M)


@dataclass
class Example:
    path: Path
    line: int
    words: frozenset[str]
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def markdown_files() -> list[Path]:
    out = []
    for path in ROOT.rglob("*.md"):
        rel = path.relative_to(ROOT)
        if any(part.startswith(".") or part in SKIP_DIRS for part in rel.parts[:-1]):
            continue  # .venv, .git, build output
        if path.name == "README.md" or rel.parts[0] == "docs":
            out.append(path)
    return sorted(out)


def examples() -> list[Example]:
    out = []
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        for m in _BLOCK.finditer(text):
            words = frozenset((m.group("words") or "").replace(",", " ").split())
            out.append(Example(path, text.count("\n", 0, m.start("code")), words, m.group("code")))
    return out


EXAMPLES = examples()


def test_the_extractor_finds_the_known_examples():
    ids = {e.id.split(":")[0] for e in EXAMPLES}
    assert {"README.md", "mqcore/client/README.md", "mqcore/spark/README.md"} <= ids
    for e in EXAMPLES:
        assert e.words <= WORDS, f"{e.id}: unknown example words {sorted(e.words - WORDS)} (known: {sorted(WORDS)})"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """A broker whose store holds a few ``Orders`` messages."""
    base = tmp_path_factory.mktemp("examples")
    # small commitlog files: a Spark example then plans over 1 MiB, not a sparse 1 GiB file
    with BrokerProcess(base / "store", conf={"mappedFileSizeCommitLog": 1 << 20}) as b:
        with Producer("examples-setup", namesrv_addr=b.namesrv_addr) as p:
            for i in range(3):
                p.send(Message("Orders", f'{{"id": {i}}}', tags="created", keys=[f"order-{i}"]))
        yield b


@pytest.fixture(scope="module")
def live_tls(tmp_path_factory):
    """A broker whose 4.x port (and name server) serve TLS and plaintext."""
    with BrokerProcess(tmp_path_factory.mktemp("examples-tls") / "store", conf={"tls.server.mode": "permissive"}) as b:
        yield b


@pytest.fixture(scope="module")
def live_grpc(tmp_path_factory):
    """A broker with the RocketMQ 5.x gRPC endpoint on a free port."""
    from tests.grpc.conftest import TEST_CONF, grpc_addr
    with BrokerProcess(tmp_path_factory.mktemp("examples-grpc") / "store", conf=TEST_CONF) as b:
        b.grpc_addr = grpc_addr(b)
        yield b


@pytest.mark.timeout(900)  # a Spark example starts a JVM: minutes on a loaded 2-core machine
@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs(example: Example, request, tmp_path):
    code = example.code
    env = dict(os.environ)
    python = sys.executable
    timeout = 120
    if example.words & {"broker", "store"}:
        b = request.getfixturevalue("live")
        code = code.replace(NAMESRV_IN_DOCS, b.namesrv_addr).replace(STORE_IN_DOCS, b.store_dir)
    if "tls" in example.words:
        code = code.replace(NAMESRV_IN_DOCS, request.getfixturevalue("live_tls").namesrv_addr)
    if "spark" in example.words:
        timeout = 840
        # as a user runs it (.venv/bin/python example.py): nobody told Spark which Python to use
        # and the venv not activated: `python3` on the PATH is not the venv's
        env.pop("PYSPARK_PYTHON", None)
        venv_bin = os.path.dirname(sys.executable)
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                      if p and os.path.realpath(p) != os.path.realpath(venv_bin))
    if "cpp-client" in example.words:
        python = os.environ.get("MQCORE_CPP_PYTHON", "")
        assert python and os.path.exists(python), \
            "MQCORE_CPP_PYTHON is not set: run the suite with scripts/test, which installs the C++ client"
    if "grpc-client" in example.words:
        code = code.replace(GRPC_IN_DOCS, request.getfixturevalue("live_grpc").grpc_addr)
        python = os.environ.get("MQCORE_GRPC_PY_CLIENT", "")
        assert python and os.path.exists(python), \
            "MQCORE_GRPC_PY_CLIENT is not set: run the suite with scripts/test, which installs the 5.x client"
        env["HOME"] = str(tmp_path)  # the 5.x client writes its logs under ~/logs
    script = tmp_path / ("test_example.py" if "pytest" in example.words else "example.py")
    script.write_text(code)
    argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)] if "pytest" in example.words \
        else [python, str(script)]
    p = subprocess.run(argv, cwd=tmp_path, input="\n", capture_output=True, text=True, timeout=timeout, env=env)
    assert p.returncode == 0, f"{example.id} failed:\n{code}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}"
    if "pytest" in example.words:
        assert " passed" in p.stdout and "failed" not in p.stdout and "error" not in p.stdout, p.stdout
    if "cpp-client" in example.words and "PushConsumer" in code:
        # the consumer's part shows a message arriving, not only a send status
        assert "received:" in p.stdout and "hello" in p.stdout, p.stdout
