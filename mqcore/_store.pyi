# Type stub of the compiled kernels (mqcore/_store.pyx). The same signatures as the
# StoreKernels Protocol in mqcore/kernel_api.py; tests/test_kernel_api.py checks both with mypy.
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from typing_extensions import disjoint_base

import numpy as np

from mqcore.format.record import DecodedRecord
from mqcore.kernel_api import Buffer
from mqcore.format.scans import BatchMeasure, IndexKeys, QueueSelection, QueueUnits, RecordScan

IMPLEMENTATION: str
DISPATCH_DTYPE: np.dtype
DECODED_FIELDS: tuple[str, ...]

# --- hashes ----------------------------------------------------------------------------
def java_hash(s: str) -> int: ...
def java_hash_utf8(b: Buffer) -> int: ...
def tags_code(tags: str | None) -> int: ...
def index_hash(h: int) -> int: ...
def key_hashes(topic: str, uniq: str | None, keys: str | None) -> list[int]: ...

# --- records ---------------------------------------------------------------------------
def record_size(body_len: int, topic_len: int, props_len: int, sys_flag: int) -> int: ...
def body_crc(data: Buffer) -> int: ...
def encode_record(dst: Buffer, pos: int, topic: bytes, queue_id: int, flag: int, queue_offset: int,
                  phy_offset: int, sys_flag: int, born_timestamp: int, born_host: bytes,
                  store_timestamp: int, store_host: bytes, reconsume_times: int,
                  prepared_offset: int, body: Buffer, properties: bytes) -> int: ...
def write_blank(dst: Buffer, pos: int, size: int) -> None: ...
def scan_records(buf: Buffer, start: int, end: int, base_offset: int, check_crc: bool,
                 delay_ms: Any, max_count: int) -> RecordScan: ...
def decode_records(buf: Buffer, start: int, end: int, max_count: int,
                   check_crc: bool = False) -> list[DecodedRecord]: ...
MESSAGE_SLOTS: tuple[str, ...]

def decode_message_objects(buf: Buffer, start: int, end: int, max_count: int, cls: type,
                           broker_name: str | None, props_suffix: bytes) -> tuple[list[Any], bool]: ...

# --- wire batches ----------------------------------------------------------------------
def encode_batch_items(items: Sequence[tuple[int, bytes, bytes]]) -> bytes: ...
def encode_batch_messages(items: Sequence[tuple[int, bytes, Mapping[str, str]]]) -> bytes: ...
def encode_batch_message(flag: int, body: bytes, props: Mapping[str, str]) -> bytes: ...
def measure_batch(items: Buffer, topic_len: int, extra_props_len: int,
                  sys_flag: int) -> BatchMeasure: ...
def encode_batch(dst: Buffer, pos: int, items: Buffer, topic: bytes, queue_id: int,
                 first_queue_offset: int, phy_offset: int, sys_flag: int, born_timestamp: int,
                 born_host: bytes, store_timestamp: int, store_host: bytes, extra_props: bytes) -> int: ...

# --- consume queues --------------------------------------------------------------------
def cq_write(dst: Buffer, pos: int, phys: Any, sizes: Any, tags: Any) -> int: ...
def cq_count_valid(buf: Buffer, start: int, end: int) -> int: ...
def cq_read(buf: Buffer, start: int, count: int) -> QueueUnits: ...
def cq_select(buf: Buffer, start: int, count: int, codes: Any, max_count: int,
              max_bytes: int) -> QueueSelection: ...
def cq_runs(buf: Buffer, start: int, count: int, codes: Any, max_count: int, max_bytes: int,
            min_phy: int, file_size: int) -> tuple[int, list[tuple[int, int, int]], bool]: ...
def pull_lookup(cq: Any, commitlog: Any, offset: int, max_msg_nums: int, cap_count: int, cap_bytes: int,
                codes: Any, filter_units: int) -> tuple[str, int, int, int, list[memoryview], int, int] | None: ...
# --- the store's hot state (C bases of the store's classes: mqcore/store/hot_state.py) ---------
@disjoint_base
class MappedFileCore:
    file_from_offset: int
    file_size: int
    wrote_position: int
    flushed_position: int
    reserved_end: int
    buf: Any
    _view_lock: Any
    reserved: bool
    _closed: bool
@disjoint_base
class MappedFileQueueCore:
    files: list[Any]
@disjoint_base
class ConsumeQueueCore:
    queue: Any
    max_physic_offset: int
    min_logic_offset: int
@disjoint_base
class MessageWriterCore:
    cfg: Any
    wait_flushed: Any
    refuse_reason: Any
    disk_full_reason: Any
    last_store_timestamp: int
@disjoint_base
class DispatcherCore:
    no_new_queues_below: int
    last_store_timestamp: int
@disjoint_base
class IndexServiceCore:
    files: list[Any]
@disjoint_base
class IndexFileCore:
    mf: Any

@disjoint_base  # a cdef class (a C layout of its own)
class PullReader:
    def __init__(self, commitlog: Any) -> None: ...
    def lookup(self, cq: Any, offset: int, max_msg_nums: int, cap_count: int, cap_bytes: int, codes: Any,
               filter_units: int) -> tuple[str, int, int, int, list[memoryview], int, int] | None: ...
def cq_search_time(buf: Buffer, lo: int, hi: int, timestamp: int,
                   store_time_of: Callable[[int, int], int]) -> int: ...

# --- index files -----------------------------------------------------------------------
def index_keys(buf: Buffer, table: np.ndarray,
               topics: Sequence[bytes]) -> IndexKeys: ...
def index_put(buf: Buffer, slots: int, max_entries: int, hashes: Any, phys: Any, timestamps: Any,
              start: int) -> int: ...
def index_put_one(buf: Buffer, slots: int, max_entries: int, key_hash: int, phy: int,
                  timestamp: int) -> int: ...
def index_query(buf: Buffer, slots: int, max_entries: int, key_hash: int, begin_ts: int, end_ts: int,
                max_num: int) -> tuple[list[int], bool]: ...

# --- page cache ------------------------------------------------------------------------
def prefault(buf: Buffer, start: int, end: int, page_size: int = 4096) -> int: ...

