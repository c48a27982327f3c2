"""Request-reply with the official Apache RocketMQ 4.9.8 Java client (DefaultMQProducer.request,
MessageUtil.createReplyMessage; the request_* scenarios of drivers/ClientScenarios.java) against
mqbroker, with the Java broker (4.9.7) as the spec: the same replies, reply topic, TTL and
timeout on both; and a Java requester answered by an mqcore.client replier (send_reply)."""
from __future__ import annotations

import os

import pytest

from tests.client.integration.helpers import create_topic
from tests.client.integration.test_request_reply import Replier
from tests.reference.test_java_client import _run, classes, mqbroker, ok  # noqa: F401 - fixtures

pytestmark = pytest.mark.timeout(600)

SCENARIOS = ["request_roundtrip", "request_timeout"]


def _facts(results, name) -> dict:
    facts = dict(ok(results, name))
    facts.pop("ms", None)
    return facts


def test_java_request_reply_matches_the_java_broker(classes, mqbroker, java_cluster, tmp_path):  # noqa: F811
    ours = _run(classes, mqbroker.namesrv_addr, tmp_path / "mq", SCENARIOS)
    assert _facts(ours, "request_roundtrip") == {
        "replies": "re:q0,re:q1,re:q2", "replyTopic": "DefaultCluster_REPLY_TOPIC", "ttl": "5000",
        "sameCorrelation": "true", "replyErrors": "0"}
    assert _facts(ours, "request_timeout")["timedOut"] == "true"
    assert _facts(ours, "request_timeout")["waitedOk"] == "true"
    ns, _broker = java_cluster
    java = _run(classes, ns.addr, tmp_path / "java", SCENARIOS)
    assert {n: _facts(java, n) for n in SCENARIOS} == {n: _facts(ours, n) for n in SCENARIOS}


def test_java_requester_gets_the_reply_of_an_mqcore_replier(classes, mqbroker, tmp_path):  # noqa: F811
    topic = f"p{os.getpid()}RpcPy"
    create_topic(mqbroker.broker_addr, mqbroker.namesrv_addr, topic)
    with Replier(mqbroker.namesrv_addr, topic, "py-replier") as replier:
        facts = _facts(_run(classes, mqbroker.namesrv_addr, tmp_path, ["request_only"]), "request_only")
        assert not replier.errors
    assert facts == {"replies": "re:j0,re:j1,re:j2"}
