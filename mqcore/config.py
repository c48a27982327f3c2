"""Configuration: one frozen dataclass per owner, defaults from RocketMQ 4.9.

Library code never reads ``os.environ`` or ``sys.argv``: entry points build these
objects (``mqcore.broker.conf`` turns a RocketMQ ``broker.conf`` into them).
"""
from __future__ import annotations

import dataclasses
import enum
import os
import re

from mqcore.errors import ConfigError, FieldConfigError
from mqcore.format import layout as L
from mqcore.format.delays import DEFAULT_DELAY_LEVELS, parse_delay_levels  # noqa: F401 - kept importable here


class FlushDiskType(enum.Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


def _require(ok: bool, field: str, problem: str) -> None:
    if not ok:
        raise FieldConfigError(field, problem)


_PATH_FIELDS = ("store_path_commitlog", "store_path_consume_queue", "store_path_index", "store_checkpoint",
                "abort_file")


def default_store_path() -> str:
    return os.path.join(os.path.expanduser("~"), "store")


@dataclasses.dataclass(frozen=True)
class StoreConfig:
    """Everything the message store needs (``MessageStoreConfig``)."""

    store_path: str = dataclasses.field(default_factory=default_store_path)
    commitlog_file_size_bytes: int = 1 << 30
    consume_queue_file_size_bytes: int = 300_000 * L.CQ_UNIT_SIZE
    index_slots: int = L.DEFAULT_INDEX_SLOTS
    index_entries: int = L.DEFAULT_INDEX_ENTRIES
    message_index_enable: bool = True
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    flush_interval_commitlog_ms: int = 500
    flush_commitlog_least_pages: int = 4
    flush_commitlog_thorough_interval_ms: int = 10_000
    flush_interval_consume_queue_ms: int = 1000
    #: a consume-queue file is flushed once this many of its pages are dirty (RocketMQ's default),
    #: so a queue that gets a few units a second costs no msync each interval; crash recovery
    #: rebuilds units from the commitlog
    flush_consume_queue_least_pages: int = 2
    #: ms between flushes of every consume-queue file however few pages are dirty; the
    #: checkpoint's consume-queue time moves only then
    flush_consume_queue_thorough_interval_ms: int = 60_000
    sync_flush_timeout_ms: int = 5000
    max_message_size_bytes: int = 4 * 1024 * 1024
    message_delay_level: str = DEFAULT_DELAY_LEVELS
    check_crc_on_recover: bool = True
    #: bytes ahead of the commitlog write position kept faulted in (0 = off); see store/prefault.py
    prefault_window_bytes: int = 32 << 20
    #: flushed store pages more than this far behind the write position are dropped from the
    #: broker's resident memory (the page cache keeps them; a read maps them back). Consume
    #: queues and the timerlog keep 1/16 of it. 0 = keep every page mapped; see store/mapped_file.py
    resident_behind_bytes: int = 8 << 20
    #: stamped as the CLUSTER property of every stored message, as a 4.9 broker does
    broker_cluster_name: str = "DefaultCluster"
    max_msgs_num_batch: int = 64
    default_query_max_num: int = 32
    #: per pull answer. Not RocketMQ's (256 KiB, 32 messages): the push consumer's default pull
    #: batch is 1000 (mqcore/client/config.py), and a cap of 32 would cut every pull to 32
    max_transfer_bytes_on_message_in_memory: int = 4 * 1024 * 1024
    max_transfer_count_on_message_in_memory: int = 1024
    # disk cleanup (CleanCommitLogService)
    file_reserved_time_hours: float = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    clean_file_forcibly_enable: bool = True
    clean_resource_interval_ms: int = 10_000
    #: first cleanup pass this long after start (RocketMQ: 60 s)
    clean_resource_first_delay_ms: int = 60_000
    delete_files_batch_max: int = 10
    destroy_mapped_file_interval_forcibly_ms: int = 120_000
    # timer messages (RocketMQ 5's TimerMessageStore; mqcore.store.timer)
    #: hold messages with TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS until due; off: refused
    timer_wheel_enable: bool = True
    #: farthest due time a send may name (timerMaxDelaySec: 3 days)
    timer_max_delay_sec: int = 3 * 24 * 3600
    #: the width of a wheel slot (timerPrecisionMs): delivery is within this of the due time
    timer_precision_ms: int = 1000
    #: timerlog file size (mappedFileSizeTimerLog)
    timerlog_file_size_bytes: int = 100 * 1024 * 1024
    #: timer files and checkpoint written to disk this often (timerFlushIntervalMs)
    timer_flush_interval_ms: int = 1000
    # where the parts live; None = under store_path, as StorePathConfigHelper derives them
    #: commitlog directory (storePathCommitLog), e.g. on a disk of its own
    store_path_commitlog: str | None = None
    #: consume queue directory (storePathConsumeQueue)
    store_path_consume_queue: str | None = None
    #: index directory (storePathIndex)
    store_path_index: str | None = None
    #: checkpoint file (storeCheckpoint)
    store_checkpoint: str | None = None
    #: abort marker file (abortFile)
    abort_file: str | None = None

    def __post_init__(self) -> None:
        _require(self.commitlog_file_size_bytes >= 4096, "commitlog_file_size_bytes", "must be at least 4096")
        _require(self.consume_queue_file_size_bytes > 0 and not self.consume_queue_file_size_bytes % L.CQ_UNIT_SIZE,
                 "consume_queue_file_size_bytes", "must be a positive multiple of 20")
        _require(self.index_slots > 0, "index_slots", "must be positive")
        _require(self.index_entries > 1, "index_entries", "must be at least 2")
        _require(self.max_message_size_bytes > 0, "max_message_size_bytes", "must be positive")
        _require(self.file_reserved_time_hours >= 0, "file_reserved_time_hours", "must be 0 or more hours")
        _require(10 <= self.disk_max_used_space_ratio <= 95, "disk_max_used_space_ratio",
                 "must be a percentage in 10..95")
        for name in ("disk_space_clean_forcibly_ratio", "disk_space_warning_level_ratio"):
            _require(1 <= getattr(self, name) <= 100, name, "must be a percentage in 1..100")
        for name in ("flush_interval_commitlog_ms", "flush_interval_consume_queue_ms", "sync_flush_timeout_ms",
                     "clean_resource_interval_ms", "max_msgs_num_batch", "default_query_max_num",
                     "delete_files_batch_max"):
            _require(getattr(self, name) > 0, name, "must be positive")
        for name in ("flush_commitlog_least_pages", "flush_commitlog_thorough_interval_ms", "prefault_window_bytes",
                     "flush_consume_queue_least_pages", "flush_consume_queue_thorough_interval_ms",
                     "resident_behind_bytes",
                     "max_transfer_bytes_on_message_in_memory", "max_transfer_count_on_message_in_memory",
                     "clean_resource_first_delay_ms", "destroy_mapped_file_interval_forcibly_ms"):
            _require(getattr(self, name) >= 0, name, "must be 0 or more")
        _require(self.timer_max_delay_sec > 0, "timer_max_delay_sec", "must be positive")
        _require(self.timer_precision_ms > 0 and not 1000 % self.timer_precision_ms, "timer_precision_ms",
                 "must divide 1000 (100, 200, 500, 1000 ...)")
        _require(self.timerlog_file_size_bytes >= 4096, "timerlog_file_size_bytes", "must be at least 4096")
        _require(self.timer_flush_interval_ms > 0, "timer_flush_interval_ms", "must be positive")
        for name in _PATH_FIELDS:
            value = getattr(self, name)
            _require(value is None or bool(value.strip()), name, "is empty")
        if self.max_message_size_bytes + 64 * 1024 > self.commitlog_file_size_bytes:
            # a record must always fit in an empty commitlog file (small files are for tests)
            object.__setattr__(self, "max_message_size_bytes",
                               min(self.max_message_size_bytes, self.commitlog_file_size_bytes // 2))
        parse_delay_levels(self.message_delay_level)
        if isinstance(self.flush_disk_type, str):
            object.__setattr__(self, "flush_disk_type", FlushDiskType(self.flush_disk_type))

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.message_delay_level)

    @property
    def index_file_size_bytes(self) -> int:
        return L.index_file_size(self.index_slots, self.index_entries)

    # paths (StorePathConfigHelper), derived in one place
    @property
    def commitlog_dir(self) -> str:
        return self.store_path_commitlog or os.path.join(self.store_path, L.COMMITLOG_DIR)

    @property
    def consume_queue_dir(self) -> str:
        return self.store_path_consume_queue or os.path.join(self.store_path, L.CONSUME_QUEUE_DIR)

    @property
    def index_dir(self) -> str:
        return self.store_path_index or os.path.join(self.store_path, L.INDEX_DIR)

    @property
    def config_dir(self) -> str:
        return os.path.join(self.store_path, L.CONFIG_DIR)

    @property
    def checkpoint_path(self) -> str:
        return self.store_checkpoint or os.path.join(self.store_path, L.CHECKPOINT_FILE)

    @property
    def abort_path(self) -> str:
        return self.abort_file or os.path.join(self.store_path, L.ABORT_FILE)

    @property
    def timerlog_dir(self) -> str:
        return os.path.join(self.store_path, "timerlog")

    @property
    def lock_path(self) -> str:
        return os.path.join(self.store_path, L.LOCK_FILE)


def read_properties(text: str) -> dict[str, str]:
    """Java properties: ``key=value`` or ``key: value``, ``#``/``!`` comments, ``\\`` line joins."""
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            logical += line[:-1]
            continue
        logical += line
        m = re.match(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$", logical)
        if m:
            out[m.group(1)] = m.group(2).strip()
        elif logical:
            out[logical] = ""
        logical = ""
    return out
