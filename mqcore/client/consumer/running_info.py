"""What a push consumer answers when the broker forwards a tool's GET_CONSUMER_RUNNING_INFO (307)
or CONSUME_MESSAGE_DIRECTLY (309), in the shapes of RocketMQ's ``ConsumerRunningInfo`` and
``ConsumeMessageDirectlyResult`` (``mqadmin consumerStatus`` / ``queryMsgById -g -d``).

Running info: ``properties`` (the consumer's settings under their Java names, plus the
``PROP_*`` facts), ``subscriptionSet``, ``mqTable`` (each owned queue's process-queue state, keyed
by MessageQueue objects as fastjson writes them), ``statusTable`` (``stats.ConsumerStats``) and,
when asked for, ``jstack`` (every thread's Python stack).

Direct consumption runs the consumer's own listener on one message on a consume thread and
reports its outcome; nothing is committed or sent back (as in RocketMQ).
"""
from __future__ import annotations

import dataclasses
import enum
import sys
import threading
import time
import traceback
from typing import Any

from mqcore.client.consumer.listener import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
)
from mqcore.client.message import MessageExt
from mqcore.jsonutil import dumps_compact

_MIB = 1024 * 1024


def java_name(field: str) -> str:
    """``pull_threshold_size_for_queue_mib`` -> ``pullThresholdSizeForQueueMib``."""
    head, *rest = field.split("_")
    return head + "".join(w[:1].upper() + w[1:] for w in rest)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, enum.Enum):
        return str(value.value)
    return str(value)


#: settings never reported to a tool (credentials)
_SECRET = frozenset({"access_key", "secret_key", "security_token"})


def properties(consumer: Any, namesrv_addr: str, client_version: str) -> dict[str, str]:
    """The consumer's settings (unset ones left out, as Java's ``object2Properties`` leaves out
    nulls; credentials never) and the ``PROP_*`` facts."""
    cfg = consumer.config
    out = {java_name(f.name): _text(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)
           if f.name not in _SECRET and getattr(cfg, f.name) is not None}
    out.update({"PROP_NAMESERVER_ADDR": namesrv_addr, "PROP_CONSUME_TYPE": consumer.consume_type,
                "PROP_CONSUMEORDERLY": _text(bool(consumer.orderly)),
                "PROP_THREADPOOL_CORE_SIZE": str(cfg.consume_thread_min),
                "PROP_CONSUMER_START_TIMESTAMP": str(consumer.start_timestamp),
                "PROP_CLIENT_VERSION": client_version})
    return out


def process_queue_info(pq: Any, commit_offset: int) -> dict[str, Any]:
    """``ProcessQueueInfo`` of one owned queue."""
    lo, hi = pq.cached_offsets()
    return {"cachedMsgCount": pq.msg_count, "cachedMsgMaxOffset": hi, "cachedMsgMinOffset": lo,
            "cachedMsgSizeInMiB": pq.msg_size // _MIB, "commitOffset": commit_offset, "droped": pq.dropped,
            "lastConsumeTimestamp": pq.last_consume_timestamp, "lastLockTimestamp": pq.last_lock_timestamp,
            "lastPullTimestamp": pq.last_pull_timestamp, "locked": pq.locked, "transactionMsgCount": 0,
            "transactionMsgMaxOffset": 0, "transactionMsgMinOffset": 0, "tryUnlockTimes": pq.try_unlock_times}


def jstack() -> str:
    """Every thread's stack, named as ``Thread.name``."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f'"{names.get(ident, ident)}"\n' + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def running_info_body(consumer: Any, namesrv_addr: str, client_version: str, with_jstack: bool) -> bytes:
    """``ConsumerRunningInfo`` as JSON (fastjson's object keys for ``mqTable``)."""
    table = consumer.rebalance.process_queue_table
    pairs = []
    for mq, pq in sorted(list(table.items()), key=lambda kv: (kv[0].topic, kv[0].broker_name, kv[0].queue_id)):
        commit = max(consumer.offset_store.read_offset_memory(mq), 0)
        pairs.append(dumps_compact(mq.to_json_obj()).decode() + ":"
                     + dumps_compact(process_queue_info(pq, commit)).decode())
    subs = sorted((s.to_json_obj() for s in consumer.rebalance.subscription_inner.values()), key=lambda s: s["topic"])
    parts = ['"mqTable":{' + ",".join(pairs) + "}",
             '"properties":' + dumps_compact(properties(consumer, namesrv_addr, client_version)).decode(),
             '"statusTable":' + dumps_compact(consumer.stats.status_table(
                 [s["topic"] for s in subs])).decode(),
             '"subscriptionSet":' + dumps_compact(subs).decode()]
    if with_jstack:
        parts.insert(0, '"jstack":' + dumps_compact(jstack()).decode())
    return ("{" + ",".join(parts) + "}").encode()


def consume_directly(consumer: Any, msg: MessageExt, broker_name: str | None) -> dict[str, Any]:
    """Run the listener on ``msg`` (a consume thread): ``ConsumeMessageDirectlyResult``."""
    consumer.reset_retry_topic([msg])
    if broker_name:
        msg.broker_name = broker_name
    mq = msg.message_queue
    listener = consumer.consume_service.listener
    began = time.monotonic()
    remark = None
    if consumer.orderly:
        octx = ConsumeOrderlyContext(mq)
        try:
            status = listener([msg], octx)
            result = {None: "CR_RETURN_NULL", ConsumeOrderlyStatus.SUCCESS: "CR_SUCCESS",
                      ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: "CR_LATER"}.get(status, "CR_LATER")
        except Exception as e:  # the listener's failure is the answer
            result, remark = "CR_THROW_EXCEPTION", "".join(traceback.format_exception(e))
        auto_commit = octx.auto_commit
    else:
        cctx = ConsumeConcurrentlyContext(mq)
        try:
            status = listener([msg], cctx)
            result = {None: "CR_RETURN_NULL", ConsumeConcurrentlyStatus.CONSUME_SUCCESS: "CR_SUCCESS",
                      ConsumeConcurrentlyStatus.RECONSUME_LATER: "CR_LATER"}.get(status, "CR_LATER")
        except Exception as e:  # the listener's failure is the answer
            result, remark = "CR_THROW_EXCEPTION", "".join(traceback.format_exception(e))
        auto_commit = True
    out: dict[str, Any] = {"autoCommit": auto_commit, "consumeResult": result, "order": bool(consumer.orderly),
                           "spentTimeMills": int((time.monotonic() - began) * 1000)}
    if remark is not None:
        out["remark"] = remark
    return out
