"""The put path: validate, rewrite delayed messages, assign queue offsets, append, dispatch.

Everything between "queue offset assigned" and "units dispatched" happens under one
put lock, so queue offsets are consecutive per queue and a consume-queue unit exists
as soon as ``put_*`` returns. Waiting for a SYNC_FLUSH happens after the lock is
released, so concurrent puts share one fsync (group commit).
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import threading
from typing import Any, Callable, Sequence

import numpy as np

from mqcore._compat import default_pipeline_kernels
from mqcore.config import StoreConfig
from mqcore.errors import DiskFullError, RecordDecodeError, StoreIOError
from mqcore.format import layout as L
from mqcore.kernel_api import Buffer, PipelineKernels, PlainSend, StoreKernels
from mqcore.format.names import NAME_CHARS_TEXT, valid_name_bytes
from mqcore.format.properties import separators_only_between
from mqcore.message import (
    SCHEDULE_TOPIC,
    MessageExtBrokerInner,
    Prop,
    host_sys_flag,
    offset_msg_id,
    offset_msg_ids,
    properties_to_bytes,
)
from mqcore.store.commitlog import CommitLog
from mqcore.store.dispatch import Dispatcher
from mqcore.store.mapped_file import MappedFile
from mqcore.store.results import PutMessageResult, PutMessageStatus
from mqcore.store.timer import rewrite as timer_rewrite
from mqcore.format.timer import TIMER_TOPIC

log = logging.getLogger(__name__)

_TX_MASK = L.SYSFLAG_TRANSACTION_MASK
#: after a put failed for want of disk space, puts are refused at once for this long
#: before a new file is tried again (a full disk must not cost a failed fallocate per put)
DISK_FULL_RETRY_MS = 1000
#: a put refused because a new store file could not be opened is logged at most this often
NO_FILE_LOG_INTERVAL_MS = 10_000


def _topic_problem(topic: bytes) -> str | None:
    if not topic:
        return "the topic name is empty"
    if len(topic) > L.MAX_TOPIC_LENGTH:
        return f"the topic name is longer than {L.MAX_TOPIC_LENGTH} characters"
    if not valid_name_bytes(topic):
        return f"the topic name {topic[:60]!r} has characters outside {NAME_CHARS_TEXT}"
    return None


def _refused(status: PutMessageStatus, remark: str) -> PutMessageResult:
    return PutMessageResult(status=status, remark=remark)


@dataclasses.dataclass(slots=True)
class _Prepared:
    """A checked message ready to append (topic and queue after the delay rewrite)."""

    msg: MessageExtBrokerInner
    topic: str
    topic_b: bytes
    queue_id: int
    props_b: bytes
    sys_flag: int
    size: int
    counted: bool   # gets a queue offset (not a transaction half/rollback record)
    wait: bool      # WAIT != false: a SYNC_FLUSH put waits for its fsync
    #: (tags code, index key hashes) known from the properties before encoding, so the
    #: put need not scan the record it just wrote; None: dispatch by scanning (delayed
    #: or transactional records, properties the record would split differently)
    unit: tuple[int, list[int]] | None = None
    #: held in the timer topic until this slot (TIMER_OUT_MS); 0: not a held timer
    timer_out_ms: int = 0


class MessageWriter:
    """Threads: any thread may put; the put lock serialises appends."""

    def __init__(self, config: StoreConfig, commitlog: CommitLog, dispatcher: Dispatcher, kernels: StoreKernels,
                 clock: Callable[[], int], wait_flushed: Callable[[int], bool] | None,
                 pipeline_kernels: PipelineKernels | None = None) -> None:
        self.cfg = config
        self.commitlog = commitlog
        self.dispatcher = dispatcher
        self.k = kernels
        #: ``append_plain``: a send pipeline item's record, unit and index keys in one call
        self.pk = pipeline_kernels if pipeline_kernels is not None else default_pipeline_kernels()
        self.clock = clock
        self.delays = config.delay_levels_ms
        self.timer_policy = timer_rewrite.TimerPolicy(config.timer_wheel_enable, config.timer_max_delay_sec,
                                                      config.timer_precision_ms)
        self.wait_flushed = wait_flushed
        self.lock = threading.Lock()
        #: (topic, queue id) -> next queue offset; rebuilt from consume queues at load
        self.queue_offsets: dict[tuple[str, int], int] = {}
        #: set by the disk cleanup policy / shutdown: puts are refused with this remark
        self.refuse_reason: str | None = None
        #: store time of the newest appended record (checkpoint physicMsgTimestamp)
        self.last_store_timestamp = 0
        #: why the last new store file could not be had (None: no problem); puts are
        #: refused with it until ``_disk_full_until_ms``, then a file is tried again
        self.disk_full_reason: str | None = None
        self._disk_full_until_ms = 0
        #: puts refused because the disk is full (a counter for metrics)
        self.disk_full_refusals = 0
        self._no_file_logged_ms = -NO_FILE_LOG_INTERVAL_MS
        #: the layout numbers the compiled ``StorePlainSends`` needs (the kernel imports nothing)
        self.plain_consts = (L.HOST_V6_BYTES, L.SYSFLAG_BORNHOST_V6, L.SYSFLAG_STOREHOST_V6, L.END_FILE_MIN_BLANK)
        #: ``(items, born_host, store_host) -> (stored, refusal)``: plain sends of the broker's send
        #: pipeline (see ``put_plain_sends_py``), compiled when the pipeline kernels offer it
        compiled = getattr(self.pk, "StorePlainSends", None)
        self.put_plain_sends: Callable[[Sequence[PlainSend], bytes, bytes], tuple[list[tuple[int, int, int]],
                                                                                PutMessageResult | None]] = (
            compiled(self) if compiled is not None else self.put_plain_sends_py)

    def _refusal(self) -> PutMessageResult | None:
        """The refusal every put gets right now, if any (shutdown, cleanup's disk-full flag,
        or a recent failure to create a store file)."""
        if self.refuse_reason:
            return _refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.refuse_reason)
        if self.disk_full_reason is not None and self.clock() < self._disk_full_until_ms:
            self.disk_full_refusals += 1
            return _refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, self.disk_full_reason)
        return None

    def _disk_full_locked(self, e: DiskFullError) -> PutMessageResult:
        if self.disk_full_reason is None:
            log.error("refusing puts: %s (reads continue; retrying every %d ms)", e.strerror, DISK_FULL_RETRY_MS)
        # (every DiskFullError is raised with a message; str(e) would do for one without)
        reason = e.strerror or str(e)
        self.disk_full_reason = reason
        self._disk_full_until_ms = self.clock() + DISK_FULL_RETRY_MS
        self.disk_full_refusals += 1
        return _refused(PutMessageStatus.SERVICE_NOT_AVAILABLE, reason)

    def _no_file_locked(self, e: StoreIOError) -> PutMessageResult:
        """The answer to a put whose new store file could not be opened for another reason
        than a full disk (most often ``EMFILE``: the process's descriptor limit): this put
        is refused (SYSTEM_ERROR, as RocketMQ answers CREATE_MAPEDFILE_FAILED), nothing of
        it is written, and the next put tries again (files that exist still take puts)."""
        hint = " (the process's descriptor limit is reached: raise RLIMIT_NOFILE, ulimit -n)" \
            if e.errno in (errno.EMFILE, errno.ENFILE) else ""
        now = self.clock()
        if now - self._no_file_logged_ms >= NO_FILE_LOG_INTERVAL_MS:  # one line per interval, not per put
            self._no_file_logged_ms = now
            log.warning("a put was refused: %s%s", e.strerror, hint)
        return _refused(PutMessageStatus.CREATE_MAPEDFILE_FAILED, f"create mapped file failed: {e.strerror}{hint}")

    def _appended_locked(self) -> None:
        if self.disk_full_reason is not None:
            log.warning("a new store file could be created again: accepting puts")
            self.disk_full_reason = None

    def _ensure_room_locked(self, p: "_Prepared", count: int = 1) -> None:
        """Create (or reserve) the consume-queue file the units will go to, before the
        commitlog append: raises ``DiskFullError`` while nothing is written yet."""
        if p.counted:
            cq = self.dispatcher.queues.find_or_create(p.topic, p.queue_id)
            cq.ensure_room_locked(self.queue_offsets.get((p.topic, p.queue_id), 0), count)

    # --- state the store façade manages --------------------------------------------------------
    def replace_refusal(self, old: str | None, new: str | None) -> bool:
        """Set the refusal to ``new`` if it is ``old`` now (so one policy never clears another's)."""
        with self.lock:
            if self.refuse_reason != old:
                return False
            self.refuse_reason = new
            return True

    def close(self, reason: str) -> None:
        """Refuse every later put with ``reason`` and return once the puts in flight are done."""
        with self.lock:  # taking the put lock waits for the put holding it
            self.refuse_reason = reason

    def restore_queue_offsets(self, offsets: dict[tuple[str, int], int]) -> None:
        """Next queue offset per (topic, queue id), from the recovered consume queues."""
        with self.lock:
            self.queue_offsets.update(offsets)

    def forget_topic(self, topic: str, remove_files: Callable[[str], None]) -> None:
        """Drop ``topic``'s queue offsets and (via ``remove_files``) its queues, with no put in between."""
        with self.lock:
            remove_files(topic)
            for key in [k for k in self.queue_offsets if k[0] == topic]:
                del self.queue_offsets[key]

    # --- single messages ----------------------------------------------------------------------
    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        refused = self._refusal()
        if refused:
            return refused
        p = self._prepare(msg)
        if isinstance(p, PutMessageResult):
            return p
        with self.lock:
            refused = self._refusal()
            if refused:
                return refused
            try:
                self._ensure_room_locked(p)
                mf, pos, result = self._append_locked(p)
            except DiskFullError as e:
                return self._disk_full_locked(e)
            except StoreIOError as e:
                return self._no_file_locked(e)
            self._appended_locked()
            if p.unit is not None:
                self.dispatcher.dispatch_unit_locked(p.topic, p.queue_id, result.queue_offset, result.phy_offset,
                                                     p.size, p.unit[0], result.store_timestamp, p.unit[1])
            else:
                self._dispatch_locked(mf, pos, pos + p.size, 1)
        return self._wait(result, result.phy_offset + p.size, p.wait)

    def put_plain_sends_py(self, items: Sequence[PlainSend], born_host: bytes,
                           store_host: bytes) -> tuple[list[tuple[int, int, int]], PutMessageResult | None]:
        """``put_plain_sends`` in Python (the twin kernels; with the compiled ones
        ``_pipeline.StorePlainSends`` runs the same steps and calls this for refusals).

        Plain single messages as the broker's send pipeline read them
        (``_pipeline.parse_plain_sends`` items), appended under one hold of the put lock:
        each gets the record, consume-queue unit and index entries ``put_message`` gives for
        the same message (tests/broker/test_send_pipeline.py compares the files). In the
        usual case one kernel call (``append_plain``) writes all three; at a file's end, a
        queue's first unit, a full index file or during recovery bookkeeping the general
        steps do (``_put_plain_locked``).

        The pipeline already knows what ``put_message`` would derive: the record's
        properties (WAIT dropped, CLUSTER added), the tags code and the index key hashes;
        the topic is a valid name, the queue id >= 0, there are no transaction bits and
        no delay, and no SYNC_FLUSH wait is wanted (``wait_flushed`` is None).

        Returns ``(queue_offset, phy_offset, size)`` per stored item, in order, and the
        refusal every put gets now, if that is what stopped it (None otherwise). Appending
        stops at the first item it cannot store exactly as ``put_message`` would (a body or
        record over the limits, a refusal): nothing of it or the items after it is written,
        and the caller hands them to the general path, which answers them."""
        stored: list[tuple[int, int, int]] = []
        if self.wait_flushed is not None or not items:
            return stored, None
        refused = self._refusal()
        if refused:
            return stored, refused
        host_flag = host_sys_flag(born_host, store_host)
        max_body = self.cfg.max_message_size_bytes
        commitlog, dispatcher, clock = self.commitlog, self.dispatcher, self.clock
        limit = commitlog.file_size - L.END_FILE_MIN_BLANK
        queues, offsets, append = dispatcher.queues, self.queue_offsets, self.pk.append_plain
        index = dispatcher.index
        #: ``(index buffer, slots, entries)`` of ``append_plain``: no index file to put keys in
        no_index: tuple[Buffer | None, int, int] = (None, 0, 0)
        with self.lock:
            refused = self._refusal()
            if refused:
                return stored, refused
            plain_dispatch = dispatcher.no_new_queues_below <= 0 and self.disk_full_reason is None
            # the commitlog file and index file appends go to; fetched again after the general
            # steps (which may roll either)
            mf = commitlog.last_locked() if plain_dispatch else None
            target: tuple[Buffer | None, int, int] = (
                (index.target_locked() or no_index) if index is not None else no_index)
            # a run of items to one queue (the usual pipelined batch) looks its queue up once and
            # tells the arrival listeners (long polling) once, with the run's last offset, still
            # under the lock: a waiter woken by an earlier offset is woken by the last one too
            key: tuple[str, int] | None = None
            cq: Any = None
            topic_b = b""
            arrived: tuple[str, int, int, int] | None = None
            try:
                for item in items:
                    topic, queue_id, body = item[1], item[2], item[10]
                    if len(body) > max_body:
                        break  # the general path answers the refusal
                    if key is None or queue_id != key[1] or topic != key[0]:
                        key = (topic, queue_id)
                        topic_b = topic.encode()
                        cq = queues.find_or_create(topic, queue_id)
                    sys_flag = (item[3] & ~(L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6)) | host_flag
                    queue_offset = offsets.get(key, 0)
                    unit_mf = cq.next_unit_locked(queue_offset) if mf is not None else None
                    size = 0
                    if unit_mf is not None:
                        assert mf is not None  # (a unit's file is looked up only with a commitlog file)
                        pos = mf.wrote_position
                        phy = mf.file_from_offset + pos
                        store_ts = clock()
                        if phy >= cq.max_physic_offset:  # a fresh record: put_one_locked would write its unit
                            size, indexed = append(
                                mf.buf, pos, limit, phy, topic_b, queue_id, item[5], queue_offset, sys_flag,
                                item[4], born_host, store_ts, store_host, item[6], body, item[7], unit_mf.buf,
                                unit_mf.wrote_position, item[8], *target, item[9])
                    if size:
                        assert mf is not None and unit_mf is not None  # (size: appended above)
                        commitlog.commit_locked(mf, size)
                        cq.unit_written_locked(unit_mf, phy + size)
                        offsets[key] = queue_offset + 1
                        self.last_store_timestamp = store_ts
                        if not indexed:
                            dispatcher.index_keys_locked(item[9], phy, store_ts)
                            target = (index.target_locked() or no_index) if index is not None else no_index
                        if arrived is not None and (arrived[0] != topic or arrived[1] != queue_id):
                            dispatcher.unit_written_locked(*arrived)
                        arrived = (topic, queue_id, queue_offset + 1, store_ts)
                    else:
                        if arrived is not None:  # the general steps notify their own unit: keep the order
                            dispatcher.unit_written_locked(*arrived)
                            arrived = None
                        size = self.record_size_plain(body, topic_b, item[7], sys_flag)
                        if size > limit:
                            break  # more than one commitlog file holds: the general path refuses it
                        try:
                            phy = self._put_plain_locked(item, topic_b, sys_flag, size, queue_offset, born_host,
                                                         store_host)
                        except DiskFullError as e:
                            return stored, self._disk_full_locked(e)
                        except StoreIOError as e:
                            return stored, self._no_file_locked(e)
                        mf = commitlog.last_locked() if plain_dispatch else None
                        target = (index.target_locked() or no_index) if index is not None else no_index
                    stored.append((queue_offset, phy, size))
            finally:
                if arrived is not None:
                    dispatcher.unit_written_locked(*arrived)
        return stored, None

    def record_size_plain(self, body: bytes, topic_b: bytes, props_b: bytes, sys_flag: int) -> int:
        return self.k.record_size(len(body), len(topic_b), len(props_b), sys_flag)

    def _put_plain_general_locked(self, item: PlainSend, topic_b: bytes, sys_flag: int, size: int, queue_offset: int,
                                  born_host: bytes, store_host: bytes) -> tuple[int, PutMessageResult | None]:
        """``_put_plain_locked`` for the compiled ``StorePlainSends``: (phy, None), or (0,
        the refusal) when no new store file could be had."""
        try:
            return self._put_plain_locked(item, topic_b, sys_flag, size, queue_offset, born_host, store_host), None
        except DiskFullError as e:
            return 0, self._disk_full_locked(e)
        except StoreIOError as e:
            return 0, self._no_file_locked(e)

    def _put_plain_locked(self, item: PlainSend, topic_b: bytes, sys_flag: int, size: int, queue_offset: int,
                          born_host: bytes, store_host: bytes) -> int:
        """One pipeline item by the general steps (a file roll, a queue's first unit, a full
        index file, recovery bookkeeping); returns its commitlog offset."""
        topic, queue_id = item[1], item[2]
        self.dispatcher.queues.find_or_create(topic, queue_id).ensure_room_locked(queue_offset, 1)
        mf, pos = self.commitlog.reserve_locked(size)
        if self.disk_full_reason is not None:
            self._appended_locked()
        store_ts = self.clock()
        phy = mf.file_from_offset + pos
        self.k.encode_record(mf.buf, pos, topic_b, queue_id, item[5], queue_offset, phy, sys_flag, item[4],
                             born_host, store_ts, store_host, item[6], 0, item[10], item[7])
        self.commitlog.commit_locked(mf, size)
        self.queue_offsets[(topic, queue_id)] = queue_offset + 1
        self.last_store_timestamp = store_ts
        self.dispatcher.dispatch_unit_locked(topic, queue_id, queue_offset, phy, size, item[8], store_ts, item[9])
        return phy

    def _encoded_properties(self, body_len: int, props: dict[str, str]) -> tuple[bytes, PutMessageResult | None]:
        """A single message's properties as record bytes, or the refusal of a body or
        properties over the limits (checked in that order, as RocketMQ does)."""
        if body_len > self.cfg.max_message_size_bytes:
            return b"", _refused(PutMessageStatus.MESSAGE_ILLEGAL,
                                 f"the body is {body_len} bytes, more than maxMessageSize "
                                 f"{self.cfg.max_message_size_bytes}")
        props_b = properties_to_bytes(props)
        if len(props_b) > L.MAX_PROPERTIES_BYTES:
            return props_b, _refused(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED,
                                     f"the properties are {len(props_b)} bytes, more than {L.MAX_PROPERTIES_BYTES}")
        return props_b, None

    def put_messages(self, msgs: Sequence[MessageExtBrokerInner]) -> list[PutMessageResult]:
        """Several messages (any topics and queues), each checked and stored exactly as by
        ``put_message``, under one hold of the put lock with one dispatch scan per
        commitlog file touched: delay delivery moves thousands of due messages this way.
        A refused message gets its own result and does not stop the others."""
        results: list[PutMessageResult | None] = [None] * len(msgs)
        prepared: list[tuple[int, _Prepared]] = []
        for i, msg in enumerate(msgs):
            p = self._refusal() or self._prepare(msg)
            if isinstance(p, PutMessageResult):
                results[i] = p
            else:
                prepared.append((i, p))
        end_offset = 0
        with self.lock:
            seg_mf: MappedFile | None = None
            seg_start, seg_end, seg_count = 0, 0, 0
            for i, p in prepared:
                refused = self._refusal()
                if refused:
                    results[i] = refused
                    continue
                try:
                    self._ensure_room_locked(p)
                    mf, pos, results[i] = self._append_locked(p)
                except DiskFullError as e:
                    results[i] = self._disk_full_locked(e)
                    continue
                except StoreIOError as e:
                    results[i] = self._no_file_locked(e)
                    continue
                self._appended_locked()
                if mf is not seg_mf:  # rolled over to the next file: dispatch what the last one got
                    if seg_count:
                        assert seg_mf is not None  # (seg_count: a file was appended to)
                        self._dispatch_locked(seg_mf, seg_start, seg_end, seg_count)
                    seg_mf, seg_start, seg_count = mf, pos, 0
                seg_end = pos + p.size
                seg_count += 1
                if p.wait:
                    end_offset = mf.file_from_offset + seg_end
            if seg_count:
                assert seg_mf is not None  # (seg_count: a file was appended to)
                self._dispatch_locked(seg_mf, seg_start, seg_end, seg_count)
        if end_offset and self.wait_flushed is not None and not self.wait_flushed(end_offset):
            log.warning("flush of offset %d did not complete within %d ms", end_offset, self.cfg.sync_flush_timeout_ms)
            for i, p in prepared:
                r = results[i]
                if p.wait and r is not None and r.status is PutMessageStatus.PUT_OK:
                    r.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        return results  # type: ignore[return-value]

    def _prepare(self, msg: MessageExtBrokerInner) -> _Prepared | PutMessageResult:
        """Checks and the delay rewrite, before the lock; a refusal comes back as a result."""
        props = dict(msg.properties)
        if msg.properties_as_sent:
            wait = props.get(Prop.WAIT, "true") != "false"
        else:
            wait = props.pop(Prop.WAIT, "true") != "false"
            if self.cfg.broker_cluster_name:
                props[Prop.CLUSTER] = self.cfg.broker_cluster_name
        topic, queue_id = msg.topic, msg.queue_id
        problem = _topic_problem(topic.encode("utf-8"))
        if problem:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, problem)
        tx = msg.sys_flag & _TX_MASK
        timer_out_ms = 0
        if tx in (L.SYSFLAG_TRANSACTION_NOT, L.SYSFLAG_TRANSACTION_COMMIT) and timer_rewrite.is_timer_request(props):
            decided = timer_rewrite.rewrite(props, topic, queue_id, self.clock(), self.timer_policy)
            if isinstance(decided, timer_rewrite.Refusal):
                return _refused(decided.status, decided.remark)
            if decided is not None:
                topic, queue_id, timer_out_ms = TIMER_TOPIC, 0, decided.out_ms
        level = 0 if msg.delay_delivered else _delay_level(props)
        if level > 0 and tx in (L.SYSFLAG_TRANSACTION_NOT, L.SYSFLAG_TRANSACTION_COMMIT):
            level = min(level, len(self.delays))
            props[Prop.DELAY] = str(level)
            props[Prop.REAL_TOPIC] = topic
            props[Prop.REAL_QID] = str(queue_id)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
        topic_b = topic.encode("utf-8")
        body = msg.body
        props_b, refused = self._encoded_properties(len(body), props)
        if refused:
            return refused
        if queue_id < 0:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, f"queue id {queue_id} is negative")
        sys_flag = (msg.sys_flag & ~(L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6)) | host_sys_flag(
            msg.born_host, msg.store_host)
        size = self.k.record_size(len(body), len(topic_b), len(props_b), sys_flag)
        if size + L.END_FILE_MIN_BLANK > self.commitlog.file_size:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL,
                            f"the message needs {size} bytes, more than one commitlog file holds")
        counted = tx in (L.SYSFLAG_TRANSACTION_NOT, L.SYSFLAG_TRANSACTION_COMMIT)
        unit = None
        if counted and topic != SCHEDULE_TOPIC and separators_only_between(props_b, len(props)):
            # every name and value is free of the separators, so a scan of the record would
            # find exactly these properties: take the consume-queue and index fields from them
            unit = (self.k.tags_code(props.get(Prop.TAGS)), self._key_hashes(topic, props))
        return _Prepared(msg, topic, topic_b, queue_id, props_b, sys_flag, size, counted, wait, unit, timer_out_ms)

    def _key_hashes(self, topic: str, props: dict[str, str]) -> list[int]:
        """Index hashes of ``topic#UNIQ_KEY`` then ``topic#k`` per KEYS word, as the scan
        of the record gives them (``index_keys``); none when the store keeps no index."""
        if self.dispatcher.index is None:
            return []
        return self.k.key_hashes(topic, props.get(Prop.UNIQ_KEY), props.get(Prop.KEYS))

    def _append_locked(self, p: _Prepared) -> tuple[MappedFile, int, PutMessageResult]:
        """Assign the queue offset and encode the record; returns (file, position, result)."""
        msg = p.msg
        store_ts = msg.store_timestamp or self.clock()
        key = (p.topic, p.queue_id)
        queue_offset = self.queue_offsets.get(key, 0) if p.counted else 0
        mf, pos = self.commitlog.reserve_locked(p.size)
        phy = mf.file_from_offset + pos
        self.k.encode_record(mf.buf, pos, p.topic_b, p.queue_id, msg.flag, queue_offset, phy, p.sys_flag,
                             msg.born_timestamp, msg.born_host, store_ts, msg.store_host,
                             msg.reconsume_times, msg.prepared_transaction_offset, msg.body, p.props_b)
        self.commitlog.commit_locked(mf, p.size)
        if p.counted:
            self.queue_offsets[key] = queue_offset + 1
        self.last_store_timestamp = store_ts
        result = PutMessageResult(PutMessageStatus.PUT_OK, phy_offset=phy, wrote_bytes=p.size, queue_id=p.queue_id,
                                  queue_offset=queue_offset, msg_ids=[offset_msg_id(msg.store_host, phy)],
                                  store_timestamp=store_ts, message_count=1, timer_out_ms=p.timer_out_ms)
        return mf, pos, result

    # --- batches (SEND_BATCH_MESSAGE) -------------------------------------------------------------
    def put_batch(self, topic: str, queue_id: int, items: bytes, *, sys_flag: int = 0, born_timestamp: int = 0,
                  born_host: bytes, store_host: bytes,
                  batch_properties: dict[str, str] | None = None) -> PutMessageResult:
        """Append a wire batch (one item per message) as consecutive records of one queue."""
        refused = self._refusal()
        if refused:
            return refused
        props = dict(batch_properties or {})
        wait = props.pop(Prop.WAIT, "true") != "false"
        if props.get(Prop.DELAY):
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, "a batch cannot be delayed")
        if timer_rewrite.is_timer_request(props):
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, "a batch cannot be a timer message; send each alone")
        if self.cfg.broker_cluster_name:
            props[Prop.CLUSTER] = self.cfg.broker_cluster_name
        topic_b = topic.encode("utf-8")
        problem = _topic_problem(topic_b)
        if problem:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, problem)
        if queue_id < 0:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, f"queue id {queue_id} is negative")
        extra = properties_to_bytes(props)
        sys_flag = (sys_flag & ~(L.SYSFLAG_BORNHOST_V6 | L.SYSFLAG_STOREHOST_V6)) | host_sys_flag(born_host, store_host)
        try:
            count, total, max_body, max_props = self.k.measure_batch(items, len(topic_b), len(extra), sys_flag)
        except RecordDecodeError as e:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, f"malformed batch: {e}")
        if count == 0:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL, "the batch is empty")
        if max_body > self.cfg.max_message_size_bytes:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL,
                            f"a batch body is {max_body} bytes, more than maxMessageSize")
        if max_props > L.MAX_PROPERTIES_BYTES:
            return _refused(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, "batch item properties exceed 32767 bytes")
        if total + L.END_FILE_MIN_BLANK > self.commitlog.file_size or \
                total > self.cfg.max_message_size_bytes + 64 * 1024 * count:
            return _refused(PutMessageStatus.MESSAGE_ILLEGAL,
                            f"the batch needs {total} bytes, more than one commitlog file holds")
        with self.lock:
            refused = self._refusal()
            if refused:
                return refused
            store_ts = self.clock()
            key = (topic, queue_id)
            first = self.queue_offsets.get(key, 0)
            try:
                self.dispatcher.queues.find_or_create(topic, queue_id).ensure_room_locked(first, count)
                mf, pos = self.commitlog.reserve_locked(total)
            except DiskFullError as e:
                return self._disk_full_locked(e)
            except StoreIOError as e:
                return self._no_file_locked(e)
            self._appended_locked()
            phy = mf.file_from_offset + pos
            self.k.encode_batch(mf.buf, pos, items, topic_b, queue_id, first, phy, sys_flag, born_timestamp,
                                born_host, store_ts, store_host, extra)
            self.commitlog.commit_locked(mf, total)
            self.queue_offsets[key] = first + count
            self.last_store_timestamp = store_ts
            table = self._dispatch_batch_locked(mf, pos, pos + total, count, topic, queue_id, sys_flag)
        ids = offset_msg_ids(store_host, table["phy_offset"])
        result = PutMessageResult(PutMessageStatus.PUT_OK, phy_offset=phy, wrote_bytes=total, queue_id=queue_id,
                                  queue_offset=first, msg_ids=ids, store_timestamp=store_ts, message_count=count)
        return self._wait(result, phy + total, wait)

    # --- helpers -------------------------------------------------------------------------------------
    def _dispatch_locked(self, mf: MappedFile, start: int, end: int, count: int) -> np.ndarray:
        table, topics, _, _ = self.k.scan_records(mf.buf, start, end, mf.file_from_offset, False,
                                                  self.delays, count)
        self.dispatcher.dispatch_locked(table, topics, mf.buf)
        return table

    def _dispatch_batch_locked(self, mf: MappedFile, start: int, end: int, count: int, topic: str, queue_id: int,
                               sys_flag: int) -> np.ndarray:
        """A wire batch: every record is of one queue and shares the batch's transaction
        bits, so when those say "consume queue" the dispatcher needs no grouping."""
        tx = sys_flag & L.SYSFLAG_TRANSACTION_MASK
        if tx not in (L.SYSFLAG_TRANSACTION_NOT, L.SYSFLAG_TRANSACTION_COMMIT):
            return self._dispatch_locked(mf, start, end, count)
        table, topics, _, _ = self.k.scan_records(mf.buf, start, end, mf.file_from_offset, False,
                                                  self.delays, count)
        self.dispatcher.dispatch_queue_locked(table, topics, mf.buf, topic, queue_id)
        return table

    def _wait(self, result: PutMessageResult, end_offset: int, wait: bool) -> PutMessageResult:
        if self.wait_flushed is not None and wait and not self.wait_flushed(end_offset):
            log.warning("flush of offset %d did not complete within %d ms", end_offset,
                        self.cfg.sync_flush_timeout_ms)
            result.status = PutMessageStatus.FLUSH_DISK_TIMEOUT
        return result


def _delay_level(props: dict[str, str]) -> int:
    raw = props.get(Prop.DELAY)
    if not raw:
        return 0
    try:
        return int(raw)
    except ValueError:
        return 0

