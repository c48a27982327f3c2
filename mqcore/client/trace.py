"""Message traces sent off the hot path, as Apache's ``AsyncTraceDispatcher`` does.

A traced producer appends one ``TraceRecord`` per send to a bounded queue (a deque append:
the only cost on the sending thread); a dispatcher thread takes what has accumulated and
sends it in batches, one trace message per batch, through a producer of its own to the trace
topic. The message's keys are the traced messages' ids and keys, so ``queryMsgTraceById``
(which looks a trace up by key) finds every record about a message. A full queue drops the
record (counted): tracing never slows or fails the traced send.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mqcore.message import Prop
from mqcore.client.trace_format import TraceRecord, encode_pub, encode_record

if TYPE_CHECKING:
    from mqcore.client.message import Message, SendResult

__all__ = ["TraceDispatcher"]

log = logging.getLogger(__name__)

#: AsyncTraceDispatcher's defaults: 2048 contexts queued at most, 100 per trace message,
#: a batch at most 128 KiB, sent at least every 500 ms
QUEUE_SIZE = 2048
BATCH_RECORDS = 100
BATCH_BYTES = 128 * 1024
FLUSH_INTERVAL_S = 0.5
#: marks a queued auto-batched send (one entry for all of its messages)
_BATCH = object()
#: marks one record of such a send, already encoded: (_TEXT, text, msg id, keys)
_TEXT = object()


class TraceDispatcher:
    """Batches trace records and sends them to ``trace_topic`` from its own thread."""

    def __init__(self, namesrv_addr: str, trace_topic: str, group: str, make_producer: Callable[[str, str], Any],
                 store_host: Callable[[str], str] = lambda name: name) -> None:
        """``make_producer(group, namesrv_addr)``: the dispatcher's own producer, not traced
        (the client's Producer class, given by its users: this module sits below them)."""
        self._make_producer = make_producer
        self.trace_topic = trace_topic
        self._store_host = store_host
        self.group = group
        self._namesrv_addr = namesrv_addr
        self._queue: collections.deque[tuple[TraceRecord, int]] = collections.deque()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._producer: Any = None
        self.dropped = 0
        self.sent_records = 0

    def start(self) -> None:
        self._producer = self._make_producer(f"_INNER_TRACE_PRODUCER-{self.trace_topic}-{id(self):x}",
                                             self._namesrv_addr).start()
        self._thread = threading.Thread(target=self._run, name="mqcore-trace-dispatcher", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        """Send what is queued, then stop."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(30)
        if self._producer is not None:
            self._producer.shutdown()

    def append(self, record: TraceRecord, body_length: int = 0) -> None:
        self._push((record, body_length))

    def _push(self, item: tuple[Any, ...]) -> None:
        # the traced thread's whole cost: a length check and an append (the record is built and
        # encoded on the dispatcher's thread); the dispatcher is woken once per full batch
        queue = self._queue
        n = len(queue)
        if n >= QUEUE_SIZE:
            self.dropped += 1
            return
        queue.append(item)
        if n + 1 == BATCH_RECORDS:
            self._wake.set()

    def trace_send(self, msg: Message, result: SendResult | None, begin_ms: int, error: BaseException | None) -> None:
        """The Pub record of one send (``SendMessageTraceHookImpl``), built later on the
        dispatcher's thread. A send without an answer has no message id to find it by: none."""
        if result is not None and result.msg_id:
            self._push((msg, result, begin_ms, int(time.time() * 1000)))

    def trace_batch(self, topic: str, tags: str | None, uniq_ids: list[str], result: SendResult,
                    begin_ms: int) -> None:
        """The Pub records of an auto-batched send's messages: each under its own message id and
        offset id, so ``queryMsgTraceById`` finds every one (Apache's client, whose batches are
        the user's, writes one record for a batch). The batch keeps no message's keys or body
        size: those fields are empty and 0 here."""
        if result.ok or result.msg_id:
            self._push((_BATCH, topic, tags, uniq_ids, result, begin_ms, int(time.time() * 1000)))

    def _batch_texts(self, topic: str, tags: str | None, uniq_ids: list[str], result: SendResult, begin_ms: int,
                     end_ms: int) -> list[tuple[str, str, str]]:
        offset_ids = result.offset_msg_ids
        offset_ids += [result.offset_msg_id] * (len(uniq_ids) - len(offset_ids))
        host = self._store_host(result.message_queue.broker_name)
        region = result.region_id or "DefaultRegion"
        cost = end_ms - begin_ms
        return [(encode_pub(begin_ms, region, self.group, topic, msg_id, tags or "", "", host, 0, cost, 0,
                            offset_id, result.ok), msg_id, "")
                for msg_id, offset_id in zip(uniq_ids, offset_ids)]

    def _pub_text(self, msg: Message, result: SendResult, begin_ms: int, end_ms: int) -> tuple[str, str, str]:
        """The Pub record of a queued send, encoded; its message id and keys (the trace message's keys)."""
        props = msg._properties  # KEYS is already the space-separated string the record carries
        keys = props.get(Prop.KEYS) or ""
        text = encode_pub(begin_ms, result.region_id or "DefaultRegion", self.group, msg.topic, result.msg_id,
                          props.get(Prop.TAGS) or "", keys, self._store_host(result.message_queue.broker_name),
                          len(msg.body), end_ms - begin_ms, 0, result.offset_msg_id, result.ok)
        return text, result.msg_id, keys

    def traced_listener(self, listener: Callable[..., Any]) -> Callable[..., Any]:
        """``listener`` recording SubBefore before and SubAfter after each call
        (``ConsumeMessageTraceHookImpl``); one request id ties a call's records together."""
        import uuid

        def traced(msgs: list[Any], context: Any) -> Any:
            request_id = uuid.uuid4().hex.upper()
            begin = int(time.time() * 1000)
            for m in msgs:
                self.append(TraceRecord("SubBefore", m.msg_id, begin, self.group, keys=" ".join(m.keys),
                                        request_id=request_id, retry_times=m.reconsume_times,
                                        region_id="DefaultRegion"))
            status: Any = None
            try:
                status = listener(msgs, context)
                return status
            finally:
                end = int(time.time() * 1000)
                # CONSUME_SUCCESS / SUCCESS (orderly); None, a raise or a retry status is a failure
                ok = status is not None and str(getattr(status, "value", status)) in ("CONSUME_SUCCESS", "SUCCESS")
                cost = (end - begin) // max(1, len(msgs))
                for m in msgs:
                    self.append(TraceRecord("SubAfter", m.msg_id, end, self.group, cost, ok, keys=" ".join(m.keys),
                                            request_id=request_id, context_code=0 if ok else 1))
        return traced

    def _run(self) -> None:
        while True:
            self._wake.wait(FLUSH_INTERVAL_S)
            self._wake.clear()
            while self._queue:
                self._send_batch()
            if self._stopping:
                return

    def _send_batch(self) -> None:
        from mqcore.client.message import Message
        parts: list[str] = []
        keys: list[str] = []
        size = 0
        while self._queue and len(parts) < BATCH_RECORDS and size < BATCH_BYTES:
            item = self._queue.popleft()
            if len(item) == 2:  # a consumer's record
                record, body_length = item
                texts = [(encode_record(record, body_length=body_length), record.msg_id, record.keys)]
            elif item[0] is _BATCH:  # an auto-batched send: its records go first, within the batch limits
                self._queue.extendleft((_TEXT, *t) for t in reversed(self._batch_texts(*item[1:])))
                continue
            elif item[0] is _TEXT:
                texts = [item[1:]]
            else:  # a send: (msg, result, begin, end)
                texts = [self._pub_text(*item)]
            for text, msg_id, record_keys in texts:
                parts.append(text)
                size += len(text)
                keys.append(msg_id)
                if record_keys:
                    keys.extend(record_keys.split())
        msg = Message(self.trace_topic, "".join(parts).encode())
        msg.keys = list(dict.fromkeys(keys))
        try:
            self._producer.send(msg)
            self.sent_records += len(parts)
        except Exception as e:  # a trace that cannot be sent is lost, never the traced send's failure
            log.warning("trace batch of %d records to %s not sent: %s", len(parts), self.trace_topic, e)
