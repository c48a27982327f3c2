"""``broker.conf``: a Java properties file with RocketMQ's key names -> config objects.

Unknown keys are reported (the caller warns with their names) rather than silently
dropped, so a typo in ``fileReservedTime`` does not go unnoticed.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable

from mqcore.broker.config import BrokerConfig
from mqcore.config import FlushDiskType, StoreConfig, parse_delay_levels
from mqcore.errors import ConfigError


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "1", "yes", "on"):
        return True
    if s in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{v!r} is not true/false")


def _int(v: str) -> int:
    try:
        return int(v.strip())
    except ValueError as e:
        raise ConfigError(f"{v!r} is not an integer") from e


def _str(v: str) -> str:
    return v.strip()


def _flush_type(v: str) -> FlushDiskType:
    try:
        return FlushDiskType(v.strip().upper())
    except ValueError as e:
        raise ConfigError(f"flushDiskType {v!r} is not ASYNC_FLUSH or SYNC_FLUSH") from e


def _delay(v: str) -> str:
    parse_delay_levels(v)
    return v.strip()


# RocketMQ key -> (config object, field, converter)
BROKER_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "brokerClusterName": ("broker_cluster_name", _str),
    "brokerName": ("broker_name", _str),
    "brokerId": ("broker_id", _int),
    "brokerIP1": ("broker_ip1", _str),
    "listenPort": ("listen_port", _int),
    "namesrvAddr": ("namesrv_addr", _str),
    "brokerPermission": ("broker_permission", _int),
    "defaultTopicQueueNums": ("default_topic_queue_nums", _int),
    "autoCreateTopicEnable": ("auto_create_topic_enable", _bool),
    "autoCreateSubscriptionGroup": ("auto_create_subscription_group", _bool),
    "clusterTopicEnable": ("cluster_topic_enable", _bool),
    "brokerTopicEnable": ("broker_topic_enable", _bool),
    "longPollingEnable": ("long_polling_enable", _bool),
    "shortPollingTimeMills": ("short_polling_time_mills", _int),
    "notifyConsumerIdsChangedEnable": ("notify_consumer_ids_changed_enable", _bool),
    "regionId": ("region_id", _str),
    "traceOn": ("trace_on", _bool),
    "flushConsumerOffsetInterval": ("flush_consumer_offset_interval_ms", _int),
    "flushDelayOffsetInterval": ("flush_delay_offset_interval_ms", _int),
    "registerNameServerPeriod": ("register_name_server_period_ms", _int),
    "channelExpiredTimeout": ("channel_expired_timeout_ms", _int),
    "serverChannelMaxIdleTimeSeconds": ("server_channel_max_idle_time_seconds", _int),
    "rejectTransactionMessage": ("reject_transaction_message", _bool),
    "grpcServerPort": ("grpc_server_port", _int),
    # mqcore's own keys
    "listenHost": ("listen_host", _str),
    "embeddedNamesrv": ("embedded_namesrv", _bool),
    "namesrvListenPort": ("namesrv_listen_port", _int),
    "grpcServerEnable": ("grpc_server_enable", _bool),
    "grpcMinInvisibleTimeMillis": ("grpc_min_invisible_time_ms", _int),
}

STORE_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "storePathRootDir": ("store_path", _str),
    "mapedFileSizeCommitLog": ("commitlog_file_size_bytes", _int),
    "mappedFileSizeCommitLog": ("commitlog_file_size_bytes", _int),
    "mapedFileSizeConsumeQueue": ("consume_queue_file_size_bytes", _int),
    "mappedFileSizeConsumeQueue": ("consume_queue_file_size_bytes", _int),
    "flushDiskType": ("flush_disk_type", _flush_type),
    "flushIntervalCommitLog": ("flush_interval_commitlog_ms", _int),
    "flushCommitLogLeastPages": ("flush_commitlog_least_pages", _int),
    "flushCommitLogThoroughInterval": ("flush_commitlog_thorough_interval_ms", _int),
    "flushIntervalConsumeQueue": ("flush_interval_consume_queue_ms", _int),
    "syncFlushTimeout": ("sync_flush_timeout_ms", _int),
    "maxMessageSize": ("max_message_size_bytes", _int),
    "messageDelayLevel": ("message_delay_level", _delay),
    "checkCRCOnRecover": ("check_crc_on_recover", _bool),
    "messageIndexEnable": ("message_index_enable", _bool),
    "maxHashSlotNum": ("index_slots", _int),
    "maxIndexNum": ("index_entries", _int),
    "maxMsgsNumBatch": ("max_msgs_num_batch", _int),
    "defaultQueryMaxNum": ("default_query_max_num", _int),
    "maxTransferBytesOnMessageInMemory": ("max_transfer_bytes_on_message_in_memory", _int),
    "maxTransferCountOnMessageInMemory": ("max_transfer_count_on_message_in_memory", _int),
    "fileReservedTime": ("file_reserved_time_hours", _int),
    "deleteWhen": ("delete_when", _str),
    "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", _int),
    "diskSpaceCleanForciblyRatio": ("disk_space_clean_forcibly_ratio", _int),
    "diskSpaceWarningLevelRatio": ("disk_space_warning_level_ratio", _int),
    "cleanFileForciblyEnable": ("clean_file_forcibly_enable", _bool),
    "cleanResourceInterval": ("clean_resource_interval_ms", _int),
    "destroyMapedFileIntervalForcibly": ("destroy_mapped_file_interval_forcibly_ms", _int),
    "deleteFileBatchMax": ("delete_files_batch_max", _int),
    "cleanResourceFirstDelay": ("clean_resource_first_delay_ms", _int),
}

#: RocketMQ keys accepted with a fixed meaning here (single-node, master only)
IGNORED_KEYS = {"brokerRole": {"ASYNC_MASTER", "SYNC_MASTER"}, "storePathCommitLog": None,
                "haListenPort": None, "fastListenPort": None, "sendMessageThreadPoolNums": None,
                "pullMessageThreadPoolNums": None, "useEpollNativeSelector": None}


def read_properties(text: str) -> dict[str, str]:
    """Java properties: ``key=value`` or ``key: value``, ``#``/``!`` comments, ``\\`` line joins."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if m:
            out[m.group(1)] = m.group(2).strip()
        elif logical:
            out[logical] = ""
        logical = ""
    return out


@dataclasses.dataclass
class LoadedConf:
    broker: BrokerConfig
    store: StoreConfig
    unknown_keys: list[str]


def build_configs(props: dict[str, str], *, broker: BrokerConfig | None = None,
                  store: StoreConfig | None = None) -> LoadedConf:
    """Apply RocketMQ-named properties on top of the given (or default) configs."""
    bkw: dict[str, Any] = {}
    skw: dict[str, Any] = {}
    unknown = []
    for key, value in props.items():
        try:
            if key in BROKER_KEYS:
                name, conv = BROKER_KEYS[key]
                bkw[name] = conv(value)
            elif key in STORE_KEYS:
                name, conv = STORE_KEYS[key]
                skw[name] = conv(value)
            elif key in IGNORED_KEYS:
                allowed = IGNORED_KEYS[key]
                if allowed is not None and value.strip() not in allowed:
                    raise ConfigError(f"only {sorted(allowed)} are supported (single-node master)")
            else:
                unknown.append(key)
        except ConfigError as e:
            raise ConfigError(f"{key}={value}: {e}") from e
    if "namesrv_addr" in bkw and bkw["namesrv_addr"]:
        bkw.setdefault("embedded_namesrv", False)
    broker = dataclasses.replace(broker or BrokerConfig(), **bkw)
    skw.setdefault("broker_cluster_name", broker.broker_cluster_name)
    store = dataclasses.replace(store or StoreConfig(), **skw)
    return LoadedConf(broker, store, unknown)


def effective_config_lines(broker: BrokerConfig, store: StoreConfig) -> list[str]:
    """``mqbroker -p``: every setting under its RocketMQ key (or field name when mqcore-only)."""
    lines = []
    for obj, table in ((broker, BROKER_KEYS), (store, STORE_KEYS)):
        by_field = {}
        for key, (name, _conv) in table.items():
            by_field.setdefault(name, key)
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if isinstance(value, FlushDiskType):
                value = value.value
            if isinstance(value, bool):
                value = str(value).lower()
            lines.append(f"{by_field.get(f.name, f.name)}={'' if value is None else value}")
    return lines
