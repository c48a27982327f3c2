"""What the dashboard reads and changes in a broker: its managers and a few callables.

As the remoting processors do, the dashboard is given the managers it uses (store, topics,
groups, offsets, clients, stats) and, for facts that change while the broker runs,
callables; it never holds the broker. ``Broker.dashboard_source()`` builds one; a test can
build one from managers alone.

Everything here runs on the broker's event loop (the dashboard's HTTP server is served
there), so reading the managers' tables needs no lock: they are only changed on that thread.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqcore.acl.config import PlainAclConfig
    from mqcore.broker.clients import ClientManager
    from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
    from mqcore.broker.stats import BrokerStats
    from mqcore.broker.topics import TopicConfigManager
    from mqcore.store.message_store import MessageStore


@dataclasses.dataclass(frozen=True)
class GrpcClient:
    """A 5.x client as the gRPC endpoint knows it (from its settings and heartbeats)."""

    client_id: str
    client_type: str
    group: str | None
    language: str
    version: str
    last_seen_ms: int
    #: the topics a consumer subscribes to (from its settings)
    topics: tuple[str, ...] = ()


@dataclasses.dataclass
class DashboardSource:
    """The broker as the dashboard sees it.

    ``runtime_figures``: the GET_BROKER_RUNTIME_INFO table (uptime, rates, disk);
    ``disk_paths``: name -> directory whose partition's use is shown;
    ``grpc_clients``: the 5.x clients, empty without the endpoint;
    ``acl``: the current plain ACL, or None when ACL is off (the dashboard then asks no login);
    ``schedule_register``: re-register with the name servers soon (a topic changed);
    ``store_host``: the packed address records are stored with (resent messages carry it);
    ``reset_offset(group, topic, timestamp_ms)``: the broker's INVOKE_BROKER_TO_RESET_OFFSET
    (commits and tells online consumers), answering ``(ok, text)``.
    """

    cluster_name: str
    broker_name: str
    version: str
    listen_addr: Callable[[], str]
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    clients: ClientManager
    stats: BrokerStats
    runtime_figures: Callable[[], dict[str, str]]
    disk_paths: Callable[[], dict[str, str]]
    grpc_clients: Callable[[], list[GrpcClient]]
    acl: Callable[[], PlainAclConfig | None]
    schedule_register: Callable[[], None]
    store_host: Callable[[], bytes]
    reset_offset: Callable[[str, str, int], Awaitable[tuple[bool, str]]]
    #: extra facts shown on the broker page (ports, flush type...): key -> value
    settings: Callable[[], dict[str, Any]] = dict
