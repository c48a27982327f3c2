"""MessageStore: the store façade. It composes the parts and delegates; no logic of its own.

    with MessageStore(StoreConfig(store_path="/tmp/store")) as store:
        r = store.put_message(MessageExtBrokerInner(topic="T", body=b"hi", properties={"TAGS": "a"}))
        got = store.get_message("T", 0, 0, 32)

Lifecycle: ``load()`` takes the directory lock and recovers (returns a
``RecoveryReport``), ``start()`` starts the flush threads and writes the ``abort``
marker, ``shutdown()`` flushes everything, removes ``abort`` and releases the lock.
Threads: puts from any thread (serialised by the writer's lock), reads from any thread.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Set
from typing import Callable, Sequence

from mqcore._compat import default_kernels
from mqcore.clock import system_clock_ms
from mqcore.config import FlushDiskType, StoreConfig
from mqcore.errors import ClosedError
from mqcore.histogram import FLUSH_LATENCY_BOUNDS_S, Histogram
from mqcore.kernel_api import QueueUnits, StoreKernels
from mqcore.message import MessageExt, MessageExtBrokerInner
from mqcore.format import store_paths
from mqcore.store import queue_manifest
from mqcore.store.checkpoint import StoreCheckpoint
from mqcore.store.commitlog import CommitLog
from mqcore.store.consume_queue import ConsumeQueue, ConsumeQueueTable
from mqcore.store.dispatch import ArrivalListener, Dispatcher
from mqcore.store.flush import FlushService, GroupCommitService
from mqcore.store.hot_state import on_kernels
from mqcore.store.index import IndexService
from mqcore.store.lock import StoreLock
from mqcore.store.prefault import PrefaultService
from mqcore.store.queue_files import QueueFileService
from mqcore.store.reader import MessageReader
from mqcore.store.recovery import Progress, Recovery, RecoveryReport
from mqcore.store.results import GetMessageResult, PutMessageResult, QueryMessageResult
from mqcore.store.space import DiskSpaceGuard, SpaceUsage, statvfs_usage
from mqcore.store.writer import MessageWriter

log = logging.getLogger(__name__)


class MessageStore:
    """The store façade: lifecycle, and the put/get API of RocketMQ's ``DefaultMessageStore``.

    Every public method is defined here and delegates to the part that owns it
    (``MessageWriter``, ``MessageReader``, the services), so the API can be read and
    grepped in one place.
    """

    def __init__(self, config: StoreConfig, *, clock: Callable[[], int] = system_clock_ms,
                 kernels: StoreKernels | None = None, space_usage: SpaceUsage = statvfs_usage,
                 recovery_progress: Progress | None = None) -> None:
        self.config = config
        #: ``(done_bytes, total_bytes)`` callback during recovery's scan (``mqcore.progress``)
        self.recovery_progress = recovery_progress
        self.clock = clock
        self.k = kernels or default_kernels()
        self._lock = StoreLock(config.lock_path)
        #: asked before every new commitlog / consume-queue file (diskSpaceWarningLevelRatio)
        self.space_guard = DiskSpaceGuard(config.disk_space_warning_level_ratio, space_usage)
        self.commitlog = CommitLog(config.commitlog_dir, config.commitlog_file_size_bytes, self.k,
                                   self.space_guard)
        self.queues = ConsumeQueueTable(config.consume_queue_dir, config.consume_queue_file_size_bytes, self.k,
                                        self.space_guard)
        self.index = (on_kernels(IndexService, self.k)(config.index_dir, config.index_slots, config.index_entries,
                                                       self.k, clock)
                      if config.message_index_enable else None)
        # the writer and dispatcher on the kernels' bases (``hot_state``): a put reads their fields in C
        self.dispatcher = on_kernels(Dispatcher, self.k)(self.queues, self.index, self.k)
        self.group_commit = (GroupCommitService(self._flush_commitlog_all)
                             if config.flush_disk_type is FlushDiskType.SYNC_FLUSH else None)
        wait: Callable[[int], bool] | None = None
        if self.group_commit is not None:
            gc, timeout = self.group_commit, config.sync_flush_timeout_ms
            wait = lambda offset: gc.wait_flushed(offset, timeout)  # noqa: E731
        self.writer = on_kernels(MessageWriter, self.k)(config, self.commitlog, self.dispatcher, self.k, clock, wait)
        #: ``(items, born_host, store_host) -> (stored, refusal)``: plain single messages read by the
        #: broker's send pipeline, under one hold of the put lock (``MessageWriter.put_plain_sends_py``
        #: says what the caller guarantees and gets back); the writer's own callable, so the send
        #: pipeline reaches the compiled store stage without a frame in between
        self.put_plain_sends = self.writer.put_plain_sends
        self.reader = MessageReader(config, self.commitlog, self.queues, self.index, self.k)
        self.checkpoint: StoreCheckpoint | None = None
        self.flush_service: FlushService | None = None
        self.prefault_service: PrefaultService | None = None
        self.queue_file_service: QueueFileService | None = None
        self.recovery_report: RecoveryReport | None = None
        #: seconds per commitlog flush that wrote data (the metrics endpoint reads it)
        self.flush_latency = Histogram(FLUSH_LATENCY_BOUNDS_S)
        self._flushed_to = 0
        self._state = "new"

    # --- lifecycle -------------------------------------------------------------------------------
    def load(self) -> RecoveryReport:
        os.makedirs(self.config.store_path, exist_ok=True)
        self._lock.acquire()
        for path in (self.config.checkpoint_path, self.config.abort_path):
            # storeCheckpoint / abortFile may point outside storePathRootDir
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        try:
            store_paths.record(self.config)  # so a reader given the root finds a moved commitlog
            abnormal = os.path.exists(self.config.abort_path)
            report = RecoveryReport()
            report.notes.extend(self.commitlog.load())
            report.notes.extend(self.queues.load())
            self.checkpoint = StoreCheckpoint(self.config.checkpoint_path)
            if self.index is not None:
                report.notes.extend(self.index.load(abnormal, self.checkpoint.index_msg_timestamp))
            Recovery(self.config, self.commitlog, self.queues, self.index, self.dispatcher, self.checkpoint,
                     self.k, self.recovery_progress).run(
                abnormal, report, queue_manifest.take(queue_manifest.path_in(self.config.store_path)))
            if self.recovery_progress is not None and hasattr(self.recovery_progress, "finish"):
                self.recovery_progress.finish()
            self.writer.restore_queue_offsets({(cq.topic, cq.queue_id): cq.max_offset() for cq in self.queues})
        except BaseException:
            self._lock.release()
            raise
        (log.warning if not report.clean else log.info)("store %s: %s", self.config.store_path, report.summary())
        self.recovery_report = report
        self._state = "loaded"
        return report

    def start(self) -> None:
        if self._state != "loaded":
            raise ClosedError(f"start() needs a loaded store (state: {self._state})")
        cfg = self.config
        self.flush_service = FlushService(
            None if self.group_commit else self._flush_commitlog, self._flush_logic,
            cfg.flush_interval_commitlog_ms, cfg.flush_commitlog_least_pages,
            cfg.flush_commitlog_thorough_interval_ms, cfg.flush_interval_consume_queue_ms,
            cfg.flush_consume_queue_least_pages, cfg.flush_consume_queue_thorough_interval_ms)
        self.flush_service.start()
        if self.group_commit is not None:
            self.group_commit.start()
        if cfg.prefault_window_bytes > 0:
            self.prefault_service = PrefaultService(self.commitlog, self.k, cfg.prefault_window_bytes)
            self.commitlog.queue.on_file_ready = self.prefault_service.file_ready
            self.prefault_service.start()
        # from here on a new queue's first file is made off the put's path (queue_files.py)
        self.queues.put_lock = self.writer.lock
        self.queues.on_ready = self._queue_ready
        self.queue_file_service = QueueFileService(self.queues)
        self.queue_file_service.start()
        self.queues.defer_new = self.queue_file_service.wakeup
        with open(self.config.abort_path, "a"):
            pass
        self._state = "running"

    def _queue_ready(self, cq: ConsumeQueue) -> None:
        self.dispatcher.arrived(cq.topic, cq.queue_id, cq.max_offset())

    def shutdown(self) -> None:
        if self._state in ("new", "closed"):
            return
        self.writer.close("the store is shutting down")
        self.queues.defer_new = None
        if self.queue_file_service is not None:
            self.queue_file_service.shutdown()
        # a queue whose file could not be made keeps its units out of the consume queues:
        # the abort file stays, so the next start re-dispatches them from the commitlog
        queues_complete = self.queues.make_all_ready()
        if self.prefault_service is not None:
            self.prefault_service.shutdown()
        if self.flush_service is not None:
            self.flush_service.shutdown()
        if self.group_commit is not None:
            self.group_commit.shutdown()
        self._flush_commitlog(0)
        self._flush_logic()
        queue_manifest.write(queue_manifest.path_in(self.config.store_path), self.queues)
        self.commitlog.close()
        for cq in self.queues:
            cq.close()
        if self.index is not None:
            self.index.close()
        if self.checkpoint is not None:
            self.checkpoint.close()
        if self._state == "running" and queues_complete and os.path.exists(self.config.abort_path):
            os.unlink(self.config.abort_path)
        self._lock.release()
        self._state = "closed"

    def update_config(self, config: StoreConfig) -> None:
        """Take new values of the settings that can change while running (``maxMessageSize``,
        the transfer limits...); the caller (``Broker.update_config``) has checked which
        keys changed. Paths and file sizes are fixed for the store's life."""
        self.config = config
        self.writer.cfg = config
        self.reader.cfg = config

    def __enter__(self) -> "MessageStore":
        self.load()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- writing (MessageWriter) ------------------------------------------------------------------
    def put_message(self, msg: MessageExtBrokerInner) -> PutMessageResult:
        """Append one message (``DefaultMessageStore.putMessage``)."""
        return self.writer.put_message(msg)

    def put_messages(self, msgs: Sequence[MessageExtBrokerInner]) -> list[PutMessageResult]:
        """Append several single messages under one hold of the put lock."""
        return self.writer.put_messages(msgs)

    def put_batch(self, topic: str, queue_id: int, items: bytes, *, sys_flag: int = 0, born_timestamp: int = 0,
                  born_host: bytes, store_host: bytes,
                  batch_properties: dict[str, str] | None = None) -> PutMessageResult:
        """Append a wire batch (SEND_BATCH_MESSAGE body) as consecutive records."""
        return self.writer.put_batch(topic, queue_id, items, sys_flag=sys_flag, born_timestamp=born_timestamp,
                                     born_host=born_host, store_host=store_host, batch_properties=batch_properties)

    @property
    def refusal(self) -> str | None:
        """Why puts are refused now (disk full, shutting down, an operator), or None."""
        return self.writer.refuse_reason

    def refuse_puts(self, reason: str) -> None:
        """Refuse puts with ``reason`` (SERVICE_NOT_AVAILABLE) until :meth:`accept_puts`."""
        self.writer.refuse_reason = reason

    def accept_puts(self) -> None:
        self.writer.refuse_reason = None

    def replace_refusal(self, old: str | None, new: str | None) -> bool:
        """Compare-and-set of the refusal: a policy changes only its own refusal."""
        return self.writer.replace_refusal(old, new)

    # --- reading (MessageReader) ----------------------------------------------------------------------
    def get_message(self, topic: str, queue_id: int, offset: int, max_count: int,
                    max_bytes: int | None = None, tag_codes: Set[int] | None = None) -> GetMessageResult:
        """Messages of one queue from ``offset`` (``DefaultMessageStore.getMessage``)."""
        return self.reader.get_message(topic, queue_id, offset, max_count, max_bytes, tag_codes)

    def look_message_by_offset(self, phy_offset: int) -> MessageExt | None:
        return self.reader.look_message_by_offset(phy_offset)

    def select_one_message_by_offset(self, phy_offset: int) -> memoryview | None:
        """The raw record at a commitlog offset, or None."""
        return self.reader.record_at(phy_offset)

    def query_message(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> QueryMessageResult:
        """Records whose index key (KEYS or UNIQ_KEY) hashes like ``key``: the broker's QUERY_MESSAGE."""
        return self.reader.query_message(topic, key, max_num, begin_ts, end_ts)

    def messages_by_key(self, topic: str, key: str, max_num: int = 32, begin_ts: int = 0,
                        end_ts: int = 1 << 62) -> list[MessageExt]:
        return self.reader.messages_by_key(topic, key, max_num, begin_ts, end_ts)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.max_offset(topic, queue_id)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.min_offset(topic, queue_id)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int) -> int:
        return self.reader.offset_by_time(topic, queue_id, timestamp)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        return self.reader.earliest_message_time(topic, queue_id)

    def get_commitlog_offset_in_queue(self, topic: str, queue_id: int, offset: int) -> int:
        return self.reader.commitlog_offset_in_queue(topic, queue_id, offset)

    def get_consume_queue_units(self, topic: str, queue_id: int, offset: int, max_count: int) -> QueueUnits | None:
        """``(phys, sizes, tags_codes)`` arrays from ``offset``, or None."""
        return self.reader.consume_queue_units(topic, queue_id, offset, max_count)

    def get_message_store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        return self.reader.message_store_timestamp(topic, queue_id, offset)

    # --- flushing ---------------------------------------------------------------------------------
    def _flush_commitlog(self, least_pages: int) -> int:
        # the newest store time first, then the end offset: the writer advances the offset
        # before the time, so every record stored at or before ``ts`` ends at or before
        # ``end``. Once the flush covers ``end`` the checkpoint may say ``ts`` - under steady
        # load too (comparing with the offset after the flush, which keeps moving, never
        # advanced it and made every crash recovery scan the whole commitlog)
        ts = self.writer.last_store_timestamp
        end = self.commitlog.max_offset
        before = self._flushed_to
        t0 = time.perf_counter()
        flushed = self.commitlog.flush(least_pages)
        if self.config.resident_behind_bytes:
            self.commitlog.queue.release_behind(self.config.resident_behind_bytes)
        if flushed > before:  # only flushes that wrote something say how long a flush takes
            self.flush_latency.observe(time.perf_counter() - t0)
            self._flushed_to = flushed
        if self.checkpoint is not None and flushed >= end and ts:
            self.checkpoint.physic_msg_timestamp = ts
        return flushed

    def _flush_commitlog_all(self) -> int:
        return self._flush_commitlog(0)

    def _flush_logic(self, least_pages: int = 0) -> None:
        """Flush the consume queues (each file with at least ``least_pages`` dirty pages: 0,
        every one), the index and the checkpoint. The checkpoint is synced only with a flush
        of every queue (``least_pages`` 0), as RocketMQ's is: recovery after a power cut
        re-dispatches from the times it holds on disk."""
        ts = self.dispatcher.last_store_timestamp
        keep = self.config.resident_behind_bytes // 16
        for cq in self.queues:
            cq.flush(least_pages)
            if keep:
                cq.queue.release_behind(keep)
        if self.index is not None:
            self.index.flush()  # the newest full file is among the two it flushes
        if self.checkpoint is not None:
            # a pending queue's units are not in a file yet: the consume queues are not
            # complete up to ``ts`` (crash recovery starts from this time)
            if ts and not self.queues.pending:
                self.checkpoint.logics_msg_timestamp = ts
            if self.index is not None:
                self.checkpoint.index_msg_timestamp = max(self.checkpoint.index_msg_timestamp,
                                                          self.index.last_full_end_timestamp())
            # as RocketMQ's: the file (its page) always shows the times, but it is made durable
            # only with a flush of every queue - a power cut must not leave a checkpoint on disk
            # newer than consume-queue pages that were never synced
            self.checkpoint.write()
            if not least_pages:
                self.checkpoint.flush()

    # --- facts ---------------------------------------------------------------------------------------
    def get_min_phy_offset(self) -> int:
        return self.commitlog.min_offset

    def get_max_phy_offset(self) -> int:
        return self.commitlog.max_offset

    def add_arrival_listener(self, listener: ArrivalListener) -> None:
        """``listener(topic, queue_id, max_offset)`` after new units land (long polling)."""
        self.dispatcher.listeners.append(listener)

    def queue_ids(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, qid in sorted([*self.queues.queues, *self.queues.pending]):  # pending: units waiting
            out.setdefault(topic, []).append(qid)
        return out

    def delete_topic(self, topic: str) -> None:
        self.writer.forget_topic(topic, self.queues.remove_topic)
