"""Broker services with the Apache RocketMQ C++ client (PyPI rocketmq==0.4.4): retry after
a failed consume, dead letters after the maximum, delayed messages."""
from __future__ import annotations

import json

import pytest

from mqcore.jsonutil import loads_lenient
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.support.protocol import create_topic, decode, pull
from tests.support.cpp_client import collect, run_cpp, start_cpp
from tests.support.processes import BrokerProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # 1 s at every level: retries come back fast; level 2 keeps a distinct delay for the delay test
    levels = " ".join(["1s", "3s"] + ["1s"] * 16)
    with BrokerProcess(tmp_path_factory.mktemp("svc-cpp") / "store", conf={"messageDelayLevel": levels}) as b:
        yield b


def produce(broker, home, specs):
    events = run_cpp({"mode": "produce", "namesrv": broker.namesrv_addr, "messages": specs}, home)
    sent = [e for e in events if "sent" in e]
    assert len(sent) == len(specs) and all(e["status"] == 0 for e in sent), events
    return sent


def consumer_ids(broker, group: str) -> list[str]:
    """The client ids the broker holds heartbeats from for ``group``."""
    with SyncRemotingClient() as rc:
        r = rc.invoke(broker.broker_addr, create_request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}),
                      5000)
    return loads_lenient(r.body).get("consumerIdList", []) if r.code == ResponseCode.SUCCESS else []


def test_a_failed_message_comes_back_from_the_retry_topic(broker, tmp_path):
    produce(broker, tmp_path, [{"topic": "SvcRetry", "body": f"job {i}", "keys": f"job-{i}"} for i in range(3)])
    events = run_cpp({"mode": "push", "namesrv": broker.namesrv_addr, "group": "CG_retry_once", "topic": "SvcRetry",
                      "fail_times": 1, "expect": 3, "timeout": 60, "linger": 1}, tmp_path, timeout=120)
    failed = [e["failed"] for e in events if "failed" in e]
    got = [e["got"] for e in events if "got" in e]
    assert sorted(f["body"] for f in failed) == [f"job {i}" for i in range(3)]
    assert all(f["reconsume_times"] == 0 for f in failed)
    assert sorted(g["body"] for g in got) == [f"job {i}" for i in range(3)], "each comes back exactly once"
    assert all(g["reconsume_times"] == 1 for g in got)
    assert all(g["props"]["RETRY_TOPIC"] == "SvcRetry" for g in got)
    assert {g["keys"] for g in got} == {f"job-{i}" for i in range(3)}


def test_a_message_that_always_fails_ends_in_the_dead_letter_queue(broker, tmp_path):
    group = "CG_always_fail"
    body = json.dumps({"groupName": group, "retryMaxTimes": 2, "retryQueueNums": 1}).encode()
    with SyncRemotingClient() as rc:
        r = rc.invoke(broker.broker_addr, create_request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body), 5000)
        assert r.code == ResponseCode.SUCCESS
        produce(broker, tmp_path, [{"topic": "SvcPoison", "body": "poison", "keys": "bad-1"}])
        # the consumer runs for 15 s: first try + 2 retries at 1 s levels, then nothing more
        proc = start_cpp({"mode": "push", "namesrv": broker.namesrv_addr, "group": group, "topic": "SvcPoison",
                          "fail_times": 1000, "timeout": 15}, tmp_path)
        try:
            def dead_letters():
                got = pull(rc, broker, f"%DLQ%{group}", 0, group="CG_admin")
                return decode(got.body) if got.code == ResponseCode.SUCCESS else []

            assert wait_for(dead_letters, timeout=60, step=0.5)
            dead = dead_letters()
            events = collect(proc, 60)
        finally:
            if proc.poll() is None:
                proc.kill()
    failed = [e["failed"] for e in events if "failed" in e]
    assert [m.body for m in dead] == [b"poison"]
    assert dead[0].reconsume_times == 3 and dead[0].properties["RETRY_TOPIC"] == "SvcPoison"
    assert dead[0].properties["KEYS"] == "bad-1"
    assert [f["reconsume_times"] for f in failed] == [0, 1, 2], "first try plus retryMaxTimes retries"


def test_a_delayed_message_arrives_no_earlier_than_its_delay(broker, tmp_path):
    # the topic exists before the consumer starts: a route lookup never creates one (as in RocketMQ)
    create_topic(broker, "SvcDelay")
    proc = start_cpp({"mode": "push", "namesrv": broker.namesrv_addr, "group": "CG_delay", "topic": "SvcDelay",
                      "expect": 2, "timeout": 60, "linger": 1}, tmp_path)
    try:
        # subscribed: the broker lists it in its group (its first pull follows the rebalance at once)
        assert wait_for(lambda: consumer_ids(broker, "CG_delay"), timeout=30)
        sent = produce(broker, tmp_path, [{"topic": "SvcDelay", "body": "later", "delay_level": 2},
                                          {"topic": "SvcDelay", "body": "now"}])
        events = collect(proc, 90)
    finally:
        if proc.poll() is None:
            proc.kill()
    got = {e["got"]["body"]: e["got"] for e in events if "got" in e}
    assert set(got) == {"later", "now"}
    later = got["later"]
    assert later["at"] - sent[0]["at"] >= 3.0 - 0.05, "level 2 is 3 s here"
    assert later["store_timestamp"] - later["born_timestamp"] >= 3000
    assert got["now"]["at"] < later["at"]
