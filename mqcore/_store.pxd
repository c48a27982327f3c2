# cython: language_level=3
# The header of the kernels: byte layouts (the same numbers as mqcore/format/layout.py;
# tests/test_layout.py checks both) and the C helpers the bodies in _store.pyx use.
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t

cdef extern from "_endian.h":
    int16_t mq_rd_i16(const unsigned char *p) nogil
    int32_t mq_rd_i32(const unsigned char *p) nogil
    int64_t mq_rd_i64(const unsigned char *p) nogil
    void mq_wr_i16(unsigned char *p, int16_t x) nogil
    void mq_wr_i32(unsigned char *p, int32_t x) nogil
    void mq_wr_i64(unsigned char *p, int64_t x) nogil
    void mq_touch_for_write(unsigned char *p) nogil

cdef extern from "_crc32.h":
    # zlib.crc32 of a buffer, with carry-less multiplies where the CPU has them (see the header)
    uint32_t mq_crc32(uint32_t crc, const unsigned char *buf, size_t len) nogil

# --- commitlog record ---------------------------------------------------------
cdef enum:
    MAGIC_V1 = -626843481
    MAGIC_V2 = -626843477
    MAGIC_BLANK = -875286124
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
    REC_STORETIMESTAMP_V4 = 56
    REC_STOREHOST_V4 = 64
    REC_RECONSUMETIMES_V4 = 72
    REC_PREPAREDOFFSET_V4 = 76
    REC_BODYLENGTH_V4 = 84
    REC_FIXED_V4 = 88
    HOST_V4_BYTES = 8
    HOST_V6_BYTES = 20
    HOST_V6_EXTRA = 12
    BLANK_HEADER_BYTES = 8
    SYSFLAG_BORNHOST_V6 = 0x10
    SYSFLAG_STOREHOST_V6 = 0x20
    MAX_PROPERTIES_BYTES = 32767
    MAX_TOPIC_LENGTH = 127

# --- wire batch item ------------------------------------------------------------
cdef enum:
    BATCH_ITEM_FLAG = 12
    BATCH_ITEM_BODYLENGTH = 16
    BATCH_ITEM_FIXED = 20

# --- properties (layout.NAME_VALUE_SEPARATOR / PROPERTY_SEPARATOR) ---------------
cdef enum:
    NAME_VALUE_SEPARATOR_BYTE = 1
    PROPERTY_SEPARATOR_BYTE = 2

# --- consume queue unit -----------------------------------------------------------
cdef enum:
    CQ_UNIT_SIZE = 20
    CQ_PHYOFFSET = 0
    CQ_SIZE = 8
    CQ_TAGSCODE = 12

# --- index file ---------------------------------------------------------------------
cdef enum:
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

# --- scan stop reasons (layout.ScanStop) ------------------------------------------------
cdef enum:
    STOP_END = 0
    STOP_BLANK = 1
    STOP_NO_DATA = 2
    STOP_CORRUPT = 3
    STOP_MAX_COUNT = 4
    STOP_TRUNCATED = 5

# one row of layout.DISPATCH_FIELDS (little-endian native, packed like the numpy dtype)
cdef packed struct DispatchRow:
    int64_t phy_offset
    int64_t store_timestamp
    int64_t queue_offset
    int64_t tags_code
    int32_t size
    int32_t queue_id
    int32_t sys_flag
    int32_t topic_idx
    int32_t uniq_pos
    int32_t uniq_len
    int32_t keys_pos
    int32_t keys_len

# the fields of a record the scanner has checked
cdef struct RecordView:
    int32_t size
    int32_t magic
    int32_t sys_flag
    int32_t born_extra
    int32_t store_extra
    Py_ssize_t body_at
    int32_t body_len
    Py_ssize_t topic_at
    int32_t topic_len
    Py_ssize_t props_at
    int32_t props_len


# --- kernels other extensions call (mqcore._pipeline: the broker's send pipeline; mqcore._wire_client:
# a message's properties into a batch item) -------------
cdef Py_ssize_t _dict_props_len(dict props) except -1
cdef Py_ssize_t _dict_props_write(dict props, unsigned char *o, Py_ssize_t cap) except -1
cdef Py_ssize_t _record_size(Py_ssize_t body_len, Py_ssize_t topic_len, Py_ssize_t props_len,
                             int32_t sys_flag) noexcept nogil
cdef Py_ssize_t _write_record(unsigned char *d, const unsigned char *topic, Py_ssize_t topic_len,
                              int32_t queue_id, int32_t flag, int64_t queue_offset, int64_t phy_offset,
                              int32_t sys_flag, int64_t born_ts, const unsigned char *born_host,
                              Py_ssize_t born_len, int64_t store_ts, const unsigned char *store_host,
                              Py_ssize_t store_len, int32_t reconsume, int64_t prepared,
                              const unsigned char *body, Py_ssize_t body_len,
                              const unsigned char *props1, Py_ssize_t props1_len,
                              const unsigned char *props2, Py_ssize_t props2_len) noexcept nogil
cdef void _index_entry(unsigned char *b, Py_ssize_t slots, Py_ssize_t entries_at, int32_t h, int64_t phy,
                       int64_t ts, int64_t *begin_ts, int64_t *begin_phy, int32_t *slot_count,
                       int32_t *count) noexcept nogil


# --- the store's hot state (C bases of the store's Python classes) ----------------------------
# A put or a pull starts cache-cold after a wake-up, and each Python attribute it reads costs a
# dict lookup there. These bases hold the fields the send pipeline's StorePlainSends and
# PullReader read per request as struct fields; the store's classes derive from them
# (mqcore/store/hot_state.py) and their Python code keeps using the same attribute names.
# Twins with the same names as __slots__ in _store_py.py.
cdef class MappedFileCore:
    cdef public int64_t file_from_offset, file_size, wrote_position, flushed_position, reserved_end
    cdef public object buf, _view_lock
    cdef public bint reserved, _closed

cdef class MappedFileQueueCore:
    cdef public list files

cdef class ConsumeQueueCore:
    cdef public object queue  # a MappedFileQueue (on MappedFileQueueCore when the store's kernels are these)
    cdef public int64_t max_physic_offset, min_logic_offset

cdef class MessageWriterCore:
    cdef public object cfg, wait_flushed, refuse_reason, disk_full_reason
    cdef public int64_t last_store_timestamp

cdef class DispatcherCore:
    cdef public int64_t no_new_queues_below, last_store_timestamp

cdef class IndexServiceCore:
    cdef public list files

cdef class IndexFileCore:
    cdef public object mf
