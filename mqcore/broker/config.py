"""Broker settings (RocketMQ's ``BrokerConfig``); the name server's are in ``mqcore/namesrv/config.py``.

``mqcore.broker.conf`` builds these from a ``broker.conf`` with RocketMQ's key names.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import re
import socket

from mqcore.errors import FieldConfigError
from mqcore.permissions import PERM_READ, PERM_WRITE


def is_host(text: str) -> bool:
    """An IPv4/IPv6 address or a DNS name (no port, no spaces)."""
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    return bool(_HOST_NAME.fullmatch(text))


_HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9_]([A-Za-z0-9_-]{0,62})(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,62}))*\.?")


_TWELVE_HOURS_MS = 12 * 3600 * 1000


def default_broker_name() -> str:
    try:
        return socket.gethostname() or "broker-a"
    except OSError:
        return "broker-a"


@dataclasses.dataclass(frozen=True)
class BrokerConfig:
    """Broker settings (RocketMQ's ``BrokerConfig``): identity, ports, name servers, auto-creation, timers."""

    broker_cluster_name: str = "DefaultCluster"
    broker_name: str = dataclasses.field(default_factory=default_broker_name)
    broker_id: int = 0
    #: address clients are told to use (brokerIP1); also the STOREHOST of records
    broker_ip1: str = "127.0.0.1"
    listen_host: str = "127.0.0.1"
    listen_port: int = 10911
    #: name servers ("host:port;host:port"); None with embedded_namesrv = the embedded one
    namesrv_addr: str | None = None
    embedded_namesrv: bool = True
    namesrv_listen_port: int = 9876
    broker_permission: int = PERM_READ | PERM_WRITE
    default_topic_queue_nums: int = 8
    auto_create_topic_enable: bool = True
    auto_create_subscription_group: bool = True
    cluster_topic_enable: bool = True
    broker_topic_enable: bool = True
    long_polling_enable: bool = True
    short_polling_time_mills: int = 1000
    notify_consumer_ids_changed_enable: bool = True
    region_id: str = "DefaultRegion"
    trace_on: bool = True
    flush_consumer_offset_interval_ms: int = 5000
    flush_delay_offset_interval_ms: int = 10_000
    register_name_server_period_ms: int = 30_000
    channel_expired_timeout_ms: int = 120_000
    server_channel_max_idle_time_seconds: int = 120
    max_frame_bytes: int = 16 * 1024 * 1024
    reject_transaction_message: bool = True
    #: serve SQL92 subscriptions (enablePropertyFilter); off, as in RocketMQ, they are refused
    enable_property_filter: bool = False
    #: Prometheus endpoint port (metricsPort); 0 = off
    metrics_port: int = 0
    #: where broker.log, store.log, remoting.log go (logDir); None = ~/logs/rocketmqlogs
    log_dir: str | None = None
    #: the RocketMQ 5.x gRPC endpoint (``mqcore.grpc``, needs ``mqcore[grpc]``), off unless asked for
    grpc_server_enable: bool = False
    grpc_server_port: int = 8081
    grpc_min_invisible_time_ms: int = 10_000
    #: invisible duration of a push consumer's receive (auto renew), renewed while it runs (the proxy's 60 s)
    grpc_default_invisible_time_ms: int = 60_000
    #: TLS on the gRPC port: permissive (TLS and plaintext on one port, the proxy's default),
    #: enforcing (TLS only) or disabled (plaintext only)
    grpc_server_tls_mode: str = "permissive"
    #: a certificate chain and its key (PEM files); unset: a self-signed pair in <store>/grpc-tls
    grpc_server_tls_cert: str | None = None
    grpc_server_tls_key: str | None = None
    #: RocketMQ plain ACL (aclEnable): every request is checked against ``acl_file``
    acl_enable: bool = False
    #: the plain_acl.yml (plainAclFile, mqcore's key; mqbroker's default is
    #: $ROCKETMQ_HOME/conf/plain_acl.yml, else plain_acl.yml next to broker.conf)
    acl_file: str | None = None
    #: the account this broker signs its own requests with (its registrations with the
    #: name servers): brokerAccessKey / brokerSecretKey, mqcore's keys
    broker_access_key: str | None = None
    broker_secret_key: str | None = None

    def __post_init__(self) -> None:
        for name in ("listen_port", "namesrv_listen_port", "metrics_port", "grpc_server_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise FieldConfigError(name, f"{port} is not a TCP port (0-65535)")
        if self.default_topic_queue_nums <= 0:
            raise FieldConfigError("default_topic_queue_nums", "must be positive")
        if not self.broker_name:
            raise FieldConfigError("broker_name", "is empty")
        if self.broker_id != 0:
            raise FieldConfigError("broker_id", f"{self.broker_id}: mqcore is a single-node master only "
                                   "(brokerId must be 0; there are no slaves)")
        for name in ("listen_host", "broker_ip1"):
            if not is_host(getattr(self, name)):
                raise FieldConfigError(name, f"{getattr(self, name)!r} is not a host name or IP address"
                                       + (" (the port goes in listenPort)" if ":" in getattr(self, name) else ""))
        for name in ("register_name_server_period_ms", "flush_consumer_offset_interval_ms",
                     "flush_delay_offset_interval_ms", "channel_expired_timeout_ms",
                     "server_channel_max_idle_time_seconds", "short_polling_time_mills", "max_frame_bytes"):
            if getattr(self, name) <= 0:
                raise FieldConfigError(name, "must be positive")
        # checked here as well as by the endpoint, so ``mqbroker -p`` refuses what a start would
        if not 0 <= self.grpc_min_invisible_time_ms <= _TWELVE_HOURS_MS:
            raise FieldConfigError("grpc_min_invisible_time_ms", "must be in 0..43200000 ms (12 h)")
        if not 0 < self.grpc_default_invisible_time_ms <= _TWELVE_HOURS_MS:
            raise FieldConfigError("grpc_default_invisible_time_ms", "must be in 1..43200000 ms (12 h)")
        if (self.broker_access_key is None) != (self.broker_secret_key is None):
            raise FieldConfigError("broker_access_key", "brokerAccessKey and brokerSecretKey go together")
        if self.grpc_server_tls_mode.strip().lower() not in ("disabled", "permissive", "enforcing"):
            raise FieldConfigError("grpc_server_tls_mode", f"{self.grpc_server_tls_mode!r} is not disabled, "
                                   "permissive or enforcing")
        if (self.grpc_server_tls_cert is None) != (self.grpc_server_tls_key is None):
            raise FieldConfigError("grpc_server_tls_cert", "grpcServerTlsCert and grpcServerTlsKey go together")
        if self.acl_enable and not self.acl_file:
            raise FieldConfigError("acl_file", "aclEnable=true needs the plain_acl.yml: set plainAclFile")
        if self.acl_enable and self.embedded_namesrv and not self.namesrv_addr and self.broker_access_key is None:
            raise FieldConfigError("broker_access_key", "aclEnable=true protects the embedded name server too: its "
                                   "registrations must be signed by an admin account; set brokerAccessKey and "
                                   "brokerSecretKey")
        if not 0 <= self.broker_permission <= 15:
            raise FieldConfigError("broker_permission", f"{self.broker_permission} is not a permission (0..15)")

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"
