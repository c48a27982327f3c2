"""Byte layouts of RocketMQ 5's timer files, defined once (Python side).

A store with timer messages holds, beside the 4.9 files, the files of RocketMQ 5's
``TimerMessageStore`` laid out as Apache 5.3.3 lays them out, so a store moves between
the two with its timers still pending. Everything is big-endian.

``timerlog/`` — numbered files (name = offset of the first byte, 20 digits), one 52-byte
unit per timer, appended in arrival order::

    0   SIZE            int32   52
    4   PREV_POS        int64   timerlog offset of the previous unit of the same slot, -1: none
    12  MAGIC           int32   MAGIC_DEFAULT | MAGIC_ROLL | MAGIC_DELETE
    16  WRITE_TIME_MS   int64   the write time (slot start) when the unit was appended
    24  DELAY_DELTA     int32   due time - WRITE_TIME_MS (ms)
    28  OFFSET_PY       int64   commitlog offset of the message in rmq_sys_wheel_timer
    36  SIZE_PY         int32   its record size
    40  TOPIC_HASH      int32   String.hashCode of the real topic (metrics)
    44  RESERVED        int64   0

A file whose room left is less than a unit plus 16 bytes ends with a blank: its room left
(int32), 0 (int64), BLANK_MAGIC (int32); the next unit goes to the next file.

``timerwheel`` — one file of ``SLOTS_TOTAL * 2`` slots of 32 bytes; the slot of a time
``t`` is ``t // precision % (SLOTS_TOTAL * 2)``::

    0   TIME            int64   t // precision (a stale slot holds another time)
    8   FIRST_POS       int64   timerlog offset of the slot's first unit
    16  LAST_POS        int64   ... of its last unit (the chain is walked back from here)
    24  NUM             int32   units (a recall marker counts -1)
    28  MAGIC           int32

``config/timercheck`` — a 4096-byte file; the first 56 bytes are seven int64: the read
time (every slot before it was delivered), the timerlog flush position, the timer queue
offset read up to, the same offset as the master knows it, and a data version (state
version, timestamp, counter). ``config/timermetrics`` is JSON (pending timers per topic).
"""
from __future__ import annotations

import struct

import numpy as np

# --- files in the store root (TimerMessageStore / BrokerPathConfigHelper) ---------------------
TIMERLOG_DIR = "timerlog"
TIMERWHEEL_FILE = "timerwheel"
TIMERCHECK_FILE = "timercheck"         # in the store's config/ directory
TIMERMETRICS_FILE = "timermetrics"     # in the store's config/ directory
#: mqcore's own, in config/, written at a clean stop: the units of the current slot already
#: delivered, so a restart does not deliver them again (Apache's timercheck has no field for it)
TIMEROPEN_FILE = "timeropen.json"
#: Apache's mappedFileSizeTimerLog default (100 MiB)
DEFAULT_TIMERLOG_FILE_SIZE = 100 * 1024 * 1024

# --- the system topic and the properties ------------------------------------------------------
TIMER_TOPIC = "rmq_sys_wheel_timer"
PROP_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROP_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROP_TIMER_DELAY_MS = "TIMER_DELAY_MS"
#: ali-ons / Aliyun SDK ``setStartDeliverTime``: an absolute due time in ms
PROP_START_DELIVER_TIME = "__STARTDELIVERTIME"
PROP_TIMER_OUT_MS = "TIMER_OUT_MS"
PROP_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROP_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
PROP_TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
PROP_TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
#: the properties that make a send a timer message (any one of them)
TIMER_REQUEST_PROPS = frozenset({PROP_TIMER_DELIVER_MS, PROP_TIMER_DELAY_SEC, PROP_TIMER_DELAY_MS,
                                 PROP_START_DELIVER_TIME})
#: TIMER_ENQUEUE_MS of a message that was due when it was read (never in the wheel)
NEVER_ENQUEUED = (1 << 63) - 1

# --- timerlog unit -----------------------------------------------------------------------------
UNIT_SIZE = 52
UNIT = struct.Struct(">iqiqiqiiq")
assert UNIT.size == UNIT_SIZE
U_SIZE, U_PREV_POS, U_MAGIC, U_WRITE_TIME, U_DELAY_DELTA, U_OFFSET_PY, U_SIZE_PY, U_TOPIC_HASH, U_RESERVED = (
    0, 4, 12, 16, 24, 28, 36, 40, 44)
UNIT_DTYPE = np.dtype([("size", ">i4"), ("prev", ">i8"), ("magic", ">i4"), ("write_ms", ">i8"),
                       ("delta", ">i4"), ("offset_py", ">i8"), ("size_py", ">i4"), ("topic_hash", ">i4"),
                       ("reserved", ">i8")])
assert UNIT_DTYPE.itemsize == UNIT_SIZE
MAGIC_DEFAULT = 1
MAGIC_ROLL = 1 << 1
MAGIC_DELETE = 1 << 2
#: TimerLog.BLANK_MAGIC_CODE (Java: ``0xBBCCDDEE ^ 1880681586 + 8``, + binds first)
BLANK_MAGIC = struct.unpack(">i", struct.pack(">I", 0xBBCCDDEE ^ (1880681586 + 8)))[0]
#: a blank: its room left at U_SIZE, zeros, BLANK_MAGIC at U_MAGIC (16 bytes)
MIN_BLANK_LEN = 16
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")


def magic_ok(magic: int) -> bool:
    """A unit's magic uses only the four low bits (TimerMessageStore.isMagicOK)."""
    return (magic | 0xF) == 0xF


# --- timerwheel slot ---------------------------------------------------------------------------
#: TIMER_WHEEL_TTL_DAY * DAY_SECS: the wheel holds twice this many slots
SLOTS_TOTAL = 7 * 24 * 3600
SLOT_SIZE = 32
SLOT = struct.Struct(">qqqii")
assert SLOT.size == SLOT_SIZE
SLOT_DTYPE = np.dtype([("time", ">i8"), ("first", ">i8"), ("last", ">i8"), ("num", ">i4"), ("magic", ">i4")])
WHEEL_LENGTH = SLOTS_TOTAL * 2 * SLOT_SIZE
#: TIMER_BLANK_SLOTS: slots kept free between the read time and a rolled message's time
BLANK_SLOTS = 60

# --- timercheck --------------------------------------------------------------------------------
CHECK_FILE_SIZE = 4096
CHECK = struct.Struct(">qqqqqqq")
C_READ_TIME, C_FLUSH_POS, C_QUEUE_OFFSET, C_MASTER_QUEUE_OFFSET, C_STATE_VERSION, C_TIMESTAMP, C_COUNTER = (
    0, 8, 16, 24, 32, 40, 48)
