"""mqcore.client: a pure-Python RocketMQ 4.x client.

Speaks the RocketMQ 4.x remoting protocol, so it works with ``mqbroker`` and with an
Apache RocketMQ 4.9 cluster. The blocking API runs on the client's own event-loop
thread and works from any thread; ``Producer.asend`` is the asyncio entry point.

::

    from mqcore.client import Producer, PushConsumer, Message

    with Producer("pg", namesrv_addr="127.0.0.1:9876") as p:
        print(p.send(Message("TopicTest", b"hello", tags="TagA", keys=["k1"])))
"""
from mqcore.client.config import (
    ClientConfig,
    ConsumeFromWhere,
    LitePullConsumerConfig,
    MessageModel,
    ProducerConfig,
    PullConsumerConfig,
    PushConsumerConfig,
)
from mqcore.client.consumer import (
    AllocateAveragely,
    AsyncLitePullConsumer,
    AsyncPushConsumer,
    AllocateAveragelyByCircle,
    AllocateByConfig,
    AllocateByMachineRoom,
    AllocateConsistentHash,
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    LitePullConsumer,
    MemoryIdempotentStore,
    PullConsumer,
    PushConsumer,
    SqliteIdempotentStore,
    idempotent,
)
from mqcore.client.message import (
    Message,
    MessageExt,
    MessageQueue,
    PullResult,
    PullStatus,
    SendResult,
    SendStatus,
)
from mqcore.client.producer import Producer
from mqcore.client.request import ReplyMessage, RequestTimeoutError, create_reply_message
from mqcore.client.selector import select_by_hash, select_by_random
from mqcore.client.transaction import LocalTransactionState, TransactionProducer, TransactionSendResult

#: short alias: ``return ConsumeStatus.RECONSUME_LATER``
ConsumeStatus = ConsumeConcurrentlyStatus

__all__ = [
    "Producer",
    "create_reply_message",
    "ReplyMessage",
    "RequestTimeoutError",
    "TransactionProducer",
    "LocalTransactionState",
    "TransactionSendResult",
    "PushConsumer",
    "AsyncPushConsumer",
    "AsyncLitePullConsumer",
    "LitePullConsumer",
    "PullConsumer",
    "Message",
    "MessageExt",
    "MessageQueue",
    "SendResult",
    "SendStatus",
    "PullResult",
    "PullStatus",
    "ConsumeStatus",
    "ConsumeConcurrentlyStatus",
    "ConsumeOrderlyStatus",
    "ConsumeConcurrentlyContext",
    "ConsumeOrderlyContext",
    "MessageModel",
    "ConsumeFromWhere",
    "ClientConfig",
    "ProducerConfig",
    "PushConsumerConfig",
    "LitePullConsumerConfig",
    "PullConsumerConfig",
    "AllocateAveragely",
    "AllocateAveragelyByCircle",
    "AllocateConsistentHash",
    "AllocateByMachineRoom",
    "AllocateByConfig",
    "MemoryIdempotentStore",
    "SqliteIdempotentStore",
    "idempotent",
    "select_by_hash",
    "select_by_random",
]
