"""Queue selectors for ``Producer.send(msg, selector=..., arg=...)``.

A selector is any callable ``(queues, message, arg) -> MessageQueue``; the typical
use is ordered messages: every message of one order id goes to the same queue, so a
consumer sees them in order. ``select_by_hash`` is Java's ``SelectMessageQueueByHash``
with Java's hash codes, so a Python and a Java producer pick the same queue for the
same string or integer key.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Callable

from mqcore.client.message import Message
from mqcore.errors import IllegalArgumentError
from mqcore.format.javahash import hash_code
from mqcore.remoting.bodies import MessageQueue

__all__ = ["MessageQueueSelector", "java_hash_code", "select_by_hash", "select_by_random"]

MessageQueueSelector = Callable[[Sequence[MessageQueue], Message, Any], MessageQueue]


def java_hash_code(arg: Any) -> int:
    """``arg.hashCode()`` as Java computes it for String, Integer/Long and Boolean."""
    try:
        return hash_code(arg)
    except TypeError:
        raise IllegalArgumentError(
            f"select_by_hash needs a str, bytes or int key, got {type(arg).__name__}") from None


def select_by_hash(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    """``abs(hashCode(arg) % len(queues))`` (Java remainder semantics)."""
    if not queues:
        raise IllegalArgumentError("no queue to select from")
    h = java_hash_code(arg)
    n = len(queues)
    value = abs(h) % n if h >= 0 else abs(-((-h) % n))  # Java: a % b has the sign of a
    return queues[value]


def select_by_random(queues: Sequence[MessageQueue], msg: Message, arg: Any) -> MessageQueue:
    if not queues:
        raise IllegalArgumentError("no queue to select from")
    return queues[random.randrange(len(queues))]
