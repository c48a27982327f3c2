"""A client's ``namespace`` (Java's ``ClientConfig.setNamespace``, ``NamespaceUtil``).

With a namespace every topic and group the client names lives under it on the broker:
``orders`` becomes ``ns%orders``, group ``workers`` becomes ``ns%workers`` (so its retry and
dead-letter topics are ``%RETRY%ns%workers`` / ``%DLQ%ns%workers``), and what the client
hands back to the user (a send result's queue, a consumed message's topic) is named without
it again. System topics and groups (``TBW102``, ``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``,
``CID_RMQ_SYS_*``) are never wrapped, and a name already under the namespace is left as it
is, as the Java client does; so a Java client and this one with the same namespace share
the same topics and groups.
"""
from __future__ import annotations

import dataclasses

from mqcore.client.message import MessageExt, SendResult
from mqcore.message import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, is_system_topic
from mqcore.remoting.bodies import MessageQueue

__all__ = ["Namespace"]

SEPARATOR = "%"
_SYS_GROUP_PREFIX = "CID_RMQ_SYS_"


def _is_system(resource: str) -> bool:
    return is_system_topic(resource) or resource.startswith(_SYS_GROUP_PREFIX)


def _split_prefix(resource: str) -> tuple[str, str]:
    """(``%RETRY%`` / ``%DLQ%`` / "", the rest)."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if resource.startswith(prefix):
            return prefix, resource[len(prefix):]
    return "", resource


class Namespace:
    """One client's namespace: names in and out of it."""

    __slots__ = ("name", "_head")

    def __init__(self, name: str) -> None:  # validated by ClientConfig
        self.name = name
        self._head = name + SEPARATOR

    def wrap(self, resource: str) -> str:
        """``orders`` -> ``ns%orders``; ``%RETRY%g`` -> ``%RETRY%ns%g``; system names and names
        already under the namespace unchanged."""
        if not resource or _is_system(resource):
            return resource
        prefix, rest = _split_prefix(resource)
        if rest.startswith(self._head):
            return resource
        return prefix + self._head + rest

    def unwrap(self, resource: str) -> str:
        """The inverse of :meth:`wrap` for names under this namespace; others unchanged."""
        if not resource or _is_system(resource):
            return resource
        prefix, rest = _split_prefix(resource)
        if rest.startswith(self._head):
            return prefix + rest[len(self._head):]
        return resource

    def queue(self, mq: MessageQueue | None) -> MessageQueue | None:
        """A queue the user named, as the broker knows it."""
        if mq is None:
            return None
        topic = self.wrap(mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    def user_queue(self, mq: MessageQueue) -> MessageQueue:
        """A broker's queue, named as the user knows it."""
        topic = self.unwrap(mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    def result(self, result: SendResult) -> SendResult:
        """A send's result with its queue named as the user knows it (the route's own queue
        object is never changed: it is shared)."""
        mq = self.user_queue(result.message_queue)
        return result if mq is result.message_queue else dataclasses.replace(result, message_queue=mq)

    def to_user(self, msgs: list[MessageExt]) -> None:
        """Consumed messages named as the user knows them (before the listener)."""
        for m in msgs:
            m.topic = self.unwrap(m.topic)

    def to_broker(self, msgs: list[MessageExt]) -> None:
        """The same messages named as the broker knows them again (after the listener: a
        message sent back for retry names its topic)."""
        for m in msgs:
            m.topic = self.wrap(m.topic)
