"""The client's settings as types, for the keyword arguments of ``Producer``, ``PushConsumer``,
``LitePullConsumer``, ``PullConsumer`` and ``TransactionProducer`` (``**settings:
Unpack[ProducerSettings]``): mypy (``--strict`` or not) refuses ``send_msg_timeout_ms="3000"``
in user code, and an editor completes the names.

Each TypedDict names exactly the fields of its config dataclass (``mqcore.client.config``), with
the same types, but the group (each constructor's first parameter, by position or by name); an enum setting also takes its value's name as a string (``message_model=
"BROADCASTING"``), as the dataclass accepts it. ``tests/client/test_config.py`` keeps the two
equal. At run time the dataclass checks every value's type (``SettingTypeError``).
"""
from __future__ import annotations

from typing import Any, TypedDict

from mqcore.client.config import ConsumeFromWhere, MessageModel

__all__ = ["ClientSettings", "ProducerSettings", "PushConsumerSettings", "LitePullConsumerSettings",
           "PullConsumerSettings"]


class ClientSettings(TypedDict, total=False):
    """Settings every client role takes (``ClientConfig``)."""

    namesrv_addr: str
    instance_name: str
    client_ip: str | None
    unit_name: str | None
    poll_name_server_interval_ms: int
    heartbeat_broker_interval_ms: int
    persist_consumer_offset_interval_ms: int
    pull_time_delay_ms_when_exception: int
    mq_client_api_timeout_ms: int
    language: int
    version: int
    access_key: str | None
    secret_key: str | None
    security_token: str | None
    use_tls: bool
    tls_trust_cert_path: str | None
    tls_cert_path: str | None
    tls_key_path: str | None
    namespace: str | None


class ProducerSettings(ClientSettings, total=False):
    """``Producer`` / ``TransactionProducer`` settings (``ProducerConfig``)."""

    create_topic_key: str
    default_topic_queue_nums: int
    send_msg_timeout_ms: int
    compress_msg_body_over_howmuch: int
    compress_level: int
    compress_type: str
    retry_times_when_send_failed: int
    retry_times_when_send_async_failed: int
    retry_another_broker_when_not_store_ok: bool
    max_message_size_bytes: int
    send_latency_fault_enable: bool
    latency_max_ms: tuple[int, ...]
    not_available_duration_ms: tuple[int, ...]
    use_send_message_v2: bool
    max_async_inflight: int
    auto_batch: bool
    batch_max_bytes: int
    batch_max_delay_ms: int
    total_batch_max_bytes: int
    enable_msg_trace: bool
    trace_topic: str


class _ConsumerCommonSettings(ClientSettings, total=False):
    """Settings push and lite pull consumers share."""

    message_model: MessageModel | str
    consume_from_where: ConsumeFromWhere | str
    consume_timestamp: str | None
    allocate_strategy: Any
    offset_store_dir: str
    rebalance_interval_ms: int
    max_reconsume_times: int


class PushConsumerSettings(_ConsumerCommonSettings, total=False):
    """``PushConsumer`` settings (``PushConsumerConfig``)."""

    enable_msg_trace: bool
    trace_topic: str
    consume_thread_min: int
    consume_thread_max: int
    consume_concurrently_max_span: int
    pull_threshold_for_queue: int
    pull_threshold_size_for_queue_mib: int
    pull_threshold_for_topic: int
    pull_threshold_size_for_topic_mib: int
    pull_interval_ms: int
    pull_batch_size: int
    consume_message_batch_max_size: int
    post_subscription_when_pull: bool
    suspend_current_queue_time_ms: int
    consume_timeout_min: float
    await_termination_ms_when_shutdown: int
    broker_suspend_max_time_ms: int
    consumer_timeout_ms_when_suspend: int
    lock_interval_ms: int
    lock_max_live_time_ms: int
    pull_max_idle_time_ms: int
    send_back_timeout_ms: int
    local_retry_delay_ms: int
    clean_expired_interval_ms: int


class LitePullConsumerSettings(_ConsumerCommonSettings, total=False):
    """``LitePullConsumer`` settings (``LitePullConsumerConfig``)."""

    pull_batch_size: int
    pull_threshold_for_all: int
    pull_threshold_for_queue: int
    pull_threshold_size_for_queue_mib: int
    poll_timeout_ms: int
    auto_commit: bool
    auto_commit_interval_ms: int
    broker_suspend_max_time_ms: int
    consumer_pull_timeout_ms: int
    consumer_timeout_ms_when_suspend: int


class PullConsumerSettings(ClientSettings, total=False):
    """``PullConsumer`` settings (``PullConsumerConfig``)."""

    broker_suspend_max_time_ms: int
    consumer_timeout_ms_when_suspend: int
    consumer_pull_timeout_ms: int
    max_reconsume_times: int
    message_model: MessageModel | str
