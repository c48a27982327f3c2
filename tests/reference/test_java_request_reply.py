"""Request-reply with the official Apache RocketMQ 4.9.8 Java client (DefaultMQProducer.request,
MessageUtil.createReplyMessage) against mqbroker, with the Java broker (4.9.7) as the spec:
the same replies, reply topic, TTL and timeout on both; and a Java requester answered by an
mqcore.client replier (send_reply) through mqbroker."""
from __future__ import annotations

import os

import pytest

from tests.client.integration.helpers import create_topic
from tests.client.integration.test_request_reply import Replier
from tests.support.java_drivers import compile_drivers, run_driver, scenario_results
from tests.support.processes import BrokerProcess

pytestmark = pytest.mark.timeout(600)

SCENARIOS = ["roundtrip", "timeout"]


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    return compile_drivers(tmp_path_factory.mktemp("rr-classes"))


@pytest.fixture(scope="module")
def mqbroker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("rr") / "store") as b:
        yield b


def _run(classes, namesrv, tmp, scenarios):
    r = run_driver(classes, "RequestReply", [namesrv, f"p{os.getpid()}", *scenarios], logroot=tmp)
    results = scenario_results(r.stdout)
    missing = [s for s in scenarios if s not in results]
    assert not missing, f"driver ended without {missing}:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
    out = {}
    for name, (passed, facts, line) in results.items():
        assert passed, f"{line}\n{r.stdout[-4000:]}"
        facts.pop("ms", None)
        out[name] = facts
    return out


def test_java_request_reply_matches_the_java_broker(classes, mqbroker, java_cluster, tmp_path):
    ours = _run(classes, mqbroker.namesrv_addr, tmp_path / "mq", SCENARIOS)
    assert ours["roundtrip"] == {"replies": "re:q0,re:q1,re:q2", "replyTopic": "DefaultCluster_REPLY_TOPIC",
                                 "ttl": "5000", "sameCorrelation": "true", "replyErrors": "0"}
    assert ours["timeout"]["timedOut"] == "true" and ours["timeout"]["waitedOk"] == "true"
    ns, _broker = java_cluster
    assert _run(classes, ns.addr, tmp_path / "java", SCENARIOS) == ours


def test_java_requester_gets_the_reply_of_an_mqcore_replier(classes, mqbroker, tmp_path):
    topic = f"p{os.getpid()}RpcPy"
    create_topic(mqbroker.broker_addr, mqbroker.namesrv_addr, topic)
    with Replier(mqbroker.namesrv_addr, topic, "py-replier") as replier:
        facts = _run(classes, mqbroker.namesrv_addr, tmp_path, ["request_only"])["request_only"]
        assert not replier.errors
    assert facts == {"replies": "re:j0,re:j1,re:j2"}
