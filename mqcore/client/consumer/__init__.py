"""Consumers: push (listener), lite pull (``poll()``), low-level pull by queue."""
from mqcore.client.consumer.aio import AsyncLitePullConsumer, AsyncPushConsumer
from mqcore.client.consumer.idempotent import (
    IdempotentStore,
    MemoryIdempotentStore,
    SqliteIdempotentStore,
    idempotent,
)
from mqcore.client.consumer.lite_pull import LitePullConsumer
from mqcore.client.consumer.listener import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
)
from mqcore.client.consumer.pull import PullConsumer
from mqcore.client.consumer.push import PushConsumer
from mqcore.client.consumer.rebalance import (
    AllocateAveragely,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
)

__all__ = [
    "AsyncPushConsumer",
    "AsyncLitePullConsumer",
    "PushConsumer",
    "LitePullConsumer",
    "PullConsumer",
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateConsistentHash",
    "AllocateByMachineRoom",
    "AllocateByConfig",
    "IdempotentStore",
    "MemoryIdempotentStore",
    "SqliteIdempotentStore",
    "idempotent",
]
