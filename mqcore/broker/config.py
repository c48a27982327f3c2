"""Broker settings (RocketMQ's ``BrokerConfig``); the name server's are in ``mqcore/namesrv/config.py``.

``mqcore.broker.conf`` builds these from a ``broker.conf`` with RocketMQ's key names.
"""
from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
import socket

from mqcore.errors import FieldConfigError
from mqcore.netaddr import parse_host_port
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

    #: the cluster this broker registers in (clusterList groups brokers by it)
    broker_cluster_name: str = "DefaultCluster"
    #: the broker's name in topic routes and clusterList
    broker_name: str = dataclasses.field(default_factory=default_broker_name)
    #: must be 0: mqcore is a single-node master
    broker_id: int = 0
    #: address clients are told to use (brokerIP1); also the STOREHOST of records
    broker_ip1: str = "127.0.0.1"
    #: the address the remoting port (and dashboard, metrics, gRPC ports) bind: 127.0.0.1 serves
    #: this machine only, 0.0.0.0 every address (then turn aclEnable on)
    listen_host: str = "127.0.0.1"
    #: the 4.x remoting port clients and mqadmin connect to
    listen_port: int = 10911
    #: name servers ("host:port;host:port"); None with embedded_namesrv = the embedded one
    namesrv_addr: str | None = None
    #: run a name server inside the broker process when no namesrvAddr is given
    embedded_namesrv: bool = True
    #: the embedded name server's port (clients' namesrvAddr is listenHost:this)
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
    #: a partial frame under way for more than 10 s must have arrived at least this fast
    #: (bytes per second, averaged) or its connection is closed (serverFrameMinBytesPerSecond,
    #: mqcore's key; 0 = no minimum): a trickle would otherwise hold a connection for ever
    server_frame_min_bytes_per_s: int = 1024
    #: the largest remoting frame a client may send; a bigger one closes its connection
    max_frame_bytes: int = 16 * 1024 * 1024
    #: open connections the remoting port holds at once, and as many the embedded name server's
    #: port (serverMaxConnections, mqcore's key); one more is closed at accept. 0: as many as the
    #: descriptors allow, less the store's reserve (an eighth of RLIMIT_NOFILE, at least 64)
    server_max_connections: int = 0
    #: bytes of partial large frames (above the 128 KiB receive ring) the remoting port and the
    #: embedded name server's port hold together (serverFrameBudgetBytes, mqcore's key); past it
    #: a connection waits, unread, until another's frame completes (serverChannelMaxIdleTimeSeconds
    #: closes one that waits longer)
    server_frame_budget_bytes: int = 256 * 1024 * 1024
    #: open connections the dashboard and the metrics port each hold at once (httpMaxConnections,
    #: mqcore's key); one more is closed at accept
    http_max_connections: int = 256
    #: seconds a connection to the dashboard or the metrics port has to send a request's line and
    #: headers, and one to the gRPC port to finish its TLS and HTTP/2 handshake
    #: (httpHeaderTimeoutSeconds, mqcore's key); a connection that does not is closed. A gRPC
    #: call has as long from its headers to send its whole request message, or it is ended
    #: (DEADLINE_EXCEEDED) and its stream freed
    http_header_timeout_seconds: int = 10
    #: open connections the gRPC port holds at once (grpcMaxConnections, mqcore's key: grpcio's
    #: connection quota); one more is closed at accept. 0: no cap of its own
    grpc_max_connections: int = 0
    #: HTTP/2 streams (calls) one gRPC connection may have open at once (grpcMaxConcurrentStreams,
    #: mqcore's key; grpcio's grpc.max_concurrent_streams, sent to the client in its SETTINGS). A
    #: client's own library queues calls past it; a stream opened past it anyway is refused
    #: (RST_STREAM REFUSED_STREAM). The proxy sets none (grpc-java's default: unlimited); 100 is
    #: the smallest value RFC 9113 recommends. A 5.x client's long-polling receives (one per
    #: subscription) and its telemetry stream take one each; past the cap its sends wait
    grpc_max_concurrent_streams: int = 100
    #: refuse half messages (rejectTransactionMessage) with NO_PERMISSION, as RocketMQ does when set
    reject_transaction_message: bool = False
    #: answer RECALL_MESSAGE (recallMessageEnable; off by default, as in RocketMQ 5.3)
    recall_message_enable: bool = False
    #: QUERY_ASSIGNMENT divides a group's queues among its live clients; off: every client gets them all
    server_load_balancer_enable: bool = True
    #: a group's mode (PULL or POP) for a topic no SET_MESSAGE_REQUEST_MODE named (as RocketMQ 5.3.3)
    default_message_request_mode: str = "PULL"
    #: popShareQueueNum of that default when it is POP (<= 0: every client pops every queue)
    default_pop_share_queue_num: int = -1
    #: a half message younger than this is not checked back (transactionTimeOut)
    transaction_timeout_ms: int = 6_000
    #: how often unresolved half messages are checked back (transactionCheckInterval)
    transaction_check_interval_ms: int = 60_000
    #: checks of one half message before it is discarded to TRANS_CHECK_MAX_TIME_TOPIC (transactionCheckMax)
    transaction_check_max: int = 15
    #: request-reply: also store each reply in ``<cluster>_REPLY_TOPIC`` after pushing it to
    #: the requester (storeReplyMessageEnable, on as in RocketMQ 4.9)
    store_reply_message_enable: bool = True
    #: serve SQL92 subscriptions (enablePropertyFilter); off, as in RocketMQ, they are refused
    enable_property_filter: bool = False
    #: Prometheus endpoint port (metricsPort); 0 = off
    metrics_port: int = 0
    #: the web dashboard's port (dashboardPort, ``mqcore.dashboard``), on ``listen_host``; 0 = off.
    #: With aclEnable it asks for an admin account of the plain_acl.yml
    dashboard_port: int = 0
    #: ASYNC_MASTER or SYNC_MASTER (brokerRole); a master serves the HA port to slaves
    #: (docs/replication.md). SYNC_MASTER answers a send once a slave has it. SLAVE
    #: (with brokerId > 0) follows a master's commitlog and refuses sends (``ha_slave``)
    broker_role: str = "ASYNC_MASTER"
    #: a slave's master HA address host:port (haMasterAddress); empty = the one the name
    #: server names in its registration answer
    ha_master_address: str = ""
    #: the HA port slaves connect to (haListenPort); 0 = listenPort + 1, as Apache
    ha_listen_port: int = 0
    #: most commitlog bytes in one HA transfer (haTransferBatchSize)
    ha_transfer_batch_size: int = 32 * 1024
    #: a header with size 0 goes to an idle slave this often (haSendHeartbeatInterval, ms)
    ha_send_heartbeat_interval_ms: int = 5000
    #: SYNC_MASTER: a send no slave has acknowledged within this is answered FLUSH_SLAVE_TIMEOUT
    #: (slaveTimeout, ms; what Apache 4.9's submitReplicaRequest waits)
    slave_timeout_ms: int = 3000
    #: SYNC_MASTER: a slave this many bytes behind counts as none: SLAVE_NOT_AVAILABLE at once
    #: (haSlaveFallbehindMax)
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    #: more host names the dashboard answers to (dashboardAllowedHosts, comma-separated), besides
    #: the bound address and, on loopback or every address, this machine's own names; a request
    #: for any other Host is refused (DNS rebinding)
    dashboard_allowed_hosts: str = ""
    #: where broker.log, store.log, remoting.log go (logDir); None = ~/logs/rocketmqlogs
    log_dir: str | None = None
    #: the RocketMQ 5.x gRPC endpoint (``mqcore.grpc``, needs ``mqcore[grpc]``), off unless asked for
    grpc_server_enable: bool = False
    #: the gRPC endpoint's port (the proxy's grpcServerPort), on listenHost
    grpc_server_port: int = 8081
    #: the shortest invisible duration a 5.x receive may ask for (the proxy's 10 s)
    grpc_min_invisible_time_ms: int = 10_000
    #: invisible duration of a push consumer's receive (auto renew), renewed while it runs (the proxy's 60 s)
    grpc_default_invisible_time_ms: int = 60_000
    #: TLS on the gRPC port: permissive (TLS and plaintext on one port, the proxy's default),
    #: enforcing (TLS only) or disabled (plaintext only)
    grpc_server_tls_mode: str = "permissive"
    #: a certificate chain and its key (PEM files); unset: a self-signed pair in <store>/grpc-tls
    grpc_server_tls_cert: str | None = None
    #: the private key (PEM) of grpcServerTlsCert
    grpc_server_tls_key: str | None = None
    #: the largest gRPC request taken in, in bytes (the proxy's grpcMaxInboundMessageSize, whose
    #: 130 MiB default fits 32 messages of 4 MiB); 0: maxMessageSize + 1 MiB, one message with its
    #: headers. A larger request is refused by grpc (RESOURCE_EXHAUSTED) before it is parsed
    grpc_max_inbound_message_size: int = 0
    #: bytes of messages all 5.x ReceiveMessage streams may hold together, popped and not yet
    #: written to their consumers; a receive finding no room within its long polling answers
    #: TOO_MANY_REQUESTS (consumers that stop reading cannot make the broker hold more)
    grpc_receive_buffer_bytes: int = 8 * 1024 * 1024
    #: TLS on the 4.x remoting port and the embedded name server's (tls.server.mode): disabled,
    #: permissive (TLS and plaintext on one port) or enforcing (TLS only). Apache's default is
    #: permissive; mqcore's is disabled, so a plain start needs no certificate
    tls_server_mode: str = "disabled"
    #: the port's certificate chain and key (tls.server.certPath / tls.server.keyPath, PEM);
    #: unset: the self-signed pair in <store>/grpc-tls the gRPC port uses too
    tls_server_cert_path: str | None = None
    #: the key of tls.server.certPath's certificate (tls.server.keyPath, PEM, unencrypted)
    tls_server_key_path: str | None = None
    #: ask clients for a certificate (tls.server.need.client.auth): none, optional or require,
    #: checked against tls.server.trustCertPath (a CA's PEM)
    tls_server_need_client_auth: str = "none"
    #: the CA (PEM) client certificates are checked against (tls.server.trustCertPath)
    tls_server_trust_cert_path: str | None = None
    #: the broker's own connections (registrations with the name servers) over TLS (tls.enable);
    #: on by itself for an embedded name server in enforcing mode. The server's certificate is
    #: checked against tls.client.trustCertPath when set, else accepted as RocketMQ's test mode does
    tls_enable: bool = False
    #: the CA (PEM) the broker checks a name server's certificate against (tls.client.trustCertPath)
    tls_client_trust_cert_path: str | None = None
    #: a TLS handshake not done in this many seconds closes its connection (mqcore's key)
    tls_handshake_timeout_s: float = 10.0
    #: RocketMQ plain ACL (aclEnable): every request is checked against ``acl_file``
    acl_enable: bool = False
    #: the plain_acl.yml (plainAclFile, mqcore's key; mqbroker's default is
    #: $ROCKETMQ_HOME/conf/plain_acl.yml, else plain_acl.yml next to broker.conf)
    acl_file: str | None = None
    #: the account this broker signs its own requests with (its registrations with the
    #: name servers): brokerAccessKey / brokerSecretKey, mqcore's keys
    broker_access_key: str | None = None
    #: the secret key of brokerAccessKey
    broker_secret_key: str | None = None
    #: ACL 2.0 (RocketMQ 5.3's authenticationEnabled): every request must be signed by a user of
    #: ``<storePathRootDir>/config/auth.json`` (docs/ACCESS_CONTROL.md); not with aclEnable
    authentication_enabled: bool = False
    #: ACL 2.0 (authorizationEnabled): every request needs a Super user or an ACL rule allowing it
    authorization_enabled: bool = False
    #: the only provider served is Apache's default (authenticationProvider; unset means it)
    authentication_provider: str | None = None
    #: the only provider served is Apache's default (authorizationProvider; unset means it)
    authorization_provider: str | None = None
    #: where users are kept (authenticationMetadataProvider): only Apache's local provider, as
    #: config/auth.json (unset means it)
    authentication_metadata_provider: str | None = None
    #: where ACL rules are kept (authorizationMetadataProvider): only Apache's local provider, as
    #: config/auth.json (unset means it)
    authorization_metadata_provider: str | None = None
    #: request codes that need no signature, comma-separated (authenticationWhitelist)
    authentication_whitelist: str | None = None
    #: request codes that need no ACL rule, comma-separated (authorizationWhitelist)
    authorization_whitelist: str | None = None
    #: a Super user created at start if absent: ``{"username":"u","password":"p"}`` (initAuthenticationUser)
    init_authentication_user: str | None = None
    #: the broker's own Super user, created at start if absent, signing its registrations:
    #: ``{"accessKey":"k","secretKey":"s"}`` (innerClientAuthenticationCredentials)
    inner_client_authentication_credentials: str | None = None

    def __post_init__(self) -> None:
        for name in ("listen_port", "namesrv_listen_port", "metrics_port", "grpc_server_port", "dashboard_port"):
            port = getattr(self, name)
            if not 0 <= port <= 65535:
                raise FieldConfigError(name, f"{port} is not a TCP port (0-65535)")
        if self.default_topic_queue_nums <= 0:
            raise FieldConfigError("default_topic_queue_nums", "must be positive")
        if not self.broker_name:
            raise FieldConfigError("broker_name", "is empty")
        if self.broker_role not in ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE"):
            raise FieldConfigError("broker_role", f"{self.broker_role}: brokerRole is ASYNC_MASTER, SYNC_MASTER "
                                   "or SLAVE")
        if self.slave_timeout_ms <= 0 or self.ha_slave_fallbehind_max <= 0:
            raise FieldConfigError("slave_timeout_ms", "slaveTimeout and haSlaveFallbehindMax must be positive")
        if self.ha_transfer_batch_size <= 0 or self.ha_send_heartbeat_interval_ms <= 0:
            raise FieldConfigError("ha_transfer_batch_size", "haTransferBatchSize and haSendHeartbeatInterval "
                                   "must be positive")
        if self.broker_role == "SLAVE" and self.broker_id <= 0:
            raise FieldConfigError("broker_id", "a SLAVE needs brokerId > 0 (0 is the master's)")
        if self.broker_role != "SLAVE" and self.broker_id != 0:
            raise FieldConfigError("broker_id", "a master has brokerId 0 (brokerId > 0 is a slave: "
                                   "set brokerRole=SLAVE)")
        if self.ha_master_address and not _host_port(self.ha_master_address):
            raise FieldConfigError("ha_master_address", f"{self.ha_master_address!r} is not host:port")
        for name in ("listen_host", "broker_ip1"):
            if not is_host(getattr(self, name)):
                raise FieldConfigError(name, f"{getattr(self, name)!r} is not a host name or IP address"
                                       + (" (the port goes in listenPort)" if ":" in getattr(self, name) else ""))
        for name in ("register_name_server_period_ms", "flush_consumer_offset_interval_ms",
                     "flush_delay_offset_interval_ms", "channel_expired_timeout_ms",
                     "server_channel_max_idle_time_seconds", "short_polling_time_mills", "max_frame_bytes",
                     "transaction_check_interval_ms", "transaction_check_max"):
            if getattr(self, name) <= 0:
                raise FieldConfigError(name, "must be positive")
        if self.server_frame_min_bytes_per_s < 0:
            raise FieldConfigError("server_frame_min_bytes_per_s", "must be >= 0 (0: no minimum)")
        for name in ("server_max_connections", "grpc_max_connections", "server_frame_budget_bytes"):
            if getattr(self, name) < 0:
                raise FieldConfigError(name, "must be >= 0")
        for name in ("http_max_connections", "http_header_timeout_seconds"):
            if getattr(self, name) <= 0:
                raise FieldConfigError(name, "must be positive")
        if not 0 < self.grpc_max_concurrent_streams < 2 ** 31:  # an HTTP/2 setting grpcio takes as an int
            raise FieldConfigError("grpc_max_concurrent_streams", "must be in 1..2147483647")
        if self.transaction_timeout_ms < 0:
            raise FieldConfigError("transaction_timeout_ms", "must not be negative")
        # checked here as well as by the endpoint, so ``mqbroker -p`` refuses what a start would
        if not 0 <= self.grpc_min_invisible_time_ms <= _TWELVE_HOURS_MS:
            raise FieldConfigError("grpc_min_invisible_time_ms", "must be in 0..43200000 ms (12 h)")
        if not 0 < self.grpc_default_invisible_time_ms <= _TWELVE_HOURS_MS:
            raise FieldConfigError("grpc_default_invisible_time_ms", "must be in 1..43200000 ms (12 h)")
        if not 0 <= self.grpc_max_inbound_message_size < 2 ** 31:
            raise FieldConfigError("grpc_max_inbound_message_size", "must be in 0..2147483647 (0: maxMessageSize + 1 MiB)")
        if self.grpc_receive_buffer_bytes <= 0:
            raise FieldConfigError("grpc_receive_buffer_bytes", "must be positive")
        if (self.broker_access_key is None) != (self.broker_secret_key is None):
            raise FieldConfigError("broker_access_key", "brokerAccessKey and brokerSecretKey go together")
        if self.grpc_server_tls_mode.strip().lower() not in ("disabled", "permissive", "enforcing"):
            raise FieldConfigError("grpc_server_tls_mode", f"{self.grpc_server_tls_mode!r} is not disabled, "
                                   "permissive or enforcing")
        if (self.grpc_server_tls_cert is None) != (self.grpc_server_tls_key is None):
            raise FieldConfigError("grpc_server_tls_cert", "grpcServerTlsCert and grpcServerTlsKey go together")
        if self.tls_server_mode.strip().lower() not in ("disabled", "permissive", "enforcing"):
            raise FieldConfigError("tls_server_mode", f"{self.tls_server_mode!r} is not disabled, permissive or "
                                   "enforcing")
        if (self.tls_server_cert_path is None) != (self.tls_server_key_path is None):
            raise FieldConfigError("tls_server_cert_path", "tls.server.certPath and tls.server.keyPath go together")
        if self.tls_server_need_client_auth.strip().lower() not in ("none", "optional", "require"):
            raise FieldConfigError("tls_server_need_client_auth", f"{self.tls_server_need_client_auth!r} is not "
                                   "none, optional or require")
        if self.tls_server_need_client_auth.strip().lower() != "none" and not self.tls_server_trust_cert_path:
            raise FieldConfigError("tls_server_trust_cert_path", "client authentication needs the CA that signs the "
                                   "client certificates: set tls.server.trustCertPath")
        if self.tls_handshake_timeout_s <= 0:
            raise FieldConfigError("tls_handshake_timeout_s", "must be positive")
        if self.acl_enable and (self.authentication_enabled or self.authorization_enabled):
            raise FieldConfigError("authentication_enabled", "aclEnable (ACL 1.0, plain_acl.yml) and "
                                   "authenticationEnabled/authorizationEnabled (ACL 2.0) exclude each other: "
                                   "choose one (docs/ACCESS_CONTROL.md says how to move to ACL 2.0)")
        for name in ("authentication_provider", "authorization_provider", "authentication_metadata_provider",
                     "authorization_metadata_provider"):
            value = getattr(self, name)
            kind = name.split("_")[0]
            default = (f"org.apache.rocketmq.auth.{kind}.provider.Local{kind.capitalize()}MetadataProvider"
                       if "metadata" in name else
                       f"org.apache.rocketmq.auth.{kind}.provider.Default{kind.capitalize()}Provider")
            if value is not None and value.strip() and value.strip() != default:
                raise FieldConfigError(name, f"{value!r}: only {default} (ACL 2.0's own) is served")
        for name, keys in (("init_authentication_user", ("username", "password")),
                           ("inner_client_authentication_credentials", ("accessKey", "secretKey"))):
            value = getattr(self, name)
            if value is None:
                continue
            try:
                parsed = json.loads(value)
            except ValueError:
                parsed = None
            if not isinstance(parsed, dict) or not all(isinstance(parsed.get(k), str) and parsed[k] for k in keys):
                raise FieldConfigError(name, f"must be JSON with {keys[0]!r} and {keys[1]!r}, like "
                                       f'{{"{keys[0]}":"name","{keys[1]}":"secret"}}')
        if self.acl_enable and not self.acl_file:
            raise FieldConfigError("acl_file", "aclEnable=true needs the plain_acl.yml: set plainAclFile")
        if self.acl_enable and self.embedded_namesrv and not self.namesrv_addr and self.broker_access_key is None:
            raise FieldConfigError("broker_access_key", "aclEnable=true protects the embedded name server too: its "
                                   "registrations must be signed by an admin account; set brokerAccessKey and "
                                   "brokerSecretKey")
        if self.dashboard_port:
            # named by their broker.conf keys: the message reaches an operator as it is
            taken = {"listenPort": self.listen_port, "metricsPort": self.metrics_port,
                     "grpcServerPort": self.grpc_server_port if self.grpc_server_enable else 0,
                     "namesrvListenPort": self.namesrv_listen_port
                     if self.embedded_namesrv and not self.namesrv_addr else 0}
            clash = [name for name, port in taken.items() if port == self.dashboard_port]
            if clash:
                raise FieldConfigError("dashboard_port", f"{self.dashboard_port} is also {clash[0]}: give the "
                                       "dashboard a port of its own")
        if not 0 <= self.broker_permission <= 15:
            raise FieldConfigError("broker_permission", f"{self.broker_permission} is not a permission (0..15)")

    @property
    def broker_addr(self) -> str:
        return f"{self.broker_ip1}:{self.listen_port}"


def _host_port(addr: str) -> bool:
    try:
        return parse_host_port(addr)[1] > 0
    except ValueError:
        return False
