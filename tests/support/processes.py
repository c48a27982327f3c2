"""Real broker / name server processes for tests: loopback, free ports, always stopped.

    with BrokerProcess(tmp_path / "store") as b:
        b.namesrv_addr, b.broker_addr
        b.kill9(); b.restart()

The process prints ``READY broker=<addr> namesrv=<addr> advertised=<addr>`` when it serves
(the first two listen; ``advertised`` is brokerIP1's address as clients get it); ports are
picked by the OS (port 0) so parallel tests never collide.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque

READY_TIMEOUT_S = 120  # a loaded 2-core CI machine has taken over 60 s to boot a broker
#: small store files for test brokers (see BrokerProcess)
TEST_FILE_SIZES = {"mappedFileSizeCommitLog": 32 << 20, "mappedFileSizeConsumeQueue": 30000 * 20,
                   "maxHashSlotNum": 50_000, "maxIndexNum": 200_000, "mappedFileSizeTimerLog": 4 << 20}


class _Proc:
    argv: list[str]

    def __init__(self, log_name: str, *, nofile: int | tuple[int, int] | None = None):
        self.proc: subprocess.Popen | None = None
        #: RLIMIT_NOFILE of the process: one number for soft and hard, or (soft, hard); None: inherited
        self.nofile = nofile
        self.lines: deque[str] = deque(maxlen=2000)
        self.log_name = log_name

    def _spawn(self) -> str:
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.lines.clear()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     preexec_fn=None if self.nofile is None else self._limit_nofile)
        ready = threading.Event()
        result = {}

        def pump(proc=self.proc):
            for line in proc.stdout:
                self.lines.append(line.rstrip("\n"))
                if line.startswith("READY ") and not ready.is_set():
                    result["line"] = line.strip()
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True, name=f"{self.log_name}-stdout").start()
        if not ready.wait(READY_TIMEOUT_S) or "line" not in result:
            self.stop()
            raise RuntimeError(f"{self.log_name} did not start:\n" + "\n".join(self.lines))
        return result["line"]

    def _limit_nofile(self) -> None:
        import resource
        limits = self.nofile if isinstance(self.nofile, tuple) else (self.nofile, self.nofile)
        resource.setrlimit(resource.RLIMIT_NOFILE, limits)

    def stop(self, timeout_s: float = 30) -> int | None:
        """SIGTERM (clean shutdown); SIGKILL if it does not exit in time."""
        p = self.proc
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.proc = None
        return p.returncode

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def output(self) -> str:
        return "\n".join(self.lines)

    def __exit__(self, *exc) -> None:
        self.stop()


class NamesrvProcess(_Proc):
    def __init__(self, extra_args: list[str] | None = None):
        super().__init__("mqnamesrv")
        # logs go to a temp dir of their own, never to ~/logs/rocketmqlogs
        self.log_dir = tempfile.mkdtemp(prefix="mqnamesrv-logs-")
        self.argv = [sys.executable, "-m", "mqcore.namesrv.cli", "--port", "0", "--log-dir", self.log_dir,
                     *(extra_args or [])]
        self.addr = ""

    def start(self) -> "NamesrvProcess":
        line = self._spawn()
        self.addr = line.split("namesrv=")[1].strip()
        return self

    def __enter__(self) -> "NamesrvProcess":
        return self.start()


class BrokerProcess(_Proc):
    def __init__(self, store_dir, *, namesrv: str | None = None, conf: dict | None = None,
                 broker_name: str = "broker-a", extra_args: list[str] | None = None,
                 nofile: int | tuple[int, int] | None = None, listen_port: int = 0):
        super().__init__(f"mqbroker {broker_name}", nofile=nofile)
        self.store_dir = str(store_dir)
        self.namesrv = namesrv
        # store files are reserved on disk when created (posix_fallocate): RocketMQ's 1 GiB
        # commitlog, 6 MB queue and 420 MB index files per test broker would fill a CI disk, so
        # test brokers use small ones unless a test names its own
        self.conf = {**TEST_FILE_SIZES, **(conf or {})}
        self.broker_name = broker_name
        self.extra_args = list(extra_args or [])
        self.broker_addr = ""
        self.namesrv_addr = ""
        #: 0 = a free port picked by the OS (then no VIP port, listenPort - 2); a restart keeps it
        self._port = listen_port
        self._ns_port = 0
        self.log_dir = self.store_dir.rstrip("/") + "-logs"

    def _argv(self) -> list[str]:
        os.makedirs(self.store_dir, exist_ok=True)
        conf_path = os.path.join(os.path.dirname(self.store_dir.rstrip("/")) or ".",
                                 f"{os.path.basename(self.store_dir.rstrip('/'))}.conf")
        with open(conf_path, "w") as f:
            for k, v in self.conf.items():
                f.write(f"{k}={v}\n")
        argv = [sys.executable, "-m", "mqcore.broker.cli", "-c", conf_path, "--store", self.store_dir,
                "--listen-port", str(self._port), "--broker-name", self.broker_name]
        if "logDir" not in self.conf:  # logs next to the store, never in ~/logs/rocketmqlogs
            argv += ["--log-dir", self.log_dir]
        if self.namesrv:
            argv += ["-n", self.namesrv]
        else:
            argv += ["--namesrv-port", str(self._ns_port)]
        return argv + self.extra_args

    def start(self) -> "BrokerProcess":
        self.argv = self._argv()
        line = self._spawn()
        fields = dict(part.split("=", 1) for part in line.split()[1:])
        self.broker_addr = fields["broker"]
        self.namesrv_addr = fields["namesrv"]
        self.advertised_addr = fields.get("advertised", self.broker_addr)
        # a restart keeps the same ports, as a real broker would
        self._port = int(self.broker_addr.rsplit(":", 1)[1])
        if not self.namesrv:
            self._ns_port = int(self.namesrv_addr.rsplit(":", 1)[1])
        return self

    def restart(self) -> "BrokerProcess":
        self.stop()
        deadline = time.monotonic() + 20
        while True:  # the port may linger briefly after a kill
            try:
                return self.start()
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def __enter__(self) -> "BrokerProcess":
        return self.start()
