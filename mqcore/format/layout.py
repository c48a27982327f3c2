"""Byte layouts of RocketMQ 4.9 store files, defined once (Python side).

Everything is big-endian. The Cython kernels carry the same numbers in
``mqcore/_store.pxd``; ``tests/test_layout.py`` checks that both agree.

Leaf module: it imports nothing from mqcore, so the kernels, the store, the tools,
Spark and the client can all depend on it (``tests/test_layering.py`` enforces that).
The ``struct``/``numpy`` shapes below are the only Python definitions of each
fixed-size structure; every reader and writer uses them.

CommitLog record (v1 magic, IPv4 hosts; +12 after BORNHOST if born host is
IPv6, +12 more after STOREHOST if store host is IPv6)::

    0   TOTALSIZE        int32   whole record, this field included
    4   MAGICCODE        int32   0xDAA320A7 (v1) / 0xDAA320AB (v2, read only)
    8   BODYCRC          int32   crc32(stored body) & 0x7fffffff
    12  QUEUEID          int32
    16  FLAG             int32
    20  QUEUEOFFSET      int64   entry index in the consume queue
    28  PHYSICALOFFSET   int64   commitlog offset of byte 0 of this record
    36  SYSFLAG          int32
    40  BORNTIMESTAMP    int64
    48  BORNHOST         4+4 | 16+4
    56  STORETIMESTAMP   int64          (+B)
    64  STOREHOST        4+4 | 16+4     (+B)
    72  RECONSUMETIMES   int32          (+B+S)
    76  PREPARED_OFFSET  int64          (+B+S)
    84  BODYLENGTH       int32, body    (+B+S)
    ..  TOPICLENGTH      int8 (v1) | int16 (v2), topic
    ..  PROPLENGTH       int16, properties
"""
from __future__ import annotations

import struct

import numpy as np

# --- store directory (StorePathConfigHelper) ---------------------------------
COMMITLOG_DIR = "commitlog"
CONSUME_QUEUE_DIR = "consumequeue"
INDEX_DIR = "index"
CONFIG_DIR = "config"
CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
LOCK_FILE = "lock"
#: the broker's JSON metadata files inside CONFIG_DIR
TOPICS_FILE = "topics.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
DELAY_OFFSET_FILE = "delayOffset.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"
#: mqcore's note of the parts kept outside the root (storePathCommitLog, storePathConsumeQueue,
#: storePathIndex), so an offline reader given the root finds them; RocketMQ ignores the file
STORE_PATHS_FILE = "storePaths.json"
DATA_FILE_NAME_DIGITS = 20      # commitlog / consume-queue files: base offset, zero padded
INDEX_FILE_NAME_DIGITS = 17     # index files: yyyyMMddHHmmssSSS of creation

# --- commitlog record --------------------------------------------------------
MAGIC_V1 = -626843481          # 0xDAA320A7
MAGIC_V2 = -626843477          # 0xDAA320AB (5.x long topics; read only)
MAGIC_BLANK = -875286124       # 0xCBD43194 end-of-file marker

REC_TOTALSIZE = 0
REC_MAGIC = 4
REC_BODYCRC = 8
REC_QUEUEID = 12
REC_FLAG = 16
REC_QUEUEOFFSET = 20
REC_PHYOFFSET = 28
REC_SYSFLAG = 36
REC_BORNTIMESTAMP = 40
REC_BORNHOST = 48
# fields after BORNHOST shift by +12 for an IPv6 born host, after STOREHOST by +12 more
REC_STORETIMESTAMP_V4 = 56
REC_STOREHOST_V4 = 64
REC_RECONSUMETIMES_V4 = 72
REC_PREPAREDOFFSET_V4 = 76
REC_BODYLENGTH_V4 = 84
REC_FIXED_V4 = 88               # bytes before the body for IPv4/IPv4 (BODYLENGTH included)
#: bytes 0..47, TOTALSIZE through BORNTIMESTAMP (the fields before the born host)
REC_HEAD = struct.Struct(">iiiiiqqiq")
#: the int64 STORETIMESTAMP between the two hosts
REC_STORETIMESTAMP = struct.Struct(">q")
#: RECONSUMETIMES, PREPARED_OFFSET, BODYLENGTH: the fields between the store host and the body
REC_TAIL = struct.Struct(">iqi")
#: TOTALSIZE and MAGIC, the first eight bytes of any record or end-of-file marker
REC_SIZE_MAGIC = struct.Struct(">ii")
HOST_V4_BYTES = 8
HOST_V6_BYTES = 20
HOST_V6_EXTRA = HOST_V6_BYTES - HOST_V4_BYTES

BLANK_HEADER_BYTES = 8          # TOTALSIZE + MAGIC of the end-of-file record
END_FILE_MIN_BLANK = 8          # a file holding records always keeps >= 8 bytes free

# --- SYSFLAG bits (MessageSysFlag) ------------------------------------------
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_TRANSACTION_NOT = 0x0
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20
SYSFLAG_COMPRESSION_TYPE_MASK = 0x700
SYSFLAG_COMPRESSION_ZLIB = 0x300

MAX_PROPERTIES_BYTES = 32767
MAX_TOPIC_LENGTH = 127


def record_hosts(rec: bytes | bytearray | memoryview, sys_flag: int) -> tuple[bytes, bytes]:
    """The born host and the store host of the record at ``rec[0:]`` as stored (ip + port,
    4+4 or 16+4 bytes each, as ``sys_flag`` says): what a message re-put from a stored one
    (a delay or timer delivery) carries."""
    b = HOST_V6_EXTRA if sys_flag & SYSFLAG_BORNHOST_V6 else 0
    s = HOST_V6_EXTRA if sys_flag & SYSFLAG_STOREHOST_V6 else 0
    store_at = REC_STOREHOST_V4 + b
    return (bytes(rec[REC_BORNHOST:REC_BORNHOST + HOST_V4_BYTES + b]),
            bytes(rec[store_at:store_at + HOST_V4_BYTES + s]))

# --- wire batch item (SEND_BATCH_MESSAGE body, MessageDecoder.encodeMessage) --
BATCH_ITEM_TOTALSIZE = 0
BATCH_ITEM_MAGIC = 4
BATCH_ITEM_BODYCRC = 8
BATCH_ITEM_FLAG = 12
BATCH_ITEM_BODYLENGTH = 16
BATCH_ITEM_FIXED = 20           # bytes before the body (BODYLENGTH included)
BATCH_ITEM_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGIC BODYCRC FLAG BODYLENGTH
PROPS_LENGTH = struct.Struct(">h")         # the int16 before properties (record and batch item)

# --- properties (MessageDecoder.messageProperties2String) --------------------
NAME_VALUE_SEPARATOR = b"\x01"
PROPERTY_SEPARATOR = b"\x02"

# --- consume queue unit (20 bytes) ------------------------------------------
CQ_UNIT_SIZE = 20
CQ_PHYOFFSET = 0               # int64 commitlog offset
CQ_SIZE = 8                    # int32 record TOTALSIZE
CQ_TAGSCODE = 12               # int64 tags hash / deliver time
CQ_FILLER_SIZE = 0x7FFFFFFF    # size of pre-blank filler units
CQ_UNIT_FORMAT = ">qiq"        # the three fields above, for struct
CQ_UNIT = struct.Struct(CQ_UNIT_FORMAT)
#: one unit as a numpy record (big-endian, as on disk) and its native-endian twin
CQ_UNIT_DTYPE = np.dtype({"names": ["phy_offset", "size", "tags_code"], "formats": [">i8", ">i4", ">i8"],
                          "offsets": [CQ_PHYOFFSET, CQ_SIZE, CQ_TAGSCODE], "itemsize": CQ_UNIT_SIZE})
CQ_UNIT_NATIVE_DTYPE = CQ_UNIT_DTYPE.newbyteorder("=")

# --- index file --------------------------------------------------------------
INDEX_HEADER_SIZE = 40
IDXH_BEGIN_TIMESTAMP = 0
IDXH_END_TIMESTAMP = 8
IDXH_BEGIN_PHYOFFSET = 16
IDXH_END_PHYOFFSET = 24
IDXH_HASH_SLOT_COUNT = 32
IDXH_INDEX_COUNT = 36
INDEX_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
IDXE_KEY_HASH = 0
IDXE_PHYOFFSET = 4
IDXE_TIMEDIFF = 12
IDXE_PREV_INDEX = 16
#: the six header fields in order: begin/end store timestamp, begin/end commitlog offset,
#: hash slot count, index count (the next entry number; entry 0 is never used)
INDEX_HEADER = struct.Struct(">qqqqii")
INDEX_ENTRY = struct.Struct(">iqii")
INDEX_ENTRY_DTYPE = np.dtype({"names": ["key_hash", "phy_offset", "time_diff", "prev_index"],
                              "formats": [">i4", ">i8", ">i4", ">i4"],
                              "offsets": [IDXE_KEY_HASH, IDXE_PHYOFFSET, IDXE_TIMEDIFF, IDXE_PREV_INDEX],
                              "itemsize": INDEX_ENTRY_SIZE})
DEFAULT_INDEX_SLOTS = 5_000_000
DEFAULT_INDEX_ENTRIES = 20_000_000


def index_file_size(slots: int = DEFAULT_INDEX_SLOTS, entries: int = DEFAULT_INDEX_ENTRIES) -> int:
    return INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE + entries * INDEX_ENTRY_SIZE


# --- checkpoint (4096 bytes) ----------------------------------------------
CHECKPOINT_FILE_SIZE = 4096
CKPT_PHYSIC_MSG_TIMESTAMP = 0
CKPT_LOGICS_MSG_TIMESTAMP = 8
CKPT_INDEX_MSG_TIMESTAMP = 16
CHECKPOINT_FIELDS = struct.Struct(">qqq")

# --- HA replication (HAService's master-slave stream) ----------------------
#: a transfer from master to slave: the int64 physical offset of the data, the int32 size of it
HA_TRANSFER_HEADER = struct.Struct(">qi")
#: a slave's report to its master: the int64 max physical offset it has
HA_SLAVE_REPORT = struct.Struct(">q")

# --- dispatch table produced by the record scanner ---------------------------
#: one row per decoded record; positions are relative to the scanned buffer
DISPATCH_FIELDS = (
    ("phy_offset", "<i8"),
    ("store_timestamp", "<i8"),
    ("queue_offset", "<i8"),
    ("tags_code", "<i8"),
    ("size", "<i4"),
    ("queue_id", "<i4"),
    ("sys_flag", "<i4"),
    ("topic_idx", "<i4"),
    ("uniq_pos", "<i4"),
    ("uniq_len", "<i4"),
    ("keys_pos", "<i4"),
    ("keys_len", "<i4"),
)


class ScanStop:
    """Why a record scan stopped (int constants shared with the Cython kernel)."""

    END = 0          # reached the requested end position
    BLANK = 1        # end-of-file marker: the rest of this file is unused
    NO_DATA = 2      # zeros: never-written space, the end of valid data
    CORRUPT = 3      # bad magic, impossible size or CRC mismatch
    MAX_COUNT = 4    # the caller's record limit was reached
    TRUNCATED = 5    # a record runs past the end of the buffer

    NAMES = {0: "END", 1: "BLANK", 2: "NO_DATA", 3: "CORRUPT", 4: "MAX_COUNT", 5: "TRUNCATED"}


def offset_to_file_name(offset: int) -> str:
    """RocketMQ's ``UtilAll.offset2FileName``: 20 digits, zero padded."""
    return "%020d" % offset
