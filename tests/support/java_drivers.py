"""The Java drivers (tests/reference/drivers/*.java) compiled once per session with ``javac``,
then run as classes: a launch costs the JVM start, not a compile each time.

    classes = compile_drivers(tmp_dir)
    out = run_driver(classes, "ClientScenarios", [namesrv, prefix, "produce"])
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.support.reference import DRIVERS_DIR, JDK17_FLAGS, client_classpath


def compile_drivers(out_dir: Path) -> Path:
    """javac every driver against the official 4.9.8 client; returns the classes directory."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = sorted(str(p) for p in DRIVERS_DIR.glob("*.java"))
    r = subprocess.run(["javac", "-nowarn", "-J-Xmx512m", "-d", str(out_dir), "-cp", client_classpath(), *sources],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"javac failed:\n{r.stdout}\n{r.stderr}")
    return out_dir


def run_driver(classes: Path, main: str, args: list[str], *, timeout_s: float = 600,
               logroot: Path | None = None) -> subprocess.CompletedProcess:
    """Runs a compiled driver's main class; returns the finished process (stdout has its lines)."""
    logroot = Path(logroot or os.environ.get("TMPDIR", "/tmp")) / "java-client-logs"
    argv = ["java", "-Xmx256m", "-XX:+UseSerialGC", *JDK17_FLAGS, f"-Drocketmq.client.logRoot={logroot}",
            "-Drocketmq.client.logLevel=WARN", "-cp", f"{classes}{os.pathsep}{client_classpath()}", main, *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)


def scenario_results(stdout: str) -> dict[str, tuple[bool, dict[str, str], str]]:
    """``RESULT name OK k=v ...`` lines -> {name: (ok, facts, line)}."""
    out = {}
    for line in stdout.splitlines():
        if not line.startswith("RESULT "):
            continue
        _, name, status, *rest = line.split(" ")
        facts = dict(word.split("=", 1) for word in rest if "=" in word)
        out[name] = (status == "OK", facts, line)
    return out
