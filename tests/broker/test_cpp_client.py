"""The Apache RocketMQ C++ client (PyPI rocketmq==0.4.4) against a real mqbroker process."""
from __future__ import annotations

import pytest

from mqcore.jsonutil import loads_lenient
from mqcore.remoting import RequestCode, SyncRemotingClient, create_request
from tests.support.cpp_client import collect, run_cpp, start_cpp
from tests.support.processes import BrokerProcess
from tests.support.protocol import create_topic
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path / "store") as b:
        yield b


def produce(broker, home, topic, specs):
    msgs = [dict(topic=topic, **s) for s in specs]
    events = run_cpp({"mode": "produce", "namesrv": broker.namesrv_addr, "messages": msgs}, home)
    sent = [e for e in events if "sent" in e]
    assert len(sent) == len(msgs) and all(e["status"] == 0 for e in sent), events
    return sent


def test_send_with_tags_and_keys_then_push_with_tag_filter(broker, tmp_path):
    specs = [{"tags": "TagA" if i % 3 == 0 else "TagB", "keys": f"key-{i} order-{i}", "body": f"hello {i}"}
             for i in range(12)]
    sent = produce(broker, tmp_path, "CppTopic", specs)
    assert all(len(e["msg_id"]) == 32 for e in sent)  # UNIQ_KEY made by the client
    events = run_cpp({"mode": "push", "namesrv": broker.namesrv_addr, "group": "CG_tagA", "topic": "CppTopic",
                      "expression": "TagA", "expect": 4, "timeout": 30, "linger": 2}, tmp_path)
    got = [e["got"] for e in events if "got" in e]
    assert sorted(g["body"] for g in got) == sorted(f"hello {i}" for i in range(0, 12, 3))  # each once
    assert all(g["tags"] == "TagA" for g in got)
    assert {g["keys"] for g in got} == {f"key-{i} order-{i}" for i in range(0, 12, 3)}


def test_push_with_two_tags_and_pull_consumer(broker, tmp_path):
    specs = [{"tags": ["TagA", "TagB", "TagC"][i % 3], "body": f"m{i}"} for i in range(9)]
    produce(broker, tmp_path, "CppTopic2", specs)
    events = run_cpp({"mode": "push", "namesrv": broker.namesrv_addr, "group": "CG_ab", "topic": "CppTopic2",
                      "expression": "TagA || TagC", "expect": 6, "timeout": 30, "linger": 1}, tmp_path)
    assert sorted(e["got"]["body"] for e in events if "got" in e) == sorted(f"m{i}" for i in range(9) if i % 3 != 1)
    events = run_cpp({"mode": "pull", "namesrv": broker.namesrv_addr, "group": "CG_pull", "topic": "CppTopic2"},
                     tmp_path)
    assert sorted(e["got"]["body"] for e in events if "got" in e) == sorted(f"m{i}" for i in range(9))


def test_consumer_restart_resumes_from_committed_offset(broker, tmp_path):
    produce(broker, tmp_path, "Resume", [{"body": f"first {i}"} for i in range(8)])
    events = run_cpp({"mode": "push", "namesrv": broker.namesrv_addr, "group": "CG_resume", "topic": "Resume",
                      "expect": 8, "timeout": 30, "linger": 1}, tmp_path)
    assert sorted(e["got"]["body"] for e in events if "got" in e) == sorted(f"first {i}" for i in range(8))
    produce(broker, tmp_path, "Resume", [{"body": f"second {i}"} for i in range(5)])
    events = run_cpp({"mode": "push", "namesrv": broker.namesrv_addr, "group": "CG_resume", "topic": "Resume",
                      "expect": 5, "timeout": 30, "linger": 3}, tmp_path)
    bodies = sorted(e["got"]["body"] for e in events if "got" in e)
    assert bodies == sorted(f"second {i}" for i in range(5)), "a restarted consumer resumes where it committed"


def test_consumer_started_before_producer_gets_messages_by_long_polling(broker, tmp_path):
    create_topic(broker, "Live")  # a route lookup never creates a topic (as in RocketMQ)
    proc = start_cpp({"mode": "push", "namesrv": broker.namesrv_addr, "group": "CG_live", "topic": "Live",
                      "expect": 5, "timeout": 40, "linger": 1}, tmp_path)
    try:
        with SyncRemotingClient() as rc:
            def holding() -> int:
                r = rc.invoke(broker.broker_addr, create_request(RequestCode.GET_BROKER_RUNTIME_INFO, None), 5000)
                return int(loads_lenient(r.body)["table"]["pullHoldingCount"])
            # the consumer's pulls found nothing and are parked in the broker (not answered empty)
            assert wait_for(lambda: holding() >= 1, timeout=40, step=0.2)
            sent = produce(broker, tmp_path, "Live", [{"body": f"live {i}", "tags": "T"} for i in range(5)])
            events = collect(proc, 90)
    finally:
        if proc.poll() is None:
            proc.kill()
    got = [e["got"] for e in events if "got" in e]
    assert sorted(g["body"] for g in got) == sorted(f"live {i}" for i in range(5))
    # the arrival woke the parked pulls: without that they would answer after the 15 s+ hold.
    # Timed from the first send to the last delivery, both stamped by the drivers (wall clock,
    # same machine), so the two C++ client processes' start-up and exit are not in the figure
    delivery = max(g["at"] for g in got) - min(e["at"] for e in sent)
    assert delivery < 10, delivery
