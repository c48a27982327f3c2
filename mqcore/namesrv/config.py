"""Name server settings (RocketMQ's ``NamesrvConfig``)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class NamesrvConfig:
    """What a name server needs: where to listen, when brokers expire, frame limit."""

    listen_host: str = "127.0.0.1"
    listen_port: int = 9876
    #: a broker silent this long is dropped from routes
    broker_channel_expired_ms: int = 120_000
    scan_not_active_broker_interval_ms: int = 10_000
    max_frame_bytes: int = 16 * 1024 * 1024
    #: the broker's limits of its remoting port, the same on this one (a broker embedding a name
    #: server passes its own): a connection idle this long is closed
    #: (serverChannelMaxIdleTimeSeconds), a frame under way 10 s must arrive at least this fast
    #: (serverFrameMinBytesPerSecond, 0: no minimum), this many connections at once
    #: (serverMaxConnections, 0: up to the descriptor reserve) and this many bytes of partial
    #: large frames in all (serverFrameBudgetBytes)
    server_channel_max_idle_time_seconds: int = 120
    server_frame_min_bytes_per_s: int = 1024
    server_max_connections: int = 0
    server_frame_budget_bytes: int = 256 * 1024 * 1024
    #: a plain_acl.yml: when set, writes (REGISTER_BROKER, UNREGISTER_BROKER, PUT_KV_CONFIG,
    #: DELETE_KV_CONFIG, DELETE_TOPIC_IN_NAMESRV) need an admin account's signature
    acl_file: str | None = None
    #: routes carry ``orderTopicConf`` (the ORDER_TOPIC_CONFIG KV entry of the topic). RocketMQ's
    #: default is false; on here, so ``mqadmin updateTopic -o true`` works without more setup
    order_message_enable: bool = True
