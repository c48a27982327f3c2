"""Java's ``toString`` of the objects Apache's mqadmin prints as they are (``consumeMessage``
prints a ``MessageQueue`` and a whole ``MessageExt``), and the order a Java ``HashSet`` of
message queues iterates in (the tool walks ``fetchSubscribeMessageQueues``' set), so mqcore's
tool prints what Apache's does, line for line."""
from __future__ import annotations

from collections.abc import Iterable

from mqcore.client.message import MessageExt, MessageQueue
from mqcore.format.javahash import fields_hash, string_hash
from mqcore.jsonutil import java_hash_order, java_hashmap_order


def mq_text(mq: MessageQueue) -> str:
    """``MessageQueue.toString``."""
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


def mq_hash(mq: MessageQueue) -> int:
    """``MessageQueue.hashCode`` (Eclipse's generated one: 31-fold over brokerName, queueId, topic)."""
    return fields_hash(string_hash(mq.broker_name), mq.queue_id, string_hash(mq.topic))


def hash_set_order(queues: Iterable[MessageQueue]) -> list[MessageQueue]:
    """The queues as a ``HashSet<MessageQueue>`` filled in this order iterates them."""
    return java_hash_order(list(queues), mq_hash)


def _host(addr: str) -> str:
    """``InetSocketAddress.toString`` of an IP address: ``/127.0.0.1:10911``."""
    return addr if addr.startswith("/") else f"/{addr}"


def _java_bytes(body: bytes) -> str:
    """``Arrays.toString(byte[])``: signed bytes."""
    return "[" + ", ".join(str(b - 256 if b > 127 else b) for b in body) + "]"


def message_ext_text(m: MessageExt) -> str:
    """``MessageExt.toString`` of a pulled message (its ``msgId`` field is the offset id; the
    properties a HashMap's order; no transaction id on a pulled message)."""
    props = "{" + ", ".join(f"{k}={v}" for k, v in java_hashmap_order(m.properties).items()) + "}"
    return (f"MessageExt [brokerName={m.broker_name}, queueId={m.queue_id}, storeSize={m.store_size}, "
            f"queueOffset={m.queue_offset}, sysFlag={m.sys_flag}, bornTimestamp={m.born_timestamp}, "
            f"bornHost={_host(m.born_host)}, storeTimestamp={m.store_timestamp}, storeHost={_host(m.store_host)}, "
            f"msgId={m.offset_msg_id}, commitLogOffset={m.commitlog_offset}, bodyCRC={m.body_crc}, "
            f"reconsumeTimes={m.reconsume_times}, preparedTransactionOffset={m.prepared_transaction_offset}, "
            f"toString()=Message{{topic='{m.topic}', flag={m.flag}, properties={props}, "
            f"body={_java_bytes(m.body)}, transactionId='{m.transaction_id or 'null'}'}}]")
