"""Client configuration: frozen dataclasses with RocketMQ 4.9.8 defaults.

One class per role (``ClientConfig`` shared settings, ``ProducerConfig``,
``PushConsumerConfig``, ``LitePullConsumerConfig``, ``PullConsumerConfig``). Names are
the Java names in snake case with a unit suffix (``sendMsgTimeout`` ->
``send_msg_timeout_ms``); every default is RocketMQ 4.9.8's (5.x's for auto-batching) except
the push consumer's ``pull_batch_size`` (1000, not 32) and auto-batching's ``batch_max_bytes``
(2 MiB, not 32 KiB): see their comments; ``mqcore/client/README.md`` lists the settings. The public classes (``Producer``...) accept the same
names as keyword arguments and build these objects, so most users never touch them.

Library code never reads environment variables; ``instance_name="DEFAULT"`` is turned
into ``<pid>#<monotonic ns>`` by the client instance, as the Java client does.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import os
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from mqcore.errors import ConfigError, IllegalArgumentError, SettingTypeError
from mqcore.format.compression import COMPRESSION_TYPES
from mqcore.message import DEFAULT_TOPIC
from mqcore.message import validate_group as _validate_group
from mqcore.remoting.codes import CURRENT_VERSION, LanguageCode

#: ``MQFaultStrategy`` tables of 4.9.8 (client-defaults.md §1)
LATENCY_MAX_MS = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION_MS = (0, 0, 30000, 60000, 120000, 180000, 600000)

DEFAULT_PRODUCER_GROUP = "DEFAULT_PRODUCER"
CLIENT_INNER_PRODUCER_GROUP = "CLIENT_INNER_PRODUCER"
DEFAULT_CONSUMER_GROUP = "DEFAULT_CONSUMER"


class MessageModel(str, enum.Enum):
    """How a group shares a topic: each message once per group, or once per consumer."""

    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(str, enum.Enum):
    """Where a group with no stored offset starts (heartbeat ``consumeFromWhere``)."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"

    # short aliases: ``consume_from_where="first"``
    @classmethod
    def parse(cls, value: Any) -> ConsumeFromWhere:
        if isinstance(value, cls):
            return value
        text = str(value).strip().upper()
        for member in cls:
            if text in (member.value, member.value.replace("CONSUME_FROM_", "").replace("_OFFSET", "")):
                return member
        raise ConfigError(f"consume_from_where {value!r} is not one of last, first, timestamp")


def validate_group(group: str) -> None:
    try:
        _validate_group(group)
    except IllegalArgumentError as e:
        raise ConfigError(str(e)) from e


def _positive(name: str, value: float) -> None:
    if value <= 0:
        raise ConfigError(f"{name} must be > 0, got {value}")


def _non_negative(name: str, value: float) -> None:
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {value}")


@functools.cache
def _field_types(cls: Any) -> tuple[tuple[str, Any], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _matches(value: Any, hint: Any) -> bool:
    """``value`` is of the declared type ``hint`` (the few kinds the settings use)."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return isinstance(value, (tuple, list)) and all(_matches(v, item) for v in value)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, (hint, str))  # the dataclass turns the name into the member
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:  # True is an int to Python, never a count of milliseconds here
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return not isinstance(hint, type) or isinstance(value, hint)


def _type_name(hint: Any) -> str:
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return f"{hint.__name__} or its name as a str"
    return hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", "")


def check_setting_types(config: Any) -> None:
    """Every field of ``config`` holds a value of its declared type, else ``SettingTypeError``
    naming the setting (a wrong type used to fail later, as a bare ``TypeError`` from a
    comparison deep in the client)."""
    cls: Any = type(config)
    for name, hint in _field_types(cls):
        value = getattr(config, name)
        if not _matches(value, hint):
            raise SettingTypeError(f"setting {name} takes {_type_name(hint)}, got {type(value).__name__} "
                                   f"{value!r:.60}")


def default_offset_store_dir() -> str:
    """``~/.rocketmq_offsets`` (Java: ``rocketmq.client.localOffsetStoreDir``)."""
    return os.path.join(os.path.expanduser("~"), ".rocketmq_offsets")


#: a namespace is a topic name's characters without its separator ``%``
_NAMESPACE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@dataclasses.dataclass(frozen=True)
class ClientConfig:
    """Settings shared by every client role (``ClientConfig.java``)."""

    #: name servers, ``host:port`` separated by ``;``
    namesrv_addr: str = "127.0.0.1:9876"
    #: ``DEFAULT`` is replaced by ``<pid>#<ns>`` so two clients in one process differ
    instance_name: str = "DEFAULT"
    #: the IP in the client id and message ids; found automatically when ``None``
    client_ip: str | None = None
    unit_name: str | None = None
    poll_name_server_interval_ms: int = 30_000
    heartbeat_broker_interval_ms: int = 30_000
    persist_consumer_offset_interval_ms: int = 5_000
    pull_time_delay_ms_when_exception: int = 1_000
    mq_client_api_timeout_ms: int = 3_000
    #: language code sent in every request header
    language: int = LanguageCode.PYTHON
    #: ``MQVersion`` ordinal sent in every request header (409 = V4_9_8)
    version: int = int(CURRENT_VERSION)
    #: plain ACL account (Java: ``new AclClientRPCHook(new SessionCredentials(ak, sk))``):
    #: when set, every request is signed; ``security_token`` is sent and signed if given
    access_key: str | None = None
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    security_token: str | None = dataclasses.field(default=None, repr=False)
    #: TLS to the name servers and brokers (Java: ``-Dtls.enable=true`` / ``setUseTLS(true)``);
    #: the broker's certificate is accepted as is (RocketMQ's test mode) unless
    #: ``tls_trust_cert_path`` names the CA it must be signed by (tls.client.trustCertPath).
    #: ``tls_cert_path``/``tls_key_path``: this client's own certificate, for brokers that ask
    #: for one (tls.client.certPath / tls.client.keyPath, PEM)
    use_tls: bool = False
    tls_trust_cert_path: str | None = None
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    #: Java's ``setNamespace``: every topic and group this client names lives under it on the
    #: broker (``ns%topic``, ``ns%group``); results and consumed messages are named without it
    namespace: str | None = None

    def __post_init__(self) -> None:
        check_setting_types(self)
        if self.namespace is not None and not _NAMESPACE.match(self.namespace):
            raise ConfigError(f"namespace {self.namespace!r}: 1..64 characters of [a-zA-Z0-9_-] expected "
                              "(it becomes part of every topic and group name)")
        if (self.access_key is None) != (self.secret_key is None) or self.access_key == "" or self.secret_key == "":
            raise ConfigError("access_key and secret_key go together (both set and non-empty, or neither)")
        if (self.tls_cert_path is None) != (self.tls_key_path is None):
            raise ConfigError("tls_cert_path and tls_key_path go together")
        if not self.use_tls and (self.tls_trust_cert_path or self.tls_cert_path):
            raise ConfigError("tls_trust_cert_path / tls_cert_path are set but use_tls is False")
        if not self.namesrv_addr or not self.namesrv_addr.strip(";, "):
            raise ConfigError("namesrv_addr is empty: give the name server as host:port")
        for name in ("poll_name_server_interval_ms", "heartbeat_broker_interval_ms",
                     "persist_consumer_offset_interval_ms", "mq_client_api_timeout_ms"):
            _positive(name, getattr(self, name))
        _non_negative("pull_time_delay_ms_when_exception", self.pull_time_delay_ms_when_exception)

    @property
    def namesrv_addrs(self) -> list[str]:
        return [a.strip() for a in self.namesrv_addr.replace(",", ";").split(";") if a.strip()]


@dataclasses.dataclass(frozen=True)
class ProducerConfig(ClientConfig):
    """``DefaultMQProducer`` settings plus the auto-batching knobs of seed 002."""

    producer_group: str = DEFAULT_PRODUCER_GROUP
    create_topic_key: str = DEFAULT_TOPIC
    default_topic_queue_nums: int = 4
    send_msg_timeout_ms: int = 3_000
    compress_msg_body_over_howmuch: int = 4096
    compress_level: int = 5
    #: how bodies over ``compress_msg_body_over_howmuch`` are compressed: ``"ZLIB"`` (every
    #: RocketMQ client's default; 4.x consumers read only this), ``"LZ4"`` or ``"ZSTD"`` (what a
    #: 5.x producer's ``setCompressType`` sends; 5.x consumers and mqcore read all three)
    compress_type: str = "ZLIB"
    retry_times_when_send_failed: int = 2
    retry_times_when_send_async_failed: int = 2
    retry_another_broker_when_not_store_ok: bool = False
    max_message_size_bytes: int = 4 * 1024 * 1024
    send_latency_fault_enable: bool = False
    latency_max_ms: tuple[int, ...] = LATENCY_MAX_MS
    not_available_duration_ms: tuple[int, ...] = NOT_AVAILABLE_DURATION_MS
    #: SEND_MESSAGE_V2 (310, Java's default) or SEND_MESSAGE (10, v1 long keys)
    use_send_message_v2: bool = True
    #: back-pressure: ``send_async`` blocks while this many async sends are unanswered
    #: (RocketMQ 5's ``backPressureForAsyncSendNum``; 4.x instead throws past 50,000 queued)
    max_async_inflight: int = 10_000
    # --- auto batching (off by default, as in RocketMQ 5) ---
    auto_batch: bool = False
    #: a batch leaves once this full. **Not RocketMQ 5's default (32 KiB)**: 2 MiB, room for a
    #: window of 1000 messages of 1 KiB in one batch (an item is ~75 bytes more than its body:
    #: 1 MiB cut such a window into ~950 + ~50, twice the batches and 0.3-0.4 µs more client
    #: CPU per message, bench/README.md "`send_async`"); each
    #: batch costs the broker a request's fixed work, and 32 KiB batches (28 such messages)
    #: measured twice the broker CPU per message (bench/README.md, "Client").
    #: ``batch_max_bytes=32 * 1024`` gives RocketMQ's. A batch still leaves as soon as its
    #: key's pipeline has room, and is never larger than ``max_message_size_bytes``.
    batch_max_bytes: int = 2 * 1024 * 1024
    batch_max_delay_ms: int = 10
    total_batch_max_bytes: int = 32 * 1024 * 1024
    #: ``enableMsgTrace``: a Pub trace record per send, sent in batches off the hot path
    enable_msg_trace: bool = False
    #: ``customizedTraceTopic``: where the traces go
    trace_topic: str = "RMQ_SYS_TRACE_TOPIC"

    def __post_init__(self) -> None:
        ClientConfig.__post_init__(self)
        validate_group(self.producer_group)
        _positive("send_msg_timeout_ms", self.send_msg_timeout_ms)
        _non_negative("retry_times_when_send_failed", self.retry_times_when_send_failed)
        _non_negative("retry_times_when_send_async_failed", self.retry_times_when_send_async_failed)
        _positive("max_message_size_bytes", self.max_message_size_bytes)
        if not 0 <= self.compress_level <= 9:
            raise ConfigError(f"compress_level must be 0..9, got {self.compress_level}")
        if self.compress_type not in COMPRESSION_TYPES:
            raise ConfigError(f"compress_type must be one of {', '.join(COMPRESSION_TYPES)}, got {self.compress_type!r}")
        if len(self.latency_max_ms) != len(self.not_available_duration_ms):
            raise ConfigError("latency_max_ms and not_available_duration_ms must have the same length")
        _positive("default_topic_queue_nums", self.default_topic_queue_nums)
        _positive("batch_max_bytes", self.batch_max_bytes)
        _positive("max_async_inflight", self.max_async_inflight)
        _non_negative("batch_max_delay_ms", self.batch_max_delay_ms)
        if self.total_batch_max_bytes < self.batch_max_bytes:
            raise ConfigError("total_batch_max_bytes must be >= batch_max_bytes")


@dataclasses.dataclass(frozen=True)
class _ConsumerCommon(ClientConfig):
    consumer_group: str = DEFAULT_CONSUMER_GROUP
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET
    #: ``yyyyMMddHHmmss`` for CONSUME_FROM_TIMESTAMP; ``None`` = now - 30 min
    consume_timestamp: str | None = None
    #: an allocation strategy (``mqcore.client.consumer.rebalance``); ``None`` = averagely
    allocate_strategy: Any = None
    #: directory of broadcasting offset files (``<dir>/<clientId>/<group>/offsets.json``)
    offset_store_dir: str = dataclasses.field(default_factory=default_offset_store_dir)
    rebalance_interval_ms: int = 20_000
    max_reconsume_times: int = -1

    def __post_init__(self) -> None:
        ClientConfig.__post_init__(self)
        validate_group(self.consumer_group)
        object.__setattr__(self, "message_model", MessageModel(self.message_model))
        object.__setattr__(self, "consume_from_where", ConsumeFromWhere.parse(self.consume_from_where))
        _positive("rebalance_interval_ms", self.rebalance_interval_ms)
        if self.consume_timestamp is not None and not (
                len(self.consume_timestamp) == 14 and self.consume_timestamp.isdigit()):
            raise ConfigError(f"consume_timestamp must be yyyyMMddHHmmss, got {self.consume_timestamp!r}")


@dataclasses.dataclass(frozen=True)
class PushConsumerConfig(_ConsumerCommon):
    """``DefaultMQPushConsumer`` settings."""

    #: accepted for compatibility: the pool always has ``consume_thread_max`` threads (Java: 20/20)
    consume_thread_min: int = 20
    consume_thread_max: int = 20
    consume_concurrently_max_span: int = 2000
    #: flow control: no pull while a queue holds more; a pull held back resumes as soon as
    #: consumption brings the queue under the limits (Java: after a fixed 50 ms), at most 50 ms later
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue_mib: int = 100
    pull_threshold_for_topic: int = -1
    pull_threshold_size_for_topic_mib: int = -1
    pull_interval_ms: int = 0
    #: messages asked for per pull. **Not RocketMQ's default (32)**: 1000, measured ~2-3x the
    #: consume rate (each pull is a round trip and a wake-up of the consume threads;
    #: bench/README.md, "Client"). ``pull_batch_size=32`` gives RocketMQ's
    #: behaviour. A broker caps it (``maxTransferCountOnMessageInMemory``: mqbroker 1024,
    #: Apache RocketMQ 32), so against a Java broker a pull still brings at most 32.
    pull_batch_size: int = 1000
    consume_message_batch_max_size: int = 1
    post_subscription_when_pull: bool = False
    suspend_current_queue_time_ms: int = 1_000
    consume_timeout_min: float = 15
    #: how long shutdown waits for running listeners (Java: 0; here 5 s so their offsets get committed)
    await_termination_ms_when_shutdown: int = 5_000
    broker_suspend_max_time_ms: int = 15_000
    consumer_timeout_ms_when_suspend: int = 30_000
    lock_interval_ms: int = 20_000
    lock_max_live_time_ms: int = 30_000
    pull_max_idle_time_ms: int = 120_000
    send_back_timeout_ms: int = 5_000
    #: a message whose send-back failed is consumed again locally after this delay
    local_retry_delay_ms: int = 5_000
    #: how often messages stuck beyond ``consume_timeout_min`` are looked for
    clean_expired_interval_ms: int = 15 * 60 * 1000

    #: ``enableMsgTrace``: SubBefore / SubAfter trace records per consumed message
    enable_msg_trace: bool = False
    #: ``customizedTraceTopic``
    trace_topic: str = "RMQ_SYS_TRACE_TOPIC"

    def __post_init__(self) -> None:
        _ConsumerCommon.__post_init__(self)
        _positive("consume_thread_max", self.consume_thread_max)
        if self.consume_thread_min > self.consume_thread_max:
            raise ConfigError("consume_thread_min must be <= consume_thread_max")
        if not 1 <= self.pull_batch_size <= 1024:
            raise ConfigError(f"pull_batch_size must be 1..1024, got {self.pull_batch_size}")
        if not 1 <= self.consume_message_batch_max_size <= 1024:
            raise ConfigError("consume_message_batch_max_size must be 1..1024")
        if not 1 <= self.pull_threshold_for_queue <= 65535:
            raise ConfigError("pull_threshold_for_queue must be 1..65535")
        if not 1 <= self.consume_concurrently_max_span <= 65535:
            raise ConfigError("consume_concurrently_max_span must be 1..65535")
        if not 10 <= self.suspend_current_queue_time_ms <= 30_000:
            raise ConfigError("suspend_current_queue_time_ms must be 10..30000")
        _positive("consume_timeout_min", self.consume_timeout_min)
        _non_negative("pull_interval_ms", self.pull_interval_ms)
        if self.consumer_timeout_ms_when_suspend <= self.broker_suspend_max_time_ms:
            raise ConfigError("consumer_timeout_ms_when_suspend must exceed broker_suspend_max_time_ms")

    @property
    def effective_max_reconsume_times(self) -> int:
        """-1 means 16 for concurrent listeners (orderly ones use ``2**31-1``)."""
        return 16 if self.max_reconsume_times == -1 else self.max_reconsume_times


@dataclasses.dataclass(frozen=True)
class LitePullConsumerConfig(_ConsumerCommon):
    """``DefaultLitePullConsumer`` settings."""

    pull_batch_size: int = 10
    pull_threshold_for_all: int = 10_000
    pull_threshold_for_queue: int = 1_000
    pull_threshold_size_for_queue_mib: int = 100
    poll_timeout_ms: int = 5_000
    auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    broker_suspend_max_time_ms: int = 20_000
    consumer_pull_timeout_ms: int = 10_000
    consumer_timeout_ms_when_suspend: int = 30_000

    def __post_init__(self) -> None:
        _ConsumerCommon.__post_init__(self)
        if not 1 <= self.pull_batch_size <= 1024:
            raise ConfigError(f"pull_batch_size must be 1..1024, got {self.pull_batch_size}")
        _positive("auto_commit_interval_ms", self.auto_commit_interval_ms)
        _positive("poll_timeout_ms", self.poll_timeout_ms)


@dataclasses.dataclass(frozen=True)
class PullConsumerConfig(ClientConfig):
    """Low-level pull by queue (``DefaultMQPullConsumer``)."""

    consumer_group: str = DEFAULT_CONSUMER_GROUP
    broker_suspend_max_time_ms: int = 20_000
    consumer_timeout_ms_when_suspend: int = 30_000
    consumer_pull_timeout_ms: int = 10_000
    max_reconsume_times: int = 16
    message_model: MessageModel = MessageModel.CLUSTERING

    def __post_init__(self) -> None:
        ClientConfig.__post_init__(self)
        validate_group(self.consumer_group)
        object.__setattr__(self, "message_model", MessageModel(self.message_model))


def build(cls: type, base: Any, overrides: Mapping[str, object]) -> Any:
    """``cls(**overrides)``, or ``base`` with overrides applied; unknown names raise
    a ConfigError that lists the valid ones."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} setting(s) {unknown}; valid: {sorted(names)}")
    if base is None:
        return cls(**overrides)
    if not isinstance(base, cls):
        raise ConfigError(f"config must be a {cls.__name__}, got {type(base).__name__}")
    return dataclasses.replace(base, **overrides) if overrides else base  # type: ignore[type-var]
