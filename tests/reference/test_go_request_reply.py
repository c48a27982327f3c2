"""Request-reply with the official Apache RocketMQ Go client (rocketmq-client-go/v2 2.1.2,
tests/reference/drivers/go4, built by scripts/setup.d/65-go4-client.sh) against mqbroker, with
the Java broker (4.9.7) as the spec: Go's ``Producer.Request`` answered by a Go replier (which
sends SEND_REPLY_MESSAGE, 324, with the long-name header) and by an mqcore.client replier; an
mqcore.client ``request`` answered by the Go replier; a request nobody answers times out."""
from __future__ import annotations

import os
import subprocess
import threading

import pytest

from mqcore.client import Message, Producer
from tests.client.integration.helpers import create_topic
from tests.client.integration.test_request_reply import Replier
from tests.support.processes import BrokerProcess

pytestmark = pytest.mark.timeout(600)


def _driver() -> str:
    path = os.environ.get("MQCORE_GO4_DRIVER", "")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"the Go client driver is missing ($MQCORE_GO4_DRIVER is {path!r}): run the suite with "
                    "scripts/test, which builds it (scripts/setup.d/65-go4-client.sh)")
    return path


def _go(*args: str, timeout_s: float = 180) -> dict:
    r = subprocess.run([_driver(), *args], capture_output=True, text=True, timeout=timeout_s)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines and lines[-1].split()[2] == "OK", f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return dict(w.split("=", 1) for w in lines[-1].split()[3:] if "=" in w)


class GoReplier:
    """The Go driver's ``reply`` scenario in the background: answers requests until ``result``
    closes its stdin, then says how many replies the broker took and refused."""

    def __init__(self, namesrv: str, topic: str, group: str):
        self.proc = subprocess.Popen([_driver(), "reply", namesrv, topic, group], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def result(self, timeout_s: float = 60) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout_s)
        self._reader.join(5)
        results = [ln for ln in self.lines if ln.startswith("RESULT ")]
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        assert results and results[-1].split()[2] == "OK", (self.lines, self.stderr)
        return dict(w.split("=", 1) for w in results[-1].split()[3:] if "=" in w)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def mqbroker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("go-rr") / "store") as b:
        yield b


def _go_to_go(namesrv: str, broker_addr: str, topic: str) -> dict:
    create_topic(broker_addr, namesrv, topic)
    replier = GoReplier(namesrv, topic, "go-replier")
    try:
        facts = _go("request", namesrv, topic, "3", "5000")
        replier.result()
        # a request the requester timed out on (the replier still joining, or the Go client's first
        # request racing its first heartbeat) is asked again; its reply is refused as "not found"
        refusals = [ln for ln in replier.stderr.splitlines() if ln.startswith("reply failed")]
        assert all("not found" in ln for ln in refusals), replier.stderr
    finally:
        replier.stop()
    return facts


def test_go_request_answered_by_go_matches_the_java_broker(mqbroker, java_cluster):
    ours = _go_to_go(mqbroker.namesrv_addr, mqbroker.broker_addr, "GoRpc")
    assert ours == {"replies": "re:g0,re:g1,re:g2", "replyTopic": "DefaultCluster_REPLY_TOPIC",
                    "sameCorrelation": "true"}
    ns, broker = java_cluster
    assert _go_to_go(ns.addr, broker.addr, "GoRpc") == ours


def test_go_request_answered_by_an_mqcore_replier(mqbroker):
    create_topic(mqbroker.broker_addr, mqbroker.namesrv_addr, "GoRpcPy")
    with Replier(mqbroker.namesrv_addr, "GoRpcPy", "py-replier-for-go") as replier:
        facts = _go("request", mqbroker.namesrv_addr, "GoRpcPy", "3", "5000")
        # the Go client's first request can race its first heartbeat (its reply is refused, as by
        # the Java broker, the request times out and is asked again); nothing else may fail
        assert all(getattr(e, "code", None) == 1 and "not found" in e.remark for e in replier.errors), replier.errors
    assert facts["replies"] == "re:g0,re:g1,re:g2" and facts["sameCorrelation"] == "true"


def test_mqcore_request_answered_by_a_go_replier(mqbroker):
    create_topic(mqbroker.broker_addr, mqbroker.namesrv_addr, "PyRpcGo")
    replier = GoReplier(mqbroker.namesrv_addr, "PyRpcGo", "go-replier-for-py")
    try:
        with Producer("py-requester", namesrv_addr=mqbroker.namesrv_addr) as p:
            replies = [p.request(Message("PyRpcGo", f"p{i}"), timeout_ms=30_000) for i in range(3)]
        assert [r.body for r in replies] == [b"re:p0", b"re:p1", b"re:p2"]
        assert {r.properties["MSG_TYPE"] for r in replies} == {"reply"}
        assert replier.result() == {"sent": "3", "failed": "0"}  # no request timed out: no stale reply
    finally:
        replier.stop()


def test_go_request_nobody_answers_times_out(mqbroker):
    facts = _go("timeout", mqbroker.namesrv_addr, "GoRpcNobody", "1500")
    assert facts == {"timedOut": "true", "waitedOk": "true"}
