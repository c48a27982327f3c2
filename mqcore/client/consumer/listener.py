"""Listener results and contexts for push consumers.

A concurrent listener is ``listener(messages, context) -> ConsumeConcurrentlyStatus``;
an orderly one is ``listener(messages, context) -> ConsumeOrderlyStatus``. Both are
called on consume threads with up to ``consume_message_batch_max_size`` messages
(default 1).

Returning ``None`` counts as success (the natural Python "nothing to report"; Java
treats a null return as a failure). Raising an exception counts as failure: a
concurrent consumer sends the messages back for a later retry
(``RECONSUME_LATER``), an orderly one suspends the queue for a moment and retries
locally (``SUSPEND_CURRENT_QUEUE_A_MOMENT``).
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from typing import Any

from mqcore.client.message import MessageExt
from mqcore.remoting.bodies import MessageQueue

__all__ = [
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "ConcurrentListener",
    "OrderlyListener",
]


class ConsumeConcurrentlyStatus(str, enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    SUCCESS = "CONSUME_SUCCESS"  # alias


class ConsumeOrderlyStatus(str, enum.Enum):
    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclasses.dataclass(slots=True)
class ConsumeConcurrentlyContext:
    """``delay_level_when_next_consume``: 0 lets the broker pick (3 + reconsume
    times), -1 sends failed messages straight to the DLQ, n > 0 picks level n.
    ``ack_index``: on success, messages after this index are still retried."""

    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = 2**31 - 1


@dataclasses.dataclass(slots=True)
class ConsumeOrderlyContext:
    """``suspend_current_queue_time_ms``: back-off for this failure (-1 = the
    consumer's ``suspend_current_queue_time_ms``)."""

    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_ms: int = -1


ConcurrentListener = Callable[[list[MessageExt], ConsumeConcurrentlyContext], Any]
OrderlyListener = Callable[[list[MessageExt], ConsumeOrderlyContext], Any]
