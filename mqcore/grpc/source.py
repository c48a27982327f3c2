"""What the gRPC endpoint uses of a broker: its managers and a few callables.

As the remoting processors are, the 5.x endpoint is given the services it uses (store,
topics, groups, offsets, stats, the one TransactionService) and, for facts that change while
the broker runs (its configuration after ``updateBrokerConfig``, the address records are
stored with), callables; it never holds the broker. ``Broker.grpc_source()`` builds one.

The managers are typed here by the few methods the endpoint calls (Protocols), not by their
broker classes: ``mqcore.grpc`` imports nothing from ``mqcore.broker`` (the broker imports
the endpoint to start it, so the other direction would be a cycle; tests/test_layering.py
checks it), and tests/grpc/test_source.py that the broker's managers have these methods with
these parameters (the broker module is not yet under mypy --strict, which would check it).
A topic's config is read for ``topic_name``, ``perm`` and its queue counts only.

Everything here runs on the broker's event loop, where those managers' tables are changed.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from mqcore.acl.config import PlainAclConfig
from mqcore.config import StoreConfig
from mqcore.message import MessageExtBrokerInner
from mqcore.pop.service import PopService
from mqcore.remoting.headers import EndTransactionRequestHeader
from mqcore.store.message_store import MessageStore
from mqcore.store.results import PutMessageResult


@runtime_checkable
class Settings(Protocol):
    """The broker settings the endpoint reads (``BrokerConfig`` has them); read per request,
    so a changed ``updateBrokerConfig`` value applies at once, as on the 4.x path."""

    @property
    def broker_name(self) -> str: ...
    @property
    def broker_ip1(self) -> str: ...
    @property
    def broker_permission(self) -> int: ...
    @property
    def reject_transaction_message(self) -> bool: ...
    @property
    def enable_property_filter(self) -> bool: ...
    @property
    def recall_message_enable(self) -> bool: ...
    @property
    def channel_expired_timeout_ms(self) -> int: ...


class TopicView(Protocol):
    """What the endpoint reads of a topic's config (the broker's ``TopicConfig`` has it)."""

    @property
    def topic_name(self) -> str: ...
    @property
    def perm(self) -> int: ...
    @property
    def read_queue_nums(self) -> int: ...
    @property
    def write_queue_nums(self) -> int: ...


@runtime_checkable
class Topics(Protocol):
    def get(self, topic: str) -> Any: ...
    def create_in_send(self, topic: str, default_topic: str, queue_nums: int) -> Any: ...
    def create_group_topic(self, topic: str, queue_nums: int = ..., perm: int = ...) -> Any: ...


@runtime_checkable
class Groups(Protocol):
    def ensure(self, group: str) -> bool: ...
    def retry_max_times(self, group: str) -> int: ...
    def consume_orderly(self, group: str) -> bool: ...


@runtime_checkable
class Offsets(Protocol):
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...
    def query(self, group: str, topic: str, queue_id: int) -> int | None: ...


@runtime_checkable
class Latency(Protocol):
    def observe(self, value: float) -> None: ...  # seconds


@runtime_checkable
class Stats(Protocol):
    @property
    def put_latency(self) -> Latency: ...
    def on_put(self, topic: str, result: Any) -> None: ...
    def on_delivered(self, group: str, topic: str, messages: int, nbytes: int) -> None: ...
    def on_send_back(self, group: str, topic: str, result: Any) -> None: ...


@runtime_checkable
class EndResult(Protocol):
    """What END_TRANSACTION did: ``refused`` when the header names no half message of the
    group at those offsets (nothing written), with the broker's ``remark``."""

    @property
    def refused(self) -> bool: ...
    @property
    def remark(self) -> str | None: ...


@runtime_checkable
class Transactions(Protocol):
    """The broker's one TransactionService (4.x and 5.x share it)."""

    def put_half(self, msg: MessageExtBrokerInner) -> PutMessageResult: ...
    def end(self, h: EndTransactionRequestHeader) -> EndResult: ...


@dataclasses.dataclass
class GrpcSource:
    """The broker as the gRPC endpoint sees it.

    ``settings``: the broker's current configuration; ``store_config``: the store's;
    ``store_host``: the packed address records are stored with (known once the broker listens);
    ``schedule_register``: re-register with the name servers soon (a topic was created);
    ``send_refusal(topic)``: the remark refusing a producer's send to a topic the broker owns,
    or None (the rule the 4.x SEND uses); ``acl``: the current plain ACL, or None when
    ``aclEnable`` is off; ``pop``: the broker's one pop service (started, so that its
    ``arrivals`` are set), which the remoting POP_MESSAGE family shares.
    """

    clock: Callable[[], int]
    store: MessageStore
    topics: Topics
    groups: Groups
    offsets: Offsets
    stats: Stats
    transactions: Transactions
    settings: Callable[[], Settings]
    store_config: Callable[[], StoreConfig]
    store_host: Callable[[], bytes]
    schedule_register: Callable[[], None]
    send_refusal: Callable[[str], str | None]
    pop: PopService
    acl: Callable[[], PlainAclConfig] | None = None
    #: ACL 2.0's check (mqcore.acl.v2.check.AuthChecker) when authenticationEnabled or
    #: authorizationEnabled is on, else None
    auth: Any = None
