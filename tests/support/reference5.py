"""Apache RocketMQ 5.3.3 as a reference: name server, broker + proxy, mqadmin and Java drivers.

``scripts/test`` (scripts/setup.d/10-reference.sh) copies the 5.3.3 jars from Maven Central into
a cache and exports their directory as $MQCORE_ROCKETMQ5_LIB. The processes start on free
loopback ports with temp stores and are always stopped by PID, like the 4.9.7 ones
(tests/support/reference.py).

    with Java5Namesrv(tmp_path / "ns") as ns, Java5Proxy(tmp_path / "b", ns.addr) as b:
        b.broker_addr   # 4.x remoting clients: the broker itself
        b.grpc_addr     # 5.x gRPC clients: the proxy
        mqadmin5(["topicList", "-n", ns.addr])

``Java5Proxy(mode="local")`` runs broker and proxy in one process (the proxy calls the broker in
memory); ``Java5ClusterProxy`` runs the proxy alone in front of whatever brokers the name server
knows (mqbroker included): it talks to them over 4.x remoting (POP, ACK, CHANGE_INVISIBLETIME...).
``Java5Broker`` is a plain 5.3.3 BrokerStartup with no proxy. Missing jars fail the test with
what to run, never skip.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.reference import (
    JDK17_FLAGS,
    JavaBroker,
    _JavaProc,
    _port_open,
    free_port_block,
    java_broker_conf,
    run_mqadmin,
    run_mqadmin_batch,
    tool_home,
)

LIB5_ENV = "MQCORE_ROCKETMQ5_LIB"
DRIVERS_DIR = Path(__file__).resolve().parent.parent / "reference" / "drivers"
#: drivers that need the 5.x client's API: kept apart, since the suite compiles every file of
#: DRIVERS_DIR against the 4.9.8 client (tests/support/java_drivers.py)
DRIVERS5_DIR = Path(__file__).resolve().parent.parent / "reference" / "drivers5"


def classpath5() -> str:
    d = os.environ.get(LIB5_ENV, "")
    if not d or not os.path.isdir(d) or not any(n.endswith(".jar") for n in os.listdir(d)):
        pytest.fail(f"the Apache RocketMQ 5.3.3 jars are missing (${LIB5_ENV} is {d!r}): run the "
                    "suite with scripts/test, which fetches them from Maven Central "
                    "(scripts/setup.d/10-reference.sh)")
    return os.path.join(d, "*")


def _broker_conf(store_dir: Path, namesrv_addr: str, port: int, broker_name: str, cluster: str,
                 extra: dict | None) -> dict:
    conf = java_broker_conf(store_dir, namesrv_addr, port, broker_name, cluster)
    conf.update({
        "autoCreateSubscriptionGroup": "true",
        # 5.x ties the timer log's size to the commitlog's; keep it small for temp stores
        "mappedFileSizeTimerLog": 4 * 1024 * 1024,
        "timerWheelEnable": "true",
    })
    conf.update(extra or {})
    return conf


def _write_conf(path: Path, conf: dict) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    return path


class _Java5Proc(_JavaProc):
    def _classpath(self) -> str:
        return classpath5()


class Java5Namesrv(_Java5Proc):
    """5.3.3 NamesrvStartup on a free loopback port."""
    main_class = "org.apache.rocketmq.namesrv.NamesrvStartup"
    logback_name = "rmq.namesrv.logback.xml"

    def __init__(self, workdir: Path, conf: dict | None = None):
        super().__init__(workdir)
        self.port = free_port_block()
        self.addr = f"127.0.0.1:{self.port}"
        self.conf = dict(conf or {})

    def _argv(self):
        conf = {"listenPort": self.port, **self.conf}
        return ["-c", str(_write_conf(self.workdir / "namesrv.properties", conf))]


class Java5Broker(JavaBroker):
    """5.3.3 BrokerStartup with a temp store (no proxy), registered at namesrv_addr: the 4.9.7
    fixture with the 5.3.3 jars and a 5.x broker.conf."""
    logback_name = "rmq.broker.logback.xml"
    workdir_suffix = "-java5"

    def __init__(self, store_dir: Path, namesrv_addr: str, *, broker_name: str = "broker-java5",
                 cluster: str = "DefaultCluster", conf: dict | None = None):
        super().__init__(store_dir, namesrv_addr, broker_name=broker_name, cluster=cluster, conf=conf)
        self.broker_addr = self.addr

    def _classpath(self) -> str:
        return classpath5()

    def _argv(self):
        conf = _broker_conf(self.store_dir, self.namesrv_addr, self.port, self.broker_name,
                            self.cluster, self.conf)
        return ["-c", str(_write_conf(self.workdir / "broker.conf", conf)), "-n", self.namesrv_addr]


class Java5Proxy(_Java5Proc):
    """5.3.3 ProxyStartup in local mode: a broker (temp store, registered at namesrv_addr) and the
    gRPC/remoting proxy in one JVM. ``broker_addr`` serves 4.x remoting clients, ``grpc_addr`` 5.x
    gRPC clients, ``proxy_remoting_addr`` the proxy's own remoting port."""
    main_class = "org.apache.rocketmq.proxy.ProxyStartup"
    logback_name = "rmq.proxy.logback.xml"
    mode = "local"

    def __init__(self, store_dir: Path, namesrv_addr: str, *, broker_name: str = "broker-java5",
                 cluster: str = "DefaultCluster", conf: dict | None = None,
                 proxy_conf: dict | None = None):
        store_dir = Path(store_dir)
        store_dir.mkdir(parents=True, exist_ok=True)
        super().__init__(store_dir.parent / (store_dir.name + "-proxy5"))
        self.store_dir = store_dir
        self.namesrv_addr = namesrv_addr
        self.broker_name = broker_name
        self.cluster = cluster
        self.conf = dict(conf or {})
        self.proxy_conf = dict(proxy_conf or {})
        self.broker_port = free_port_block(2)
        self.grpc_port = free_port_block()
        self.proxy_remoting_port = free_port_block()
        self.port = self.grpc_port  # the last port to open: the proxy starts after the broker
        self.broker_addr = self.addr = f"127.0.0.1:{self.broker_port}"
        self.grpc_addr = f"127.0.0.1:{self.grpc_port}"
        self.proxy_remoting_addr = f"127.0.0.1:{self.proxy_remoting_port}"

    def _proxy_json(self) -> dict:
        return {
            "rocketMQClusterName": self.cluster,
            "namesrvAddr": self.namesrv_addr,
            "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.proxy_remoting_port,
            # mqbroker has no per-topic message type: let one topic carry every kind, as on mqbroker
            "enableTopicMessageTypeCheck": False,
            **self.proxy_conf,
        }

    def _argv(self):
        pc = self.workdir / "proxy.json"
        pc.write_text(json.dumps(self._proxy_json()))
        argv = ["-pm", self.mode, "-pc", str(pc)]
        if self.mode == "local":
            conf = _broker_conf(self.store_dir, self.namesrv_addr, self.broker_port, self.broker_name,
                                self.cluster, self.conf)
            argv += ["-bc", str(_write_conf(self.workdir / "broker.conf", conf))]
        return argv

    def _ready(self) -> bool:
        return _port_open(self.proxy_remoting_port) and (self.mode != "local" or _port_open(self.broker_port))


class Java5ClusterProxy(Java5Proxy):
    """5.3.3 ProxyStartup in cluster mode: the proxy alone, in front of the brokers registered at
    namesrv_addr (an mqbroker, for instance), speaking 4.x remoting to them."""
    mode = "cluster"

    def __init__(self, workdir: Path, namesrv_addr: str, *, cluster: str = "DefaultCluster",
                 proxy_conf: dict | None = None):
        super().__init__(Path(workdir) / "unused-store", namesrv_addr, cluster=cluster,
                         proxy_conf=proxy_conf)
        self.broker_addr = self.addr = ""


def _tool_home(home: Path | None) -> Path:
    return tool_home(home, "mqadmin5-home", "rmq.tools.logback.xml")


def mqadmin5(args: list[str], *, timeout_s: float = 60, home: Path | None = None) -> subprocess.CompletedProcess:
    """The real 5.3.3 ``mqadmin`` (rocketmq-tools MQAdminStartup); returns the finished process."""
    return run_mqadmin(args, classpath=classpath5(), home=_tool_home(home), timeout_s=timeout_s)


def run_java5_driver(driver: str, args: list[str], *, timeout_s: float = 120, workdir: Path | None = None,
                     background: bool = False):
    """Runs tests/reference/drivers5/<driver> (or drivers/<driver>, a driver both clients compile) as a
    single-file source program against the 5.3.3
    remoting client (org.apache.rocketmq:rocketmq-client 5.3.3 and its tools). Returns
    CompletedProcess, or the Popen when ``background``."""
    src = DRIVERS5_DIR / driver if (DRIVERS5_DIR / driver).exists() else DRIVERS_DIR / driver
    logroot = Path(workdir or os.environ.get("TMPDIR", "/tmp")) / "java5-client-logs"
    argv = ["java", "-Xmx256m", "-XX:+UseSerialGC", *JDK17_FLAGS, f"-Drocketmq.client.logRoot={logroot}",
            "-Drocketmq.client.logLevel=WARN", f"-Duser.home={logroot}", "-cp", classpath5(), str(src), *args]
    if background:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)


def mqadmin5_batch(commands: list[list[str]], *, timeout_s: float = 180, home: Path | None = None,
                   tools_yml: str | None = None) -> list[str]:
    """Several real 5.3.3 ``mqadmin`` commands in one JVM (drivers/MQAdminBatch.java, as
    tests/support/reference.py's ``mqadmin_batch`` runs the 4.9.8 tool); returns each command's
    output in order. ``tools_yml``: the text of ``conf/tools.yml``, the access key and secret key
    the tool signs its requests with (ACL)."""
    home = _tool_home(home)
    if tools_yml is not None:
        (home / "conf" / "tools.yml").write_text(tools_yml)
    return run_mqadmin_batch(commands, classpath=classpath5(), home=home, timeout_s=timeout_s)
