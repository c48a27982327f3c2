"""Apache RocketMQ as a reference: the Java name server, broker, mqadmin and Java client drivers.

``scripts/test`` (scripts/setup.d/10-reference.sh) copies the jars from Maven Central into a
cache and exports their directories; these helpers start the real processes on free loopback
ports with temp stores and always stop them by PID.

    with JavaNamesrv(tmp_path) as ns, JavaBroker(tmp_path / "b", ns.addr) as b:
        mqadmin(["topicList", "-n", ns.addr])
        run_java_driver("ProducerDriver.java", [ns.addr, "Topic"])

The server is RocketMQ 4.9.7 (the newest 4.x whose namesrv/broker jars Maven Central serves);
the Java client and mqadmin are 4.9.8. Missing jars fail the test with what to run, never skip.
"""
from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from pathlib import Path

import pytest

SERVER_LIB_ENV = "MQCORE_ROCKETMQ_SERVER_LIB"
CLIENT_LIB_ENV = "MQCORE_ROCKETMQ_CLIENT_LIB"
DRIVERS_DIR = Path(__file__).resolve().parent.parent / "reference" / "drivers"
START_TIMEOUT_S = 180  # JVM start under a loaded 2-core CI machine has exceeded 90 s

# RocketMQ 4.9's store and remoting reach into JDK internals (apache/rocketmq 3223, 3321, 5097)
JDK17_FLAGS = [
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
]

_LOGBACK = """<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5level [%thread] %logger{{20}} - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""


def _lib(env: str) -> str:
    d = os.environ.get(env, "")
    if not d or not os.path.isdir(d) or not any(n.endswith(".jar") for n in os.listdir(d)):
        pytest.fail(f"the Apache RocketMQ reference jars are missing (${env} is {d!r}): run the "
                    "suite with scripts/test, which fetches them from Maven Central "
                    "(scripts/setup.d/10-reference.sh)")
    return d


def server_classpath() -> str:
    return os.path.join(_lib(SERVER_LIB_ENV), "*")


def client_classpath() -> str:
    return os.path.join(_lib(CLIENT_LIB_ENV), "*")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux default 32768)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port_block(width: int = 1) -> int:
    """A port p with p-2 .. p+width-1 free: the Java broker also binds listenPort-2 (VIP
    channel) and listenPort+1 (HA). Taken below the kernel's ephemeral range: nothing there
    is handed out by bind(0) or to outgoing connections, so a test that just closed 10,000
    client sockets (each port in TIME_WAIT for a minute, unbindable) cannot crowd it out."""
    low = _ephemeral_low()
    for _ in range(400):
        p = random.randrange(max(1100, low - 12000), low - width)
        ok = True
        for q in range(p - 2, p + width):
            with socket.socket() as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", q))
                except OSError:
                    ok = False
                    break
        if ok:
            return p
    raise RuntimeError("no free block of loopback ports")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


#: the Java broker's JVM as Apache's bin/runbroker.sh starts it (G1, a fixed heap, 16 MiB
#: regions), with the heap scaled to this machine: what a benchmark compares against
RUNBROKER_JVM = ("-Xms4g", "-Xmx4g", "-XX:+UseG1GC", "-XX:G1HeapRegionSize=16m", "-XX:G1ReservePercent=25",
                 "-XX:InitiatingHeapOccupancyPercent=30", "-XX:SoftRefLRUPolicyMSPerMB=0",
                 "-XX:-OmitStackTraceInFastThrow", "-XX:+AlwaysPreTouch", "-XX:MaxDirectMemorySize=15g",
                 "-XX:-UseLargePages")


def java_env(home: Path) -> dict:
    env = dict(os.environ)
    env["ROCKETMQ_HOME"] = str(home)
    env.pop("JAVA_TOOL_OPTIONS", None)
    return env


class _JavaProc:
    main_class = ""
    logback_name = ""

    #: heap and collector: small, for a test machine running many JVMs (a benchmark passes
    #: runbroker.sh's choice, G1 with a large fixed heap, as RUNBROKER_JVM)
    jvm_opts: tuple[str, ...] = ("-Xms256m", "-Xmx768m", "-XX:+UseSerialGC")

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.home = self.workdir / "rmq-home"
        (self.home / "conf").mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.lines: deque[str] = deque(maxlen=2000)
        self.port = 0

    def _argv(self) -> list[str]:
        raise NotImplementedError  # each process kind names its own command line

    def _classpath(self) -> str:
        return server_classpath()  # the 4.9.7 server; reference5 names the 5.3.3 jars

    def start(self):
        (self.home / "conf" / self.logback_name).write_text(
            _LOGBACK.format(log=self.home / "logs" / (self.logback_name.replace(".xml", ".log"))))
        argv = ["java", *self.jvm_opts, *JDK17_FLAGS,
                f"-Drocketmq.home.dir={self.home}", f"-Duser.home={self.home}",
                "-cp", self._classpath(), self.main_class, *self._argv()]
        self.lines.clear()  # a restart must not see the previous run's "boot success"
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=java_env(self.home), cwd=self.workdir)
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if _port_open(self.port) and self._ready():
                return self
            time.sleep(0.2)
        out = self.output()
        self.stop()
        raise RuntimeError(f"{self.main_class} did not start on port {self.port}:\n{out}")

    def _ready(self) -> bool:
        return True

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def output(self) -> str:
        return "\n".join(self.lines)

    def stop(self, timeout_s: float = 30):
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)  # the JVM's shutdown hooks flush and persist config
        try:
            p.wait(timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)

    def kill9(self):
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class JavaNamesrv(_JavaProc):
    """org.apache.rocketmq.namesrv.NamesrvStartup on a free loopback port."""
    main_class = "org.apache.rocketmq.namesrv.NamesrvStartup"
    logback_name = "logback_namesrv.xml"

    def __init__(self, workdir: Path):
        super().__init__(workdir)
        self.port = free_port_block()
        self.addr = f"127.0.0.1:{self.port}"

    def _argv(self):
        conf = self.workdir / "namesrv.properties"
        conf.write_text(f"listenPort={self.port}\n")
        return ["-c", str(conf)]


def java_broker_conf(store_dir: Path, namesrv_addr: str, port: int, broker_name: str, cluster: str) -> dict:
    """The broker.conf of a test's Java broker (4.9.7 and 5.3.3 alike): a temp store with small files."""
    return {
        "brokerClusterName": cluster,
        "brokerName": broker_name,
        "brokerId": 0,
        "listenPort": port,
        "brokerIP1": "127.0.0.1",
        "namesrvAddr": namesrv_addr,
        "storePathRootDir": store_dir,
        "storePathCommitLog": store_dir / "commitlog",
        "autoCreateTopicEnable": "true",
        "mappedFileSizeCommitLog": 16 * 1024 * 1024,
        "mappedFileSizeConsumeQueue": 300000 * 20,
        "maxIndexNum": 40000,
        "maxHashSlotNum": 10000,
        "flushDiskType": "ASYNC_FLUSH",
        "deleteWhen": "04",
        "fileReservedTime": 48,
        "brokerRole": "ASYNC_MASTER",
        # keep the ratios clear of a nearly full shared disk
        "diskMaxUsedSpaceRatio": 95,
    }


class JavaBroker(_JavaProc):
    """org.apache.rocketmq.broker.BrokerStartup with a temp store, registered at namesrv_addr.

    ``conf`` adds or overrides broker.conf keys (e.g. enablePropertyFilter=true)."""
    main_class = "org.apache.rocketmq.broker.BrokerStartup"
    logback_name = "logback_broker.xml"
    workdir_suffix = "-java"

    def __init__(self, store_dir: Path, namesrv_addr: str, *, broker_name: str = "broker-java",
                 cluster: str = "DefaultCluster", conf: dict | None = None,
                 jvm_opts: tuple[str, ...] | None = None):
        store_dir = Path(store_dir)
        if jvm_opts is not None:
            self.jvm_opts = jvm_opts
        store_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(store_dir.parent / (store_dir.name + self.workdir_suffix))
        self.store_dir = store_dir
        self.namesrv_addr = namesrv_addr
        self.broker_name = broker_name
        self.cluster = cluster
        self.conf = dict(conf or {})
        self.port = free_port_block(2)
        self.addr = f"127.0.0.1:{self.port}"

    def _argv(self):
        conf = java_broker_conf(self.store_dir, self.namesrv_addr, self.port, self.broker_name, self.cluster)
        conf.update(self.conf)
        path = self.workdir / "broker.conf"
        path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        return ["-c", str(path), "-n", self.namesrv_addr]

    def _ready(self) -> bool:
        # the broker prints this once it is registered with the name server
        return any("boot success" in line for line in self.lines)

    def restart(self):
        self.stop()
        deadline = time.monotonic() + 30
        while _port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.start()


def tool_home(home: Path | None, dir_name: str = "mqadmin-home", logback_name: str = "logback_tools.xml") -> Path:
    """The mqadmin tool's home (its ``user.home`` and ``rocketmq.home.dir``): ``<home or TMPDIR>/<dir_name>``
    with a ``conf/<logback_name>`` that sends the tool's log to a file there (the 4.9.8 tool reads
    logback_tools.xml, the 5.x tool rmq.tools.logback.xml)."""
    home = Path(home or os.environ.get("TMPDIR", "/tmp")) / dir_name
    (home / "conf").mkdir(parents=True, exist_ok=True)
    logback = home / "conf" / logback_name
    if not logback.exists():
        logback.write_text(_LOGBACK.format(log=home / "tools.log"))
    return home


def _tool_argv(home: Path, classpath: str, main: list[str]) -> list[str]:
    return ["java", "-Xmx256m", "-XX:+UseSerialGC", *JDK17_FLAGS, f"-Drocketmq.client.logRoot={home}/logs",
            f"-Drocketmq.home.dir={home}", f"-Duser.home={home}", "-cp", classpath, *main]


def run_mqadmin(args: list[str], *, classpath: str, home: Path, timeout_s: float) -> subprocess.CompletedProcess:
    """MQAdminStartup of the tools jar on ``classpath`` (4.9.8 or 5.x), ``home`` from :func:`tool_home`."""
    argv = _tool_argv(home, classpath, ["org.apache.rocketmq.tools.command.MQAdminStartup", *args])
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=java_env(home))


def run_mqadmin_batch(commands: list[list[str]], *, classpath: str, home: Path, timeout_s: float) -> list[str]:
    """Several mqadmin commands in one JVM (drivers/MQAdminBatch.java runs MQAdminStartup.main0
    once per command) with the tools jar on ``classpath``; returns each command's output
    (stdout and the stack traces the tool prints), in order."""
    for words in commands:
        if any("|" in w for w in words):
            raise ValueError(f"'|' separates words for MQAdminBatch: {words}")
    argv = _tool_argv(home, classpath, [str(DRIVERS_DIR / "MQAdminBatch.java"), *("|".join(words) for words in commands)])
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=java_env(home))
    outputs = []
    for i in range(len(commands)):
        begin, end = f"@@@ BEGIN {i}\n", f"\n@@@ END {i}\n"
        if begin not in p.stdout or end not in p.stdout:
            raise RuntimeError(f"MQAdminBatch stopped before command {i} {commands[i]}:\n{p.stdout[-4000:]}\n"
                               f"{p.stderr[-4000:]}")
        outputs.append(p.stdout.split(begin, 1)[1].split(end, 1)[0])
    return outputs


def mqadmin(args: list[str], *, timeout_s: float = 60, home: Path | None = None) -> subprocess.CompletedProcess:
    """The real ``mqadmin`` (rocketmq-tools MQAdminStartup 4.9.8); returns the finished process."""
    return run_mqadmin(args, classpath=client_classpath(), home=tool_home(home), timeout_s=timeout_s)


def run_java_driver(driver: str, args: list[str], *, timeout_s: float = 120, workdir: Path | None = None,
                    background: bool = False, jvm_args: list[str] | None = None):
    """Runs one of tests/reference/drivers/*.java as a single-file source program against the
    official 4.9.8 Java client. Returns CompletedProcess, or the Popen when ``background``
    (its stdin a pipe, for drivers that wait for the test's word).
    ``jvm_args``: more JVM options (system properties such as ``-Dtls.enable=true``)."""
    src = DRIVERS_DIR / driver
    logroot = Path(workdir or os.environ.get("TMPDIR", "/tmp")) / "java-client-logs"
    argv = ["java", "-Xmx256m", "-XX:+UseSerialGC", *JDK17_FLAGS, f"-Drocketmq.client.logRoot={logroot}",
            "-Drocketmq.client.logLevel=WARN", *(jvm_args or []), "-cp", client_classpath(), str(src), *args]
    if background:
        return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)


def mqadmin_batch(commands: list[list[str]], *, timeout_s: float = 180, home: Path | None = None) -> list[str]:
    """Several real ``mqadmin`` commands in one JVM (drivers/MQAdminBatch.java runs
    MQAdminStartup.main0 once per command); returns each command's output (stdout and the
    stack traces the tool prints), in order. One JVM start instead of one per command."""
    return run_mqadmin_batch(commands, classpath=client_classpath(), home=tool_home(home), timeout_s=timeout_s)
