"""Status enums and result objects for expected store outcomes.

A put that was refused, a pull that found nothing: these are statuses, not
exceptions (RocketMQ's ``PutMessageStatus`` / ``GetMessageStatus``), so the broker
maps them to response codes without try/except.
"""
from __future__ import annotations

import dataclasses
import enum


class PutMessageStatus(enum.Enum):
    """Outcome of a put (``PutMessageStatus``): OK, flush timeouts, refusals and invalid input."""

    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPEDFILE_FAILED = "CREATE_MAPEDFILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    #: a timer message with a malformed or too distant due time (RocketMQ 5)
    WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
    #: a timer message while timerWheelEnable=false
    WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"

    @property
    def stored(self) -> bool:
        """The bytes are in the commitlog (even if the flush wait timed out)."""
        return self in (PutMessageStatus.PUT_OK, PutMessageStatus.FLUSH_DISK_TIMEOUT,
                        PutMessageStatus.FLUSH_SLAVE_TIMEOUT, PutMessageStatus.SLAVE_NOT_AVAILABLE)


@dataclasses.dataclass
class PutMessageResult:
    """Outcome of a put. For a batch, ``msg_ids`` has one offsetMsgId per message."""

    status: PutMessageStatus
    phy_offset: int = -1
    wrote_bytes: int = 0
    queue_id: int = -1
    queue_offset: int = -1
    msg_ids: list[str] = dataclasses.field(default_factory=list)
    store_timestamp: int = 0
    message_count: int = 0
    #: why a put was refused, in words a user can act on
    remark: str = ""
    #: a timer message held until this slot (its TIMER_OUT_MS); 0: not a held timer
    timer_out_ms: int = 0

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    @property
    def msg_id(self) -> str:
        return ",".join(self.msg_ids)


class GetMessageStatus(enum.Enum):
    """Outcome of a queue read (``GetMessageStatus``): found, or why not and where to go next.

    RocketMQ's NO_MATCHED_LOGIC_QUEUE is not here: its store creates a missing queue on lookup,
    so a queue never written to reads as NO_MESSAGE_IN_QUEUE, and so it does here
    (docs/remoting-pulls.md has what each status answers)."""

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclasses.dataclass
class GetMessageResult:
    """Outcome of a pull. ``buffers`` are zero-copy views of whole stored records, in
    queue order, ready to be written to a socket as the pull response body as they are."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    #: views of whole records; records adjacent in the commitlog share one view
    buffers: list[memoryview] = dataclasses.field(default_factory=list)
    message_count: int = 0
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False

    def body(self) -> bytes:
        """All records concatenated (copies; the network layer sends ``buffers`` directly)."""
        return b"".join(bytes(b) for b in self.buffers)


@dataclasses.dataclass
class QueryMessageResult:
    """Outcome of a key query: whole records (views) of candidate messages."""

    buffers: list[memoryview] = dataclasses.field(default_factory=list)
    phy_offsets: list[int] = dataclasses.field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0

    def body(self) -> bytes:
        return b"".join(bytes(b) for b in self.buffers)
