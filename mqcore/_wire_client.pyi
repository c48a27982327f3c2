"""Types of the compiled client wire kernels (mqcore/_wire_client.pyx); the twin is mqcore/_wire_client_py.py.
``tests/test_kernel_api.py`` checks that both satisfy ``mqcore.kernel_api.WireClientKernels``."""
from typing import Any

Buffer = Any

EXCHANGE_WRITE_TIMEOUT: int
EXCHANGE_READ_TIMEOUT: int
EXCHANGE_PEER_CLOSED: int
EXCHANGE_WRITE_FAILED: int
EXCHANGE_READ_FAILED: int
EXCHANGE_BUFFER_BYTES: int
EXCHANGE_WAIT_SLICE_MS: int

def encode_request_frame(code: int, language: str, version: int, opaque: int, flag: int,
                         keys: tuple[str, ...], values: tuple[Any, ...], body: Buffer) -> bytes | None: ...
def decode_json_answer(header: Buffer) -> tuple[int, int, int, str | None, dict[str, str]] | None: ...
def exchange(fd: int, frame: Buffer, opaque: int,
             deadline: float) -> tuple[int, int, int, str | None, dict[str, str]] | bytes | int: ...


class SendTemplate:
    mq: Any
    queue_id: int
    signed: bool
    def __init__(self, head: bytes, mid: bytes, tail: bytes, mq: Any, queue_id: int, result_type: Any,
                 send_ok: Any, mid2: bytes = ..., sign_prefix: bytes | None = ..., sign_suffix: bytes | None = ...,
                 secret: bytes | None = ...) -> None: ...
    def frame(self, opaque: int, born: int, flag: int, properties: dict[str, str], body: bytes) -> bytes | None: ...
    def send(self, fd: int, opaque: int, born: int, flag: int, properties: dict[str, str], body: bytes,
             deadline: float, uniq_id: str) -> Any: ...
    def read_answer(self, header: Buffer, opaque: int, uniq_id: str) -> Any: ...
    def result(self, answer: tuple[int, int, int, str | None, dict[str, str]], uniq_id: str) -> Any: ...

def send_template(code: int, language: str, version: int, producer_group: str, topic: str, default_topic: str,
                  default_topic_queue_nums: int, queue_id: int, broker_name: str, mq: Any, result_type: Any,
                  send_ok: Any, access_key: str | None = ..., secret_key: str | None = ...) -> SendTemplate | None: ...

# --- auto-batching (the twin's AutoBatcher / PendingBatch have the contract) ---
JOIN_CHECK: int
JOIN_WAIT: int
BATCH_LAUNCH: int
BATCH_LEAVE_SOON: int
BATCH_ARM_TIMER: int

class UniqIdWriter:
    def __init__(self, ids: Any, system_clock: bool) -> None: ...
    def next_id(self) -> str: ...
    def stamp_all(self, msgs: Any) -> list[str]: ...

class PendingBatch:
    key: Any
    topic: str
    queue: Any
    tags: str | None
    wait: bool
    uniq_ids: list[str]
    open: bool
    timer: Any
    launched: bool
    window_slots: int
    externals: list[tuple[int, Any]] | None
    condition: Any
    state: str
    result: Any
    error: BaseException | None
    watchers: list[Any] | None
    def __init__(self, key: Any, topic: str, queue: Any, tags: str | None, wait: bool, condition: Any,
                 result_type: Any) -> None: ...
    @property
    def count(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def body(self) -> memoryview: ...
    @property
    def capacity(self) -> int: ...
    def drop_body(self) -> None: ...
    def track(self, future: Any) -> None: ...
    def settled_result(self, index: int) -> Any: ...
    def result_for(self, index: int) -> Any: ...

class WindowSlots:
    def __init__(self, count: int) -> None: ...
    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool: ...
    def release(self) -> None: ...
    def release_many(self, count: int) -> None: ...
    @property
    def free(self) -> int: ...

class AutoBatcher:
    lock: Any
    pending: dict[Any, Any]
    inflight_per_key: dict[Any, int]
    held_bytes: int
    closed: bool
    batch_max_bytes: int
    total_batch_max_bytes: int
    max_inflight_batches: int
    max_message_bytes: int
    condition: Any
    recent_batch_bytes: int
    spares: list[bytearray]
    def __init__(self, *, lock: Any, batch_max_bytes: int, total_batch_max_bytes: int, max_inflight_batches: int,
                 max_message_bytes: int, checked_topics: Any, ids: Any, system_clock: bool, future_type: Any,
                 condition: Any, result_type: Any, on_batch: Any, window: Any = None) -> None: ...
    def add(self, msg: Any, queue: Any = None, future: Any = None, window_slot: int = 0,
            checked: bool = False) -> Any: ...
    def detach(self, batch: Any) -> Any: ...

def gc_track(obj: Any) -> None: ...

# --- concurrent consumption: a run of listener calls in one step (mqcore/_consume_run.pxi) ---
RUN_EXHAUSTED: int
RUN_SETTLE: int
RUN_SLOW: int
RUN_OUTCOME: int
RUN_STOPPED: int

class ConsumeRun:
    msgs: list[Any]
    pos: int
    pq: Any
    mq: Any
    def __init__(self, msgs: list[Any], pq: Any, mq: Any) -> None: ...
    @property
    def remaining(self) -> int: ...
    def claim(self, n: int) -> list[Any] | None: ...
    def close(self) -> None: ...

class DrainerState:
    done: list[Any]
    pq: Any
    mq: Any
    outcome: Any
    began: float
    def __init__(self) -> None: ...
    def take_done(self) -> tuple[list[Any], Any, Any]: ...
    def set_queue(self, pq: Any, mq: Any) -> None: ...
    def add_done(self, msgs: list[Any]) -> None: ...

class ListenerRunner:
    listener: Any
    context_type: Any
    success: Any
    reset_retry: Any
    clock: Any
    retry_topic: str
    stamp_key: str
    stamp_prefix: bytes
    property_separator: bytes
    batch_size: int
    settle_every: int
    system_clock: bool
    stopped: bool
    slow_s: float
    consumed_ok: int
    def __init__(self, listener: Any, context_type: Any, success: Any, batch_size: int, retry_topic: str,
                 reset_retry: Any, clock: Any, system_clock: bool, stamp_key: str, stamp_prefix: bytes,
                 property_separator: bytes, slow_s: float, settle_every: int) -> None: ...
    def run(self, run: ConsumeRun, state: DrainerState) -> int: ...
