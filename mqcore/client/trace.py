"""Message traces sent off the hot path, as Apache's ``AsyncTraceDispatcher`` does.

A traced producer encodes a send's Pub record once its answer is in (a sync send after it
returns, an async one in its completion hook, an auto-batched one as one entry for its
messages) and appends it to a bounded queue; a dispatcher thread joins the records into a
trace message until it holds ``BATCH_RECORDS`` (or ``FLUSH_INTERVAL_S`` passes without that
many) and sends it async through a producer of its own to the trace topic. The message's keys
are the traced messages' ids and keys, so ``queryMsgTraceById`` (which looks a trace up by
key) finds every record about a message. A full queue drops the record (counted): tracing
never fails the traced send.
"""
from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mqcore.client.loop import settled_outcome
from mqcore.client.message import SendStatus
from mqcore.message import Prop
from mqcore.format.trace import CONTENT_SEPARATOR, FIELD_SEPARATOR, TraceRecord, encode_record, pub_context, pub_parts

if TYPE_CHECKING:
    from mqcore.client.message import Message, SendResult

__all__ = ["TraceDispatcher"]

log = logging.getLogger(__name__)

#: AsyncTraceDispatcher's defaults: 2048 contexts queued at most, a batch at most 128 KiB,
#: sent at least every 500 ms. Its 100 records per trace message is 400 here: a trace message
#: costs the client and the broker ~0.15 ms each whatever it holds, a third of tracing's cost
#: for an auto-batching producer at 100 (bench/bench_trace.py); readers take any count.
QUEUE_SIZE = 2048
BATCH_RECORDS = 400
BATCH_BYTES = 128 * 1024
#: the trace message's KEYS (every record's message id and keys) at most this long: a
#: record's properties are at most 32,767 bytes (their length is a 2-byte field)
BATCH_KEY_BYTES = 16 * 1024
#: a message id (32 hex digits) and its separator in KEYS
_ID_KEY_BYTES = 33
FLUSH_INTERVAL_S = 0.5
#: (region, topic, tags, broker) Pub parts kept at most (``TraceDispatcher._contexts``)
MAX_CONTEXTS = 1024
#: the dispatcher gives up the GIL every this many records: the traced threads wait for it
#: (an answer read, a send woken) while it formats a trace message, for as long as Python's
#: switch interval (5 ms) would otherwise let it keep it
YIELD_EVERY = 8
_SEND_OK = SendStatus.SEND_OK
#: marks a queued auto-batched send (one entry for all of its messages)
_BATCH = object()


class TraceDispatcher:
    """Batches trace records and sends them to ``trace_topic`` from its own thread."""

    def __init__(self, namesrv_addr: str, trace_topic: str, group: str, make_producer: Callable[[str, str], Any],
                 store_host: Callable[[str], str] = lambda name: name, in_flight: int = 0) -> None:
        """``make_producer(group, namesrv_addr)``: the dispatcher's own producer, not traced
        (the client's Producer class, given by its users: this module sits below them).
        ``in_flight``: how many async sends the producer keeps unanswered, whose records wait
        in the queue for their answers: the queue holds that many more."""
        self._make_producer = make_producer
        self._capacity = QUEUE_SIZE + in_flight
        self.trace_topic = trace_topic
        self._store_host = store_host
        self.group = group
        self._namesrv_addr = namesrv_addr
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._producer: Any = None
        #: the trace message being filled: its records' texts, its keys, their count and bytes
        self._parts: list[str] = []
        self._keys: list[str] = []
        self._records = self._size = self._key_bytes = 0
        #: records pushed (the wake-up count)
        self._pushed = 0
        #: the Pub parts of each (region, topic, tags, broker) sent to (``pub_context``); forgotten
        #: at each trace message sent, so a broker's new address shows within a message
        self._contexts: dict[tuple[str, str, str, str], tuple[str, str, str]] = {}
        #: the last one used, with its key: (topic, tags, broker, region, context)
        self._last_context: tuple[Any, ...] = ("", "", "", "", ("", "", ""))
        #: trace messages sent and not answered yet
        self._in_flight: set[concurrent.futures.Future[Any]] = set()
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
        concurrent.futures.wait(list(self._in_flight), timeout=10)
        if self._producer is not None:
            self._producer.shutdown()

    def append(self, record: TraceRecord, body_length: int = 0) -> None:
        self._push((record, body_length))

    def _push(self, item: tuple[Any, ...]) -> None:
        # a length check and an append; the dispatcher is woken once per full batch
        queue = self._queue
        if len(queue) >= self._capacity:
            self.dropped += 1
            return
        queue.append(item)
        # counted, not measured by the queue's length, which the dispatcher empties while
        # records come (a lost update of two threads pushing at once moves a wake-up by one)
        pushed = self._pushed + 1
        self._pushed = pushed
        if pushed % BATCH_RECORDS == 0:
            self._wake.set()

    def trace_send(self, msg: Message, result: SendResult | None, begin_ms: int, error: BaseException | None) -> None:
        """The Pub record of one send (``SendMessageTraceHookImpl``). A send without an answer
        has no message id to find it by: none."""
        if result is not None and result.msg_id:
            self._push_pub(msg, result, begin_ms, int(time.time() * 1000))

    def trace_settled(self, msg: Message, future: concurrent.futures.Future[Any], begin_ms: int) -> None:
        """The Pub record of an async send whose ``future`` has just been settled (its
        completion hook calls this on the thread that settled it). An unanswered send gives none."""
        result, error = settled_outcome(future)
        if error is None and result.msg_id:
            self._push_pub(msg, result, begin_ms, int(time.time() * 1000))

    def _push_pub(self, msg: Message, result: SendResult, begin_ms: int, end_ms: int) -> None:
        """Queue a send's Pub record, encoded here (``(text, msg_id, keys)``).

        Why on the sending thread, not the dispatcher's: the message and its result are in this
        core's cache now; read by the dispatcher on the other core, the same formatting cost
        twice as much (3 against 1.7 us a record, 1000 async sends in flight), and all of it is
        Python under the one GIL, so it is what tracing takes from the traced producer."""
        props = msg._properties  # KEYS is already the space-separated string the record carries
        tags = props.get(Prop.TAGS) or ""
        topic = msg.topic
        broker_name = result.message_queue.broker_name
        region = result.region_id or "DefaultRegion"
        last = self._last_context  # a producer's sends mostly share one: no key tuple, no hash
        if last[0] == topic and last[1] == tags and last[2] == broker_name and last[3] == region:
            a, b, c = last[4]
        else:
            shared = (topic, tags, broker_name, region)
            context = self._contexts.get(shared)
            if context is None:
                if len(self._contexts) > MAX_CONTEXTS:
                    self._contexts.clear()
                context = self._contexts[shared] = pub_context(region, self.group, topic, tags,
                                                               self._store_host(broker_name))
            self._last_context = (topic, tags, broker_name, region, context)
            a, b, c = context
        keys = props.get(Prop.KEYS) or ""
        msg_id = result.msg_id
        s = CONTENT_SEPARATOR  # format.trace.encode_pub's format, the shared parts formatted once
        self._push((f"Pub{s}{begin_ms}{a}{msg_id}{b}{keys}{c}{len(msg.body)}{s}{end_ms - begin_ms}{s}0{s}"
                    f"{result.offset_msg_id}{s}{'true' if result.status is _SEND_OK else 'false'}{FIELD_SEPARATOR}",
                    msg_id, keys))

    def trace_batch(self, topic: str, tags: str | None, uniq_ids: list[str], result: SendResult,
                    begin_ms: int) -> None:
        """The Pub records of an auto-batched send's messages: each under its own message id and
        offset id, so ``queryMsgTraceById`` finds every one (Apache's client, whose batches are
        the user's, writes one record for a batch). The batch keeps no message's keys or body
        size: those fields are empty and 0 here."""
        if result.ok or result.msg_id:
            self._push((_BATCH, topic, tags, uniq_ids, result, begin_ms, int(time.time() * 1000), None))

    def _batch_pubs(self, item: tuple[Any, ...], room: int, parts: list[str],
                    keys: list[str]) -> tuple[int, int, tuple[Any, ...] | None]:
        """The Pub records of a queued auto-batched send, at most ``room`` of them, into
        ``parts`` (their message ids into ``keys``): how many, their bytes, and the item of
        the records left (None: none left)."""
        _, topic, tags, uniq_ids, result, begin_ms, end_ms, offset_ids = item
        if offset_ids is None:
            offset_ids = result.offset_msg_ids
            offset_ids += [result.offset_msg_id] * (len(uniq_ids) - len(offset_ids))
        head, middle, tail = pub_parts(begin_ms, result.region_id or "DefaultRegion", self.group, topic, tags or "",
                                       "", self._store_host(result.message_queue.broker_name), 0,
                                       end_ms - begin_ms, 0, result.ok)
        take = uniq_ids[:room]
        for msg_id, offset_id in zip(take, offset_ids):
            parts += (head, msg_id, middle, offset_id, tail)
        keys += take
        nbytes = len(take) * (len(head) + len(middle) + len(tail) + len(take[0]) + len(offset_ids[0])) if take else 0
        if len(uniq_ids) > room:
            return len(take), nbytes, (_BATCH, topic, tags, uniq_ids[room:], result, begin_ms, end_ms,
                                       offset_ids[room:])
        return len(take), nbytes, None

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
            woken = self._wake.wait(FLUSH_INTERVAL_S)
            self._wake.clear()
            stopping = self._stopping  # the producer has shut down: its async sends are answered or failed
            while self._fill():  # full trace messages while records keep coming
                self._flush()
            if not woken or stopping:  # FLUSH_INTERVAL_S without a full one: what there is
                self._flush()
            if stopping:
                return

    def _fill(self) -> bool:
        """Move queued records into the trace message being filled; True when it is full.

        Why a message is filled across wake-ups rather than sent with what the queue holds:
        sent at once, a traced sync producer's records went out ~12 to a message (the queue
        refills while one is being sent), and the dispatcher was busy for as long as the
        producer; Apache's dispatcher also waits for a full batch or a quiet interval."""
        parts, keys = self._parts, self._keys
        queue = self._queue
        # the loop's state in locals, written back when it stops (attribute updates per record
        # were a fifth of its cost)
        records, size, key_bytes = self._records, self._size, self._key_bytes
        full = True
        pause = YIELD_EVERY
        try:
            while records < BATCH_RECORDS and size < BATCH_BYTES and key_bytes < BATCH_KEY_BYTES:
                if not queue:
                    full = False
                    break
                pause -= 1
                if not pause:  # let a thread waiting for the GIL have it (see YIELD_EVERY)
                    pause = YIELD_EVERY
                    time.sleep(0)
                item = queue.popleft()
                kind = len(item)
                if kind == 3:  # a send's record, encoded: (text, msg_id, keys)
                    text, msg_id, record_keys = item
                elif kind == 2:  # a consumer's record
                    record, body_length = item
                    text, msg_id = encode_record(record, body_length=body_length), record.msg_id
                    record_keys = record.keys or ""
                else:  # an auto-batched send: as many of its records as the trace message takes
                    room = min(BATCH_RECORDS - records, (BATCH_KEY_BYTES - key_bytes) // _ID_KEY_BYTES + 1)
                    taken, nbytes, rest = self._batch_pubs(item, room, parts, keys)
                    if rest is not None:
                        queue.appendleft(rest)
                    records += taken
                    size += nbytes
                    key_bytes += taken * _ID_KEY_BYTES
                    continue
                parts.append(text)
                records += 1
                size += len(text)
                keys.append(msg_id)
                key_bytes += len(msg_id) + 1
                if record_keys:
                    keys += record_keys.split()
                    key_bytes += len(record_keys) + 1
        finally:
            self._records, self._size, self._key_bytes = records, size, key_bytes
        return full

    def _flush(self) -> None:
        """Send the trace message filled so far (if it holds a record) and start a new one."""
        from mqcore.client.message import Message
        records = self._records
        if not records:
            return
        msg = Message(self.trace_topic, "".join(self._parts).encode())
        msg.keys = " ".join(dict.fromkeys(self._keys))
        self._parts, self._keys, self._records, self._size, self._key_bytes = [], [], 0, 0, 0
        self._contexts = {}
        self._last_context = ("", "", "", "", ("", "", ""))
        # sent async, as Apache's dispatcher does: one at a time, a busy broker's answer time
        # (~0.6 ms) capped the dispatcher below a batching producer's rate and records queued up
        try:
            future = self._producer.send_async(msg)
        except Exception as e:  # a trace that cannot be sent is lost, never the traced send's failure
            self._not_sent(records, e)
            return
        self._in_flight.add(future)
        future.add_done_callback(functools.partial(self._sent, records))

    def _sent(self, records: int, future: concurrent.futures.Future[Any]) -> None:
        self._in_flight.discard(future)
        error = future.exception() if not future.cancelled() else concurrent.futures.CancelledError()
        if error is None:
            self.sent_records += records
        else:
            self._not_sent(records, error)

    def _not_sent(self, records: int, error: BaseException) -> None:
        log.warning("trace batch of %d records to %s not sent: %s", records, self.trace_topic, error)

    def catch_up(self) -> bool:
        """Wake the dispatcher for what waits (as the producer's next records would); True when
        no trace message is in flight and nothing waits but a trace message not full yet (it
        waits for more records or ``FLUSH_INTERVAL_S``): the dispatcher keeps up."""
        if not self._in_flight and not self._queue and self._records < BATCH_RECORDS:
            return True
        self._wake.set()
        return False
