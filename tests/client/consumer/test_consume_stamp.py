"""What a concurrent consume thread does to the messages it hands to a listener: each gets
``CONSUME_START_TIME`` (the consumer's clock), whether its properties were parsed already
or not, and a message redelivered through ``%RETRY%<group>`` shows its original topic."""
from __future__ import annotations

import concurrent.futures

import pytest

from mqcore import _wire_client, _wire_client_py
from mqcore._compat import default_kernels
from mqcore.client.config import MessageModel, PushConsumerConfig
from mqcore.client.consumer.common import reset_retry_topic
from mqcore.client.consumer.consume_concurrently import ConsumeMessageConcurrentlyService
from mqcore.client.consumer.process_queue import ProcessQueue
from mqcore.client.message import decode_messages
from mqcore.client.consumer.stats import ConsumerStats
from mqcore.clock import ManualClock
from mqcore.message import Prop, pack_host, properties_to_bytes
from mqcore.remoting.bodies import MessageQueue


def records(*specs: tuple[str, dict[str, str]]) -> bytes:
    k = default_kernels()
    out = bytearray()
    for i, (topic, props) in enumerate(specs):
        pb = properties_to_bytes(props)
        buf = bytearray(k.record_size(1, len(topic), len(pb), 0))
        k.encode_record(buf, 0, topic.encode(), 0, 0, i, len(out), 0, 1, pack_host("10.0.0.2", 1), 2,
                        pack_host("10.0.0.3", 2), 0, 0, b"x", pb)
        out += buf
    return bytes(out)


class Offsets:
    def update_offset(self, mq, offset, increase_only=False) -> None:
        pass


class Consumer:
    config = PushConsumerConfig(consumer_group="g", consume_message_batch_max_size=4)
    group = "g"
    clock = ManualClock(1_700_000_000_123)
    offset_store = Offsets()
    stats = ConsumerStats(clock)
    message_model = MessageModel.CLUSTERING

    def reset_retry_topic(self, msgs) -> None:
        reset_retry_topic(msgs, self.group)


@pytest.mark.parametrize("kernels", [_wire_client, _wire_client_py], ids=["kernel", "twin"])
def test_messages_get_their_consume_start_time_and_original_topic(kernels):
    msgs = decode_messages(records(("T", {"TAGS": "A"}), ("T", {}), ("%RETRY%g", {Prop.RETRY_TOPIC: "T", "K": "v"}),
                                   ("T", {"TAGS": "B"})), "b")
    assert msgs[3].properties["TAGS"] == "B"  # parsed before: stamped in the dict
    seen = []

    def listener(batch, ctx) -> None:
        seen.extend((m.topic, dict(m.properties)) for m in batch)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        service = ConsumeMessageConcurrentlyService(Consumer(), listener, pool, kernels=kernels)
        mq = MessageQueue("T", "b", 0)
        pq = ProcessQueue()
        pq.put_messages(msgs)
        state = kernels.DrainerState()
        assert service._runner.run(kernels.ConsumeRun(msgs, pq, mq), state) == kernels.RUN_EXHAUSTED
        assert state.done == msgs
    start = {Prop.CONSUME_START_TIME: "1700000000123"}
    assert seen == [("T", {"TAGS": "A", **start}), ("T", start), ("T", {Prop.RETRY_TOPIC: "T", "K": "v", **start}),
                    ("T", {"TAGS": "B", **start})]
