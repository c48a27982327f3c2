# The compiled broker pipeline kernels (mqcore/_pipeline.pyx); the twin is mqcore/_pipeline_py.py.
from typing import Any

IMPLEMENTATION: str

def parse_plain_sends(buf: Any, start: int, end: int, max_frame_bytes: int, cluster: bytes,
                      indexed: bool) -> tuple[list[tuple[int, str, int, int, int, int, int, bytes, int, list[int],
                                                         bytes, int]], int]: ...
def send_answer(before_queue_id: bytes, before_msg_id: bytes, host_hex: bytes, queue_id: int, phy: int,
                queue_offset: int, opaque: int, version: int) -> bytes: ...

# --- PULL (mqcore/_pipeline_pull.pxi) ---
def parse_pulls(buf: Any, start: int, end: int, max_frame_bytes: int
                ) -> tuple[list[tuple[int, str, str, int, int, int, int, int, int, str | None, str | None, int]],
                           int]: ...
def pull_answer(code: int, opaque: int, remark: bytes, next_begin_offset: int, min_offset: int, max_offset: int,
                body_len: int, version: int) -> bytes: ...
