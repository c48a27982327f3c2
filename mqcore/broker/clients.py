"""Who is connected: producer and consumer groups from heartbeats, queue locks.

A consumer group's membership is the set of channels that sent a heartbeat naming
it; a channel that closes or stays silent for ``channel_expired_timeout_ms`` leaves
every group. Membership changes are reported to ``on_group_changed`` (the broker
then sends NOTIFY_CONSUMER_IDS_CHANGED to the group).

Threads: the broker's event loop only.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any, Callable

from mqcore.broker.filtering import compile_expression, is_tag_type
from mqcore.errors import FilterExpressionError
from mqcore.errors import ProtocolError
from mqcore.tags import SUB_ALL, split_tags, subscribes_all
from mqcore.tags import tag_codes as codes_of

if TYPE_CHECKING:
    from mqcore.filter.sql92 import Sql92Filter
    from mqcore.remoting.channel import Channel

log = logging.getLogger(__name__)

CONSUME_FROM_NAMES = ["CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
                      "CONSUME_FROM_MIN_OFFSET", "CONSUME_FROM_MAX_OFFSET", "CONSUME_FROM_FIRST_OFFSET",
                      "CONSUME_FROM_TIMESTAMP"]
# Java enum ordinals as some clients send them; 4.x ConsumeFromWhere has the deprecated ones between
_ENUMS = {"consumeType": ["CONSUME_ACTIVELY", "CONSUME_PASSIVELY"],
          "messageModel": ["BROADCASTING", "CLUSTERING"],
          "consumeFromWhere": CONSUME_FROM_NAMES}


def enum_name(kind: str, value: Any, default: str) -> str:
    """Heartbeat enums arrive as names or ordinals (C++ client): normalise to names."""
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        return value
    try:
        return _ENUMS[kind][int(value)]
    except (ValueError, TypeError, IndexError):
        return default


def parse_tags(sub_string: str | None) -> tuple[str, frozenset[str]]:
    """Tag expression -> (normalised expression, tags); ``*`` or empty = all tags."""
    if subscribes_all(sub_string):
        return SUB_ALL, frozenset()
    return sub_string.strip(), frozenset(split_tags(sub_string))  # type: ignore[union-attr]


def tag_codes(tags: frozenset[str]) -> frozenset[int] | None:
    return frozenset(codes_of(tags)) if tags else None


def subscription_codes(sub_string: str | None) -> frozenset[int] | None:
    """Tag codes a subscription matches: None for ``*``; an expression naming no tag
    (``" || "``) matches nothing, as in RocketMQ (its code set is empty), not everything."""
    if subscribes_all(sub_string):
        return None
    return frozenset(codes_of(split_tags(sub_string)))


@dataclasses.dataclass
class Subscription:
    """One topic subscription of a consumer group: the tag expression, its tags and their hash codes."""

    topic: str
    sub_string: str
    tags: frozenset[str]
    sub_version: int
    expression_type: str = "TAG"
    #: the compiled SQL92 filter (``expression_type`` SQL92), or None with ``filter_error`` saying why
    sql_filter: Sql92Filter | None = None
    filter_error: str | None = None

    @property
    def codes(self) -> frozenset[int] | None:
        if self.tags:
            return tag_codes(self.tags)
        return None if self.sub_string == "*" else frozenset()  # " || " names no tag: nothing matches

    def to_json(self) -> dict[str, Any]:
        return {"classFilterMode": False, "codeSet": sorted(self.codes or ()), "expressionType": self.expression_type,
                "subString": self.sub_string, "subVersion": self.sub_version, "tagsSet": sorted(self.tags),
                "topic": self.topic}


@dataclasses.dataclass
class ClientChannelInfo:
    """A client connection as heartbeats describe it: channel, client id, language, version, last seen."""

    channel: Channel
    client_id: str
    language: int
    version: int
    last_update_ms: int


@dataclasses.dataclass
class ConsumerGroupInfo:
    """A consumer group's members (channel -> info), consume settings and subscriptions."""

    group: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Channel, ClientChannelInfo] = dataclasses.field(default_factory=dict)
    subscriptions: dict[str, Subscription] = dataclasses.field(default_factory=dict)  # by topic

    def client_ids(self) -> list[str]:
        return [info.client_id for info in self.channels.values()]


class ClientManager:
    """Producer and consumer membership from heartbeats; reports group changes and silent channels."""

    def __init__(self, clock: Callable[[], int], expiry_ms: int,
                 on_group_changed: Callable[[str, list[Channel]], None] | None = None) -> None:
        self.clock = clock
        self.expiry_ms = expiry_ms
        self.on_group_changed = on_group_changed
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[Channel, ClientChannelInfo]] = {}  # group -> {channel: info}

    # --- heartbeats -------------------------------------------------------------------------------
    def heartbeat(self, channel: Channel, client_id: str, language: int, version: int,
                  data: dict[str, Any]) -> list[str]:
        """Register what a HEART_BEAT says; returns the consumer groups named in it."""
        now = self.clock()
        info = ClientChannelInfo(channel, client_id, language, version, now)
        for p in _entries(data, "producerDataSet"):
            group = _group_name(p, "producerDataSet")
            if group:
                self.producers.setdefault(group, {})[channel] = info
        groups = []
        for c in _entries(data, "consumerDataSet"):
            group = _group_name(c, "consumerDataSet")
            if not group:
                continue
            groups.append(group)
            g = self.consumers.get(group)
            if g is None:
                g = self.consumers[group] = ConsumerGroupInfo(group)
            g.consume_type = enum_name("consumeType", c.get("consumeType"), g.consume_type)
            g.message_model = enum_name("messageModel", c.get("messageModel"), g.message_model)
            g.consume_from_where = enum_name("consumeFromWhere", c.get("consumeFromWhere"), g.consume_from_where)
            new_member = channel not in g.channels
            g.channels[channel] = info
            subs_changed = self._update_subscriptions(g, _entries(c, "subscriptionDataSet"))
            if new_member:
                log.info("consumer group %s: %s joined (%d members)", group, client_id, len(g.channels))
            if (new_member or subs_changed) and self.on_group_changed:
                self.on_group_changed(group, list(g.channels))
        return groups

    def _update_subscriptions(self, g: ConsumerGroupInfo, subs: list[Any]) -> bool:
        changed = False
        for s in subs:
            if not isinstance(s, dict) or not s.get("topic"):
                continue
            topic, sub_string, tags_set, version, expression_type = _subscription_fields(s)
            if not is_tag_type(expression_type):
                changed = self._update_sql_subscription(g, topic, sub_string, version, expression_type) or changed
                continue
            expr, tags = parse_tags(sub_string)
            if not tags and tags_set:  # a client that sent tags but an odd subString
                tags = frozenset(str(t) for t in tags_set if str(t).strip() and str(t) != "*")
            old = g.subscriptions.get(topic)
            if old is None or old.sub_string != expr or version > old.sub_version:
                changed = changed or old is None or old.sub_string != expr
                g.subscriptions[topic] = Subscription(topic, expr, tags, version, expression_type)
        return changed

    @staticmethod
    def _update_sql_subscription(g: ConsumerGroupInfo, topic: str, sub_string: str | None, version: int,
                                 expression_type: str) -> bool:
        """A SQL92 subscription: compiled once per change of expression; a bad one is kept
        with its error, so pulls can say why nothing is delivered."""
        expr = str(sub_string or "")
        old = g.subscriptions.get(topic)
        if old is not None and old.sub_string == expr and old.expression_type == expression_type:
            old.sub_version = max(old.sub_version, version)
            return False
        sub = Subscription(topic, expr, frozenset(), version, expression_type)
        try:
            sub.sql_filter = compile_expression(expression_type, expr)
        except FilterExpressionError as e:
            sub.filter_error = str(e)
            log.warning("consumer group %s: subscription to %s refused: %s", g.group, topic, e)
        g.subscriptions[topic] = sub
        return True

    # --- leaving ------------------------------------------------------------------------------------
    def unregister(self, channel: Channel, producer_group: str | None, consumer_group: str | None) -> None:
        if producer_group and producer_group in self.producers:
            self.producers[producer_group].pop(channel, None)
        if consumer_group:
            self._remove_from_group(consumer_group, channel)

    def channel_closed(self, channel: Channel) -> None:
        for members in self.producers.values():
            members.pop(channel, None)
        for group in list(self.consumers):
            self._remove_from_group(group, channel)

    def _remove_from_group(self, group: str, channel: Channel) -> None:
        g = self.consumers.get(group)
        if g is None or g.channels.pop(channel, None) is None:
            return
        log.info("consumer group %s: a member left (%d remain)", group, len(g.channels))
        if self.on_group_changed and g.channels:
            self.on_group_changed(group, list(g.channels))
        if not g.channels:
            del self.consumers[group]

    def scan_expired(self) -> list[Channel]:
        """Channels silent for longer than the expiry; the caller closes them."""
        limit = self.clock() - self.expiry_ms
        stale: set[Channel] = set()
        for g in self.consumers.values():
            stale.update(ch for ch, info in g.channels.items() if info.last_update_ms < limit)
        for members in self.producers.values():
            stale.update(ch for ch, info in members.items() if info.last_update_ms < limit)
        return list(stale)

    # --- queries --------------------------------------------------------------------------------------
    def producer_channel(self, group: str) -> Channel | None:
        """A live channel of producer ``group`` (the one heard from last), or None: where a
        transaction check-back goes (RocketMQ ``getAvailableChannel``)."""
        members = self.producers.get(group)
        if not members:
            return None
        live = [info for ch, info in members.items() if getattr(ch, "is_active", True)]
        return max(live, key=lambda info: info.last_update_ms).channel if live else None

    def producer_channel_of(self, client_id: str) -> Channel | None:
        """The live channel of the client that heartbeated as a producer with ``client_id``,
        or None (RocketMQ ``ProducerManager.findChannel``): where a reply is pushed. Only
        producers count, as in RocketMQ: a requester is a producer. A scan of the producer
        table, which holds a few entries per client."""
        for members in self.producers.values():
            for ch, info in members.items():
                if info.client_id == client_id and getattr(ch, "is_active", True):
                    return ch
        return None

    def group(self, group: str) -> ConsumerGroupInfo | None:
        return self.consumers.get(group)

    def subscription(self, group: str, topic: str) -> Subscription | None:
        g = self.consumers.get(group)
        return g.subscriptions.get(topic) if g else None


#: a message queue as the lock table keys it: (topic, broker name, queue id)
QueueKey = tuple[str, str, int]


class RebalanceLockManager:
    """Orderly consumers lock queues per group; a lock not renewed for 60 s expires."""

    def __init__(self, clock: Callable[[], int], max_live_ms: int = 60_000) -> None:
        self.clock = clock
        self.max_live_ms = max_live_ms
        self._locks: dict[str, dict[QueueKey, tuple[str, int]]] = {}  # group -> mq -> (client, ts)

    def try_lock_batch(self, group: str, mqs: list[QueueKey], client_id: str) -> list[QueueKey]:
        now = self.clock()
        table = self._locks.setdefault(group, {})
        locked: list[QueueKey] = []
        for mq in mqs:
            owner = table.get(mq)
            if owner is None or owner[0] == client_id or now - owner[1] > self.max_live_ms:
                table[mq] = (client_id, now)
                locked.append(mq)
        return locked

    def unlock_batch(self, group: str, mqs: list[QueueKey], client_id: str) -> None:
        table = self._locks.get(group, {})
        for mq in mqs:
            owner = table.get(mq)
            if owner is not None and owner[0] == client_id:
                del table[mq]


def _entries(data: dict[str, Any], key: str) -> list[Any]:
    """A heartbeat list (absent => empty); any other shape is the peer's error."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"heartbeat {key} is a {type(value).__name__}, not an array")
    return value


def _group_name(entry: object, key: str) -> str | None:
    """The groupName of a heartbeat entry: a string, or None to skip a null or empty one."""
    if not isinstance(entry, dict):
        return None
    group = entry.get("groupName")
    if group is None or group == "":
        return None
    if not isinstance(group, str):
        raise ProtocolError(f"heartbeat {key}[].groupName is a {type(group).__name__}, not a string")
    return group


def _subscription_fields(s: dict[str, Any]) -> tuple[str, str | None, list[str | int], int, str]:
    """(topic, subString, tagsSet, subVersion, expressionType) of a heartbeat
    subscription, each of the type Java's bean has; anything else is a ProtocolError."""
    topic, sub_string = s.get("topic"), s.get("subString")
    tags_set, expression_type = s.get("tagsSet") or [], s.get("expressionType") or "TAG"
    if not isinstance(topic, str):
        raise ProtocolError(f"heartbeat subscription topic is a {type(topic).__name__}, not a string")
    if sub_string is not None and not isinstance(sub_string, str):
        raise ProtocolError(f"heartbeat subscription subString is a {type(sub_string).__name__}, not a string")
    if not isinstance(tags_set, list) or not all(isinstance(t, (str, int)) for t in tags_set):
        raise ProtocolError("heartbeat subscription tagsSet is not an array of strings")
    if not isinstance(expression_type, str):
        raise ProtocolError("heartbeat subscription expressionType is not a string")
    raw_version = s.get("subVersion") or 0
    try:
        if isinstance(raw_version, bool) or not isinstance(raw_version, (int, str)):
            raise ValueError(raw_version)
        version = int(raw_version)
    except ValueError:
        raise ProtocolError(f"heartbeat subscription subVersion {raw_version!r} is not an integer") from None
    return topic, sub_string, tags_set, version, expression_type
