# cython: language_level=3
# The column kernels: columnar decode of commitlog records for the Spark reader, an
# extension of their own (mqcore._columns) because only Spark uses them. They share the
# record checker ``_check_record``/``RecordView``, ``_parse_level`` and the property walk
# with the store kernels through _record.pxi, and the byte-layout enums of _store.pxd.
# Their readable twin, with the full contract, is mqcore/_columns_py.py.
#
# Why a separate kernel: the Spark reader wants Arrow columns. Decoding into one Python
# tuple per message costs ~2 us per row in the Spark worker; this walks the records once
# and fills numpy buffers (fixed-width columns, offsets + data for strings, lists and the
# properties map) that pyarrow wraps with ``Array.from_buffers`` -- no Python object per row.
#
# Memory: every data arena is bounded by the bytes of the records emitted in the batch
# (each derived string -- hosts, message ids -- is shorter than the smallest record), so a
# batch allocates ``max_bytes`` per arena up front; pages never written stay virtual.
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.string cimport memcpy, memset
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from mqcore._store cimport *

import numpy as np

from mqcore.format.scans import ColumnBatch, RecordWalk

include "_record.pxi"

IMPLEMENTATION = "cython"

from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memchr

cdef enum:
    COL_WITH_BODY = 1
    COL_CHECK_CRC = 2
    COL_SKIP_CORRUPT = 4
    # projection: a flag per derived column the caller does not want (see COLUMN_SKIP_FLAGS)
    COL_NO_TOPIC = 8
    COL_NO_BORN_HOST = 16
    COL_NO_STORE_HOST = 32
    COL_NO_TAGS = 64
    COL_NO_MSG_ID = 128
    COL_NO_OFFSET_MSG_ID = 256
    COL_NO_ORIGINAL_TOPIC = 512
    COL_NO_KEYS = 1024
    COL_NO_PROPERTIES = 2048
    COL_NO_DELAY_LEVEL = 4096
    # every column fed by the properties scan skipped: no scan at all
    COL_NO_PROPERTY_READERS = (COL_NO_TAGS | COL_NO_MSG_ID | COL_NO_ORIGINAL_TOPIC | COL_NO_KEYS
                               | COL_NO_PROPERTIES | COL_NO_DELAY_LEVEL)
    COL_BIT_RETRY = 1
    COL_BIT_DLQ = 2
    COL_BIT_DELAYED = 4
    COL_BIT_COMPRESSED = 8
    COL_BIT_HAS_TAGS = 16
    COL_SYSFLAG_COMPRESSED = 0x1        # layout.SYSFLAG_COMPRESSED
    COL_MIN_RECORD = REC_FIXED_V4 + 3   # the smallest size _check_record accepts
    COL_MAX_PROP_ENTRIES = 8193         # 32767 property bytes hold at most 8192 "k\1v" pairs
    # string columns, in STRING_COLUMNS order
    S_TOPIC = 0
    S_BODY = 1
    S_BORN_HOST = 2
    S_STORE_HOST = 3
    S_TAGS = 4
    S_MSG_ID = 5
    S_OFFSET_MSG_ID = 6
    S_ORIGINAL_TOPIC = 7
    N_STRINGS = 8
    # property values the kernel looks at
    P_TAGS = 0
    P_KEYS = 1
    P_UNIQ = 2
    P_DELAY = 3
    P_RETRY_TOPIC = 4
    P_REAL_TOPIC = 5
    N_WANTED = 6

WITH_BODY = COL_WITH_BODY
CHECK_CRC = COL_CHECK_CRC
SKIP_CORRUPT = COL_SKIP_CORRUPT
BIT_RETRY = COL_BIT_RETRY
BIT_DLQ = COL_BIT_DLQ
BIT_DELAYED = COL_BIT_DELAYED
BIT_COMPRESSED = COL_BIT_COMPRESSED
BIT_HAS_TAGS = COL_BIT_HAS_TAGS
COLUMN_SKIP_FLAGS = (
    ("topic", COL_NO_TOPIC),
    ("born_host", COL_NO_BORN_HOST),
    ("store_host", COL_NO_STORE_HOST),
    ("tags", COL_NO_TAGS),
    ("msg_id", COL_NO_MSG_ID),
    ("offset_msg_id", COL_NO_OFFSET_MSG_ID),
    ("original_topic", COL_NO_ORIGINAL_TOPIC),
    ("keys", COL_NO_KEYS),
    ("properties", COL_NO_PROPERTIES),
    ("delay_level", COL_NO_DELAY_LEVEL),
)

FIXED_COLUMNS = (
    ("commitlog_offset", np.int64),
    ("queue_id", np.int32),
    ("queue_offset", np.int64),
    ("store_size", np.int32),
    ("body_crc", np.int32),
    ("flag", np.int32),
    ("sys_flag", np.int32),
    ("born_timestamp", np.int64),
    ("store_timestamp", np.int64),
    ("reconsume_times", np.int32),
    ("prepared_transaction_offset", np.int64),
    ("delay_level", np.int32),
)
STRING_COLUMNS = ("topic", "body", "born_host", "store_host", "tags", "msg_id", "offset_msg_id",
                  "original_topic")

cdef const char *_HEX_UPPER = b"0123456789ABCDEF"
cdef const char *_HEX_LOWER = b"0123456789abcdef"


cdef struct ColOut:
    int64_t *commitlog_offset
    int32_t *queue_id
    int64_t *queue_offset
    int32_t *store_size
    int32_t *body_crc
    int32_t *flag
    int32_t *sys_flag
    int64_t *born_timestamp
    int64_t *store_timestamp
    int32_t *reconsume_times
    int64_t *prepared_offset
    int32_t *delay_level
    uint8_t *bits
    int32_t *s_off[8]
    unsigned char *s_data[8]
    Py_ssize_t s_used[8]
    int32_t *keys_list_off
    int32_t *keys_off
    unsigned char *keys_data
    Py_ssize_t keys_n
    Py_ssize_t keys_used
    int32_t *map_off
    int32_t *pk_off
    unsigned char *pk_data
    int32_t *pv_off
    unsigned char *pv_data
    Py_ssize_t props_n
    Py_ssize_t pk_used
    Py_ssize_t pv_used
    int32_t *seg            # scratch: 4 ints (name at, name len, value at, value len) per pair


cdef void *_addr(arr) except NULL:
    cdef unsigned char[::1] v = arr.view(np.uint8)
    return <void *>&v[0]


cdef class _ColumnBuffers:
    """Preallocated output of one batch; ``out`` points into the numpy arrays it owns."""

    cdef ColOut out
    cdef dict arrays

    def __cinit__(self, Py_ssize_t rows_cap, Py_ssize_t bytes_cap):
        cdef Py_ssize_t k
        cdef ColOut *o = &self.out
        a = self.arrays = {}
        for name, dtype in FIXED_COLUMNS:
            a[name] = np.empty(rows_cap + 1, dtype)
        a["bits"] = np.empty(rows_cap + 1, np.uint8)
        o.commitlog_offset = <int64_t *>_addr(a["commitlog_offset"])
        o.queue_id = <int32_t *>_addr(a["queue_id"])
        o.queue_offset = <int64_t *>_addr(a["queue_offset"])
        o.store_size = <int32_t *>_addr(a["store_size"])
        o.body_crc = <int32_t *>_addr(a["body_crc"])
        o.flag = <int32_t *>_addr(a["flag"])
        o.sys_flag = <int32_t *>_addr(a["sys_flag"])
        o.born_timestamp = <int64_t *>_addr(a["born_timestamp"])
        o.store_timestamp = <int64_t *>_addr(a["store_timestamp"])
        o.reconsume_times = <int32_t *>_addr(a["reconsume_times"])
        o.prepared_offset = <int64_t *>_addr(a["prepared_transaction_offset"])
        o.delay_level = <int32_t *>_addr(a["delay_level"])
        o.bits = <uint8_t *>_addr(a["bits"])
        for k, name in enumerate(STRING_COLUMNS):
            a[name + ".off"] = np.zeros(rows_cap + 1, np.int32)
            a[name + ".data"] = np.empty(bytes_cap + 1, np.uint8)
            o.s_off[k] = <int32_t *>_addr(a[name + ".off"])
            o.s_data[k] = <unsigned char *>_addr(a[name + ".data"])
            o.s_used[k] = 0
        a["keys.list"] = np.zeros(rows_cap + 1, np.int32)
        a["keys.off"] = np.zeros(bytes_cap // 2 + rows_cap + 1, np.int32)
        a["keys.data"] = np.empty(bytes_cap + 1, np.uint8)
        o.keys_list_off = <int32_t *>_addr(a["keys.list"])
        o.keys_off = <int32_t *>_addr(a["keys.off"])
        o.keys_data = <unsigned char *>_addr(a["keys.data"])
        o.keys_n = o.keys_used = 0
        a["props.map"] = np.zeros(rows_cap + 1, np.int32)
        a["props.koff"] = np.zeros(bytes_cap // 3 + rows_cap + 1, np.int32)
        a["props.kdata"] = np.empty(bytes_cap + 1, np.uint8)
        a["props.voff"] = np.zeros(bytes_cap // 3 + rows_cap + 1, np.int32)
        a["props.vdata"] = np.empty(bytes_cap + 1, np.uint8)
        a["seg"] = np.empty(4 * COL_MAX_PROP_ENTRIES, np.int32)
        o.map_off = <int32_t *>_addr(a["props.map"])
        o.pk_off = <int32_t *>_addr(a["props.koff"])
        o.pk_data = <unsigned char *>_addr(a["props.kdata"])
        o.pv_off = <int32_t *>_addr(a["props.voff"])
        o.pv_data = <unsigned char *>_addr(a["props.vdata"])
        o.props_n = o.pk_used = o.pv_used = 0
        o.seg = <int32_t *>_addr(a["seg"])

    cdef dict finish(self, Py_ssize_t n):
        """The dict of trimmed views described in the twin's module docstring."""
        cdef ColOut *o = &self.out
        a = self.arrays
        cols = {name: a[name][:n] for name, _ in FIXED_COLUMNS}
        cols["bits"] = a["bits"][:n]
        for k, name in enumerate(STRING_COLUMNS):
            cols[name] = (a[name + ".off"][:n + 1], a[name + ".data"][:o.s_used[k]])
        cols["keys"] = (a["keys.list"][:n + 1], a["keys.off"][:o.keys_n + 1],
                        a["keys.data"][:o.keys_used])
        cols["properties"] = (a["props.map"][:n + 1], a["props.koff"][:o.props_n + 1],
                              a["props.kdata"][:o.pk_used], a["props.voff"][:o.props_n + 1],
                              a["props.vdata"][:o.pv_used])
        return cols


# --- small writers -------------------------------------------------------------------------
cdef inline Py_ssize_t _put_int(unsigned char *d, int64_t x) noexcept nogil:
    """Decimal text of ``x``; returns its length."""
    cdef unsigned char tmp[24]
    cdef Py_ssize_t n = 0, i
    cdef uint64_t u = <uint64_t>(-x) if x < 0 else <uint64_t>x
    while True:
        tmp[n] = 48 + <unsigned char>(u % 10)
        n += 1
        u //= 10
        if u == 0:
            break
    i = 0
    if x < 0:
        d[0] = 45  # '-'
        i = 1
    while n > 0:
        n -= 1
        d[i] = tmp[n]
        i += 1
    return i


cdef Py_ssize_t _put_host(unsigned char *d, const unsigned char *h, Py_ssize_t n) noexcept nogil:
    """``a.b.c.d:port`` or ``[v6]:port`` (RFC 5952: the longest run of >= 2 zero groups
    becomes ``::``, the first on ties; lowercase hex) -- what Python's ipaddress prints."""
    cdef Py_ssize_t p = 0, i, best_at = -1, best_len = 0, run_at = -1, run_len = 0
    cdef uint32_t g
    cdef int shift
    cdef bint started
    if n == HOST_V4_BYTES:
        for i in range(4):
            p += _put_int(d + p, h[i])
            d[p] = 46 if i < 3 else 58  # '.' or ':'
            p += 1
        return p + _put_int(d + p, mq_rd_i32(h + 4))
    for i in range(8):
        if h[2 * i] == 0 and h[2 * i + 1] == 0:
            if run_len == 0:
                run_at = i
            run_len += 1
            if run_len > best_len:
                best_at = run_at
                best_len = run_len
        else:
            run_len = 0
    if best_len < 2:
        best_at = -1
    d[p] = 91  # '['
    p += 1
    i = 0
    while i < 8:
        if i == best_at:
            d[p] = 58
            d[p + 1] = 58
            p += 2
            i += best_len
            continue
        if i > 0 and i != best_at + best_len:
            d[p] = 58
            p += 1
        g = (h[2 * i] << 8) | h[2 * i + 1]
        started = False
        for shift in range(12, -1, -4):
            if started or ((g >> shift) & 0xF) or shift == 0:
                d[p] = _HEX_LOWER[(g >> shift) & 0xF]
                p += 1
                started = True
        i += 1
    d[p] = 93  # ']'
    d[p + 1] = 58
    p += 2
    return p + _put_int(d + p, mq_rd_i32(h + 16))


cdef inline Py_ssize_t _put_offset_msg_id(unsigned char *d, const unsigned char *host, Py_ssize_t n,
                                          int64_t phy) noexcept nogil:
    """offsetMsgId: uppercase hex of store host bytes + the big-endian commitlog offset."""
    cdef unsigned char raw[8]
    cdef Py_ssize_t i
    for i in range(n):
        d[2 * i] = _HEX_UPPER[host[i] >> 4]
        d[2 * i + 1] = _HEX_UPPER[host[i] & 0xF]
    mq_wr_i64(raw, phy)
    for i in range(8):
        d[2 * (n + i)] = _HEX_UPPER[raw[i] >> 4]
        d[2 * (n + i) + 1] = _HEX_UPPER[raw[i] & 0xF]
    return 2 * (n + 8)


cdef inline bint _same(const unsigned char *a, Py_ssize_t na, const unsigned char *b,
                       Py_ssize_t nb) noexcept nogil:
    return na == nb and (na == 0 or memcmp_eq(a, b, na))


cdef inline bint _starts(const unsigned char *p, Py_ssize_t n, const char *prefix, Py_ssize_t k) noexcept nogil:
    return n >= k and memcmp_eq(p, <const unsigned char *>prefix, k)


cdef inline void _put_str(ColOut *o, int k, Py_ssize_t row, const unsigned char *p, Py_ssize_t n) noexcept nogil:
    if n > 0:
        memcpy(o.s_data[k] + o.s_used[k], p, n)
        o.s_used[k] += n
    o.s_off[k][row + 1] = <int32_t>o.s_used[k]


cdef int _wanted_index(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    if _name_is(p, n, "TAGS", 4):
        return P_TAGS
    if _name_is(p, n, "KEYS", 4):
        return P_KEYS
    if _name_is(p, n, "UNIQ_KEY", 8):
        return P_UNIQ
    if _name_is(p, n, "DELAY", 5):
        return P_DELAY
    if _name_is(p, n, "RETRY_TOPIC", 11):
        return P_RETRY_TOPIC
    if _name_is(p, n, "REAL_TOPIC", 10):
        return P_REAL_TOPIC
    return -1


# --- one row ---------------------------------------------------------------------------------
cdef void _emit_row(ColOut *o, Py_ssize_t row, const unsigned char *b, Py_ssize_t pos,
                    int64_t base_offset, RecordView *v, int flags) noexcept nogil:
    """Append the checked record at ``pos`` as row ``row`` of every column."""
    cdef const unsigned char *props = b + v.props_at
    cdef Py_ssize_t p = 0, q, k, m = 0, i, j, vat, vlen
    cdef Py_ssize_t want_at[N_WANTED]
    cdef Py_ssize_t want_len[N_WANTED]
    cdef int w
    cdef bint dup
    cdef int32_t *seg = o.seg
    cdef int64_t phy = base_offset + pos
    cdef Py_ssize_t born_at = pos + REC_BORNHOST
    cdef Py_ssize_t store_at = pos + REC_STOREHOST_V4 + v.born_extra
    cdef Py_ssize_t tail = v.born_extra + v.store_extra
    cdef const unsigned char *topic = b + v.topic_at
    cdef uint8_t bits = 0
    cdef unsigned char *d
    for w in range(N_WANTED):
        want_at[w] = -1
        want_len[w] = 0
    # properties: valid "name\1value" segments, as string2messageProperties accepts them;
    # skipped entirely when no wanted column reads them (a narrow scan's main saving)
    while p < v.props_len and (flags & COL_NO_PROPERTY_READERS) != COL_NO_PROPERTY_READERS:
        q = _next_property(props, p, v.props_len, &k)
        if k >= 0:
            seg[4 * m] = <int32_t>p
            seg[4 * m + 1] = <int32_t>(k - p)
            seg[4 * m + 2] = <int32_t>(k + 1)
            seg[4 * m + 3] = <int32_t>(q - k - 1)
            w = _wanted_index(props + p, k - p)
            if w >= 0:  # a later duplicate overwrites: last wins
                want_at[w] = v.props_at + k + 1
                want_len[w] = q - k - 1
            m += 1
        p = q + 1
    if flags & COL_NO_PROPERTIES:
        m = 0  # no map entries: every row's map stays empty
    for i in range(m):
        dup = False
        for j in range(i + 1, m):
            if _same(props + seg[4 * i], seg[4 * i + 1], props + seg[4 * j], seg[4 * j + 1]):
                dup = True
                break
        if dup:
            continue
        memcpy(o.pk_data + o.pk_used, props + seg[4 * i], seg[4 * i + 1])
        o.pk_used += seg[4 * i + 1]
        memcpy(o.pv_data + o.pv_used, props + seg[4 * i + 2], seg[4 * i + 3])
        o.pv_used += seg[4 * i + 3]
        o.props_n += 1
        o.pk_off[o.props_n] = <int32_t>o.pk_used
        o.pv_off[o.props_n] = <int32_t>o.pv_used
    o.map_off[row + 1] = <int32_t>o.props_n
    # KEYS split on single spaces, empty words dropped
    if want_at[P_KEYS] >= 0 and not flags & COL_NO_KEYS:
        p = want_at[P_KEYS]
        q = p + want_len[P_KEYS]
        while p < q:
            k = p
            while k < q and b[k] != 32:
                k += 1
            if k > p:
                memcpy(o.keys_data + o.keys_used, b + p, k - p)
                o.keys_used += k - p
                o.keys_n += 1
                o.keys_off[o.keys_n] = <int32_t>o.keys_used
            p = k + 1
    o.keys_list_off[row + 1] = <int32_t>o.keys_n
    # fixed-width columns
    o.commitlog_offset[row] = phy
    o.queue_id[row] = mq_rd_i32(b + pos + REC_QUEUEID)
    o.queue_offset[row] = mq_rd_i64(b + pos + REC_QUEUEOFFSET)
    o.store_size[row] = v.size
    o.body_crc[row] = mq_rd_i32(b + pos + REC_BODYCRC)
    o.flag[row] = mq_rd_i32(b + pos + REC_FLAG)
    o.sys_flag[row] = v.sys_flag
    o.born_timestamp[row] = mq_rd_i64(b + pos + REC_BORNTIMESTAMP)
    o.store_timestamp[row] = mq_rd_i64(b + pos + REC_STORETIMESTAMP_V4 + v.born_extra)
    o.reconsume_times[row] = mq_rd_i32(b + pos + REC_RECONSUMETIMES_V4 + tail)
    o.prepared_offset[row] = mq_rd_i64(b + pos + REC_PREPAREDOFFSET_V4 + tail)
    o.delay_level[row] = <int32_t>(_parse_level(b + want_at[P_DELAY], want_len[P_DELAY])
                                   if want_at[P_DELAY] >= 0 and not flags & COL_NO_DELAY_LEVEL else 0)
    if _starts(topic, v.topic_len, "%RETRY%", 7):
        bits |= COL_BIT_RETRY
    if _starts(topic, v.topic_len, "%DLQ%", 5):
        bits |= COL_BIT_DLQ
    if _same(topic, v.topic_len, <const unsigned char *>b"SCHEDULE_TOPIC_XXXX", 19):
        bits |= COL_BIT_DELAYED
    if v.sys_flag & COL_SYSFLAG_COMPRESSED:
        bits |= COL_BIT_COMPRESSED
    if want_at[P_TAGS] >= 0 and not flags & COL_NO_TAGS:
        bits |= COL_BIT_HAS_TAGS
    o.bits[row] = bits
    # string columns; a skipped one keeps its zero offsets (an empty string in every row)
    if not flags & COL_NO_TOPIC:
        _put_str(o, S_TOPIC, row, topic, v.topic_len)
    _put_str(o, S_BODY, row, b + v.body_at + 4, v.body_len if flags & COL_WITH_BODY else 0)
    if not flags & COL_NO_BORN_HOST:
        d = o.s_data[S_BORN_HOST] + o.s_used[S_BORN_HOST]
        o.s_used[S_BORN_HOST] += _put_host(d, b + born_at, HOST_V4_BYTES + v.born_extra)
        o.s_off[S_BORN_HOST][row + 1] = <int32_t>o.s_used[S_BORN_HOST]
    if not flags & COL_NO_STORE_HOST:
        d = o.s_data[S_STORE_HOST] + o.s_used[S_STORE_HOST]
        o.s_used[S_STORE_HOST] += _put_host(d, b + store_at, HOST_V4_BYTES + v.store_extra)
        o.s_off[S_STORE_HOST][row + 1] = <int32_t>o.s_used[S_STORE_HOST]
    if not flags & COL_NO_TAGS:
        _put_str(o, S_TAGS, row, b + want_at[P_TAGS], want_len[P_TAGS])
    if not (flags & COL_NO_OFFSET_MSG_ID and flags & COL_NO_MSG_ID):
        # written past the arena's end even when not kept: msg_id may fall back to it
        d = o.s_data[S_OFFSET_MSG_ID] + o.s_used[S_OFFSET_MSG_ID]
        k = _put_offset_msg_id(d, b + store_at, HOST_V4_BYTES + v.store_extra, phy)
        if not flags & COL_NO_MSG_ID:
            if want_at[P_UNIQ] >= 0:
                _put_str(o, S_MSG_ID, row, b + want_at[P_UNIQ], want_len[P_UNIQ])
            else:
                _put_str(o, S_MSG_ID, row, d, k)
        if not flags & COL_NO_OFFSET_MSG_ID:
            o.s_used[S_OFFSET_MSG_ID] += k
            o.s_off[S_OFFSET_MSG_ID][row + 1] = <int32_t>o.s_used[S_OFFSET_MSG_ID]
    if not flags & COL_NO_ORIGINAL_TOPIC:
        vat = v.topic_at
        vlen = v.topic_len
        if want_at[P_RETRY_TOPIC] >= 0:
            vat = want_at[P_RETRY_TOPIC]
            vlen = want_len[P_RETRY_TOPIC]
        elif want_at[P_REAL_TOPIC] >= 0:
            vat = want_at[P_REAL_TOPIC]
            vlen = want_len[P_REAL_TOPIC]
        _put_str(o, S_ORIGINAL_TOPIC, row, b + vat, vlen)


# --- filters and resync -------------------------------------------------------------------------
cdef struct TopicSet:
    const unsigned char *data
    const int32_t *offsets
    Py_ssize_t count        # -1: no topic filter


cdef inline bint _accepts(const unsigned char *b, Py_ssize_t pos, RecordView *v, TopicSet *ts,
                          int64_t min_ts, int64_t max_ts) noexcept nogil:
    cdef Py_ssize_t i
    cdef int64_t t = mq_rd_i64(b + pos + REC_STORETIMESTAMP_V4 + v.born_extra)
    if t < min_ts or t > max_ts:
        return False
    if ts.count < 0:
        return True
    for i in range(ts.count):
        if _same(b + v.topic_at, v.topic_len, ts.data + ts.offsets[i], ts.offsets[i + 1] - ts.offsets[i]):
            return True
    return False


cdef Py_ssize_t _find_record(const unsigned char *b, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t limit,
                             int64_t base_offset, bint check_crc) noexcept nogil:
    """First valid record start in [start, stop) whose PHYSICALOFFSET names its own position."""
    cdef RecordView v
    cdef const unsigned char *hit
    cdef Py_ssize_t q = start, m
    while q < stop:
        m = q + REC_MAGIC
        if m >= limit:
            return -1
        hit = <const unsigned char *>memchr(b + m, 0xDA, limit - m)  # both magics start 0xDA 0xA3 0x20
        if hit == NULL:
            return -1
        q = (hit - b) - REC_MAGIC
        if q >= stop:
            return -1
        if (q + REC_PHYOFFSET + 8 <= limit and (mq_rd_i32(b + q + REC_MAGIC) == MAGIC_V1
                                               or mq_rd_i32(b + q + REC_MAGIC) == MAGIC_V2)
                and mq_rd_i64(b + q + REC_PHYOFFSET) == base_offset + q
                and _check_record(b, q, limit, check_crc, &v) < 0):
            return q
        q += 1
    return -1


cdef class _TopicFilter:
    """Wanted topics packed for the kernel (None = no filter)."""

    cdef TopicSet ts
    cdef object data, offsets

    def __cinit__(self, topics):
        if topics is None:
            self.ts.count = -1
            self.data = b""
            self.offsets = np.zeros(1, np.int32)
        else:
            topics = [bytes(t) for t in topics]
            self.data = b"".join(topics) + b"\0"
            self.offsets = np.zeros(len(topics) + 1, np.int32)
            np.cumsum([len(t) for t in topics], out=self.offsets[1:])
            self.ts.count = len(topics)
        self.ts.data = <const unsigned char *><bytes>self.data
        self.ts.offsets = <const int32_t *>_addr(self.offsets)


cdef inline Py_ssize_t _rows_cap(Py_ssize_t max_rows, Py_ssize_t max_bytes):
    cdef Py_ssize_t by_bytes = max_bytes // COL_MIN_RECORD + 1
    return (max_rows if max_rows < by_bytes else by_bytes) + 1


# --- entry points ---------------------------------------------------------------------------------
def find_record(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t limit,
                int64_t base_offset, bint check_crc):
    """Resync of a byte-range split; see the twin."""
    if start < 0 or start > stop or stop > limit or limit > buf.shape[0]:
        raise ValueError("search range outside the buffer")
    return _find_record(_ptr(buf), start, stop, limit, base_offset, check_crc)


def decode_columns(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t limit,
                   int64_t base_offset, Py_ssize_t max_rows, Py_ssize_t max_bytes, topics,
                   int64_t min_store_ts, int64_t max_store_ts, int flags):
    """Records starting in ``buf[start:stop)`` as columns; see the twin for the contract."""
    if start < 0 or start > stop or stop > limit or limit > buf.shape[0]:
        raise ValueError("decode range outside the buffer")
    if max_rows < 1 or max_bytes < 1:
        raise ValueError("max_rows and max_bytes must be positive")
    cdef const unsigned char *b = _ptr(buf)
    cdef _TopicFilter tf = _TopicFilter(topics)
    cdef _ColumnBuffers out = None
    cdef RecordView v
    cdef Py_ssize_t pos = start, n = 0, used = 0, corrupt = 0, corrupt_bytes = 0, q
    cdef int status, reason = STOP_END
    cdef bint check_crc = (flags & COL_CHECK_CRC) != 0
    while pos < stop:
        status = _check_record(b, pos, limit, check_crc, &v)
        if status == STOP_BLANK or status == STOP_NO_DATA:
            reason = status
            break
        if status >= 0:  # CORRUPT, or TRUNCATED: runs past a record boundary
            if not flags & COL_SKIP_CORRUPT:
                reason = STOP_CORRUPT
                break
            q = _find_record(b, pos + 1, stop, limit, base_offset, check_crc)
            corrupt += 1
            corrupt_bytes += (q if q >= 0 else stop) - pos
            if q < 0:
                pos = stop
                break
            pos = q
            continue
        if _accepts(b, pos, &v, &tf.ts, min_store_ts, max_store_ts):
            if n > 0 and (n >= max_rows or used + v.size > max_bytes):
                reason = STOP_MAX_COUNT
                break
            if out is None:
                out = _ColumnBuffers(_rows_cap(max_rows, max_bytes),
                                     max_bytes if max_bytes > v.size else v.size)
            _emit_row(&out.out, n, b, pos, base_offset, &v, flags)
            n += 1
            used += v.size
        pos += v.size
    if out is None:
        out = _ColumnBuffers(0, 0)
    return _named(ColumnBatch, (n, out.finish(n), pos, reason, corrupt, corrupt_bytes))


def decode_columns_at(const unsigned char[::1] buf, positions, Py_ssize_t first, Py_ssize_t limit,
                      int64_t base_offset, Py_ssize_t max_rows, Py_ssize_t max_bytes, topics,
                      int64_t min_store_ts, int64_t max_store_ts, int flags):
    """Records at ``positions[first:]`` (consume-queue offsets) as columns; see the twin."""
    if first < 0 or limit < 0 or limit > buf.shape[0]:
        raise ValueError("decode range outside the buffer")
    if max_rows < 1 or max_bytes < 1:
        raise ValueError("max_rows and max_bytes must be positive")
    cdef const int64_t[::1] at = np.ascontiguousarray(positions, dtype=np.int64)
    cdef const unsigned char *b = _ptr(buf)
    cdef _TopicFilter tf = _TopicFilter(topics)
    cdef _ColumnBuffers out = None
    cdef RecordView v
    cdef Py_ssize_t i = first, n = 0, used = 0, corrupt = 0, pos
    cdef int status, reason = STOP_END
    cdef bint check_crc = (flags & COL_CHECK_CRC) != 0
    while i < at.shape[0]:
        pos = at[i]
        status = STOP_CORRUPT
        if pos >= 0 and pos + REC_PHYOFFSET + 8 <= limit and mq_rd_i64(b + pos + REC_PHYOFFSET) == base_offset + pos:
            status = _check_record(b, pos, limit, check_crc, &v)
        if status >= 0:
            if not flags & COL_SKIP_CORRUPT:
                reason = STOP_CORRUPT
                break
            corrupt += 1
            i += 1
            continue
        if _accepts(b, pos, &v, &tf.ts, min_store_ts, max_store_ts):
            if n > 0 and (n >= max_rows or used + v.size > max_bytes):
                reason = STOP_MAX_COUNT
                break
            if out is None:
                out = _ColumnBuffers(_rows_cap(max_rows, max_bytes),
                                     max_bytes if max_bytes > v.size else v.size)
            _emit_row(&out.out, n, b, pos, base_offset, &v, flags)
            n += 1
            used += v.size
        i += 1
    if out is None:
        out = _ColumnBuffers(0, 0)
    return _named(ColumnBatch, (n, out.finish(n), i, reason, corrupt, 0))


def walk_records(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t limit, bint check_crc):
    """Walk valid records from ``start``; ``(end, count, reason, first_ts, last_ts)``."""
    if start < 0 or start > limit or limit > buf.shape[0]:
        raise ValueError("walk range outside the buffer")
    cdef const unsigned char *b = _ptr(buf)
    cdef RecordView v
    cdef Py_ssize_t pos = start, count = 0
    cdef int status, reason = STOP_END
    cdef int64_t ts, first_ts = -1, last_ts = -1
    with nogil:
        while pos < limit:
            status = _check_record(b, pos, limit, check_crc, &v)
            if status >= 0:
                reason = status
                break
            ts = mq_rd_i64(b + pos + REC_STORETIMESTAMP_V4 + v.born_extra)
            if count == 0:
                first_ts = ts
            last_ts = ts
            count += 1
            pos += v.size
    return _named(RecordWalk, (pos, count, reason, first_ts, last_ts))


def format_host(const unsigned char[::1] raw):
    """``ip:port`` text of a record's host field (8 or 20 bytes), as ASCII bytes."""
    if raw.shape[0] != HOST_V4_BYTES and raw.shape[0] != HOST_V6_BYTES:
        raise ValueError("a host field is 8 or 20 bytes")
    cdef unsigned char d[64]
    cdef Py_ssize_t n = _put_host(d, &raw[0], raw.shape[0])
    return <bytes>d[:n]
