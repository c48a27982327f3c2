# The record helpers the store kernels (_store.pyx) and the column kernels (_columns.pyx)
# share, included by both so each extension keeps them inline: the buffer pointer, BODYCRC,
# the record checker (``checkMessageAndReturnSize``) and the property walk. Layout numbers
# come from _store.pxd. Their readable twin is mqcore/_record_py.py.


from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.type cimport PyType_GenericAlloc


cdef inline object _named(object cls, tuple fields):
    """``fields`` as an instance of the NamedTuple ``cls`` (mqcore/format/scans.py): the tuple
    subtype allocated and filled directly, which is what ``tuple.__new__(cls, fields)`` does
    without its argument handling."""
    cdef Py_ssize_t i, n = len(fields)
    cdef object r = PyType_GenericAlloc(cls, n)
    for i in range(n):
        v = fields[i]
        Py_INCREF(v)  # PyTuple_SET_ITEM steals the reference
        PyTuple_SET_ITEM(r, i, v)
    return r


cdef const unsigned char *EMPTY = <const unsigned char *>b""


cdef inline const unsigned char *_ptr(const unsigned char[::1] b) noexcept nogil:
    return &b[0] if b.shape[0] else EMPTY


cdef inline int32_t _crc(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    # RocketMQ keeps the low 31 bits (UtilAll.crc32 masks with 0x7FFFFFFF)
    return <int32_t>(mq_crc32(0, p, <size_t>n) & 0x7FFFFFFF)


cdef int _check_record(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, bint check_crc,
                       RecordView *v) noexcept nogil:
    """``checkMessageAndReturnSize``: -1 when valid (fields in ``v``), else a STOP_* reason."""
    cdef Py_ssize_t i
    if end - pos < 8:
        for i in range(pos, end):
            if b[i]:
                return STOP_TRUNCATED
        return STOP_NO_DATA
    v.size = mq_rd_i32(b + pos)
    v.magic = mq_rd_i32(b + pos + REC_MAGIC)
    if v.magic == MAGIC_BLANK:
        return STOP_BLANK
    if v.magic != MAGIC_V1 and v.magic != MAGIC_V2:
        return STOP_NO_DATA if v.size == 0 and v.magic == 0 else STOP_CORRUPT
    if v.size < REC_FIXED_V4 + 3:
        return STOP_CORRUPT
    if pos + v.size > end:
        return STOP_TRUNCATED
    cdef Py_ssize_t rec_end = pos + v.size
    v.sys_flag = mq_rd_i32(b + pos + REC_SYSFLAG)
    v.born_extra = HOST_V6_EXTRA if v.sys_flag & SYSFLAG_BORNHOST_V6 else 0
    v.store_extra = HOST_V6_EXTRA if v.sys_flag & SYSFLAG_STOREHOST_V6 else 0
    v.body_at = pos + REC_BODYLENGTH_V4 + v.born_extra + v.store_extra
    if v.body_at + 4 > rec_end:
        return STOP_CORRUPT
    v.body_len = mq_rd_i32(b + v.body_at)
    if v.body_len < 0 or v.body_at + 4 + v.body_len + 3 > rec_end:
        return STOP_CORRUPT
    cdef Py_ssize_t topic_field = v.body_at + 4 + v.body_len
    if v.magic == MAGIC_V1:
        v.topic_len = b[topic_field]
        if v.topic_len > 127:
            return STOP_CORRUPT
        v.topic_at = topic_field + 1
    else:
        v.topic_len = mq_rd_i16(b + topic_field)
        if v.topic_len < 0:
            return STOP_CORRUPT
        v.topic_at = topic_field + 2
    if v.topic_at + v.topic_len + 2 > rec_end:
        return STOP_CORRUPT
    v.props_len = mq_rd_i16(b + v.topic_at + v.topic_len)
    v.props_at = v.topic_at + v.topic_len + 2
    if v.props_len < 0 or v.props_at + v.props_len != rec_end:
        return STOP_CORRUPT
    if check_crc and v.body_len > 0:
        if _crc(b + v.body_at + 4, v.body_len) != mq_rd_i32(b + pos + REC_BODYCRC):
            return STOP_CORRUPT
    return -1


cdef inline bint _name_is(const unsigned char *p, Py_ssize_t n, const char *name, Py_ssize_t k) noexcept nogil:
    cdef Py_ssize_t i
    if n != k:
        return False
    for i in range(k):
        if p[i] != <unsigned char>name[i]:
            return False
    return True


cdef inline Py_ssize_t _next_property(const unsigned char *b, Py_ssize_t p, Py_ssize_t end,
                                      Py_ssize_t *name_end) noexcept nogil:
    """End of the property segment starting at ``p`` (its U+0002 or ``end``).

    ``name_end[0]`` is the position of the segment's U+0001 when the segment is valid (a
    non-empty name and a non-empty value, as string2messageProperties accepts), else -1.
    The one C walk of the property grammar; mqcore/format/properties.py is the Python one.
    """
    cdef Py_ssize_t q = p, k
    while q < end and b[q] != PROPERTY_SEPARATOR_BYTE:
        q += 1
    k = p
    while k < q and b[k] != NAME_VALUE_SEPARATOR_BYTE:
        k += 1
    name_end[0] = k if (k > p and k < q - 1) else -1
    return q


cdef int64_t _parse_level(const unsigned char *p, Py_ssize_t n) noexcept nogil:
    cdef int64_t v = 0
    cdef Py_ssize_t i = 0
    cdef bint neg = False
    if n == 0:
        return 0
    if p[0] == 45:  # '-'
        neg = True
        i = 1
        if n == 1:
            return 0
    elif p[0] == 43:  # '+' (int() accepts it)
        i = 1
        if n == 1:
            return 0
    for i in range(i, n):
        if p[i] < 48 or p[i] > 57:
            return 0
        if v < 100000000:  # saturate: any level this large is clamped to the maximum anyway
            v = v * 10 + (p[i] - 48)
    if v > 100000000:  # the clamp itself, as the twin's: a saturated value still depends on its digits
        v = 100000000
    return -v if neg else v


cdef inline bint memcmp_eq(const unsigned char *a, const unsigned char *b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if a[i] != b[i]:
            return False
    return True
