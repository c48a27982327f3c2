"""Brokers for client integration tests: every scenario runs against a real ``mqbroker`` and
against Apache RocketMQ's own broker (4.9.7, Java), so what the suite proves on one it proves on
the other. Loopback only, free ports, everything stopped by PID."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.reference import JavaBroker, JavaNamesrv
from tests.support.reference5 import Java5Broker, Java5Namesrv

#: retry delay levels 3, 4, 5... become 1 s, 2 s, 3 s...: growing but short
SHORT_DELAYS = "1s 1s 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s"

#: client settings that make periodic work fast enough for tests
FAST = dict(rebalance_interval_ms=1000, heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000,
            persist_consumer_offset_interval_ms=500, pull_time_delay_ms_when_exception=200)

#: the two brokers every scenario runs against
BROKER_KINDS = ["mqbroker", "rocketmq"]

#: RocketMQ sheds a send that waited 200 ms in its queue or held the store lock 1 s (SYSTEM_BUSY,
#: which clients do not retry); on a shared 2-core CI machine with a load of 20+ that happens, so
#: the Java brokers of the tests allow a few seconds, as a send's own timeout does
JAVA_BUSY_LIMITS = {"waitTimeMillsInSendQueue": 3000, "osPageCacheBusyTimeOutMills": 5000}


class JavaBrokerHandle:
    """A Java broker (and, when it owns one, its Java name server) with the attributes the tests
    use on a :class:`BrokerProcess`: ``broker_addr``, ``namesrv_addr``, ``restart()``, ``kill9()``."""

    kind = "rocketmq"

    def __init__(self, broker: JavaBroker, namesrv: JavaNamesrv | None = None):
        self.java = broker
        self.namesrv = namesrv
        self.broker_name = broker.broker_name

    @property
    def broker_addr(self) -> str:
        return self.java.addr

    @property
    def namesrv_addr(self) -> str:
        return self.java.namesrv_addr

    def restart(self) -> "JavaBrokerHandle":
        self.java.restart()
        return self

    def kill9(self) -> None:
        self.java.kill9()

    def stop(self) -> None:
        self.java.stop()
        if self.namesrv is not None:
            self.namesrv.stop()


def start_java_broker(work: Path, *, namesrv: JavaNamesrv | None = None, broker_name: str = "broker-java",
                      conf: dict | None = None) -> JavaBrokerHandle:
    """A Java broker on its own Java name server (or on ``namesrv``), with the same short delay
    levels the mqbroker fixtures use."""
    own = None
    if namesrv is None:
        own = namesrv = JavaNamesrv(work / f"ns-{broker_name}").start()
    settings = {"messageDelayLevel": SHORT_DELAYS, "enablePropertyFilter": "true", **JAVA_BUSY_LIMITS}
    settings.update(conf or {})
    try:
        b = JavaBroker(work / broker_name, namesrv.addr, broker_name=broker_name, conf=settings).start()
    except BaseException:
        if own is not None:
            own.stop()
        raise
    return JavaBrokerHandle(b, own)


@pytest.fixture(scope="package")
def java_broker(tmp_path_factory):
    """One Apache RocketMQ name server + broker shared by this package's tests (a JVM takes 5 to
    40 s to start on a loaded 2-core machine) and stopped when they are done; tests use their own
    topics and groups, so they do not see each other's data."""
    h = start_java_broker(tmp_path_factory.mktemp("rmq"))
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture(params=BROKER_KINDS)
def broker(request, tmp_path):
    if request.param == "rocketmq":
        h = request.getfixturevalue("java_broker")
        if h.java.proc is None:  # a test left it stopped: bring it back for the next one
            h.java.start()
        yield h
        return
    with BrokerProcess(tmp_path / "store", conf={"messageDelayLevel": SHORT_DELAYS}) as b:
        b.kind = "mqbroker"
        yield b


class _JavaPair:
    """Two Java brokers on one Java name server, shaped like the mqbroker ``two_brokers`` tuple."""

    def __init__(self, work: Path):
        self.ns = JavaNamesrv(work / "ns").start()
        self.ns.kind = "rocketmq"
        self.brokers: list[JavaBrokerHandle] = []
        try:
            for name in ("broker-a", "broker-b"):
                self.brokers.append(start_java_broker(work, namesrv=self.ns, broker_name=name))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for b in self.brokers:
            b.stop()
        self.ns.stop()


@pytest.fixture(scope="module")
def java_pair(tmp_path_factory):
    pair = _JavaPair(tmp_path_factory.mktemp("rmq-pair"))
    try:
        yield pair
    finally:
        pair.stop()


@pytest.fixture(params=BROKER_KINDS)
def two_brokers(request, tmp_path):
    if request.param == "rocketmq":
        pair = request.getfixturevalue("java_pair")
        for b in pair.brokers:  # a test may have killed one: it comes back on the same port and store
            if b.java.proc is None:
                b.java.start()
        yield (pair.ns, *pair.brokers)
        return
    with NamesrvProcess() as ns, \
            BrokerProcess(tmp_path / "a", namesrv=ns.addr, broker_name="broker-a") as a, \
            BrokerProcess(tmp_path / "b", namesrv=ns.addr, broker_name="broker-b") as b:
        yield ns, a, b


class _Java5:
    """A 5.3.3 name server and broker, with the attributes the tests use on a BrokerProcess."""

    kind = "rocketmq5"

    def __init__(self, ns: Java5Namesrv, broker: Java5Broker):
        self.ns, self.java = ns, broker
        self.broker_addr, self.namesrv_addr = broker.broker_addr, ns.addr


@pytest.fixture(scope="package")
def java5_broker(tmp_path_factory):
    """Apache RocketMQ 5.3.3 (name server + plain broker, no proxy), shared like ``java_broker``."""
    work = tmp_path_factory.mktemp("rmq5")
    with Java5Namesrv(work / "ns") as ns, Java5Broker(work / "store", ns.addr) as b:
        yield _Java5(ns, b)


@pytest.fixture(params=["mqbroker", "rocketmq", "rocketmq5"])
def any_broker(request, tmp_path):
    """``broker``'s two kinds and Apache RocketMQ 5.3.3."""
    if request.param == "rocketmq5":
        yield request.getfixturevalue("java5_broker")
    elif request.param == "rocketmq":
        h = request.getfixturevalue("java_broker")
        if h.java.proc is None:
            h.java.start()
        yield h
    else:
        with BrokerProcess(tmp_path / "store") as b:
            yield b
