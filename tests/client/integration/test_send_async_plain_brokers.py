"""Un-batched ``send_async`` (the plain path: ``Channel.invoke_flat``) against every broker kind:
mqbroker, Apache RocketMQ 4.9.7 and 5.3.3 answer headers of their own shapes, and every
answer must settle its send on the first attempt (a dropped answer would leave the future
waiting for the whole send timeout, with no retry allowed here)."""
from __future__ import annotations

import os

import pytest

from mqcore.client import Message, Producer

from .helpers import create_topic, pull_everything

pytestmark = pytest.mark.timeout(300)


def test_unbatched_send_async_settles_every_answer_on_the_first_attempt(any_broker):
    ns = any_broker.namesrv_addr
    topic = f"PlainAsync{os.getpid()}{any_broker.kind if hasattr(any_broker, 'kind') else ''}"
    create_topic(any_broker.broker_addr, ns, topic)
    with Producer("it-plain-async", namesrv_addr=ns, send_msg_timeout_ms=60_000,
                  retry_times_when_send_async_failed=0, max_async_inflight=64) as p:
        p.send(Message(topic, b"warm"))
        assert p.send_async(Message(topic, b"warm")).result(30).ok  # the loop's connection is open now
        futures = [p.send_async(Message(topic, f"m{i}".encode(), keys=[f"k{i}"])) for i in range(300)]
        results = [f.result(20) for f in futures]  # 20 s, well under the 60 s a dropped answer would take
    assert all(r.ok for r in results) and len({r.msg_id for r in results}) == 300
    stored = sorted(m.body for m in pull_everything(ns, topic))
    assert stored == sorted([b"warm", b"warm"] + [f"m{i}".encode() for i in range(300)])
