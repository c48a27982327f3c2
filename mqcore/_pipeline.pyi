# The compiled broker pipeline kernels (mqcore/_pipeline.pyx); the twin is mqcore/_pipeline_py.py.
from collections.abc import Callable
from typing import Any

IMPLEMENTATION: str

def parse_plain_sends(buf: Any, start: int, end: int, max_frame_bytes: int, cluster: bytes,
                      indexed: bool) -> tuple[list[tuple[int, str, int, int, int, int, int, bytes, int, list[int],
                                                         bytes, int]], int]: ...
def send_answer(before_queue_id: bytes, before_msg_id: bytes, host_hex: bytes, queue_id: int, phy: int,
                queue_offset: int, opaque: int, version: int) -> bytes: ...
def send_answers(before_queue_id: bytes, before_msg_id: bytes, host_hex: bytes, items: list[Any],
                 stored: list[tuple[int, int, int]], version: int) -> bytes: ...
def append_plain(commitlog: Any, pos: int, limit: int, phy: int, topic: bytes, queue_id: int, flag: int,
                 queue_offset: int, sys_flag: int, born_timestamp: int, born_host: bytes, store_timestamp: int,
                 store_host: bytes, reconsume_times: int, body: bytes, properties: bytes, consume_queue: Any,
                 unit_pos: int, tags_code: int, index: Any, slots: int, max_entries: int,
                 key_hashes: list[int]) -> tuple[int, bool]: ...

# --- PULL (mqcore/_pipeline_pull.pxi) ---
def parse_pulls(buf: Any, start: int, end: int, max_frame_bytes: int
                ) -> tuple[list[tuple[int, str, str, int, int, int, int, int, int, str | None, str | None, int]],
                           int]: ...
def pull_answer(code: int, opaque: int, remark: bytes, next_begin_offset: int, min_offset: int, max_offset: int,
                body_len: int, version: int) -> bytes: ...

# the broker's shared state the cores update in C (mqcore/_broker_state.pxi)
class Histogram:
    @property
    def bounds(self) -> tuple[float, ...]: ...
    @property
    def counts(self) -> list[int]: ...
    sum: float
    def __init__(self, bounds: tuple[float, ...]) -> None: ...
    def observe(self, value: float) -> None: ...
    def cumulative(self) -> list[tuple[str, int]]: ...

class ArrivalGate:
    @property
    def listener(self) -> Callable[[str, int, int], None]: ...
    waiting: int
    def __init__(self, listener: Callable[[str, int, int], None]) -> None: ...
    def __call__(self, topic: str, queue_id: int, max_offset: int) -> None: ...

# HMAC-SHA1(key, a + b) as the send core checks ACL signatures (mqcore/_sha1.h); the twin has none
def hmac_sha1(key: bytes, a: bytes, b: bytes) -> bytes: ...

# the connection core (mqcore/_send_core.pxi); the twin has none: the Python Channel and
# SendPipeline.__call__ / MessageWriter.put_plain_sends_py run the same stages
class SendCore:
    pipeline: Any
    def __init__(self, pipeline: Any, peer_host: Any, not_allowed: Any, version: int, acl: Any = None) -> None: ...
    def take(self, channel: Any, view: Any, start: int, end: int) -> tuple[int, bytes | None]: ...

class ReceiverCore:
    # the C base of a C core's FrameReceiver (mqcore/_receiver_core.pxi): the ring's fields
    _ring: bytearray
    _ring_view: memoryview
    _start: int
    _end: int
    _offered: int
    _big_filled: int
    _grow: bool
    _big_view: memoryview | None

class ChannelCore:
    _receiver_core: type[ReceiverCore]
    last_activity: float
    def get_buffer(self, sizehint: int) -> memoryview: ...
    def buffer_updated(self, nbytes: int) -> None: ...

class StorePlainSends:
    def __init__(self, writer: Any) -> None: ...
    def __call__(self, items: list[Any], born_host: bytes, store_host: bytes) -> tuple[list[tuple[int, int, int]], Any]: ...

# the pull pipeline's connection core (mqcore/_pipeline_pull.pxi); PullPipeline.__call__ runs the
# same stages with the twin
class PullCore:
    pipeline: Any
    def __init__(self, pipeline: Any, names_pass: Any, code_by_name: dict[str, int], kinds: dict[int, str],
                 codes: tuple[int, int, int], filter_units: int, version: int) -> None: ...
    def take(self, channel: Any, view: Any, start: int, end: int) -> tuple[int, list[Any] | None]: ...
