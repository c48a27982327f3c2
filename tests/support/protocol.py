"""Raw remoting requests against a broker (no client library): send, pull, decode.

Shared by the protocol, resilience, retry/DLQ and C++ service tests.
"""
from __future__ import annotations

import time

from mqcore._compat import kernels
from mqcore.message import MessageExt, properties_to_string
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode as R
from mqcore.remoting import SyncRemotingClient, create_request
from mqcore.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader


def send(rc, broker, topic, body=b"hello", queue_id=0, code=RC.SEND_MESSAGE_V2, **props):
    h = SendMessageRequestHeader(producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
                                 queue_id=queue_id, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
                                 properties=properties_to_string(props))
    return rc.invoke(broker.broker_addr, create_request(code, h.to_ext(code), body), 5000)


def pull(rc, broker, topic, offset, queue_id=0, sys_flag=0, suspend_ms=0, sub=None, group="CG", timeout=5000):
    sys_flag |= 0x4 if sub is not None else 0
    h = PullMessageRequestHeader(consumer_group=group, topic=topic, queue_id=queue_id, queue_offset=offset,
                                 max_msg_nums=32, sys_flag=sys_flag, commit_offset=0,
                                 suspend_timeout_millis=suspend_ms, sub_version=0, subscription=sub,
                                 expression_type="TAG")
    return rc.invoke(broker.broker_addr, create_request(RC.PULL_MESSAGE, h.to_ext()), timeout)


def decode(body):
    return [MessageExt.from_decoded(t) for t in kernels.decode_records(body, 0, len(body), 1000, True)]


def create_topic(broker, topic: str) -> None:
    """UPDATE_AND_CREATE_TOPIC, then wait until the name server routes it."""
    with SyncRemotingClient() as rc:
        resp = rc.invoke(broker.broker_addr, create_request(RC.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
            "topicFilterType": "SINGLE_TAG"}), 5000)
        assert resp.code == R.SUCCESS, resp.remark
        deadline = time.monotonic() + 15
        while rc.invoke(broker.namesrv_addr, create_request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}),
                        5000).code != R.SUCCESS:
            assert time.monotonic() < deadline, f"{topic} never routed"
            time.sleep(0.1)


def send_many(broker, topic: str, count: int, props_of, *, conns: int = 8, body: bytes = b"x" * 100) -> float:
    """``count`` single SEND_MESSAGE_V2 sends over ``conns`` connections (``props_of(i)``: the
    properties of message i, sent to queue i % 4); returns the seconds it took."""
    import threading

    t0 = time.perf_counter()
    failures: list[str] = []

    def worker(k: int) -> None:
        with SyncRemotingClient() as rc:
            for i in range(k, count, conns):
                r = send(rc, broker, topic, body, queue_id=i % 4, **props_of(i))
                if r.code != R.SUCCESS:
                    failures.append(f"{i}: {r.code} {r.remark}")
                    return

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]
    return time.perf_counter() - t0
