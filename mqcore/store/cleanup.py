"""Disk cleanup: delete old commitlog files, then the consume-queue and index files that
only point at deleted messages (store-format.md §8; RocketMQ ``CleanCommitLogService``
and ``CleanConsumeQueueService``).

Why a policy object and a service: the decisions (is it time, how full is the disk,
may this file go) are pure functions of the clock, the local hour, the disk usage and a
file's age, so ``CleanupPolicy`` is tested on its own with no files at all.
``CleanupService`` measures, applies the decision to the store and logs every deletion
with the file, its age and the reason.

The rules (defaults in ``StoreConfig``):

* a pass runs every ``clean_resource_interval_ms`` (first one after
  ``clean_resource_first_delay_ms``);
* commitlog files older than ``file_reserved_time_hours`` are deleted during the
  ``delete_when`` hours (``"04"``, or several: ``"03;04"``), or at any hour when the
  disk is above ``disk_max_used_space_ratio`` %, or on a manual request;
* above ``disk_space_clean_forcibly_ratio`` % the oldest files go even if unexpired
  (``clean_file_forcibly_enable``), ``delete_files_batch_max`` per pass, until usage drops;
* above ``disk_space_warning_level_ratio`` % the store refuses writes
  (SERVICE_NOT_AVAILABLE, "the disk is full ...") until usage is back at or below the
  clean-forcibly ratio, as RocketMQ's ``runningFlags`` do; reads go on;
* files are taken oldest first, never the file being written, and the scan stops at the
  first file that may not go (no holes). A file a reader holds is kept and retried on
  the next pass; after ``destroy_mapped_file_interval_forcibly_ms`` it is deleted
  anyway (its mapping is closed when the reader lets go);
* once the commitlog minimum offset moved, consume-queue files whose last unit points
  below it and index files whose last entry does are deleted (never a queue's last
  file), and every queue's minimum offset moves up (pulls behind it answer
  PULL_OFFSET_MOVED).

Threads: the service thread runs the passes; tests call ``run_once`` directly instead of
starting it (never both). ``request_manual_delete`` may be called from any thread.
Writers on any thread see the disk-full refusal through ``MessageStore.refusal``.
"""
from __future__ import annotations

import dataclasses
import enum
import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Callable

from mqcore.config import StoreConfig
from mqcore.errors import ConfigError, MQError
from mqcore.service import ServiceThread
from mqcore.store.mapped_file import DestroyOutcome, MappedFile
from mqcore.store.space import used_percent

if TYPE_CHECKING:
    from mqcore.store.message_store import MessageStore

log = logging.getLogger(__name__)

#: while writes are refused for a full disk, the disk is looked at this often between
#: passes, so writes resume within about this long of space being freed
FULL_DISK_RECHECK_S = 0.5

HOUR_MS = 3_600_000
#: passes a manual delete request (admin TRIGGER_DELETE_FILES) keeps cleanup on for
MANUAL_DELETE_PASSES = 20
#: while the disk stays above a ratio with nothing left to delete, the warning is logged when
#: that starts and then at most this often (a pass runs every 10 s: it used to repeat each time)
STUCK_WARNING_INTERVAL_MS = 10 * 60 * 1000

#: percent of the partition holding ``path`` that is used
DiskUsage = Callable[[str], float]
#: ``committed(topic)`` -> {group: {queue id: committed offset}} of the groups consuming it
CommittedOffsets = Callable[[str], dict[str, dict[int, int]]]


def psutil_disk_usage(path: str) -> float:
    """What ``df`` shows for the partition holding ``path`` (``space.used_percent``, the one
    measure the broker reports too; the name is kept for callers)."""
    return used_percent(path)


def local_hour(now_ms: int) -> int:
    return time.localtime(now_ms / 1000).tm_hour


def parse_delete_when(spec: str) -> frozenset[int]:
    """``"04"`` or ``"03;04"`` -> hours of the day (RocketMQ ``UtilAll.isItTimeToDo``)."""
    hours = set()
    for part in spec.split(";"):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or not 0 <= int(part) <= 23:
            raise ConfigError(f"deleteWhen: {part!r} is not an hour 0..23 (use e.g. \"04\" or \"03;04\")")
        hours.add(int(part))
    return frozenset(hours)


class CleanTrigger(enum.Enum):
    """Why a pass deletes commitlog files at all (the first that applies)."""

    MANUAL = "a manual delete request"
    DISK_FULL = "disk above diskSpaceWarningLevelRatio"
    DISK_CLEAN_FORCIBLY = "disk above diskSpaceCleanForciblyRatio"
    DISK_ABOVE_MAX = "disk above diskMaxUsedSpaceRatio"
    DELETE_WHEN = "deleteWhen hour"


@dataclasses.dataclass(frozen=True)
class CleanupDecision:
    """One pass's verdict. ``mark_disk_full``: True = refuse writes, False = accept them
    again, None = keep the current state (between the clean-forcibly and warning ratios,
    or usage unknown)."""

    hour: int
    usage_percent: float | None
    trigger: CleanTrigger | None
    clean_immediately: bool
    mark_disk_full: bool | None

    @property
    def delete_commitlog(self) -> bool:
        return self.trigger is not None


class CleanupPolicy:
    """Pure decisions of disk cleanup; see the module docstring for the rules."""

    def __init__(self, config: StoreConfig):
        self.cfg = config
        self.delete_hours = parse_delete_when(config.delete_when)
        self.reserved_ms = int(config.file_reserved_time_hours * HOUR_MS)

    def decide(self, hour: int, usage_percent: float | None, manual: bool = False) -> CleanupDecision:
        cfg = self.cfg
        clean_immediately = False
        mark_full: bool | None = None
        trigger = None
        if usage_percent is not None:
            if usage_percent > cfg.disk_space_warning_level_ratio:
                mark_full = clean_immediately = True
                trigger = CleanTrigger.DISK_FULL
            elif usage_percent > cfg.disk_space_clean_forcibly_ratio:
                clean_immediately = True
                trigger = CleanTrigger.DISK_CLEAN_FORCIBLY
            else:
                mark_full = False
                if usage_percent > cfg.disk_max_used_space_ratio:
                    trigger = CleanTrigger.DISK_ABOVE_MAX
        if trigger is None and hour in self.delete_hours:
            trigger = CleanTrigger.DELETE_WHEN
        if manual:
            trigger = CleanTrigger.MANUAL if trigger in (None, CleanTrigger.DELETE_WHEN) else trigger
        return CleanupDecision(hour, usage_percent, trigger, clean_immediately, mark_full)

    def file_reason(self, decision: CleanupDecision, now_ms: int, last_modified_ms: int) -> str | None:
        """Why this commitlog file may be deleted in this pass, or None (stop the scan)."""
        if not decision.delete_commitlog:
            return None
        age_h = (now_ms - last_modified_ms) / HOUR_MS
        reserved_h = self.cfg.file_reserved_time_hours
        if now_ms >= last_modified_ms + self.reserved_ms:
            return f"expired (older than fileReservedTime {reserved_h:g} h), deleted for {self.why(decision)}"
        if decision.clean_immediately and self.cfg.clean_file_forcibly_enable:
            return (f"not expired ({age_h:.1f} h < {reserved_h:g} h) but deleted early: {self.why(decision)} "
                    f"and cleanFileForciblyEnable is on")
        return None

    def why(self, decision: CleanupDecision) -> str:
        t = decision.trigger
        assert t is not None, "only a pass that deletes commitlog files has a reason"
        if t is CleanTrigger.DELETE_WHEN:
            return f"deleteWhen hour {decision.hour:02d}"
        if t is CleanTrigger.MANUAL:
            return CleanTrigger.MANUAL.value  # (t.value: mypy types a narrowed member's value Any)
        key, limit = {CleanTrigger.DISK_FULL: ("diskSpaceWarningLevelRatio", self.cfg.disk_space_warning_level_ratio),
                      CleanTrigger.DISK_CLEAN_FORCIBLY: ("diskSpaceCleanForciblyRatio",
                                                         self.cfg.disk_space_clean_forcibly_ratio),
                      CleanTrigger.DISK_ABOVE_MAX: ("diskMaxUsedSpaceRatio", self.cfg.disk_max_used_space_ratio)}[t]
        return f"disk use {decision.usage_percent:.1f}% > {key} {limit}%"


@dataclasses.dataclass
class DeletedFile:
    """One file the cleanup pass deleted: its kind, path, age, the reason and how the unmap went."""

    kind: str            # "commitlog", "consumequeue", "index"
    path: str
    age_ms: int
    reason: str
    outcome: DestroyOutcome


@dataclasses.dataclass
class MessageLoss:
    """Messages of one topic in a deleted commitlog file, and per group how many of them
    that group had not consumed yet (its committed offset was below them)."""

    topic: str
    messages: int
    unconsumed: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class CleanupStats:
    """Running totals since the service was made: plain counters for a metrics exporter."""

    commitlog_files_deleted: int = 0
    #: deleted before fileReservedTime because the disk was above diskSpaceCleanForciblyRatio
    commitlog_files_deleted_forcibly: int = 0
    messages_deleted: int = 0
    #: messages deleted that at least one consuming group had not consumed yet
    unconsumed_messages_deleted: int = 0
    #: (topic, group) -> unconsumed messages of that group deleted
    unconsumed_by_group: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class CleanupReport:
    """What one pass did (returned by ``run_once``; tests and benchmarks read it)."""

    decision: CleanupDecision
    deleted: list[DeletedFile] = dataclasses.field(default_factory=list)
    #: files a reader held, kept for a later pass
    held: list[str] = dataclasses.field(default_factory=list)
    #: files unlinked while still mapped by a reader (closed when it lets go)
    pending_close: int = 0
    #: per topic of the commitlog files deleted: messages lost and unconsumed per group
    losses: list[MessageLoss] = dataclasses.field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(1 for d in self.deleted if d.kind == kind)


class CleanupService(ServiceThread):
    """Runs cleanup passes over a loaded ``MessageStore``; see the module docstring.

    ``disk_usage(path)`` gives percent used (psutil by default), ``last_modified_ms(file)``
    a file's age source (its mtime by default), ``hour_of(now_ms)`` the hour that
    ``deleteWhen`` is compared with (local time by default); all injectable for tests.
    ``delete_interval_ms`` spreads commitlog deletions within a pass (RocketMQ
    ``deleteCommitLogFilesInterval``).
    """

    name = "mqcore-cleanup"

    def __init__(self, store: MessageStore, *, clock: Callable[[], int] | None = None,
                 disk_usage: DiskUsage = psutil_disk_usage,
                 last_modified_ms: Callable[[MappedFile], int] = MappedFile.last_modified_ms,
                 hour_of: Callable[[int], int] = local_hour, delete_interval_ms: int = 100,
                 committed_offsets: CommittedOffsets | None = None) -> None:
        super().__init__()
        self.store = store
        self.cfg: StoreConfig = store.config
        self.policy = CleanupPolicy(self.cfg)
        self.clock = clock or store.clock
        self.disk_usage = disk_usage
        self.last_modified_ms = last_modified_ms
        self.hour_of = hour_of
        self.delete_interval_ms = delete_interval_ms
        #: the broker's consumer offsets, to say which groups lose unconsumed messages
        self.committed_offsets = committed_offsets
        #: totals for metrics (read from any thread; ints and a dict updated by this thread)
        self.stats = CleanupStats()
        self._manual_passes = 0
        self._full_reason: str | None = None
        #: commitlog min offset the consume queues were last cleaned for
        self._logic_clean_min = 0
        self._usage_error_logged = False
        #: one pass at a time: this thread's and an operator's (``clean_now``)
        self._pass_lock = threading.Lock()
        #: when the "high but nothing deleted" warning was last logged (None: not in that state)
        self._stuck_warned_ms: int | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        # a disk already full at start refuses writes now, not after the first pass
        self._apply_disk_state(self.policy.decide(self.hour_of(self.clock()), self._usage()))
        super().start()

    def run(self) -> None:
        self._wait_for_pass(self.cfg.clean_resource_first_delay_ms / 1000)
        while not self.stopped:
            try:
                with self._pass_lock:
                    self.run_once()
            except (MQError, OSError, ValueError) as e:  # keep cleaning on the next pass
                log.exception("disk cleanup pass failed: %s", e)
            self._wait_for_pass(self.cfg.clean_resource_interval_ms / 1000)

    def _wait_for_pass(self, seconds: float) -> None:
        """Wait for the next pass (or a wakeup). While writes are refused for a full disk,
        look at the disk every ``FULL_DISK_RECHECK_S`` meanwhile: the next pass may be a
        minute away (the first one after a start on a full disk), and writes must resume
        as soon as space is freed."""
        deadline = time.monotonic() + seconds
        while not self.stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._full_reason is None:
                self.wait_for_running(left)
                return
            if self._wakeup.wait(min(left, FULL_DISK_RECHECK_S)):
                self._wakeup.clear()
                return
            try:
                self._apply_disk_state(self.policy.decide(self.hour_of(self.clock()), self._usage()))
            except (MQError, OSError, ValueError) as e:
                log.warning("disk use check failed: %s", e)

    def request_manual_delete(self, passes: int = MANUAL_DELETE_PASSES) -> None:
        """Admin TRIGGER_DELETE_FILES: delete expired files in the next ``passes`` passes
        whatever the hour."""
        self._manual_passes = passes
        self.wakeup()

    def clean_now(self) -> CleanupReport:
        """One pass now, on the caller's thread (admin CLEAN_EXPIRED_CONSUMEQUEUE): expired
        consume-queue and index files go; commitlog files only as a scheduled pass would."""
        with self._pass_lock:
            return self.run_once()

    @property
    def disk_full(self) -> bool:
        return self._full_reason is not None

    # --- one pass -----------------------------------------------------------------------------
    def run_once(self) -> CleanupReport:
        now = self.clock()
        manual = self._manual_passes > 0
        decision = self.policy.decide(self.hour_of(now), self._usage(), manual)
        self._apply_disk_state(decision)
        report = CleanupReport(decision)
        if decision.delete_commitlog:
            if manual:
                self._manual_passes -= 1
            self._delete_commitlog(now, decision, report)
        stuck = not report.count("commitlog") and decision.trigger in (
            CleanTrigger.DISK_FULL, CleanTrigger.DISK_CLEAN_FORCIBLY, CleanTrigger.DISK_ABOVE_MAX)
        if not stuck:
            self._stuck_warned_ms = None
        elif self._stuck_warned_ms is None or now - self._stuck_warned_ms >= STUCK_WARNING_INTERVAL_MS:
            self._stuck_warned_ms = now
            log.warning("disk use %.1f%% is high (%s) but no commitlog file could be deleted (%s); said again "
                        "every %d min while it lasts", decision.usage_percent, self.policy.why(decision),
                        "a reader holds the oldest" if report.held else "the files left are unexpired or the one "
                        "being written", STUCK_WARNING_INTERVAL_MS // 60_000)
        self._delete_logic_files(now, report)
        # files unlinked while a reader held them: unmap those whose views are gone by now
        report.pending_close = self.store.commitlog.queue.retry_pending_close() + sum(
            cq.queue.retry_pending_close() for cq in self.store.queues)
        return report

    def _usage(self) -> float | None:
        """Highest use of the partitions holding the commitlog and the consume queues."""
        cfg = self.cfg
        worst = None
        for path in (cfg.commitlog_dir, cfg.consume_queue_dir):
            if not os.path.isdir(path):
                path = cfg.store_path
            try:
                used = float(self.disk_usage(path))
            except OSError as e:
                if not self._usage_error_logged:
                    log.warning("cannot measure disk use of %s: %s; only deleteWhen applies", path, e)
                    self._usage_error_logged = True
                continue
            worst = used if worst is None else max(worst, used)
        return worst

    def _apply_disk_state(self, decision: CleanupDecision) -> None:
        cfg = self.cfg
        if decision.mark_disk_full:
            reason = (f"the disk is full: {decision.usage_percent:.1f}% of the store's partition is used "
                      f"(diskSpaceWarningLevelRatio {cfg.disk_space_warning_level_ratio}%); writes resume once "
                      f"cleanup brings it to {cfg.disk_space_clean_forcibly_ratio}% or less - free space or "
                      f"add disk")
            if self._full_reason is None:
                log.error("disk use %.1f%% > %d%%: refusing writes until space is freed",
                          decision.usage_percent, cfg.disk_space_warning_level_ratio)
            if not self.store.replace_refusal(None, reason):
                self.store.replace_refusal(self._full_reason, reason)
            self._full_reason = reason
        elif decision.mark_disk_full is False and self._full_reason is not None:
            self.store.replace_refusal(self._full_reason, None)
            self._full_reason = None
            log.info("disk use %.1f%% is OK again: accepting writes", decision.usage_percent)

    def _delete_commitlog(self, now: int, decision: CleanupDecision, report: CleanupReport) -> None:
        queue = self.store.commitlog.queue
        force_ms = self.cfg.destroy_mapped_file_interval_forcibly_ms
        for n in range(self.cfg.delete_files_batch_max):
            files = queue.files
            if len(files) <= 1:
                return
            mf = files[0]
            modified = self.last_modified_ms(mf)
            reason = self.policy.file_reason(decision, now, modified)
            if reason is None:
                return
            if n and self.delete_interval_ms and self._stopped.wait(self.delete_interval_ms / 1000):
                return  # shutting down: spread deletions no further
            # counted before the file goes: the consume queues still point into it
            losses = self._losses(mf.file_from_offset, mf.end_offset)
            gone, outcome = queue.destroy_first(now, force_ms)
            if gone is not mf:
                return  # the queue changed under us (only cleanup deletes files): next pass
            assert outcome is not None  # (None only with no file to delete)
            if outcome is DestroyOutcome.HELD:
                log.info("keeping commitlog file %s for now: a reader holds it (deleted anyway after %d ms)",
                         mf.path, force_ms)
                report.held.append(mf.path)
                return
            self._record(report, "commitlog", mf.path, now - modified, reason, outcome)
            self._account_loss(report, mf, losses, now < modified + self.policy.reserved_ms)

    def _losses(self, lo: int, hi: int) -> list[MessageLoss]:
        """Per topic, messages in commitlog [lo, hi) and how many each consuming group has
        not consumed yet (retry and system topics included: they are messages too)."""
        per_topic: dict[str, MessageLoss] = {}
        committed_of: dict[str, dict[str, dict[int, int]]] = {}
        for cq in self.store.queues:
            a, b = cq.offsets_in_phy_range(lo, hi)
            if b <= a:
                continue
            loss = per_topic.setdefault(cq.topic, MessageLoss(cq.topic, 0))
            loss.messages += b - a
            if self.committed_offsets is None:
                continue
            if cq.topic not in committed_of:
                committed_of[cq.topic] = self.committed_offsets(cq.topic)
            for group, queues in committed_of[cq.topic].items():
                done = queues.get(cq.queue_id, 0)
                if done < b:
                    loss.unconsumed[group] = loss.unconsumed.get(group, 0) + b - max(a, done)
        return list(per_topic.values())

    def _account_loss(self, report: CleanupReport, mf: MappedFile, losses: list[MessageLoss],
                      unexpired: bool) -> None:
        st = self.stats
        st.commitlog_files_deleted += 1
        st.commitlog_files_deleted_forcibly += unexpired
        report.losses.extend(losses)
        for loss in losses:
            st.messages_deleted += loss.messages
            if loss.unconsumed:
                st.unconsumed_messages_deleted += max(loss.unconsumed.values())
                for group, n in loss.unconsumed.items():
                    key = (loss.topic, group)
                    st.unconsumed_by_group[key] = st.unconsumed_by_group.get(key, 0) + n
                log.warning("deleting commitlog file %s lost messages not yet consumed: topic %s, %s "
                            "(of %d messages of the topic in the file)", mf.name, loss.topic,
                            ", ".join(f"group {g}: {n}" for g, n in sorted(loss.unconsumed.items())),
                            loss.messages)

    def _delete_logic_files(self, now: int, report: CleanupReport) -> None:
        cl_min = self.store.commitlog.min_offset
        if cl_min <= self._logic_clean_min:
            return
        force_ms = self.cfg.destroy_mapped_file_interval_forcibly_ms
        complete = True
        for cq in self.store.queues:
            for mf, outcome, last_phy, modified in cq.delete_expired(cl_min, now, force_ms, self.last_modified_ms):
                why = f"its last unit points at commitlog offset {last_phy} < commitlog min offset {cl_min}"
                self._record(report, "consumequeue", mf.path, now - modified, why, outcome)
            first = cq.queue.files[0] if len(cq.queue.files) > 1 else None
            if first is not None and first.first_destroy_attempt_ms is not None:
                complete = False  # a reader held it (HELD is the only refusal): retry next pass
                report.held.append(first.path)
        if self.store.index is not None:
            for path, end_phy, modified in self.store.index.delete_expired(cl_min, self.last_modified_ms):
                why = f"its last entry points at commitlog offset {end_phy} < commitlog min offset {cl_min}"
                self._record(report, "index", path, now - modified, why, DestroyOutcome.DESTROYED)
        if complete:
            self._logic_clean_min = cl_min

    @staticmethod
    def _record(report: CleanupReport, kind: str, path: str, age_ms: int, reason: str,
                outcome: DestroyOutcome) -> None:
        forced = " (a reader still held it: forced)" if outcome is DestroyOutcome.FORCED else ""
        log.info("deleted %s file %s, age %.1f h: %s%s", kind, path, age_ms / HOUR_MS, reason, forced)
        report.deleted.append(DeletedFile(kind, path, age_ms, reason, outcome))
