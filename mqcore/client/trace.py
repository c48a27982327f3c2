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

from mqcore.client.trace_format import TraceRecord, encode_record

if TYPE_CHECKING:
    from mqcore.client.message import Message, SendResult

__all__ = ["TraceDispatcher"]

log = logging.getLogger(__name__)

#: AsyncTraceDispatcher's defaults: 1024 contexts queued at most, 100 per trace message,
#: a batch at most 128 KiB, sent at least every 500 ms
QUEUE_SIZE = 1024
BATCH_RECORDS = 100
BATCH_BYTES = 128 * 1024
FLUSH_INTERVAL_S = 0.5


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
        if len(self._queue) >= QUEUE_SIZE:
            self.dropped += 1
            return
        self._queue.append((record, body_length))
        if len(self._queue) >= BATCH_RECORDS:
            self._wake.set()

    def trace_send(self, msg: Message, result: SendResult | None, begin_ms: int, error: BaseException | None) -> None:
        """The Pub record of one send (``SendMessageTraceHookImpl``)."""
        now = int(time.time() * 1000)
        keys = " ".join(msg.keys)
        if result is None:
            record = TraceRecord("Pub", "", begin_ms, self.group, now - begin_ms, False, topic=msg.topic,
                                 tags=msg.tags or "", keys=keys)
        else:
            record = TraceRecord("Pub", result.msg_id, begin_ms, self.group, now - begin_ms, result.ok,
                                 topic=msg.topic, tags=msg.tags or "", keys=keys,
                                 store_host=self._store_host(result.message_queue.broker_name),
                                 offset_msg_id=result.offset_msg_id, region_id=result.region_id or "DefaultRegion")
        if record.msg_id:
            self.append(record, len(msg.body))

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
            record, body_length = self._queue.popleft()
            text = encode_record(record, body_length=body_length)
            parts.append(text)
            size += len(text)
            keys.append(record.msg_id)
            if record.keys:
                keys.extend(record.keys.split())
        msg = Message(self.trace_topic, "".join(parts).encode())
        msg.keys = list(dict.fromkeys(keys))
        try:
            self._producer.send(msg)
            self.sent_records += len(parts)
        except Exception as e:  # a trace that cannot be sent is lost, never the traced send's failure
            log.warning("trace batch of %d records to %s not sent: %s", len(parts), self.trace_topic, e)
