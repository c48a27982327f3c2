"""QUERY_ASSIGNMENT (400) and SET_MESSAGE_REQUEST_MODE (401): RocketMQ 5's broker-side
rebalance, which is how the 5.x remoting ``DefaultMQPushConsumer`` (``setClientRebalance(false)``)
learns its queues and whether to pull or pop them.

As Apache 5.3.3's ``QueryAssignmentProcessor``: a query answers ``{"messageQueueAssignments":
[{"messageQueue": {...}, "mode": "POP"}, ...]}`` from the group's mode for the topic (set by 401,
else ``defaultMessageRequestMode``; a retry topic is always PULL), and answers no assignments
(``{}``: the client keeps what it has) for a topic that does not exist, a group without live
clients or an unknown strategy. A setting for a retry topic is NO_PERMISSION, for a topic that
does not exist TOPIC_NOT_EXIST, for a group that does not exist (and is not auto-created)
SUBSCRIPTION_GROUP_NOT_EXIST. A body that is not
the JSON object the request needs is SYSTEM_ERROR naming what is wrong (RocketMQ fails on it
with a NullPointerException or a JSON error, also SYSTEM_ERROR; it answers a query naming no
group or client with no assignments), and nothing is stored then.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from mqcore.broker.assignment import STRATEGIES, MessageModel, Queue, assign
from mqcore.broker.request_mode import (RETRY_GROUP_TOPIC_PREFIX, MessageRequestMode, MessageRequestModeTable,
                                        RequestModeSetting, json_body, parse_setting_body)
from mqcore.broker.topics import readable
from mqcore.errors import ProtocolError
from mqcore.permissions import PERM_READ
from mqcore.remoting import ResponseCode, create_response
from mqcore.remoting.command import RemotingCommand

log = logging.getLogger(__name__)


def _text(value: dict[str, Any], key: str) -> str:
    v = value.get(key)
    if not isinstance(v, str) or not v:
        raise ProtocolError(f"the query assignment body: {key} is missing")
    return v


class AssignmentProcessor:
    """``cfg`` is read per request (``defaultMessageRequestMode`` and friends)."""

    def __init__(self, *, modes: MessageRequestModeTable, topics: Any, groups: Any, clients: Any,
                 cfg: Callable[[], Any]) -> None:
        self.modes = modes
        self.topics = topics
        self.groups = groups
        self.clients = clients
        self.cfg = cfg

    # --- QUERY_ASSIGNMENT ----------------------------------------------------------------------
    def query_assignment(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            body = json_body(request.body, "the query assignment body")
            topic, group, client_id = _text(body, "topic"), _text(body, "consumerGroup"), _text(body, "clientId")
            model = body.get("messageModel")
            if model not in [m.value for m in MessageModel]:
                raise ProtocolError(f"the query assignment body: messageModel {model!r:.40} is neither "
                                    "CLUSTERING nor BROADCASTING")
            strategy = body.get("strategyName")
        except ProtocolError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, str(e))
        setting = self.mode_of(topic, group)
        queues = self._assigned(topic, group, client_id, MessageModel(model), strategy, setting)
        answer: dict[str, Any] = {}
        if queues is not None:
            answer["messageQueueAssignments"] = [
                {"messageQueue": {"brokerName": b, "queueId": q, "topic": t}, "mode": setting.mode.value}
                for t, b, q in sorted(queues)]
        return create_response(request, ResponseCode.SUCCESS, body=json.dumps(answer).encode())

    def mode_of(self, topic: str, group: str) -> RequestModeSetting:
        """The group's setting for the topic, else the broker's default (PULL for a retry topic)."""
        setting = self.modes.get(topic, group)
        if setting is not None:
            return setting
        if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return RequestModeSetting(topic, group, MessageRequestMode.PULL)
        cfg = self.cfg()
        mode = MessageRequestMode(cfg.default_message_request_mode)
        share = cfg.default_pop_share_queue_num if mode is MessageRequestMode.POP else 0
        return RequestModeSetting(topic, group, mode, share)

    def _queues(self, topic: str) -> list[Queue] | None:
        """The topic's readable queues here, as the name server's route lists them."""
        tc = self.topics.get(topic)
        cfg = self.cfg()
        if tc is None or not readable(tc) or not cfg.broker_permission & PERM_READ or not tc.read_queue_nums:
            return None
        return [(topic, cfg.broker_name, q) for q in range(tc.read_queue_nums)]

    def _assigned(self, topic: str, group: str, client_id: str, model: MessageModel, strategy_name: Any,
                  setting: RequestModeSetting) -> set[Queue] | None:
        """The client's queues; None when the broker cannot say (the client keeps its own)."""
        queues = self._queues(topic)
        if queues is None:
            if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                log.warning("query assignment of group %s: topic %s does not exist", group, topic)
            return None
        if model is MessageModel.BROADCASTING or not self.cfg().server_load_balancer_enable:
            return set(queues)
        info = self.clients.group(group)
        clients = info.client_ids() if info is not None else []
        if not clients:
            log.warning("query assignment of group %s topic %s: the group has no live client", group, topic)
            return None
        strategy = STRATEGIES.get(strategy_name) if isinstance(strategy_name, str) else None
        if strategy is None:
            log.warning("query assignment of group %s: unsupported strategy %r", group, strategy_name)
            return None
        return assign(client_id, queues, clients, strategy, setting)

    # --- SET_MESSAGE_REQUEST_MODE --------------------------------------------------------------
    def set_message_request_mode(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        try:
            setting = parse_setting_body(request.body)
        except ProtocolError as e:
            return create_response(request, ResponseCode.SYSTEM_ERROR, str(e))
        if setting.topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
            return create_response(request, ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
        if self.topics.get(setting.topic) is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, f"topic[{setting.topic}] not exist")
        if not self.groups.ensure(setting.consumer_group):  # created here when auto-creation is on, as there
            return create_response(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                                   "subscription group does not exist")
        self.modes.put(setting)
        self.modes.persist()
        log.info("message request mode of group %s on topic %s: %s (popShareQueueNum %d)", setting.consumer_group,
                 setting.topic, setting.mode.value, setting.pop_share_queue_num)
        return create_response(request, ResponseCode.SUCCESS)
