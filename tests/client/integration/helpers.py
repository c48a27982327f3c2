"""Small helpers shared by the integration tests."""
from __future__ import annotations

import threading
import time

from mqcore.client import Message, Producer, PullConsumer, PullStatus
from mqcore.errors import RemotingError
from mqcore.remoting import (
    RequestCode,
    ResponseCode,
    SyncRemotingClient,
    create_request,
)

#: client settings that make periodic work fast enough for tests
FAST = dict(rebalance_interval_ms=1000, heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000,
            persist_consumer_offset_interval_ms=500, pull_time_delay_ms_when_exception=200)


def create_topic(broker_addr: str, namesrv_addr: str, topic: str, queues: int = 4) -> None:
    """UPDATE_AND_CREATE_TOPIC on a broker, then wait until the name server routes it."""
    with SyncRemotingClient() as rc:
        resp = rc.invoke(broker_addr, create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
            "perm": "6", "topicFilterType": "SINGLE_TAG"}), 5000)
        assert resp.code == ResponseCode.SUCCESS, resp
        deadline = time.time() + 15
        while time.time() < deadline:
            r = rc.invoke(namesrv_addr, create_request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}), 5000)
            if r.code == ResponseCode.SUCCESS and broker_addr.encode() in r.body:
                return
            time.sleep(0.1)
    raise AssertionError(f"topic {topic} never showed up in the route of {broker_addr}")


def produce(namesrv: str, topic: str, n: int, start: int = 0, **kw) -> list:
    with Producer("it-producer", namesrv_addr=namesrv) as p:
        return [p.send(Message(topic, f"m{i}", **kw)) for i in range(start, start + n)]


def pull_everything(namesrv: str, topic: str, group: str = "it-reader") -> list:
    """Every message of ``topic`` (all queues, from offset 0) with the low-level pull consumer."""
    out = []
    with PullConsumer(group, namesrv_addr=namesrv) as pc:
        for mq in pc.fetch_subscribe_message_queues(topic):
            offset = 0
            while True:
                try:
                    r = pc.pull(mq, "*", offset, 32)
                except RemotingError:  # a broker the test killed
                    break
                if r.status is not PullStatus.FOUND:
                    break
                out.extend(r.messages)
                offset = r.next_begin_offset
    return out


class Sink:
    """A listener that records what it got (thread-safe)."""

    def __init__(self) -> None:
        self.msgs: list = []
        self.lock = threading.Lock()

    def __call__(self, msgs, ctx) -> None:
        with self.lock:
            self.msgs.extend(msgs)

    def __len__(self) -> int:
        with self.lock:
            return len(self.msgs)

    def bodies(self) -> list[bytes]:
        with self.lock:
            return [m.body for m in self.msgs]
