"""Client configuration defaults and validation."""
from __future__ import annotations

import pytest

from mqcore.client.config import (
    ConsumeFromWhere,
    MessageModel,
    ProducerConfig,
    PushConsumerConfig,
    build,
)
from mqcore.errors import ConfigError


def test_java_defaults():
    p = ProducerConfig()
    assert (p.send_msg_timeout_ms, p.retry_times_when_send_failed, p.retry_times_when_send_async_failed) == (3000, 2, 2)
    assert (p.compress_msg_body_over_howmuch, p.compress_level, p.max_message_size_bytes) == (4096, 5, 4 * 1024 * 1024)
    assert p.create_topic_key == "TBW102" and p.default_topic_queue_nums == 4 and not p.send_latency_fault_enable
    c = PushConsumerConfig()
    assert (c.pull_batch_size, c.consume_thread_max, c.pull_threshold_for_queue) == (1000, 20, 1000)
    assert (c.broker_suspend_max_time_ms, c.consumer_timeout_ms_when_suspend) == (15000, 30000)
    assert c.consume_timeout_min == 15 and c.effective_max_reconsume_times == 16
    assert c.message_model is MessageModel.CLUSTERING
    assert c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    assert c.heartbeat_broker_interval_ms == 30000 and c.persist_consumer_offset_interval_ms == 5000


def test_short_names_and_validation():
    c = PushConsumerConfig(consume_from_where="first", message_model="BROADCASTING")
    assert c.consume_from_where is ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    assert c.message_model is MessageModel.BROADCASTING
    with pytest.raises(ConfigError):
        PushConsumerConfig(consume_from_where="middle")
    with pytest.raises(ConfigError):
        PushConsumerConfig(pull_batch_size=0)
    with pytest.raises(ConfigError):
        ProducerConfig(producer_group="bad group")
    with pytest.raises(ConfigError):
        ProducerConfig(namesrv_addr="")
    with pytest.raises(ConfigError):
        PushConsumerConfig(consume_timestamp="2024")


def test_build_reports_unknown_settings():
    with pytest.raises(ConfigError, match="send_timeout"):
        build(ProducerConfig, None, {"send_timeout": 1})
    base = ProducerConfig(producer_group="g")
    assert build(ProducerConfig, base, {"send_msg_timeout_ms": 10}).send_msg_timeout_ms == 10
    assert ProducerConfig(namesrv_addr="a:1;b:2").namesrv_addrs == ["a:1", "b:2"]
