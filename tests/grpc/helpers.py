"""Small helpers shared by the gRPC endpoint tests (4.x reads of what 5.x clients wrote)."""
from __future__ import annotations

import time

from mqcore.client import PullConsumer
from mqcore.broker.metadata import SubscriptionGroupConfig, SubscriptionGroupTable


def preset_group(store_dir, group: str, retry_max_times: int) -> None:
    """Write the group's config before the broker starts (as mqadmin updateSubGroup would)."""
    table = SubscriptionGroupTable.in_dir(str(store_dir / "config"))
    table.load()
    table.put(SubscriptionGroupConfig(group, retry_max_times=retry_max_times))
    table.persist()


def pull_all(namesrv: str, topic: str, want: int, timeout_s: float = 20) -> list:
    """Every message of ``topic`` through the 4.x client's pull consumer, waiting for ``want``."""
    got: dict = {}
    deadline = time.monotonic() + timeout_s
    with PullConsumer("grpc-test-reader", namesrv_addr=namesrv) as c:
        while time.monotonic() < deadline:
            try:
                queues = c.fetch_subscribe_message_queues(topic)
            except Exception:  # the topic's route is not registered yet
                queues = []
            for mq in queues:
                r = c.pull(mq, "*", 0, 64)
                for m in r.messages:
                    got[(m.queue_id, m.queue_offset)] = m
            if len(got) >= want:
                break
            time.sleep(0.2)
    return [got[k] for k in sorted(got)]
