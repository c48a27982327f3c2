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

def encode_request_frame(code: int, language: str, version: int, opaque: int, flag: int,
                         keys: tuple[str, ...], values: tuple[Any, ...], body: Buffer) -> bytes | None: ...
def decode_json_answer(header: Buffer) -> tuple[int, int, int, str | None, dict[str, str]] | None: ...
def exchange(fd: int, frame: Buffer, opaque: int,
             deadline: float) -> tuple[int, int, int, str | None, dict[str, str]] | bytes | int: ...


class SendTemplate:
    mq: Any
    queue_id: int
    def __init__(self, head: bytes, mid: bytes, tail: bytes, mq: Any, queue_id: int, result_type: Any,
                 send_ok: Any) -> None: ...
    def frame(self, opaque: int, born: int, flag: int, properties: dict[str, str], body: bytes) -> bytes | None: ...
    def send(self, fd: int, opaque: int, born: int, flag: int, properties: dict[str, str], body: bytes,
             deadline: float, uniq_id: str) -> Any: ...
    def read_answer(self, header: Buffer, opaque: int, uniq_id: str) -> Any: ...
    def result(self, answer: tuple[int, int, int, str | None, dict[str, str]], uniq_id: str) -> Any: ...

def send_template(code: int, language: str, version: int, producer_group: str, topic: str, default_topic: str,
                  default_topic_queue_nums: int, queue_id: int, broker_name: str, mq: Any, result_type: Any,
                  send_ok: Any) -> SendTemplate | None: ...
