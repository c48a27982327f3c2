"""GET_TOPIC_CONFIG (351) and GET_SUBSCRIPTIONGROUP_CONFIG (352): one topic's or one group's
config, as RocketMQ 5's broker answers them. RocketMQ 5's proxy in cluster mode asks them of
every broker it fronts: the topic's message type (the ``message.type`` attribute; a topic
without one is NORMAL, and mqbroker's topics carry every type), the group's retry policy
and whether it is a FIFO group."""
from __future__ import annotations

from typing import Any

from mqcore.jsonutil import dumps_compact
from mqcore.remoting import ResponseCode, create_response
from mqcore.remoting.command import RemotingCommand
from mqcore.store.config_files import bean_to_json


class ConfigQueryProcessor:
    def __init__(self, *, topics: Any, groups: Any) -> None:
        self.topics = topics
        self.groups = groups

    def topic_config(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        topic = (request.ext_fields or {}).get("topic")
        tc = self.topics.get(topic) if isinstance(topic, str) else None
        if tc is None:
            return create_response(request, ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")
        # TopicConfigAndQueueMapping: the config's fields, its attributes, no static queue mapping
        return create_response(request, ResponseCode.SUCCESS, body=dumps_compact({**bean_to_json(tc), "attributes": {}}))

    def group_config(self, channel: Any, request: RemotingCommand) -> RemotingCommand:
        group = (request.ext_fields or {}).get("group")
        if not isinstance(group, str) or not self.groups.ensure(group):  # found or auto-created, as Java
            return create_response(request, ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        return create_response(request, ResponseCode.SUCCESS,
                               body=dumps_compact(self.groups.table._bean_json(self.groups.table.get(group))))
