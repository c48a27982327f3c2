"""What the dashboard reads and changes in a broker: its managers and a few callables.

As the remoting processors do, the dashboard is given the managers it uses (store, topics,
groups, offsets, clients, stats) and, for facts that change while the broker runs,
callables; it never holds the broker. ``Broker.dashboard_source()`` builds one; a test can
build one from managers alone.

The managers are typed here by the few members the dashboard uses (Protocols), not by their
broker classes: ``mqcore.dashboard`` imports nothing from ``mqcore.broker`` (the broker imports
the dashboard to start it, so the other direction would be a cycle; tests/test_layering.py
checks it), and tests/dashboard/test_source.py that the broker's managers have these members
with these parameters. Topics are created through ``create_topic``, so the dashboard never
builds a broker ``TopicConfig`` itself.

Everything here runs on the broker's event loop (the dashboard's HTTP server is served
there), so reading the managers' tables needs no lock: they are only changed on that thread.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mqcore.store.space import used_percent

if TYPE_CHECKING:
    from mqcore.acl.config import PlainAclConfig
    from mqcore.store.message_store import MessageStore


@runtime_checkable
class Table(Protocol):
    """A versioned table of named beans (topic configs, subscription group configs)."""

    def get(self, name: str) -> Any: ...
    def names(self) -> list[str]: ...
    def snapshot(self) -> dict[str, Any]: ...


@runtime_checkable
class CreatedTopic(Protocol):
    """A topic's config as ``create_topic`` answers it (the dashboard reads its name)."""

    @property
    def topic_name(self) -> str: ...


@runtime_checkable
class Topics(Protocol):
    @property
    def table(self) -> Table: ...
    def get(self, topic: str) -> Any: ...
    def delete(self, topic: str) -> bool: ...
    def create_group_topic(self, topic: str, queue_nums: int = ..., perm: int = ...) -> Any: ...


@runtime_checkable
class Groups(Protocol):
    @property
    def table(self) -> Table: ...
    def dead_letter_after(self, group: str) -> tuple[int, str]: ...


@runtime_checkable
class Offsets(Protocol):
    def query(self, group: str, topic: str, queue_id: int) -> int | None: ...
    def query_queues(self, group: str, topic: str) -> dict[int, int]: ...
    def snapshot(self) -> dict[str, dict[int, int]]: ...
    def topics_of(self, group: str) -> list[str]: ...
    def committed_by_group(self, topic: str) -> dict[str, dict[int, int]]: ...
    def remove_topic(self, topic: str) -> None: ...


@runtime_checkable
class Clients(Protocol):
    """The 4.x clients known from heartbeats: consumer groups (group -> info with ``group``,
    ``subscriptions``, ``channels``...) and producers (group -> {channel: info})."""

    @property
    def consumers(self) -> dict[str, Any]: ...
    @property
    def producers(self) -> dict[str, Any]: ...
    def group(self, group: str) -> Any: ...


@runtime_checkable
class Stats(Protocol):
    """The broker's counters: ``put`` topic -> [messages, bytes] stored, ``pulled``
    (group, topic) -> [messages, bytes] delivered (read by the charts' history)."""

    @property
    def put(self) -> dict[str, Any]: ...
    @property
    def pulled(self) -> dict[tuple[str, str], Any]: ...
    def on_put(self, topic: str, result: Any) -> None: ...


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


async def _no_admin_requests(code: int, fields: dict[str, str], body: bytes | None, remote_addr: str) -> Any:
    raise NotImplementedError("this source has no broker processors to send admin requests to")


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
    (commits and tells online consumers), answering ``(ok, text)``;
    ``create_topic(name, read_queues, write_queues, perm)``: what UPDATE_AND_CREATE_TOPIC
    does to the topic table (the caller validated the values and registers afterwards);
    ``admin_request(code, ext_fields, body, remote_addr)``: the broker's own processor for a
    request code, given the request as a remoting client's reaches it (behind the same name
    checks), answering its response command: topic and group edits, test sends, producer
    connections and the calls forwarded to a consumer (307, 309) are the admin RPCs themselves.
    """

    cluster_name: str
    broker_name: str
    version: str
    listen_addr: Callable[[], str]
    store: MessageStore
    topics: Topics
    groups: Groups
    offsets: Offsets
    clients: Clients
    stats: Stats
    runtime_figures: Callable[[], dict[str, str]]
    disk_paths: Callable[[], dict[str, str]]
    grpc_clients: Callable[[], list[GrpcClient]]
    acl: Callable[[], PlainAclConfig | None]
    schedule_register: Callable[[], None]
    store_host: Callable[[], bytes]
    reset_offset: Callable[[str, str, int], Awaitable[tuple[bool, str]]]
    #: create (or replace) a topic: ``(name, read_queues, write_queues, perm)`` -> its config
    create_topic: Callable[[str, int, int, int], CreatedTopic]
    #: extra facts shown on the broker page (ports, flush type...): key -> value
    settings: Callable[[], dict[str, Any]] = dict
    #: used fraction of the partition holding a path: the broker's own measure (its cleanup's,
    #: the one brokerStatus, clusterList and /metrics report), so the page never disagrees
    disk_ratio: Callable[[str], float] = lambda path: used_percent(path) / 100
    #: ``(code, ext_fields, body, remote_addr)`` -> the processor's response (a RemotingCommand)
    admin_request: Callable[[int, dict[str, str], bytes | None, str], Awaitable[Any]] = _no_admin_requests
