# Type stub of the compiled column kernels (mqcore/_columns.pyx). The same signatures as the
# ColumnKernels Protocol in mqcore/kernel_api.py; tests/test_kernel_api.py checks both with mypy.
from collections.abc import Sequence
from typing import Any

from mqcore.format.scans import ColumnBatch, RecordWalk
from mqcore.kernel_api import Buffer

IMPLEMENTATION: str
FIXED_COLUMNS: tuple[tuple[str, Any], ...]
STRING_COLUMNS: tuple[str, ...]
WITH_BODY: int
CHECK_CRC: int
SKIP_CORRUPT: int
BIT_RETRY: int
BIT_DLQ: int
BIT_DELAYED: int
BIT_COMPRESSED: int
BIT_HAS_TAGS: int
COLUMN_SKIP_FLAGS: tuple[tuple[str, int], ...]

def format_host(raw: bytes) -> bytes: ...
def find_record(buf: Buffer, start: int, stop: int, limit: int, base_offset: int,
                check_crc: bool) -> int: ...
def decode_columns(buf: Buffer, start: int, stop: int, limit: int, base_offset: int, max_rows: int,
                   max_bytes: int, topics: Sequence[bytes] | None, min_store_ts: int, max_store_ts: int,
                   flags: int) -> ColumnBatch: ...
def decode_columns_at(buf: Buffer, positions: Any, first: int, limit: int, base_offset: int,
                      max_rows: int, max_bytes: int, topics: Sequence[bytes] | None, min_store_ts: int,
                      max_store_ts: int, flags: int) -> ColumnBatch: ...
def walk_records(buf: Buffer, start: int, limit: int,
                 check_crc: bool) -> RecordWalk: ...
