"""mqcore.client's push consumer told PULL_OFFSET_MOVED, on mqbroker, Apache RocketMQ 4.9.7 and 5.3.3.

A group whose committed offsets lie past the end of its queues (a store restored from an older
copy, a recreated queue) pulls there; each broker answers PULL_OFFSET_MOVED naming the queue's
max offset. The consumer reacts as the Java client does: it drops the queue, stores and persists
that offset 10 s later, and takes the queue again at the next rebalance. It then gets the new
messages and none of the old ones (docs/remoting-pulls.md).
"""
from __future__ import annotations

import json
import os

import pytest

from mqcore.client import PushConsumer
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.support.waiting import wait_for

from .helpers import FAST, Sink, create_topic, produce

pytestmark = pytest.mark.timeout(300)


def _commit_past_the_end(broker, group: str, topic: str, queues: int, offset: int) -> None:
    with SyncRemotingClient() as rc:
        # the group made first: 5.x refuses a commit for a group it does not know
        body = json.dumps({"groupName": group}).encode()
        r = rc.invoke(broker.broker_addr, create_request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body), 5000)
        assert r.code == ResponseCode.SUCCESS, r.remark
        for q in range(queues):
            r = rc.invoke(broker.broker_addr, create_request(RC.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": group, "topic": topic, "queueId": str(q), "commitOffset": str(offset)}), 5000)
            assert r.code == ResponseCode.SUCCESS, r.remark


def test_a_push_consumer_committed_past_the_end_gets_the_new_messages_and_no_old_one(any_broker):
    ns = any_broker.namesrv_addr
    topic, group = f"PastEnd{os.getpid()}", f"cg-past-end-{os.getpid()}"
    create_topic(any_broker.broker_addr, ns, topic)
    produce(ns, topic, 8)  # m0..m7, two per queue
    _commit_past_the_end(any_broker, group, topic, 4, 1000)
    sink = Sink()
    c = PushConsumer(group, namesrv_addr=ns, **dict(FAST, consume_from_where="first"))
    c.subscribe(topic)
    c.register_listener(sink)
    with c:
        assert wait_for(lambda: len(c.assigned_queues(topic)) == 4)
        produce(ns, topic, 4, start=100)  # one per queue (the producer goes round the queues)
        # the fix waits 10 s after the answer (as the Java client does), then a rebalance
        assert wait_for(lambda: len(sink) >= 4, timeout=60), sink.bodies()
    assert sorted(sink.bodies()) == [b"m100", b"m101", b"m102", b"m103"]
