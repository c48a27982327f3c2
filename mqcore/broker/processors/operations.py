"""Operator requests (what ``mqadmin`` sends beyond topics and stats):
UPDATE_BROKER_CONFIG (25), GET_BROKER_CONFIG (26), GET_PRODUCER_CONNECTION_LIST (204),
DELETE_SUBSCRIPTIONGROUP (207), INVOKE_BROKER_TO_RESET_OFFSET (222) and
QUERY_TOPIC_CONSUME_BY_WHO (300). Answers match a 4.9 broker's codes and bodies.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from mqcore.broker.conf import effective_config_lines
from mqcore.broker.processors.inspection import mq_keyed
from mqcore.config import read_properties
from mqcore.errors import ConfigError, MQError
from mqcore.remoting import RemotingCommand, ResponseCode, create_response
from mqcore.remoting.codes import LanguageCode, RequestCode
from mqcore.remoting.command import create_request
from mqcore.jsonutil import dumps_compact

if TYPE_CHECKING:
    from mqcore.broker.clients import ClientManager
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
    from mqcore.broker.topics import TopicConfigManager
    from mqcore.config import StoreConfig
    from mqcore.remoting.channel import Channel
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)


def _language(code: int) -> str:
    try:
        return LanguageCode(code).name
    except ValueError:
        return "OTHER"


class OperationsProcessor:
    """Operator requests. Given only the managers it uses and, as callables, what changes
    while the broker runs: ``configs`` (the current broker and store configuration),
    ``bound_port`` (the port actually listened on, known after start) and
    ``update_config`` (apply run-time keys, ``Broker.update_config``) and ``unsaved`` (why the
    last change was not saved to broker.conf, or None). Runs on the broker's event loop."""

    def __init__(self, *, broker_name: str, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetManager, clients: ClientManager,
                 configs: Callable[[], tuple[BrokerConfig, StoreConfig]], bound_port: Callable[[], int],
                 update_config: Callable[[dict[str, str]], list[str]], unsaved: Callable[[], str | None]) -> None:
        self.broker_name = broker_name
        self.store = store
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.clients = clients
        self.configs = configs
        self.bound_port = bound_port
        self.update_config = update_config
        self.unsaved = unsaved

    # --- broker config ----------------------------------------------------------------------------
    def get_broker_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        lines: list[str] = []
        for line in effective_config_lines(*self.configs()):
            key, _, value = line.partition("=")
            if "_" in key:  # mqcore-internal settings without a RocketMQ key: not an operator's concern
                continue
            if key == "listenPort":
                value = str(self.bound_port())  # the port actually bound (0 in the config means "any free one")
            lines.append(f"{key}={value}")
        text = "\n".join(lines) + "\n"
        return create_response(request, ResponseCode.SUCCESS, body=text.encode(),
                               ext_fields={"version": dumps_compact({"counter": 0, "timestamp": 0}).decode()})

    def update_broker_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            props = read_properties(bytes(request.body).decode("utf-8"))
            log.info("updateBrokerConfig from %s: %s", channel.remote_addr, props)
            self.update_config(props)  # one list of run-time keys, broker and store alike
        except (ConfigError, UnicodeDecodeError) as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, str(e))
        # applied; the remark says when it could not be saved (mqadmin prints it as a warning)
        return create_response(request, ResponseCode.SUCCESS,
                               f"not saved: {unsaved}" if (unsaved := self.unsaved()) else None)

    # --- clients ---------------------------------------------------------------------------------------
    def producer_connections(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        group = request.ext_fields.get("producerGroup", "")
        members = self.clients.producers.get(group)
        if not members:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        body = {"connectionSet": [{"clientAddr": ch.remote_addr, "clientId": info.client_id,
                                   "language": _language(info.language), "version": info.version}
                                  for ch, info in members.items()]}
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact(body))

    def topic_consumed_by(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        topic = request.ext_fields.get("topic", "")
        groups = {g.group for g in self.clients.consumers.values() if topic in g.subscriptions}
        suffix = "@"
        groups.update(k.partition(suffix)[2] for k in self.offsets.snapshot() if k.partition(suffix)[0] == topic)
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact({"groupList": sorted(groups)}))

    def delete_group(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        group = request.ext_fields.get("groupName", "")
        remove_offset = request.ext_fields.get("removeOffset", "false").lower() == "true"
        self.groups.delete(group)
        if remove_offset:
            for topic in self.offsets.topics_of(group):
                self.offsets.remove(group, topic)
        log.info("subscription group %s deleted by %s (offsets %s)", group, channel.remote_addr,
                 "removed" if remove_offset else "kept")
        return create_response(request, ResponseCode.SUCCESS)

    # --- offsets -----------------------------------------------------------------------------------------
    async def reset_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """Move a group's offsets on a topic to a timestamp (-1: the end). Like RocketMQ, online
        consumers are told (RESET_CONSUMER_CLIENT_OFFSET) and a group with none online gets
        CONSUMER_NOT_ONLINE, so the tool falls back to rewriting the committed offsets."""
        ext = request.ext_fields
        topic, group = ext.get("topic", ""), ext.get("group", "")
        try:
            timestamp = int(ext.get("timestamp", "-1"))
        except ValueError:
            return create_response(request, ResponseCode.SYSTEM_ERROR, f"timestamp {ext.get('timestamp')!r} "
                                   "is not a number of milliseconds")
        force = ext.get("isForce", "true").lower() == "true"
        code, text = await self.reset_group_offsets(group, topic, timestamp, force)
        if code != ResponseCode.SUCCESS:
            return create_response(request, code, text)
        return create_response(request, ResponseCode.SUCCESS, body=text.encode())

    async def reset_group_offsets(self, group: str, topic: str, timestamp: int, force: bool = True, *,
                                  offline_too: bool = False) -> tuple[int, str]:
        """The reset itself: ``(SUCCESS, the offset table as JSON)`` or ``(code, why not)``.
        The dashboard calls it with ``offline_too``: a group with no consumer online has its
        committed offsets moved all the same (what mqadmin's fallback does over the wire)."""
        tc = self.topics.get(topic)
        if tc is None:
            return ResponseCode.SYSTEM_ERROR, f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}"
        store = self.store
        table: list[tuple[int, int]] = []
        for qid in range(tc.write_queue_nums):
            consumer_offset = self.offsets.query(group, topic, qid)
            if consumer_offset is None or consumer_offset < 0:
                return ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist"
            if timestamp == -1:
                ts_offset = store.get_max_offset_in_queue(topic, qid)
            else:
                ts_offset = store.get_offset_in_queue_by_time(topic, qid, timestamp)
            ts_offset = max(ts_offset, 0)
            table.append((qid, ts_offset if (force or ts_offset < consumer_offset) else consumer_offset))
        g = self.clients.group(group)
        online = list(g.channels) if g is not None else []
        if not online and not offline_too:
            return (ResponseCode.CONSUMER_NOT_ONLINE,
                    f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} Timestamp: {timestamp}")
        name = self.broker_name
        body = '{"offsetTable":' + mq_keyed([({"brokerName": name, "queueId": qid, "topic": topic}, off)
                                              for qid, off in table]) + "}"
        # the committed offsets move now, so a consumer that does not act on the notice
        # still resumes from the new position after its next rebalance
        for qid, off in table:
            self.offsets.commit(group, topic, qid, off)
        notice = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": str(force).lower()}
        for ch in online:
            cmd = create_request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, notice, body.encode(), oneway=True)
            try:
                await asyncio.wait_for(ch.send_request_oneway(cmd), 5)
            except (MQError, OSError, asyncio.TimeoutError) as e:  # one unreachable consumer must not fail it
                log.warning("reset-offset notice to %s failed: %s", ch.remote_addr, e)
        return ResponseCode.SUCCESS, body
