"""``broker.conf``: a Java properties file with RocketMQ's key names -> config objects.

Unknown keys are reported (the caller warns with their names) rather than silently
dropped, so a typo in ``fileReservedTime`` does not go unnoticed.
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Callable

from mqcore.broker.config import BrokerConfig
from mqcore.config import FlushDiskType, StoreConfig, parse_delay_levels, read_properties
from mqcore.errors import ConfigError, FieldConfigError
from mqcore.store.cleanup import parse_delete_when


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


def _request_mode(v: str) -> str:
    if v.strip().upper() not in ("PULL", "POP"):
        raise ConfigError(f"defaultMessageRequestMode {v!r} is not PULL or POP")
    return v.strip().upper()


def _delay(v: str) -> str:
    parse_delay_levels(v)
    return v.strip()


def _delete_when(v: str) -> str:
    parse_delete_when(v)  # validated here so ``-p`` refuses what a start would refuse
    return v.strip()


def _dir(v: str) -> str:
    path = v.strip()
    if ":" in path:
        # RocketMQ's multiCommitLogPathEnable spreads the commitlog over ':'-separated
        # directories; mqcore keeps one, and says so rather than treating it as one odd name
        raise ConfigError("several ':'-separated directories are not supported; give one directory")
    return path


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
    "recallMessageEnable": ("recall_message_enable", _bool),
    "serverLoadBalancerEnable": ("server_load_balancer_enable", _bool),
    "defaultMessageRequestMode": ("default_message_request_mode", _request_mode),
    "defaultPopShareQueueNum": ("default_pop_share_queue_num", _int),
    "transactionTimeOut": ("transaction_timeout_ms", _int),
    "transactionCheckInterval": ("transaction_check_interval_ms", _int),
    "transactionCheckMax": ("transaction_check_max", _int),
    "enablePropertyFilter": ("enable_property_filter", _bool),
    "storeReplyMessageEnable": ("store_reply_message_enable", _bool),
    "grpcServerPort": ("grpc_server_port", _int),
    "aclEnable": ("acl_enable", _bool),
    "slaveTimeout": ("slave_timeout_ms", _int),
    "haSlaveFallbehindMax": ("ha_slave_fallbehind_max", _int),
    # ACL 2.0 (RocketMQ 5.3's AuthConfig keys)
    "authenticationEnabled": ("authentication_enabled", _bool),
    "authorizationEnabled": ("authorization_enabled", _bool),
    "authenticationProvider": ("authentication_provider", _str),
    "authorizationProvider": ("authorization_provider", _str),
    "authenticationMetadataProvider": ("authentication_metadata_provider", _str),
    "authorizationMetadataProvider": ("authorization_metadata_provider", _str),
    "authenticationWhitelist": ("authentication_whitelist", _str),
    "authorizationWhitelist": ("authorization_whitelist", _str),
    "initAuthenticationUser": ("init_authentication_user", _str),
    "innerClientAuthenticationCredentials": ("inner_client_authentication_credentials", _str),
    # mqcore's own keys
    "listenHost": ("listen_host", _str),
    "embeddedNamesrv": ("embedded_namesrv", _bool),
    "namesrvListenPort": ("namesrv_listen_port", _int),
    "maxFrameBytes": ("max_frame_bytes", _int),
    "serverFrameMinBytesPerSecond": ("server_frame_min_bytes_per_s", _int),
    "serverMaxConnections": ("server_max_connections", _int),
    "serverFrameBudgetBytes": ("server_frame_budget_bytes", _int),
    "httpMaxConnections": ("http_max_connections", _int),
    "httpHeaderTimeoutSeconds": ("http_header_timeout_seconds", _int),
    "grpcMaxConnections": ("grpc_max_connections", _int),
    "grpcMaxConcurrentStreams": ("grpc_max_concurrent_streams", _int),
    "metricsPort": ("metrics_port", _int),
    "dashboardPort": ("dashboard_port", _int),
    "brokerRole": ("broker_role", _str),
    "haListenPort": ("ha_listen_port", _int),
    "haTransferBatchSize": ("ha_transfer_batch_size", _int),
    "haSendHeartbeatInterval": ("ha_send_heartbeat_interval_ms", _int),
    "haMasterAddress": ("ha_master_address", _str),
    "dashboardAllowedHosts": ("dashboard_allowed_hosts", _str),
    "logDir": ("log_dir", _str),
    "grpcServerEnable": ("grpc_server_enable", _bool),
    "grpcMinInvisibleTimeMillis": ("grpc_min_invisible_time_ms", _int),
    "grpcDefaultInvisibleTimeMillis": ("grpc_default_invisible_time_ms", _int),
    "grpcServerTlsMode": ("grpc_server_tls_mode", _str),
    "grpcServerTlsCert": ("grpc_server_tls_cert", _str),
    "grpcServerTlsKey": ("grpc_server_tls_key", _str),
    "grpcReceiveBufferBytes": ("grpc_receive_buffer_bytes", _int),
    # the proxy's key (it defaults to 130 MiB; mqcore to one message's worth, see the field)
    "grpcMaxInboundMessageSize": ("grpc_max_inbound_message_size", _int),
    # the proxy's names for the same files
    "tlsCertPath": ("grpc_server_tls_cert", _str),
    "tlsKeyPath": ("grpc_server_tls_key", _str),
    # mqcore's own keys: the ACL file and the broker's own account
    "plainAclFile": ("acl_file", _str),
    # TLS on the remoting port: RocketMQ's system property names, as broker.conf keys (or in
    # the properties file tls.config.file names)
    "tls.server.mode": ("tls_server_mode", _str),
    "tls.server.certPath": ("tls_server_cert_path", _str),
    "tls.server.keyPath": ("tls_server_key_path", _str),
    "tls.server.need.client.auth": ("tls_server_need_client_auth", _str),
    "tls.server.trustCertPath": ("tls_server_trust_cert_path", _str),
    "tls.enable": ("tls_enable", _bool),
    "tls.client.trustCertPath": ("tls_client_trust_cert_path", _str),
    "tlsHandshakeTimeoutSeconds": ("tls_handshake_timeout_s", float),
    "brokerAccessKey": ("broker_access_key", _str),
    "brokerSecretKey": ("broker_secret_key", _str),
}

STORE_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "storePathRootDir": ("store_path", _str),
    "storePathCommitLog": ("store_path_commitlog", _dir),
    "storePathConsumeQueue": ("store_path_consume_queue", _str),
    "storePathIndex": ("store_path_index", _str),
    "storeCheckpoint": ("store_checkpoint", _str),
    "abortFile": ("abort_file", _str),
    "mappedFileSizeCommitLog": ("commitlog_file_size_bytes", _int),
    "mapedFileSizeCommitLog": ("commitlog_file_size_bytes", _int),
    "mappedFileSizeConsumeQueue": ("consume_queue_file_size_bytes", _int),
    "mapedFileSizeConsumeQueue": ("consume_queue_file_size_bytes", _int),
    "flushDiskType": ("flush_disk_type", _flush_type),
    "flushIntervalCommitLog": ("flush_interval_commitlog_ms", _int),
    "flushCommitLogLeastPages": ("flush_commitlog_least_pages", _int),
    "flushCommitLogThoroughInterval": ("flush_commitlog_thorough_interval_ms", _int),
    "flushIntervalConsumeQueue": ("flush_interval_consume_queue_ms", _int),
    "flushConsumeQueueLeastPages": ("flush_consume_queue_least_pages", _int),
    "flushConsumeQueueThoroughInterval": ("flush_consume_queue_thorough_interval_ms", _int),
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
    "deleteWhen": ("delete_when", _delete_when),
    "diskMaxUsedSpaceRatio": ("disk_max_used_space_ratio", _int),
    "diskSpaceCleanForciblyRatio": ("disk_space_clean_forcibly_ratio", _int),
    "diskSpaceWarningLevelRatio": ("disk_space_warning_level_ratio", _int),
    "cleanFileForciblyEnable": ("clean_file_forcibly_enable", _bool),
    "cleanResourceInterval": ("clean_resource_interval_ms", _int),
    "destroyMapedFileIntervalForcibly": ("destroy_mapped_file_interval_forcibly_ms", _int),
    "deleteFileBatchMax": ("delete_files_batch_max", _int),
    "cleanResourceFirstDelay": ("clean_resource_first_delay_ms", _int),
    "timerWheelEnable": ("timer_wheel_enable", _bool),
    "timerMaxDelaySec": ("timer_max_delay_sec", _int),
    "timerPrecisionMs": ("timer_precision_ms", _int),
    "mappedFileSizeTimerLog": ("timerlog_file_size_bytes", _int),
    "timerFlushIntervalMs": ("timer_flush_interval_ms", _int),
    # mqcore's own
    "prefaultWindowBytes": ("prefault_window_bytes", _int),
    "residentBehindBytes": ("resident_behind_bytes", _int),
}

#: RocketMQ keys accepted but without effect here: key -> (accepted values or None for any, why)
IGNORED_KEYS: dict[str, tuple[frozenset[str] | None, str]] = {
    "fastListenPort": (None, "no VIP channel; clients use listenPort"),
    "sendMessageThreadPoolNums": (None, "requests run on one event loop"),
    "pullMessageThreadPoolNums": (None, "requests run on one event loop"),
    "useEpollNativeSelector": (None, "no Netty; asyncio picks the selector"),
}

#: keys a running broker takes without a restart (``Broker.update_config``)
RUNTIME_KEYS = frozenset({
    "brokerPermission", "autoCreateTopicEnable", "autoCreateSubscriptionGroup", "longPollingEnable",
    "notifyConsumerIdsChangedEnable",
    "traceOn", "rejectTransactionMessage", "recallMessageEnable", "regionId",
    "maxMessageSize", "fileReservedTime", "deleteWhen", "diskMaxUsedSpaceRatio", "diskSpaceCleanForciblyRatio",
    "diskSpaceWarningLevelRatio", "cleanFileForciblyEnable", "deleteFileBatchMax",
    "destroyMapedFileIntervalForcibly", "defaultQueryMaxNum", "maxTransferBytesOnMessageInMemory",
    "maxTransferCountOnMessageInMemory",
})

_KEY_OF_FIELD: dict[str, str] = {}
for _table in (BROKER_KEYS, STORE_KEYS):
    for _key, (_field, _conv) in _table.items():
        _KEY_OF_FIELD.setdefault(_field, _key)


@dataclasses.dataclass
class LoadedConf:
    """What a broker.conf file gave: the built configs and the keys that were not recognised."""

    broker: BrokerConfig
    store: StoreConfig
    unknown_keys: list[str]
    #: accepted keys without effect here -> the value given
    ignored: dict[str, str] = dataclasses.field(default_factory=dict)


def _restate(e: FieldConfigError, props: dict[str, str]) -> ConfigError:
    """A dataclass complained about a field: say it with the key the user wrote."""
    keys = [k for k, (f, _c) in {**BROKER_KEYS, **STORE_KEYS}.items() if f == e.field]
    given = [k for k in keys if k in props]
    if given:
        return ConfigError(f"{given[0]}={props[given[0]]}: {e.problem}")
    return ConfigError(f"{_KEY_OF_FIELD.get(e.field, e.field)} {e.problem}")


#: the properties file RocketMQ reads its tls.* settings from (tls.config.file)
TLS_CONFIG_FILE_KEY = "tls.config.file"


def with_tls_config_file(props: dict[str, str]) -> dict[str, str]:
    """``props`` with the tls.* keys of the file ``tls.config.file`` names added (keys given
    in ``props`` itself win); the key itself is consumed."""
    path = props.get(TLS_CONFIG_FILE_KEY)
    if path is None:
        return props
    try:
        with open(path.strip(), encoding="utf-8") as f:
            extra = read_properties(f.read())
    except OSError as e:
        raise ConfigError(f"{TLS_CONFIG_FILE_KEY}={path}: cannot read it: {e.strerror}") from e
    merged = {k: v for k, v in extra.items() if k.startswith("tls.")}
    merged.update((k, v) for k, v in props.items() if k != TLS_CONFIG_FILE_KEY)
    return merged


def build_configs(props: dict[str, str], *, broker: BrokerConfig | None = None,
                  store: StoreConfig | None = None) -> LoadedConf:
    """Apply RocketMQ-named properties on top of the given (or default) configs. Every
    check a start makes on a value is made here, so ``mqbroker -p`` refuses what a start
    would refuse; errors name the RocketMQ key, never a Python field."""
    props = with_tls_config_file(props)
    bkw: dict[str, Any] = {}
    skw: dict[str, Any] = {}
    unknown = []
    ignored = {}
    for key, value in props.items():
        try:
            if key in BROKER_KEYS:
                name, conv = BROKER_KEYS[key]
                bkw[name] = conv(value)
            elif key in STORE_KEYS:
                name, conv = STORE_KEYS[key]
                skw[name] = conv(value)
            elif key in IGNORED_KEYS:
                allowed, _why = IGNORED_KEYS[key]
                if allowed is not None and value.strip() not in allowed:
                    raise ConfigError(f"only {', '.join(sorted(allowed))} (mqcore is a single-node master)")
                ignored[key] = value.strip()
            else:
                unknown.append(key)
        except FieldConfigError as e:
            raise ConfigError(f"{key}={value}: {e.problem}") from e
        except ConfigError as e:
            raise ConfigError(f"{key}={value}: {e}") from e
    if "namesrv_addr" in bkw and bkw["namesrv_addr"]:
        bkw.setdefault("embedded_namesrv", False)
    try:
        broker = dataclasses.replace(broker or BrokerConfig(), **bkw)
        skw.setdefault("broker_cluster_name", broker.broker_cluster_name)
        store = dataclasses.replace(store or StoreConfig(), **skw)
    except FieldConfigError as e:
        raise _restate(e, props) from e
    return LoadedConf(broker, store, unknown, ignored)


def update_runtime_config(broker: BrokerConfig, store: StoreConfig,
                          props: dict[str, str]) -> tuple[BrokerConfig, StoreConfig]:
    """New configs with ``props`` applied, for a running broker (``updateBrokerConfig``).

    Only ``RUNTIME_KEYS`` may change; any other key (unknown, ignored, or one that needs
    a restart such as ``listenPort``) is refused with its name and nothing is applied."""
    refused = sorted(k for k in props if k not in RUNTIME_KEYS)
    if refused:
        known = [k for k in refused if k in BROKER_KEYS or k in STORE_KEYS]
        unknown = [k for k in refused if k not in known]
        parts = []
        if known:
            parts.append(f"{', '.join(known)} cannot change while the broker runs (restart with it in broker.conf)")
        if unknown:
            parts.append(f"unknown key {', '.join(unknown)}")
        raise ConfigError("; ".join(parts) + f"; keys that can change at run time: {', '.join(sorted(RUNTIME_KEYS))}")
    if "brokerPermission" in props and props["brokerPermission"].strip() not in ("2", "4", "6"):
        raise ConfigError(f"brokerPermission={props['brokerPermission']}: must be 2 (write), 4 (read) or "
                          "6 (read+write)")
    loaded = build_configs(props, broker=broker, store=store)
    return loaded.broker, loaded.store


def effective_config_lines(broker: BrokerConfig, store: StoreConfig,
                           ignored: dict[str, str] | None = None) -> list[str]:
    """``mqbroker -p``: every setting under its RocketMQ (or mqcore) key, as a broker.conf
    that reads back to the same config with no warnings; settings left unset are comments,
    and accepted-but-ignored keys are listed as comments with the reason."""
    lines = []
    for obj, table in ((broker, BROKER_KEYS), (store, STORE_KEYS)):
        by_field: dict[str, str] = {}
        for key, (name, _conv) in table.items():
            by_field.setdefault(name, key)
        for f in dataclasses.fields(obj):
            key = by_field.get(f.name)
            if key is None:
                continue  # derived from another key (the store's copy of brokerClusterName)
            value = getattr(obj, f.name)
            if value is None:
                lines.append(f"# {key} not set ({_UNSET.get(key, 'the default applies')})")
                continue
            if isinstance(value, FlushDiskType):
                value = value.value
            if isinstance(value, bool):
                value = str(value).lower()
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            lines.append(f"{key}={value}")
    for key, value in (ignored or {}).items():
        lines.append(f"# ignored: {key}={value} ({IGNORED_KEYS[key][1]})")
    return lines


_UNSET = {"namesrvAddr": "the embedded name server", "plainAclFile": "ACL off",
          "authenticationProvider": "ACL 2.0's own", "authorizationProvider": "ACL 2.0's own",
          "authenticationMetadataProvider": "config/auth.json", "authorizationMetadataProvider": "config/auth.json",
          "authenticationWhitelist": "none", "authorizationWhitelist": "none",
          "initAuthenticationUser": "no user is created", "innerClientAuthenticationCredentials": "none",
          "brokerAccessKey": "registrations are not signed", "brokerSecretKey": "registrations are not signed", "logDir": "~/logs/rocketmqlogs",
          "storePathCommitLog": "storePathRootDir/commitlog", "storePathConsumeQueue": "storePathRootDir/consumequeue",
          "storePathIndex": "storePathRootDir/index", "storeCheckpoint": "storePathRootDir/checkpoint",
          "abortFile": "storePathRootDir/abort"}


def write_back(path: str, props: dict[str, str]) -> None:
    """Save run-time changes (``updateBrokerConfig``) into the broker.conf the broker started
    with, so they outlive a restart as on a RocketMQ broker (which rewrites that file).

    Unlike RocketMQ, which writes every setting it has into the file, only the changed keys
    are touched: an existing ``key=value`` line (every one, should the key appear twice) is
    replaced in place, a key the file lacks is appended, and comments and the other lines
    stay as the operator wrote them. The new file replaces the old one atomically."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from e
    out: list[str] = []
    written: set[str] = set()
    skipping = False  # inside the continuation lines of a replaced entry
    continued = False  # the previous line ended with a single backslash
    for raw in lines:
        joins = raw.endswith("\\") and not raw.endswith("\\\\")
        if skipping:
            skipping = joins
            continued = joins
            continue
        stripped = raw.strip()
        key = None
        if not continued and stripped and stripped[0] not in "#!":
            m = re.match(r"^([^=:\s]+)", stripped)
            key = m.group(1) if m else None
        continued = joins
        if key in props:
            out.append(f"{key}={props[key].strip()}")
            written.add(key)
            skipping = joins
            continue
        out.append(raw)
    out += [f"{k}={v.strip()}" for k, v in props.items() if k not in written]
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(out) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ConfigError(f"cannot write {path}: {e.strerror}") from e
