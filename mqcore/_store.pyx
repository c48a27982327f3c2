# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Cython kernels of the store: byte work over buffers, in batches.

Each function here has a twin with the same name, arguments, results and errors in
``mqcore/_store_py.py`` (the readable reference). Kernels never open files, take
locks, log or read the clock; they never keep a view of a buffer past the call.
"""
cimport cython
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t
from libc.string cimport memcpy, memset
from cpython.dict cimport PyDict_Next
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.tuple cimport PyTuple_SET_ITEM
from cpython.type cimport PyType_GenericAlloc
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.object cimport PyTypeObject

import numpy as np

from mqcore.errors import CorruptFileError, RecordDecodeError
from mqcore.format import layout as L
from mqcore.format.properties import format_properties
from mqcore.format.record import DECODED_FIELDS, DecodedRecord
from mqcore.format.scans import BatchMeasure, IndexKeys, QueueSelection, QueueUnits, RecordScan

IMPLEMENTATION = "cython"

DISPATCH_DTYPE = np.dtype(list(L.DISPATCH_FIELDS))
cdef object _Record = DecodedRecord
cdef Py_ssize_t _RECORD_FIELDS = len(DECODED_FIELDS)


cdef inline object _named_record(tuple fields):
    """``fields`` as a ``DecodedRecord``: the tuple subtype allocated and filled directly, which is
    what ``tuple.__new__(DecodedRecord, fields)`` does without its argument handling (a third of
    a record's decode time on the consume path)."""
    cdef object r = PyType_GenericAlloc(_Record, _RECORD_FIELDS)
    cdef Py_ssize_t i
    for i in range(_RECORD_FIELDS):
        v = fields[i]
        Py_INCREF(v)  # PyTuple_SET_ITEM steals the reference
        PyTuple_SET_ITEM(r, i, v)
    return r

include "_record.pxi"  # _ptr, _crc, the record checker and the property walk (shared with _columns.pyx)


# --- Java String.hashCode over UTF-8 input -------------------------------------------
cdef inline bint _utf8_hash(uint32_t *h, const unsigned char *p, Py_ssize_t n) noexcept nogil:
    """Continue ``h`` over the UTF-16 code units of strict UTF-8 ``p[:n]``; False if invalid."""
    cdef Py_ssize_t i = 0
    cdef uint32_t cp, c, hh = h[0]
    while i < n:
        c = p[i]
        if c < 0x80:
            cp = c
            i += 1
        elif 0xC2 <= c <= 0xDF:
            if i + 1 >= n or (p[i + 1] & 0xC0) != 0x80:
                return False
            cp = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F)
            i += 2
        elif 0xE0 <= c <= 0xEF:
            if i + 2 >= n or (p[i + 1] & 0xC0) != 0x80 or (p[i + 2] & 0xC0) != 0x80:
                return False
            if (c == 0xE0 and p[i + 1] < 0xA0) or (c == 0xED and p[i + 1] > 0x9F):
                return False
            cp = ((c & 0x0F) << 12) | ((p[i + 1] & 0x3F) << 6) | (p[i + 2] & 0x3F)
            i += 3
        elif 0xF0 <= c <= 0xF4:
            if (i + 3 >= n or (p[i + 1] & 0xC0) != 0x80 or (p[i + 2] & 0xC0) != 0x80
                    or (p[i + 3] & 0xC0) != 0x80):
                return False
            if (c == 0xF0 and p[i + 1] < 0x90) or (c == 0xF4 and p[i + 1] > 0x8F):
                return False
            cp = (((c & 0x07) << 18) | ((p[i + 1] & 0x3F) << 12) | ((p[i + 2] & 0x3F) << 6)
                  | (p[i + 3] & 0x3F))
            i += 4
        else:
            return False
        if cp >= 0x10000:
            cp -= 0x10000
            hh = 31 * hh + (0xD800 + (cp >> 10))
            hh = 31 * hh + (0xDC00 + (cp & 0x3FF))
        else:
            hh = 31 * hh + cp
    h[0] = hh
    return True


cdef uint32_t _hash_bytes(uint32_t h, const unsigned char *p, Py_ssize_t n) except? 0xFFFFFFFF:
    """Hash continuation that falls back to Python's decoder for invalid UTF-8 (rare)."""
    cdef uint32_t hh = h
    cdef bytes units
    cdef Py_ssize_t i
    if _utf8_hash(&hh, p, n):
        return hh
    units = (<bytes>p[:n]).decode("utf-8", "replace").encode("utf-16-be", "surrogatepass")
    hh = h
    for i in range(0, len(units), 2):
        hh = 31 * hh + ((<unsigned char>units[i] << 8) | <unsigned char>units[i + 1])
    return hh


def java_hash(str s):
    """``String.hashCode()``: 31*h + c over UTF-16 code units, wrapping int32."""
    # via UTF-16 so that lone surrogates hash as Java sees them
    cdef bytes units = s.encode("utf-16-be", "surrogatepass")
    cdef const unsigned char *u = <const unsigned char *>units
    cdef uint32_t h = 0
    cdef Py_ssize_t i
    for i in range(0, len(units), 2):
        h = 31 * h + ((u[i] << 8) | u[i + 1])
    return <int32_t>h


def java_hash_utf8(const unsigned char[::1] b):
    """``java_hash`` of UTF-8 bytes (invalid sequences count as U+FFFD)."""
    return <int32_t>_hash_bytes(0, _ptr(b), b.shape[0])


def tags_code(tags):
    """ConsumeQueue tagsCode of a TAGS value: sign-extended hash, 0 when absent."""
    return java_hash(tags) if tags else 0


cdef inline int32_t _index_hash(int32_t h) noexcept nogil:
    if h == <int32_t>(-2147483648):
        return 0
    return -h if h < 0 else h


def index_hash(int32_t h):
    """``Math.abs(hash)`` with Integer.MIN_VALUE mapped to 0."""
    return _index_hash(h)


def key_hashes(str topic, uniq, keys):
    """Index hashes of ``topic#uniq`` then ``topic#w`` for each non-empty space-separated
    word ``w`` of ``keys`` (``index_hash(java_hash(...))`` of each, what the record scan
    gives): the prefix's hash is taken once, and a trace message's hundred keys cost one
    UTF-16 encoding instead of a hundred strings."""
    cdef bytes prefix = (topic + "#").encode("utf-16-be", "surrogatepass")
    cdef const unsigned char *u = <const unsigned char *>prefix
    cdef uint32_t h0 = 0, h
    cdef Py_ssize_t i, n = len(prefix), start
    for i in range(0, n, 2):
        h0 = 31 * h0 + ((u[i] << 8) | u[i + 1])
    out = []
    cdef bytes units
    if uniq:
        units = (<str?>uniq).encode("utf-16-be", "surrogatepass")
        u = <const unsigned char *>units
        h = h0
        for i in range(0, len(units), 2):
            h = 31 * h + ((u[i] << 8) | u[i + 1])
        out.append(_index_hash(<int32_t>h))
    if not keys:
        return out
    units = (<str?>keys).encode("utf-16-be", "surrogatepass")
    u = <const unsigned char *>units
    n = len(units)
    h = h0
    start = 0
    for i in range(0, n + 2, 2):
        if i == n or (u[i] == 0 and u[i + 1] == 0x20):  # a word ends (U+0020 is never half a pair)
            if i > start:
                out.append(_index_hash(<int32_t>h))
            h = h0
            start = i + 2
        else:
            h = 31 * h + ((u[i] << 8) | u[i + 1])
    return out


# --- record sizes and encoding ---------------------------------------------------------
cdef Py_ssize_t _record_size(Py_ssize_t body_len, Py_ssize_t topic_len, Py_ssize_t props_len,
                                    int32_t sys_flag) noexcept nogil:
    cdef Py_ssize_t extra = 0
    if sys_flag & SYSFLAG_BORNHOST_V6:
        extra += HOST_V6_EXTRA
    if sys_flag & SYSFLAG_STOREHOST_V6:
        extra += HOST_V6_EXTRA
    return REC_FIXED_V4 + extra + body_len + 1 + topic_len + 2 + props_len


def record_size(Py_ssize_t body_len, Py_ssize_t topic_len, Py_ssize_t props_len, int32_t sys_flag):
    """TOTALSIZE of a v1 record (``CommitLog.calMsgLength``)."""
    return _record_size(body_len, topic_len, props_len, sys_flag)


cdef int _check_host(Py_ssize_t n, int32_t sys_flag, int32_t bit, str what) except -1:
    cdef Py_ssize_t want = HOST_V6_BYTES if sys_flag & bit else HOST_V4_BYTES
    if n != want:
        raise ValueError(f"{what} is {n} bytes but sys_flag asks for {want}")
    return 0


cdef Py_ssize_t _write_record(unsigned char *d, const unsigned char *topic, Py_ssize_t topic_len,
                              int32_t queue_id, int32_t flag, int64_t queue_offset, int64_t phy_offset,
                              int32_t sys_flag, int64_t born_ts, const unsigned char *born_host,
                              Py_ssize_t born_len, int64_t store_ts, const unsigned char *store_host,
                              Py_ssize_t store_len, int32_t reconsume, int64_t prepared,
                              const unsigned char *body, Py_ssize_t body_len,
                              const unsigned char *props1, Py_ssize_t props1_len,
                              const unsigned char *props2, Py_ssize_t props2_len) noexcept nogil:
    """Write one record; properties are props1 [+ U+0002 + props2]. Returns its size."""
    cdef Py_ssize_t props_len = props1_len
    if props2_len:
        props_len = props1_len + 1 + props2_len if props1_len else props2_len
    cdef Py_ssize_t size = _record_size(body_len, topic_len, props_len, sys_flag)
    cdef Py_ssize_t p
    mq_wr_i32(d + REC_TOTALSIZE, <int32_t>size)
    mq_wr_i32(d + REC_MAGIC, MAGIC_V1)
    mq_wr_i32(d + REC_BODYCRC, _crc(body, body_len) if body_len else 0)
    mq_wr_i32(d + REC_QUEUEID, queue_id)
    mq_wr_i32(d + REC_FLAG, flag)
    mq_wr_i64(d + REC_QUEUEOFFSET, queue_offset)
    mq_wr_i64(d + REC_PHYOFFSET, phy_offset)
    mq_wr_i32(d + REC_SYSFLAG, sys_flag)
    mq_wr_i64(d + REC_BORNTIMESTAMP, born_ts)
    memcpy(d + REC_BORNHOST, born_host, born_len)
    p = REC_BORNHOST + born_len
    mq_wr_i64(d + p, store_ts)
    p += 8
    memcpy(d + p, store_host, store_len)
    p += store_len
    mq_wr_i32(d + p, reconsume)
    mq_wr_i64(d + p + 4, prepared)
    mq_wr_i32(d + p + 12, <int32_t>body_len)
    p += 16
    if body_len:
        memcpy(d + p, body, body_len)
    p += body_len
    d[p] = <unsigned char>topic_len
    memcpy(d + p + 1, topic, topic_len)
    p += 1 + topic_len
    mq_wr_i16(d + p, <int16_t>props_len)
    p += 2
    if props1_len:
        memcpy(d + p, props1, props1_len)
        p += props1_len
        if props2_len:
            d[p] = 2
            p += 1
    if props2_len:
        memcpy(d + p, props2, props2_len)
    return size


def body_crc(const unsigned char[::1] data):
    """BODYCRC of ``data``: ``zlib.crc32(data) & 0x7FFFFFFF``, folded with PCLMULQDQ where the
    CPU has it (mqcore/_crc32.h)."""
    cdef int32_t crc
    with nogil:
        crc = _crc(_ptr(data), data.shape[0])
    return crc


def encode_record(unsigned char[::1] dst, Py_ssize_t pos, const unsigned char[::1] topic,
                  int32_t queue_id, int32_t flag, int64_t queue_offset, int64_t phy_offset,
                  int32_t sys_flag, int64_t born_timestamp, const unsigned char[::1] born_host,
                  int64_t store_timestamp, const unsigned char[::1] store_host,
                  int32_t reconsume_times, int64_t prepared_offset,
                  const unsigned char[::1] body, const unsigned char[::1] properties):
    """Write one v1 record at ``dst[pos:]``; returns its size. Raises if it does not fit."""
    _check_host(born_host.shape[0], sys_flag, SYSFLAG_BORNHOST_V6, "born_host")
    _check_host(store_host.shape[0], sys_flag, SYSFLAG_STOREHOST_V6, "store_host")
    if topic.shape[0] > MAX_TOPIC_LENGTH:
        raise ValueError("topic longer than 127 bytes")
    if properties.shape[0] > MAX_PROPERTIES_BYTES:
        raise ValueError("properties longer than 32767 bytes")
    cdef Py_ssize_t size = _record_size(body.shape[0], topic.shape[0], properties.shape[0], sys_flag)
    if pos < 0 or pos + size > dst.shape[0]:
        raise ValueError("record does not fit in the buffer")
    with nogil:
        _write_record(&dst[pos], _ptr(topic), topic.shape[0], queue_id, flag, queue_offset,
                      phy_offset, sys_flag, born_timestamp, _ptr(born_host), born_host.shape[0],
                      store_timestamp, _ptr(store_host), store_host.shape[0], reconsume_times,
                      prepared_offset, _ptr(body), body.shape[0], _ptr(properties),
                      properties.shape[0], EMPTY, 0)
    return size


def write_blank(unsigned char[::1] dst, Py_ssize_t pos, Py_ssize_t size):
    """End-of-file marker: TOTALSIZE = bytes left in the file, BLANK magic."""
    if size < BLANK_HEADER_BYTES or pos < 0 or pos + BLANK_HEADER_BYTES > dst.shape[0]:
        raise ValueError("no room for an end-of-file marker")
    mq_wr_i32(&dst[pos], <int32_t>size)
    mq_wr_i32(&dst[pos] + 4, MAGIC_BLANK)


# --- wire batches ------------------------------------------------------------------------
cdef inline Py_ssize_t _batch_item_head(unsigned char *o, int32_t flag, const unsigned char *body,
                                        Py_ssize_t blen, Py_ssize_t plen) noexcept:
    """A batch item up to its properties: sizes, flag, body and the properties length
    (the client writes MAGIC and BODYCRC as 0). Returns the bytes written."""
    mq_wr_i32(o, <int32_t>(BATCH_ITEM_FIXED + blen + 2 + plen))
    mq_wr_i32(o + 4, 0)
    mq_wr_i32(o + 8, 0)
    mq_wr_i32(o + BATCH_ITEM_FLAG, flag)
    mq_wr_i32(o + BATCH_ITEM_BODYLENGTH, <int32_t>blen)
    if blen:
        memcpy(o + BATCH_ITEM_FIXED, body, blen)
    mq_wr_i16(o + BATCH_ITEM_FIXED + blen, <int16_t>plen)
    return BATCH_ITEM_FIXED + blen + 2


def encode_batch_items(items):
    """Client side: (flag, body, properties) items -> SEND_BATCH body (MessageDecoder.encodeMessage)."""
    cdef Py_ssize_t total = 0, p = 0, blen, plen
    cdef const unsigned char[::1] b
    cdef const unsigned char[::1] pr
    for flag, body, props in items:
        total += BATCH_ITEM_FIXED + len(body) + 2 + len(props)
    out = bytearray(total)
    cdef unsigned char[::1] o = out
    for flag, body, props in items:
        b = body
        pr = props
        blen = b.shape[0]
        plen = pr.shape[0]
        p += _batch_item_head(&o[p], <int32_t>flag, &b[0] if blen else NULL, blen, plen)
        if plen:
            memcpy(&o[p], &pr[0], plen)
        p += plen
    return bytes(out)


cdef Py_ssize_t _dict_props_len(dict props) except -1:
    """Encoded length of a properties dict of str names and values (None values left out),
    or -2 when an entry is not a str (the caller formats that message in Python)."""
    cdef Py_ssize_t pos = 0, n = 0, count = 0, kl, vl
    cdef PyObject *k
    cdef PyObject *v
    while PyDict_Next(props, &pos, &k, &v):
        if <object>v is None:
            continue
        if type(<object>k) is not str or type(<object>v) is not str:
            return -2
        PyUnicode_AsUTF8AndSize(<object>k, &kl)
        PyUnicode_AsUTF8AndSize(<object>v, &vl)
        n += kl + 1 + vl
        count += 1
    return n + count - 1 if count else 0


cdef Py_ssize_t _dict_props_write(dict props, unsigned char *o, Py_ssize_t cap) except -1:
    """Write what ``_dict_props_len`` measured into ``cap`` bytes; a dict that no longer
    fits (changed by another thread since it was measured) is an error, never an overrun."""
    cdef Py_ssize_t pos = 0, p = 0, kl, vl
    cdef PyObject *k
    cdef PyObject *v
    cdef const char *kb
    cdef const char *vb
    while PyDict_Next(props, &pos, &k, &v):
        if <object>v is None:
            continue
        if type(<object>k) is not str or type(<object>v) is not str:
            raise RuntimeError("a message's properties changed while the batch was being encoded")
        kb = PyUnicode_AsUTF8AndSize(<object>k, &kl)
        vb = PyUnicode_AsUTF8AndSize(<object>v, &vl)
        if p + (1 if p else 0) + kl + 1 + vl > cap:
            raise RuntimeError("a message's properties changed while the batch was being encoded")
        if p:
            o[p] = PROPERTY_SEPARATOR_BYTE
            p += 1
        memcpy(o + p, kb, kl)
        p += kl
        o[p] = NAME_VALUE_SEPARATOR_BYTE
        p += 1
        memcpy(o + p, vb, vl)
        p += vl
    if p != cap:
        raise RuntimeError("a message's properties changed while the batch was being encoded")
    return p


def encode_batch_messages(items):
    """Client side: (flag, body, properties dict) items -> SEND_BATCH body, the properties
    formatted as ``messageProperties2String`` on the way (no per-message string
    building). A properties length over 32767 bytes is a ValueError."""
    cdef Py_ssize_t total = 0, p = 0, blen, plen, n = len(items), i
    cdef int32_t flag
    cdef const unsigned char[::1] b
    cdef const unsigned char[::1] pr
    cdef const unsigned char *bp
    cdef unsigned char *o
    # pass 1 measures every item and keeps what pass 2 writes, so nothing a thread switch
    # could change is read twice: the body (bytes as they are; any other buffer as a view,
    # which also holds its export), the properties (dict or encoded bytes), flag and length.
    # Nothing per item is allocated for bytes bodies: a view or tuple per item was two to
    # three collector-tracked objects each, and their allocations set off the collections
    # that cost a fifth of a 1000-message send_batch's client CPU (issue 34)
    cdef list bodies = [], propss = []
    cdef int64_t *meta = <int64_t *>PyMem_Malloc(2 * n * sizeof(int64_t) + 1)  # (flag, properties length)
    if meta == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            item_flag, body, props = items[i]
            flag = item_flag
            meta[2 * i] = flag
            if type(body) is bytes:
                blen = PyBytes_GET_SIZE(body)
            else:
                b = body
                blen = b.shape[0]
                body = b
            plen = _dict_props_len(<dict>props) if type(props) is dict else -2
            if plen == -2:  # not all str: the Python formatting, as the twin does
                props = format_properties(props).encode("utf-8")
                plen = len(props)
            if plen > 32767:
                raise ValueError(f"batch item {i}: properties encode to {plen} bytes, over 32767")
            meta[2 * i + 1] = plen
            bodies.append(body)
            propss.append(props)
            total += BATCH_ITEM_FIXED + blen + 2 + plen
        # written in place into the bytes it returns: a bytearray copied out at the end cost a
        # second (page-faulting) allocation of the whole batch, ~1 ms for 1000 x 1 KiB
        out = PyBytes_FromStringAndSize(NULL, total)
        o = <unsigned char *>PyBytes_AS_STRING(out)  # not shared yet: ours to fill
        for i in range(n):
            body, props, plen = bodies[i], propss[i], meta[2 * i + 1]
            if type(body) is bytes:
                blen, bp = PyBytes_GET_SIZE(body), <const unsigned char *>PyBytes_AS_STRING(body)
            else:
                b = body
                blen = b.shape[0]
                bp = &b[0] if blen else NULL
            if p + BATCH_ITEM_FIXED + blen + 2 + plen > total:
                raise RuntimeError("a message changed while the batch was being encoded")
            p += _batch_item_head(o + p, <int32_t>meta[2 * i], bp if blen else NULL, blen, plen)
            if type(props) is dict:
                _dict_props_write(<dict>props, o + p, plen)
            elif plen:
                pr = props
                memcpy(o + p, &pr[0], plen)
            p += plen
    finally:
        PyMem_Free(meta)
    if p != total:
        raise RuntimeError("a message changed while the batch was being encoded")
    return out


def encode_batch_message(int32_t flag, body, props):
    """One message's SEND_BATCH item, the bytes ``encode_batch_messages`` writes for it: an
    auto-batching producer encodes each message on the sending thread, while it is still in
    the cache, and joins the items when the batch leaves."""
    cdef const unsigned char[::1] b = body
    cdef Py_ssize_t blen = b.shape[0], p
    cdef Py_ssize_t plen = _dict_props_len(<dict>props) if type(props) is dict else -2
    cdef const unsigned char[::1] pr
    if plen == -2:  # not all str: the Python formatting, as the twin does
        props = format_properties(props).encode("utf-8")
        plen = len(props)
    if plen > 32767:
        raise ValueError(f"batch item: properties encode to {plen} bytes, over 32767")
    out = PyBytes_FromStringAndSize(NULL, BATCH_ITEM_FIXED + blen + 2 + plen)
    cdef unsigned char *o = <unsigned char *>PyBytes_AS_STRING(out)  # not shared yet: ours to fill
    p = _batch_item_head(o, flag, &b[0] if blen else NULL, blen, plen)
    if type(props) is dict:
        _dict_props_write(<dict>props, o + p, plen)
    elif plen:
        pr = props
        memcpy(o + p, &pr[0], plen)
    return out


cdef int _batch_item(const unsigned char *it, Py_ssize_t pos, Py_ssize_t n, Py_ssize_t *total,
                     Py_ssize_t *body_len, Py_ssize_t *props_len) except -1:
    """Check the wire batch item at ``pos``; raises RecordDecodeError when malformed."""
    if n - pos < BATCH_ITEM_FIXED:
        raise RecordDecodeError(f"batch item at byte {pos} is truncated")
    cdef int32_t t = mq_rd_i32(it + pos), bl = mq_rd_i32(it + pos + BATCH_ITEM_BODYLENGTH)
    if bl < 0 or t < BATCH_ITEM_FIXED + 2 or pos + t > n:
        raise RecordDecodeError(f"batch item at byte {pos} has an impossible size")
    cdef Py_ssize_t props_at = pos + BATCH_ITEM_FIXED + bl
    if props_at + 2 > pos + t:
        raise RecordDecodeError(f"batch item at byte {pos}: body runs past the item")
    cdef int16_t pl = mq_rd_i16(it + props_at)
    if pl < 0 or props_at + 2 + pl != pos + t:
        raise RecordDecodeError(f"batch item at byte {pos}: sizes do not add up")
    total[0] = t
    body_len[0] = bl
    props_len[0] = pl
    return 0


cdef inline Py_ssize_t _joined(Py_ssize_t props_len, Py_ssize_t extra_len) noexcept nogil:
    if extra_len == 0:
        return props_len
    if props_len == 0:
        return extra_len
    return props_len + 1 + extra_len


def measure_batch(const unsigned char[::1] items, Py_ssize_t topic_len, Py_ssize_t extra_props_len,
                  int32_t sys_flag):
    """Validate a wire batch; returns (count, total record bytes, max body, max properties)."""
    cdef Py_ssize_t n = items.shape[0], pos = 0, t, bl, pl, count = 0, total = 0
    cdef Py_ssize_t max_body = 0, max_props = 0
    cdef const unsigned char *it = _ptr(items)
    while pos < n:
        _batch_item(it, pos, n, &t, &bl, &pl)
        pl = _joined(pl, extra_props_len)
        total += _record_size(bl, topic_len, pl, sys_flag)
        if bl > max_body:
            max_body = bl
        if pl > max_props:
            max_props = pl
        count += 1
        pos += t
    return _named(BatchMeasure, (count, total, max_body, max_props))


def encode_batch(unsigned char[::1] dst, Py_ssize_t pos, const unsigned char[::1] items,
                 const unsigned char[::1] topic, int32_t queue_id, int64_t first_queue_offset,
                 int64_t phy_offset, int32_t sys_flag, int64_t born_timestamp,
                 const unsigned char[::1] born_host, int64_t store_timestamp,
                 const unsigned char[::1] store_host, const unsigned char[::1] extra_props):
    """Turn a wire batch into consecutive records at ``dst[pos:]``; returns bytes written."""
    _check_host(born_host.shape[0], sys_flag, SYSFLAG_BORNHOST_V6, "born_host")
    _check_host(store_host.shape[0], sys_flag, SYSFLAG_STOREHOST_V6, "store_host")
    if topic.shape[0] > MAX_TOPIC_LENGTH:
        raise ValueError("topic longer than 127 bytes")
    cdef Py_ssize_t n = items.shape[0], ipos = 0, t, bl, pl, written = 0, need = 0, i = 0
    cdef const unsigned char *it = _ptr(items)
    # validate everything and check the room first: a batch is written whole or not at all
    while ipos < n:
        _batch_item(it, ipos, n, &t, &bl, &pl)
        if _joined(pl, extra_props.shape[0]) > MAX_PROPERTIES_BYTES:
            raise ValueError("properties longer than 32767 bytes")
        need += _record_size(bl, topic.shape[0], _joined(pl, extra_props.shape[0]), sys_flag)
        ipos += t
    if pos < 0 or pos + need > dst.shape[0]:
        raise ValueError("batch does not fit in the buffer")
    cdef unsigned char *d = &dst[0] if need else NULL
    ipos = 0
    with nogil:
        while ipos < n:
            t = mq_rd_i32(it + ipos)
            bl = mq_rd_i32(it + ipos + BATCH_ITEM_BODYLENGTH)
            pl = mq_rd_i16(it + ipos + BATCH_ITEM_FIXED + bl)
            written += _write_record(d + pos + written, _ptr(topic), topic.shape[0], queue_id,
                                     mq_rd_i32(it + ipos + BATCH_ITEM_FLAG), first_queue_offset + i,
                                     phy_offset + written, sys_flag, born_timestamp,
                                     _ptr(born_host), born_host.shape[0], store_timestamp,
                                     _ptr(store_host), store_host.shape[0], 0, 0,
                                     it + ipos + BATCH_ITEM_FIXED, bl,
                                     it + ipos + BATCH_ITEM_FIXED + bl + 2, pl,
                                     _ptr(extra_props), extra_props.shape[0])
            ipos += t
            i += 1
    return written


# --- record scanning (the checker is _record.pxi's _check_record) ----------------------------
cdef void _find_props(const unsigned char *b, Py_ssize_t at, Py_ssize_t n, Py_ssize_t *tags,
                      Py_ssize_t *uniq, Py_ssize_t *keys, Py_ssize_t *delay) noexcept nogil:
    """Value spans (pos, len pairs) of TAGS, UNIQ_KEY, KEYS and DELAY; last occurrence wins."""
    cdef Py_ssize_t p = at, end = at + n, q, k
    tags[0] = uniq[0] = keys[0] = delay[0] = -1
    while p < end:
        q = _next_property(b, p, end, &k)
        if k >= 0:
            if _name_is(b + p, k - p, "TAGS", 4):
                tags[0] = k + 1
                tags[1] = q - k - 1
            elif _name_is(b + p, k - p, "UNIQ_KEY", 8):
                uniq[0] = k + 1
                uniq[1] = q - k - 1
            elif _name_is(b + p, k - p, "KEYS", 4):
                keys[0] = k + 1
                keys[1] = q - k - 1
            elif _name_is(b + p, k - p, "DELAY", 5):
                delay[0] = k + 1
                delay[1] = q - k - 1
        p = q + 1


def scan_records(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t end, int64_t base_offset,
                 bint check_crc, delay_ms, Py_ssize_t max_count):
    """Walk records in ``buf[start:end]``; see the twin for the contract."""
    if start < 0 or end > buf.shape[0] or start > end:
        raise ValueError("scan range outside the buffer")
    cdef const int64_t[::1] delays = np.ascontiguousarray(delay_ms, dtype=np.int64)
    cdef Py_ssize_t n_delays = delays.shape[0]
    # size the table once: no record is shorter than REC_FIXED_V4 + 3 bytes
    cdef Py_ssize_t cap = (end - start) // (REC_FIXED_V4 + 3) + 1
    if cap > max_count:
        cap = max_count if max_count > 0 else 1
    table = np.empty(cap, dtype=DISPATCH_DTYPE)
    cdef DispatchRow[::1] rows = table
    cdef const unsigned char *b = _ptr(buf)
    cdef RecordView v
    cdef Py_ssize_t pos = start, n = 0
    cdef Py_ssize_t tags[2]
    cdef Py_ssize_t uniq[2]
    cdef Py_ssize_t keys[2]
    cdef Py_ssize_t delay[2]
    cdef int reason = STOP_END, status
    cdef int64_t store_ts, level
    cdef uint32_t h
    cdef int32_t tid
    cdef bint scheduled
    topics = []
    topic_ids = {}
    cdef bytes topic, last_topic = None
    cdef int32_t last_tid = -1
    while pos < end:
        if n >= max_count:
            reason = STOP_MAX_COUNT
            break
        status = _check_record(b, pos, end, check_crc, &v)
        if status >= 0:
            reason = status
            break
        if n == cap:
            cap *= 2
            table = np.resize(table, cap)
            rows = table
        # topics repeat: compare against the previous one before touching the dict
        if (last_topic is not None and v.topic_len == len(last_topic)
                and memcmp_eq(b + v.topic_at, <const unsigned char *>last_topic, v.topic_len)):
            tid = last_tid
        else:
            topic = <bytes>(b + v.topic_at)[:v.topic_len]
            tid = topic_ids.get(topic, -1)
            if tid < 0:
                tid = len(topics)
                topic_ids[topic] = tid
                topics.append(topic)
            last_topic = topic
            last_tid = tid
        _find_props(b, v.props_at, v.props_len, tags, uniq, keys, delay)
        store_ts = mq_rd_i64(b + pos + REC_STORETIMESTAMP_V4 + v.born_extra)
        rows[n].phy_offset = base_offset + pos
        rows[n].store_timestamp = store_ts
        rows[n].queue_offset = mq_rd_i64(b + pos + REC_QUEUEOFFSET)
        rows[n].size = v.size
        rows[n].queue_id = mq_rd_i32(b + pos + REC_QUEUEID)
        rows[n].sys_flag = v.sys_flag
        rows[n].topic_idx = tid
        rows[n].uniq_pos = uniq[0]
        rows[n].uniq_len = uniq[1] if uniq[0] >= 0 else 0
        rows[n].keys_pos = keys[0]
        rows[n].keys_len = keys[1] if keys[0] >= 0 else 0
        scheduled = False
        if delay[0] >= 0 and v.topic_len == 19 and memcmp_eq(b + v.topic_at,
                                                              <const unsigned char *>b"SCHEDULE_TOPIC_XXXX", 19):
            level = _parse_level(b + delay[0], delay[1])
            if level > 0:
                scheduled = True
                if level > n_delays:
                    level = n_delays
                rows[n].tags_code = store_ts + (delays[level - 1] if level > 0 else 1000)
        if not scheduled:
            if tags[0] >= 0:
                h = _hash_bytes(0, b + tags[0], tags[1])
                rows[n].tags_code = <int32_t>h
            else:
                rows[n].tags_code = 0
        n += 1
        pos += v.size
    return _named(RecordScan, (table[:n], topics, pos, reason))


cdef str _host_str(const unsigned char *p, Py_ssize_t n):
    cdef int32_t port = mq_rd_i32(p + n - 4)
    if n == HOST_V4_BYTES:
        return "%d.%d.%d.%d:%d" % (p[0], p[1], p[2], p[3], port)
    import ipaddress
    return "[%s]:%d" % (ipaddress.IPv6Address(<bytes>p[:16]), port)


@cython.final
cdef class _RecordStrs:
    """The born host, store host and topic of the record ``_next_record`` read last, as ``str``.

    Consecutive records nearly always share their topic, store host and (one producer) born
    host: the previous record's str is reused when the raw bytes are equal instead of
    formatting/decoding them again (two "%d.%d.%d.%d:%d" formats and a UTF-8 decode were a
    third of a record's decode time on the consume path). One per decode call, none per record."""
    cdef const unsigned char *born_prev
    cdef const unsigned char *store_prev
    cdef const unsigned char *topic_prev
    cdef Py_ssize_t born_prev_n, store_prev_n, topic_prev_n
    cdef str born, store, topic


cdef inline bint _next_record(_RecordStrs c, const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, bint check_crc,
                              RecordView *v) except -1:
    """Check the record at ``pos`` into ``v`` and bring ``c``'s strings to it: True to go on,
    False at a blank marker or never-written space; RecordDecodeError for a corrupt record."""
    cdef int status = _check_record(b, pos, end, check_crc, v)
    if status == STOP_BLANK or status == STOP_NO_DATA:
        return False
    if status >= 0:
        raise RecordDecodeError(f"corrupt record at byte {pos}: {L.ScanStop.NAMES[status]}")
    cdef const unsigned char *p = b + pos + REC_BORNHOST
    cdef Py_ssize_t n = HOST_V4_BYTES + v.born_extra
    if c.born_prev == NULL or n != c.born_prev_n or not memcmp_eq(p, c.born_prev, n):
        c.born = _host_str(p, n)
        c.born_prev, c.born_prev_n = p, n
    p = b + pos + REC_STOREHOST_V4 + v.born_extra
    n = HOST_V4_BYTES + v.store_extra
    if c.store_prev == NULL or n != c.store_prev_n or not memcmp_eq(p, c.store_prev, n):
        c.store = _host_str(p, n)
        c.store_prev, c.store_prev_n = p, n
    p = b + v.topic_at
    if c.topic_prev == NULL or v.topic_len != c.topic_prev_n or not memcmp_eq(p, c.topic_prev, v.topic_len):
        c.topic = (<bytes>p[:v.topic_len]).decode("utf-8", "replace")
        c.topic_prev, c.topic_prev_n = p, v.topic_len
    return True


def decode_records(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_count,
                   bint check_crc=False):
    """Fully decode records in ``buf[start:end]`` into ``DecodedRecord`` values."""
    if start < 0 or end > buf.shape[0] or start > end:
        raise ValueError("decode range outside the buffer")
    cdef const unsigned char *b = _ptr(buf)
    cdef RecordView v
    cdef Py_ssize_t pos = start
    cdef _RecordStrs c = _RecordStrs()
    out = []
    while pos < end and len(out) < max_count:
        if not _next_record(c, b, pos, end, check_crc, &v):
            break
        out.append(_named_record((
            v.size,
            mq_rd_i32(b + pos + REC_BODYCRC),
            mq_rd_i32(b + pos + REC_QUEUEID),
            mq_rd_i32(b + pos + REC_FLAG),
            mq_rd_i64(b + pos + REC_QUEUEOFFSET),
            mq_rd_i64(b + pos + REC_PHYOFFSET),
            v.sys_flag,
            mq_rd_i64(b + pos + REC_BORNTIMESTAMP),
            c.born,
            mq_rd_i64(b + pos + REC_STORETIMESTAMP_V4 + v.born_extra),
            c.store,
            mq_rd_i32(b + pos + REC_RECONSUMETIMES_V4 + v.born_extra + v.store_extra),
            mq_rd_i64(b + pos + REC_PREPAREDOFFSET_V4 + v.born_extra + v.store_extra),
            <bytes>(b + v.body_at + 4)[:v.body_len],
            c.topic,
            <bytes>(b + v.props_at)[:v.props_len],
        )))
        pos += v.size
    return out


# --- received messages (the consumer's pull answers) -----------------------------------------------
cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    PyTypeObject PyMemberDescr_Type
    PyTypeObject PyBaseObject_Type
    void PyObject_GC_UnTrack(void *op)

#: the slots ``decode_message_objects`` fills, in this order (its twin names them too)
MESSAGE_SLOTS = ("topic", "body", "flag", "_properties", "_props_raw", "transaction_id", "broker_name",
                 "queue_id", "queue_offset", "commitlog_offset", "store_size", "body_crc", "sys_flag",
                 "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times",
                 "prepared_transaction_offset")
DEF _N_SLOTS = 19
DEF _T_OBJECT_EX = 16
DEF _READONLY = 1


cdef int _slot_offsets(object cls, Py_ssize_t *off) except -1:
    """Where each of ``MESSAGE_SLOTS`` lives in a ``cls`` object: plain writable object slots
    (``__slots__``) or an error, so the writes below are the ones ``setattr`` would do."""
    cdef PyMemberDef *m
    for i, name in enumerate(MESSAGE_SLOTS):
        d = getattr(cls, name, None)
        if type(d) is not <object>&PyMemberDescr_Type:
            raise TypeError(f"{cls.__name__}.{name} is not a __slots__ member")
        m = (<PyMemberDescrObject *><PyObject *>d).d_member
        if m.type != _T_OBJECT_EX or m.flags & _READONLY:
            raise TypeError(f"{cls.__name__}.{name} is not a writable object slot")
        off[i] = m.offset
    return 0


cdef inline void _fill(object obj, Py_ssize_t offset, object value) noexcept:
    """A slot of a new object (still NULL): what ``setattr`` does, without the lookup."""
    Py_INCREF(value)
    (<PyObject **>(<char *><PyObject *>obj + offset))[0] = <PyObject *>value


def decode_message_objects(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_count,
                           cls, broker_name, bytes props_suffix):
    """Records of a pull answer straight into ``cls`` objects (the client's ``MessageExt``),
    every slot of ``MESSAGE_SLOTS`` written once: what ``decode_records`` and then a
    ``MessageExt`` per record would give, without the intermediate record. ``_properties``
    is None (parsed when first read), ``_props_raw`` the stored properties with
    ``props_suffix`` appended after a separator (the pull's MIN/MAX_OFFSET), bodies as
    stored (``(objects, any_compressed)``: the caller decompresses those records)."""
    if start < 0 or end > buf.shape[0] or start > end:
        raise ValueError("decode range outside the buffer")
    cdef Py_ssize_t off[_N_SLOTS]
    _slot_offsets(cls, off)
    if not isinstance(cls, type) or (<PyTypeObject *>cls).tp_new != PyBaseObject_Type.tp_new:
        raise TypeError(f"{cls!r} must be made by object.__new__")
    cdef const unsigned char *b = _ptr(buf)
    cdef RecordView v
    cdef Py_ssize_t pos = start, slen = len(props_suffix)
    cdef bint compressed = False
    cdef _RecordStrs c = _RecordStrs()
    cdef char *o
    out = []
    while pos < end and len(out) < max_count:
        if not _next_record(c, b, pos, end, False, &v):
            break
        if not slen:
            props = <bytes>(b + v.props_at)[:v.props_len]
        elif not v.props_len:
            props = props_suffix
        else:
            props = PyBytes_FromStringAndSize(NULL, v.props_len + 1 + slen)
            o = PyBytes_AS_STRING(props)
            memcpy(o, b + v.props_at, v.props_len)
            o[v.props_len] = PROPERTY_SEPARATOR_BYTE
            memcpy(o + v.props_len + 1, PyBytes_AS_STRING(props_suffix), slen)
        if v.sys_flag & 1:  # SYSFLAG_COMPRESSED
            compressed = True
        m = cls.__new__(cls)
        _fill(m, off[0], c.topic)
        _fill(m, off[1], <bytes>(b + v.body_at + 4)[:v.body_len])
        _fill(m, off[2], mq_rd_i32(b + pos + REC_FLAG))
        _fill(m, off[3], None)
        _fill(m, off[4], props)
        _fill(m, off[5], None)
        _fill(m, off[6], broker_name)
        _fill(m, off[7], mq_rd_i32(b + pos + REC_QUEUEID))
        _fill(m, off[8], mq_rd_i64(b + pos + REC_QUEUEOFFSET))
        _fill(m, off[9], mq_rd_i64(b + pos + REC_PHYOFFSET))
        _fill(m, off[10], v.size)
        _fill(m, off[11], mq_rd_i32(b + pos + REC_BODYCRC))
        _fill(m, off[12], v.sys_flag)
        _fill(m, off[13], mq_rd_i64(b + pos + REC_BORNTIMESTAMP))
        _fill(m, off[14], c.born)
        _fill(m, off[15], mq_rd_i64(b + pos + REC_STORETIMESTAMP_V4 + v.born_extra))
        _fill(m, off[16], c.store)
        _fill(m, off[17], mq_rd_i32(b + pos + REC_RECONSUMETIMES_V4 + v.born_extra + v.store_extra))
        _fill(m, off[18], mq_rd_i64(b + pos + REC_PREPAREDOFFSET_V4 + v.born_extra + v.store_extra))
        # out of the cyclic collector's sight: its slots hold strings, bytes, ints and at most
        # a dict of strings, never a way back to itself, and a pull answer's thousand messages
        # living in the process queue made every collection on the loop thread walk them
        PyObject_GC_UnTrack(<PyObject *>m)
        out.append(m)
        pos += v.size
    return out, compressed


# --- consume queue ------------------------------------------------------------------------------
def cq_write(unsigned char[::1] dst, Py_ssize_t pos, phys, sizes, tags):
    """Write len(phys) 20-byte units at ``dst[pos:]``; returns bytes written."""
    cdef const int64_t[::1] p = np.ascontiguousarray(phys, dtype=np.int64)
    cdef const int32_t[::1] s = np.ascontiguousarray(sizes, dtype=np.int32)
    cdef const int64_t[::1] t = np.ascontiguousarray(tags, dtype=np.int64)
    cdef Py_ssize_t n = p.shape[0], i
    if s.shape[0] != n or t.shape[0] != n:
        raise ValueError("phys, sizes and tags differ in length")
    if pos < 0 or pos + n * CQ_UNIT_SIZE > dst.shape[0]:
        raise ValueError("consume-queue units do not fit in the buffer")
    cdef unsigned char *d
    if n == 0:
        return 0
    d = &dst[pos]
    with nogil:
        for i in range(n):
            mq_wr_i64(d + CQ_PHYOFFSET, p[i])
            mq_wr_i32(d + CQ_SIZE, s[i])
            mq_wr_i64(d + CQ_TAGSCODE, t[i])
            d += CQ_UNIT_SIZE
    return n * CQ_UNIT_SIZE


def cq_count_valid(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t end):
    """Number of consecutive valid units (offset >= 0 and size > 0) from ``start``."""
    if start < 0:
        raise ValueError("consume-queue read outside the buffer")
    if end > buf.shape[0]:
        end = buf.shape[0]
    cdef const unsigned char *b = _ptr(buf)
    cdef Py_ssize_t n = 0, pos = start
    with nogil:
        while pos + CQ_UNIT_SIZE <= end:
            if mq_rd_i64(b + pos + CQ_PHYOFFSET) < 0 or mq_rd_i32(b + pos + CQ_SIZE) <= 0:
                break
            n += 1
            pos += CQ_UNIT_SIZE
    return n


def cq_read(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t count):
    """Units at ``buf[start:]`` as three arrays (phys int64, sizes int32, tags int64)."""
    if start < 0 or count < 0 or start + count * CQ_UNIT_SIZE > buf.shape[0]:
        raise ValueError("consume-queue read outside the buffer")
    phys = np.empty(count, np.int64)
    sizes = np.empty(count, np.int32)
    tags = np.empty(count, np.int64)
    cdef int64_t[::1] p = phys
    cdef int32_t[::1] s = sizes
    cdef int64_t[::1] t = tags
    cdef const unsigned char *b = _ptr(buf) + start
    cdef Py_ssize_t i
    with nogil:
        for i in range(count):
            p[i] = mq_rd_i64(b + CQ_PHYOFFSET)
            s[i] = mq_rd_i32(b + CQ_SIZE)
            t[i] = mq_rd_i64(b + CQ_TAGSCODE)
            b += CQ_UNIT_SIZE
    return _named(QueueUnits, (phys, sizes, tags))


def cq_select(const unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t count, codes,
              Py_ssize_t max_count, int64_t max_bytes):
    """Pick units for a pull; see the twin for the contract."""
    if start < 0 or count < 0 or start + count * CQ_UNIT_SIZE > buf.shape[0]:
        raise ValueError("consume-queue read outside the buffer")
    if max_count < 1:
        raise ValueError("max_count must be at least 1")
    cdef const int64_t[::1] c
    cdef Py_ssize_t nc = 0
    cdef bint filt = codes is not None
    if filt:
        c = np.unique(np.asarray(list(codes) if not isinstance(codes, np.ndarray) else codes,
                                 dtype=np.int64))
        nc = c.shape[0]
    picked = np.empty(count if count < max_count else max_count, np.int64)
    cdef int64_t[::1] out = picked
    cdef const unsigned char *b = _ptr(buf) + start
    cdef Py_ssize_t i, n = 0, scanned = 0, lo, hi, mid
    cdef int64_t total = 0, code
    cdef int32_t size
    cdef bint hit
    with nogil:
        for i in range(count):
            size = mq_rd_i32(b + i * CQ_UNIT_SIZE + CQ_SIZE)
            if n > 0 and (n >= max_count or total + size > max_bytes):
                break
            scanned = i + 1
            if filt:
                code = <int32_t>mq_rd_i64(b + i * CQ_UNIT_SIZE + CQ_TAGSCODE)
                lo = 0
                hi = nc
                hit = False
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if c[mid] == code:
                        hit = True
                        break
                    if c[mid] < code:
                        lo = mid + 1
                    else:
                        hi = mid
                if not hit:
                    continue
            out[n] = i
            n += 1
            total += size
    return _named(QueueSelection, (scanned, picked[:n]))


def cq_runs(object buf, Py_ssize_t start, Py_ssize_t count, codes,
            Py_ssize_t max_count, int64_t max_bytes, int64_t min_phy, int64_t file_size):
    """Pick units for a pull and join their records into runs; see the twin for the contract."""
    # the raw buffer protocol, not a typed memoryview: on a fresh view of a mapped file (every
    # pull's) acquiring a typed memoryview costs more than the whole scan
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or count < 0 or start + count * CQ_UNIT_SIZE > view.len:
            raise ValueError("consume-queue read outside the buffer")
        if max_count < 1 or file_size < 1:
            raise ValueError("max_count and file_size must be at least 1")
        return _cq_runs(<const unsigned char *>view.buf + start, count, codes, max_count, max_bytes, min_phy,
                        file_size)
    finally:
        PyBuffer_Release(&view)


cdef enum:
    CQ_RUNS_SMALL = 32  # runs held without an allocation (a pull's usual window is 32 units)

cdef struct CqRuns:
    int64_t *runs  # (start, size, n) per run: ``small`` or an allocation of 3 * count
    Py_ssize_t n, scanned
    bint removed
    int64_t small[3 * CQ_RUNS_SMALL]


cdef inline int64_t _floor_div(int64_t a, int64_t b) noexcept nogil:
    """Python's ``a // b`` for ``b > 0`` (C division truncates towards zero)."""
    cdef int64_t q = a / b
    return q - 1 if (a % b) < 0 else q


cdef tuple _cq_runs(const unsigned char *b, Py_ssize_t count, codes, Py_ssize_t max_count, int64_t max_bytes,
                    int64_t min_phy, int64_t file_size):
    """``cq_runs``' answer as Python objects: ``(scanned, [(start, size, n), ...], removed)``."""
    cdef CqRuns got
    got.runs = got.small
    try:
        _cq_runs_into(b, count, codes, max_count, max_bytes, min_phy, file_size, &got)
        return got.scanned, [(got.runs[3 * i], got.runs[3 * i + 1], got.runs[3 * i + 2]) for i in range(got.n)], \
            got.removed
    finally:
        _cq_runs_free(&got)


cdef inline void _cq_runs_free(CqRuns *got) noexcept:
    if got.runs != got.small:
        PyMem_Free(got.runs)


cdef int _cq_runs_into(const unsigned char *b, Py_ssize_t count, codes, Py_ssize_t max_count, int64_t max_bytes,
                       int64_t min_phy, int64_t file_size, CqRuns *got) except -1:
    """The units' runs as C triples in ``got`` (PullReader reads them without a tuple per run;
    free them with ``_cq_runs_free``, also after an exception)."""
    got.runs = got.small
    got.n = got.scanned = 0
    got.removed = False
    if count > CQ_RUNS_SMALL:  # at most one run per unit
        got.runs = <int64_t *>PyMem_Malloc(3 * count * sizeof(int64_t))
        if got.runs == NULL:
            got.runs = got.small
            raise MemoryError()
    cdef int64_t small[16]
    cdef int64_t *c = small
    cdef Py_ssize_t nc = 0, j
    cdef bint filt = codes is not None
    cdef object more = None
    if filt:
        codes = list(codes)
        if len(codes) > 16:
            more = np.asarray(codes, dtype=np.int64)
            c = <int64_t *><Py_ssize_t>more.ctypes.data
        else:
            for j in range(len(codes)):
                small[j] = codes[j]
        nc = len(codes)
    cdef Py_ssize_t i, n = 0, scanned = 0, nr = 0
    cdef int64_t total = 0, code, phy, run_start = -1, run_end = -1
    # the run's file [run_file, run_file + file_size): ``phy // file_size == run_start //
    # file_size`` (floor division, as the twin) as two comparisons, one division per run
    cdef int64_t run_file = 0
    cdef int32_t size
    cdef int run_n = 0
    cdef bint hit, removed = False
    cdef int64_t *runs = got.runs
    for i in range(count):
        size = mq_rd_i32(b + i * CQ_UNIT_SIZE + CQ_SIZE)
        if n > 0 and (n >= max_count or total + size > max_bytes):
            break
        scanned = i + 1
        if filt:
            code = <int32_t>mq_rd_i64(b + i * CQ_UNIT_SIZE + CQ_TAGSCODE)
            hit = False
            for j in range(nc):
                if c[j] == code:
                    hit = True
                    break
            if not hit:
                continue
        n += 1
        total += size
        phy = mq_rd_i64(b + i * CQ_UNIT_SIZE + CQ_PHYOFFSET)
        if phy < min_phy:
            removed = True
            continue
        if run_n and phy == run_end and run_file <= phy and phy - run_file < file_size:
            run_end = phy + size
            run_n += 1
            continue
        if run_n:
            runs[3 * nr], runs[3 * nr + 1], runs[3 * nr + 2] = run_start, run_end - run_start, run_n
            nr += 1
        run_start, run_end, run_n = phy, phy + size, 1
        run_file = _floor_div(phy, file_size) * file_size
    if run_n:
        runs[3 * nr], runs[3 * nr + 1], runs[3 * nr + 2] = run_start, run_end - run_start, run_n
        nr += 1
    got.n, got.scanned, got.removed = nr, scanned, removed
    return 0


# --- the store's hot state ---------------------------------------------------------------------
# C bases of the store's Python classes (declared in _store.pxd; mqcore/store/hot_state.py
# derives MappedFile, MappedFileQueue, ConsumeQueue, MessageWriter and Dispatcher from them when
# these are the store's kernels). They hold, as struct fields, what the send pipeline's
# StorePlainSends and PullReader read per request, which every read of a Python attribute
# would otherwise look up in a dict, cache-cold after a wake-up; the Python code reads and
# writes the same names as before. No behaviour: the twins are __slots__ in _store_py.py.

cdef class MappedFileCore:
    """``MappedFile``'s positions, buffer and flags."""


cdef class MappedFileQueueCore:
    """``MappedFileQueue.files``."""


cdef class ConsumeQueueCore:
    """``ConsumeQueue``'s file queue and its two offsets."""


cdef class MessageWriterCore:
    """``MessageWriter``'s configuration, flush wait, refusals and last store time."""


cdef class DispatcherCore:
    """``Dispatcher``'s recovery bound and last store time."""


cdef class IndexServiceCore:
    """``IndexService.files``."""


cdef class IndexFileCore:
    """``IndexFile.mf``."""


# --- a pull's lookup over the mapped files (MessageReader.get_message's usual case) -------------
# Not a byte kernel like the rest of this file: it reads the store's own objects - a consume
# queue's and the commitlog's file lists, each MappedFile's positions and buffer - the way
# ConsumeQueue.units_at, MappedFileQueue.find_by_offset, CommitLog.view and MappedFile.view do
# (slices under the file's view lock, so a file closed by cleanup is never sliced), so that a
# pull's lookup makes no Python call. The twin (_store_py.pull_lookup) calls those methods.
cdef str _ST_FOUND = "FOUND"
cdef str _ST_NO_MATCHED = "NO_MATCHED_MESSAGE"
cdef str _ST_REMOVING = "MESSAGE_WAS_REMOVING"
cdef str _ST_FOUND_NULL = "OFFSET_FOUND_NULL"
cdef str _ST_BADLY = "OFFSET_OVERFLOW_BADLY"
cdef str _ST_ONE = "OFFSET_OVERFLOW_ONE"
cdef str _ST_TOO_SMALL = "OFFSET_TOO_SMALL"
cdef str _ST_NO_MESSAGE = "NO_MESSAGE_IN_QUEUE"


cdef object _file_at(list files, int64_t offset, int64_t file_size):
    """``MappedFileQueue.find_by_offset`` over the queue's list of files."""
    cdef Py_ssize_t n = len(files)
    cdef int64_t first, at
    if n == 0:
        return None
    first = files[0].file_from_offset
    if offset >= first and file_size > 0 and (offset - first) // file_size < n:
        mf = files[(offset - first) // file_size]
        at = mf.file_from_offset
        if at <= offset < at + <int64_t>mf.file_size:
            return mf
    for mf in files:  # holes after a non-contiguous load
        at = mf.file_from_offset
        if at <= offset < at + <int64_t>mf.file_size:
            return mf
    return None


cdef object _committed_view(list files, int64_t file_size, int64_t phy, int64_t size):
    """``CommitLog.view``: ``size`` bytes at ``phy`` when all of them are below the file's
    committed end (``wrote_position``), else None. ``phy`` and ``size`` come from a consume
    queue file: checked here before anything is sliced."""
    mf = _file_at(files, phy, file_size)
    if mf is None:
        return None
    cdef int64_t pos = phy - <int64_t>mf.file_from_offset
    if size <= 0 or pos < 0 or pos + size > <int64_t>mf.wrote_position or pos + size > <int64_t>mf.file_size:
        return None
    lock = mf._view_lock
    lock.acquire()
    try:
        if mf._closed:
            return None
        return mf.buf[pos:pos + size]
    finally:
        lock.release()


cdef inline tuple _pull_outside(int64_t offset, int64_t lo, int64_t hi):
    """A pull's answer when ``offset`` is not inside the queue's units ``[lo, hi)`` (the
    reader's status, next offset, min, max, no views), else None."""
    if hi == 0:
        return _ST_NO_MESSAGE, 0, lo, hi, [], 0, 0
    if offset < lo:
        return _ST_TOO_SMALL, lo, lo, hi, [], 0, 0
    if offset == hi:
        return _ST_ONE, offset, lo, hi, [], 0, 0
    if offset > hi:  # past the end: back to the end (never to 0), as RocketMQ 4.9.7 and 5.x answer
        return _ST_BADLY, hi, lo, hi, [], 0, 0
    return None


def pull_lookup(object cq, object commitlog, int64_t offset, int64_t max_msg_nums, int64_t cap_count,
                int64_t cap_bytes, codes, int64_t filter_units):
    """A pull's lookup in one call; see the twin for the contract."""
    cdef int64_t unit = CQ_UNIT_SIZE
    cdef int64_t max_count = max(1, min(max_msg_nums, cap_count))
    cdef object queue = cq.queue
    cdef list files = queue.files
    cdef Py_ssize_t nf = len(files)
    cdef int64_t lo_bytes = files[0].file_from_offset if nf else 0
    cdef int64_t lo = max(<int64_t>cq.min_logic_offset, lo_bytes) // unit, hi = 0
    if nf:
        last = files[nf - 1]
        hi = (<int64_t>last.file_from_offset + <int64_t>last.wrote_position) // unit
    cdef tuple outside = _pull_outside(offset, lo, hi)
    if outside is not None:
        return outside
    cdef int64_t window = max_count if codes is None else max(filter_units, max_count)
    cdef int64_t pos = 0, count = 0, per_file
    cdef list cl_files = commitlog.queue.files
    cdef int64_t min_phy = cl_files[0].file_from_offset if len(cl_files) else 0
    cdef Py_buffer view
    cdef tuple got = None
    mf = _file_at(files, offset * unit, queue.file_size)  # ConsumeQueue.units_at
    if mf is not None:
        pos = offset * unit - <int64_t>mf.file_from_offset
        count = <int64_t>mf.wrote_position - pos
        count = min(window, count // unit) if count >= unit else 0
    if count > 0:
        lock = mf._view_lock
        lock.acquire()
        try:
            if not mf._closed:
                PyObject_GetBuffer(mf.buf, &view, PyBUF_SIMPLE)
                try:
                    if pos < 0 or pos + count * unit > view.len:
                        raise ValueError("consume-queue read outside the buffer")
                    got = _cq_runs(<const unsigned char *>view.buf + pos, count, codes, max_count, cap_bytes, min_phy,
                                   commitlog.file_size)
                finally:
                    PyBuffer_Release(&view)
        finally:
            lock.release()
    if got is None:
        per_file = <int64_t>cq.file_size // unit  # ConsumeQueue.next_file_offset
        return _ST_FOUND_NULL, offset + per_file - offset % per_file, lo, hi, [], 0, 0
    cdef Py_ssize_t scanned = got[0]
    cdef list buffers = []
    cdef int64_t n = 0, total = 0, cl_file_size = commitlog.queue.file_size
    cdef tuple run
    for run in <list>got[1]:
        v = _committed_view(cl_files, cl_file_size, run[0], run[1])
        if v is None:
            return None  # part of the run is not readable: the reader takes its records one by one
        buffers.append(v)
        n += <int64_t>run[2]
        total += <int64_t>run[1]
    status = _ST_FOUND if n else (_ST_REMOVING if got[2] else _ST_NO_MATCHED)
    return status, offset + scanned, lo, hi, buffers, n, total


# --- the same lookup for one store, holding what does not change between pulls ------------------
# ``pull_lookup`` reads some thirty attributes of the store's Python objects per pull (file
# lists, each file's base offset, size and lock, the queues' sizes): each a dict lookup, run
# cache-cold after every wake-up of a one-in-flight connection. ``PullReader`` reads a mapped
# file's fixed parts (``file_from_offset``, ``file_size``, ``_view_lock``: set when the file is
# made) once, and per pull only what moves: a file list (is it still the one seen?), the
# queue's ``min_logic_offset``, a file's ``wrote_position`` and, under its view lock,
# ``_closed`` and ``buf``. Every offset and size read from a file is checked as before.

cdef class _MappedRef:
    """A mapped file (on its C base) with its fixed parts read once (its view lock's methods
    bound: no method lookup per pull)."""
    cdef MappedFileCore mf
    cdef object acquire, release
    cdef int64_t base, size

    def __cinit__(self, MappedFileCore mf):
        self.mf = mf
        self.base = mf.file_from_offset
        self.size = mf.file_size
        self.acquire, self.release = mf._view_lock.acquire, mf._view_lock.release


cdef class _FileList:
    """A ``MappedFileQueue``'s files as last seen. The list is still the one seen while it is
    the same object of the same length: a roll appends to it, a gap fill inserts into it,
    cleanup and truncation replace it. The list seen is kept (its identity is not reused)."""
    cdef MappedFileQueueCore queue
    cdef list files
    cdef Py_ssize_t n
    cdef int64_t first, file_size
    cdef _MappedRef last, at  # the last file; the file last read
    cdef bint contiguous  # each file starts where the one before ends (else: no shortcut in find)

    def __cinit__(self, MappedFileQueueCore queue, int64_t file_size):
        self.queue = queue
        self.file_size = file_size
        self.n = -1

    cdef list current(self):
        cdef list files = self.queue.files
        if files is not self.files or len(files) != self.n:
            self.files, self.n = files, len(files)
            self.first = (<MappedFileCore?>files[0]).file_from_offset if self.n else 0
            self.last = _MappedRef(files[self.n - 1]) if self.n else None
            self.at = None
            self.contiguous = self._contiguous(files)
        return files

    cdef bint _contiguous(self, list files) except -1:
        cdef int64_t at = self.first
        cdef MappedFileCore mf
        for f in files:
            mf = <MappedFileCore?>f
            if mf.file_from_offset != at or mf.file_size != self.file_size:
                return False
            at += self.file_size
        return True

    cdef _MappedRef find(self, list files, int64_t offset):
        """``_file_at`` (``MappedFileQueue.find_by_offset``) of the list ``current`` returned:
        the files do not overlap, so the file last read or the last file holding ``offset``
        is the one it finds."""
        cdef _MappedRef r = self.at
        if self.contiguous and r is not None and r.base <= offset < r.base + r.size:
            return r
        r = self.last
        if not self.contiguous or r is None or not (r.base <= offset < r.base + r.size):
            mf = _file_at(files, offset, self.file_size)
            if mf is None:
                return None
            r = _MappedRef(mf)
        self.at = r
        return r


cdef object _ref_view(_MappedRef r, int64_t pos, int64_t size):
    """``MappedFile.view``: under the view lock, None once the file is closed."""
    r.acquire()
    try:
        if r.mf._closed:
            return None
        return r.mf.buf[pos:pos + size]
    finally:
        r.release()


cdef Py_ssize_t _MAX_QUEUES = 4096  # consume queues remembered (more only empties the memory)


cdef class PullReader:
    """``pull_lookup(cq, commitlog, ...)`` for one store's ``commitlog``; see the twin. It reads
    the store's objects as their C bases (``ConsumeQueueCore``, ``MappedFileQueueCore``,
    ``MappedFileCore``); a store built on other kernels' bases is read by ``pull_lookup``."""
    cdef object commitlog
    cdef int64_t cl_file_size  # CommitLog.file_size (the runs' file boundary)
    cdef _FileList cl  # None: the commitlog's files are not on the C bases
    cdef dict queues  # consume queue -> its _FileList

    def __init__(self, commitlog):
        self.commitlog = commitlog
        self.cl_file_size = commitlog.file_size
        queue = commitlog.queue
        self.cl = _FileList(queue, queue.file_size) if isinstance(queue, MappedFileQueueCore) else None
        self.queues = {}

    def lookup(self, object cq, int64_t offset, int64_t max_msg_nums, int64_t cap_count, int64_t cap_bytes, codes,
               int64_t filter_units):
        """``pull_lookup(cq, commitlog, offset, ...)``: the same answer."""
        if self.cl is None or not isinstance(cq, ConsumeQueueCore):
            return pull_lookup(cq, self.commitlog, offset, max_msg_nums, cap_count, cap_bytes, codes, filter_units)
        cdef ConsumeQueueCore c = <ConsumeQueueCore>cq
        cdef _FileList q = self.queues.get(cq)
        if q is None:
            if len(self.queues) >= _MAX_QUEUES:
                self.queues.clear()
            q = _FileList(c.queue, c.queue.file_size)
            self.queues[cq] = q
        cdef int64_t unit = CQ_UNIT_SIZE
        cdef int64_t max_count = max(1, min(max_msg_nums, cap_count))
        cdef list files = q.current()
        cdef int64_t lo = max(c.min_logic_offset, q.first) // unit, hi = 0, last_wrote = 0
        if q.n:
            last_wrote = q.last.mf.wrote_position
            hi = (q.last.base + last_wrote) // unit
        cdef tuple outside = _pull_outside(offset, lo, hi)
        if outside is not None:
            return outside
        cdef int64_t window = max_count if codes is None else max(filter_units, max_count)
        cdef int64_t pos = 0, count = 0, per_file
        cdef list cl_files = self.cl.current()
        cdef Py_buffer view
        cdef CqRuns got
        cdef bint found = False
        cdef _MappedRef r = q.find(files, offset * unit)  # ConsumeQueue.units_at
        if r is not None:
            pos = offset * unit - r.base
            # the last file's position as read for ``hi`` (a unit written since is not offered yet)
            count = (last_wrote if r is q.last else r.mf.wrote_position) - pos
            count = min(window, count // unit) if count >= unit else 0
        got.runs = got.small  # (what _cq_runs_free looks at, whatever happens)
        try:
            if count > 0:
                r.acquire()
                try:
                    if not r.mf._closed:
                        PyObject_GetBuffer(r.mf.buf, &view, PyBUF_SIMPLE)
                        try:
                            if pos < 0 or pos + count * unit > view.len:
                                raise ValueError("consume-queue read outside the buffer")
                            _cq_runs_into(<const unsigned char *>view.buf + pos, count, codes, max_count, cap_bytes,
                                          self.cl.first, self.cl_file_size, &got)
                            found = True
                        finally:
                            PyBuffer_Release(&view)
                finally:
                    r.release()
            if not found:
                per_file = q.file_size // unit  # ConsumeQueue.next_file_offset
                return _ST_FOUND_NULL, offset + per_file - offset % per_file, lo, hi, [], 0, 0
            return self._views(&got, offset, lo, hi, cl_files)
        finally:
            _cq_runs_free(&got)

    cdef tuple _views(self, CqRuns *got, int64_t offset, int64_t lo, int64_t hi, list cl_files):
        """The lookup's answer for the runs found: one commitlog view per run, or None."""
        cdef list buffers = []
        cdef int64_t n = 0, total = 0, phy, size, at
        cdef Py_ssize_t i
        cdef _MappedRef r
        for i in range(got.n):
            # CommitLog.view: all of the run below its file's committed end (phy and size come
            # from a consume-queue file: checked before anything is sliced)
            phy, size = got.runs[3 * i], got.runs[3 * i + 1]
            r = self.cl.find(cl_files, phy)
            if r is None:
                return None  # part of the run is not readable: the reader takes its records one by one
            at = phy - r.base
            if size <= 0 or at < 0 or at + size > r.mf.wrote_position or at + size > r.size:
                return None
            v = _ref_view(r, at, size)
            if v is None:
                return None
            buffers.append(v)
            n += got.runs[3 * i + 2]
            total += size
        status = _ST_FOUND if n else (_ST_REMOVING if got.removed else _ST_NO_MATCHED)
        return status, offset + got.scanned, lo, hi, buffers, n, total


def cq_search_time(const unsigned char[::1] buf, Py_ssize_t lo, Py_ssize_t hi, int64_t timestamp,
                   store_time_of):
    """Unit index in [lo, hi) whose store time is closest to ``timestamp``; see the twin."""
    if lo < 0 or hi * CQ_UNIT_SIZE > buf.shape[0]:
        raise ValueError("consume-queue search outside the buffer")
    cdef const unsigned char *b = _ptr(buf)
    cdef Py_ssize_t left = lo, right = hi - 1, mid, left_i = -1, right_i = -1
    cdef int64_t ts, left_ts = -1, right_ts = -1
    while left <= right:
        mid = (left + right) >> 1
        ts = store_time_of(mq_rd_i64(b + mid * CQ_UNIT_SIZE + CQ_PHYOFFSET),
                           mq_rd_i32(b + mid * CQ_UNIT_SIZE + CQ_SIZE))
        if ts < 0:
            left = mid + 1
            continue
        if ts == timestamp:
            return mid
        if ts > timestamp:
            right_i = mid
            right_ts = ts
            right = mid - 1
        else:
            left_i = mid
            left_ts = ts
            left = mid + 1
    if left_i < 0 and right_i < 0:
        return lo
    if left_i < 0:
        return right_i
    if right_i < 0:
        return left_i
    return left_i if timestamp - left_ts <= right_ts - timestamp else right_i


# --- index file -------------------------------------------------------------------------------------
cdef _check_index_geometry(Py_ssize_t buf_len, Py_ssize_t slots, Py_ssize_t max_entries):
    if slots < 1 or max_entries < 2:
        raise ValueError(f"an index file needs slots >= 1 and max_entries >= 2 (got {slots}, {max_entries})")
    if INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE + max_entries * INDEX_ENTRY_SIZE > buf_len:
        raise ValueError("index buffer smaller than slots and entries need")


cdef _check_index_header(Py_ssize_t count, Py_ssize_t slot_count, Py_ssize_t max_entries):
    """indexCount is the next entry number (entry 0 is never used), so 1..max_entries."""
    if count < 1 or count > max_entries:
        raise CorruptFileError(f"index header: indexCount {count} is outside 1..{max_entries}")
    if slot_count < 0 or slot_count > count:
        raise CorruptFileError(f"index header: hashSlotCount {slot_count} is outside 0..{count}")


def index_keys(const unsigned char[::1] buf, table, topics):
    """Index keys of dispatched records (``topic#UNIQ_KEY``, then ``topic#k`` per KEYS word)."""
    cdef DispatchRow[::1] rows = np.ascontiguousarray(table, dtype=DISPATCH_DTYPE)
    cdef Py_ssize_t n = rows.shape[0], i, j, k, cap = n * 2 + 8, m = 0, kend
    prefix = np.empty(len(topics), np.uint32)
    cdef uint32_t[::1] pre = prefix
    cdef const unsigned char *b = _ptr(buf)
    for i, t in enumerate(topics):
        pre[i] = _hash_bytes(_hash_bytes(0, <const unsigned char *>t, len(t)),
                             <const unsigned char *>b"#", 1)
    hashes = np.empty(cap, np.int32)
    phys = np.empty(cap, np.int64)
    tss = np.empty(cap, np.int64)
    cdef int32_t[::1] hv = hashes
    cdef int64_t[::1] pv = phys, tv = tss
    for i in range(n):
        # worst case: one uniq key + (keys_len + 1) / 2 words
        if m + 2 + rows[i].keys_len // 2 + 1 > cap:
            cap = (m + 2 + rows[i].keys_len) * 2
            hashes = np.resize(hashes, cap)
            phys = np.resize(phys, cap)
            tss = np.resize(tss, cap)
            hv = hashes
            pv = phys
            tv = tss
        if rows[i].uniq_len > 0:
            hv[m] = _index_hash(<int32_t>_hash_bytes(pre[rows[i].topic_idx], b + rows[i].uniq_pos,
                                                     rows[i].uniq_len))
            pv[m] = rows[i].phy_offset
            tv[m] = rows[i].store_timestamp
            m += 1
        if rows[i].keys_len > 0:
            j = rows[i].keys_pos
            kend = j + rows[i].keys_len
            while j < kend:
                k = j
                while k < kend and b[k] != 32:
                    k += 1
                if k > j:
                    hv[m] = _index_hash(<int32_t>_hash_bytes(pre[rows[i].topic_idx], b + j, k - j))
                    pv[m] = rows[i].phy_offset
                    tv[m] = rows[i].store_timestamp
                    m += 1
                j = k + 1
    return _named(IndexKeys, (hashes[:m], phys[:m], tss[:m]))


cdef void _index_entry(unsigned char *b, Py_ssize_t slots, Py_ssize_t entries_at, int32_t h, int64_t phy,
                              int64_t ts, int64_t *begin_ts, int64_t *begin_phy, int32_t *slot_count,
                              int32_t *count) noexcept nogil:
    """Write entry ``count`` for key ``h`` (chained to the slot's previous entry), point the
    slot at it and advance the header values the caller keeps (``IndexFile.putKey``)."""
    cdef unsigned char *sp = b + INDEX_HEADER_SIZE + (h % slots) * INDEX_SLOT_SIZE
    cdef int32_t prev = mq_rd_i32(sp)
    if prev <= 0 or prev > count[0]:
        prev = 0
    cdef int64_t diff = 0 if begin_ts[0] <= 0 else (ts - begin_ts[0]) // 1000
    if diff < 0:
        diff = 0
    elif diff > 0x7FFFFFFF:
        diff = 0x7FFFFFFF
    cdef unsigned char *ep = b + entries_at + <Py_ssize_t>count[0] * INDEX_ENTRY_SIZE
    mq_wr_i32(ep + IDXE_KEY_HASH, h)
    mq_wr_i64(ep + IDXE_PHYOFFSET, phy)
    mq_wr_i32(ep + IDXE_TIMEDIFF, <int32_t>diff)
    mq_wr_i32(ep + IDXE_PREV_INDEX, prev)
    mq_wr_i32(sp, count[0])
    if count[0] <= 1:
        begin_phy[0] = phy
        begin_ts[0] = ts
    if prev == 0:
        slot_count[0] += 1
    count[0] += 1


def index_put(unsigned char[::1] buf, Py_ssize_t slots, Py_ssize_t max_entries, hashes, phys,
              timestamps, Py_ssize_t start):
    """Append keys ``start..`` into the index file in ``buf``; returns the next key not put."""
    cdef const int32_t[::1] hv = np.ascontiguousarray(hashes, dtype=np.int32)
    cdef const int64_t[::1] pv = np.ascontiguousarray(phys, dtype=np.int64)
    cdef const int64_t[::1] tv = np.ascontiguousarray(timestamps, dtype=np.int64)
    cdef Py_ssize_t n = hv.shape[0], i = start
    _check_index_geometry(buf.shape[0], slots, max_entries)
    if pv.shape[0] != n or tv.shape[0] != n:
        raise ValueError("hashes, phys and timestamps differ in length")
    if start < 0 or start > n:
        raise ValueError("start outside the keys")
    for i in range(start, n):
        if hv[i] < 0:
            raise ValueError("index key hashes must be >= 0 (index_hash)")
    i = start
    cdef unsigned char *b = &buf[0]
    cdef int64_t begin_ts = mq_rd_i64(b + IDXH_BEGIN_TIMESTAMP), end_ts = mq_rd_i64(b + IDXH_END_TIMESTAMP)
    cdef int64_t begin_phy = mq_rd_i64(b + IDXH_BEGIN_PHYOFFSET), end_phy = mq_rd_i64(b + IDXH_END_PHYOFFSET)
    cdef int32_t slot_count = mq_rd_i32(b + IDXH_HASH_SLOT_COUNT), count = mq_rd_i32(b + IDXH_INDEX_COUNT)
    # the header comes from a file: a damaged count would send the loop outside the buffer
    _check_index_header(count, slot_count, max_entries)
    cdef Py_ssize_t entries_at = INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE
    with nogil:
        while i < n:
            if count >= max_entries:
                break
            _index_entry(b, slots, entries_at, hv[i], pv[i], tv[i], &begin_ts, &begin_phy, &slot_count, &count)
            end_phy = pv[i]
            end_ts = tv[i]
            i += 1
        mq_wr_i64(b + IDXH_BEGIN_TIMESTAMP, begin_ts)
        mq_wr_i64(b + IDXH_END_TIMESTAMP, end_ts)
        mq_wr_i64(b + IDXH_BEGIN_PHYOFFSET, begin_phy)
        mq_wr_i64(b + IDXH_END_PHYOFFSET, end_phy)
        mq_wr_i32(b + IDXH_HASH_SLOT_COUNT, slot_count)
        mq_wr_i32(b + IDXH_INDEX_COUNT, count)
    return i


def index_put_one(unsigned char[::1] buf, Py_ssize_t slots, Py_ssize_t max_entries, int32_t key_hash,
                  int64_t phy, int64_t timestamp):
    """``index_put`` of one key without arrays (a single message's put): 1 when put, 0
    when the file is full."""
    _check_index_geometry(buf.shape[0], slots, max_entries)
    if key_hash < 0:
        raise ValueError("index key hashes must be >= 0 (index_hash)")
    cdef unsigned char *b = &buf[0]
    cdef int64_t begin_ts = mq_rd_i64(b + IDXH_BEGIN_TIMESTAMP)
    cdef int64_t begin_phy = mq_rd_i64(b + IDXH_BEGIN_PHYOFFSET)
    cdef int32_t slot_count = mq_rd_i32(b + IDXH_HASH_SLOT_COUNT), count = mq_rd_i32(b + IDXH_INDEX_COUNT)
    _check_index_header(count, slot_count, max_entries)
    if count >= max_entries:
        return 0
    _index_entry(b, slots, INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE, key_hash, phy, timestamp, &begin_ts,
                 &begin_phy, &slot_count, &count)
    mq_wr_i64(b + IDXH_BEGIN_TIMESTAMP, begin_ts)
    mq_wr_i64(b + IDXH_END_TIMESTAMP, timestamp)
    mq_wr_i64(b + IDXH_BEGIN_PHYOFFSET, begin_phy)
    mq_wr_i64(b + IDXH_END_PHYOFFSET, phy)
    mq_wr_i32(b + IDXH_HASH_SLOT_COUNT, slot_count)
    mq_wr_i32(b + IDXH_INDEX_COUNT, count)
    return 1


def index_query(const unsigned char[::1] buf, Py_ssize_t slots, Py_ssize_t max_entries, int32_t key_hash,
                int64_t begin_ts, int64_t end_ts, Py_ssize_t max_num):
    """Walk the chain of ``key_hash``; (phy offsets of entries stored in [begin_ts, end_ts],
    damaged). A chain link that does not point strictly backwards (the file was damaged: it
    could close a loop) ends the walk with ``damaged`` true instead of walking forever."""
    _check_index_geometry(buf.shape[0], slots, max_entries)
    if key_hash < 0:
        raise ValueError("index key hashes must be >= 0 (index_hash)")
    cdef const unsigned char *b = _ptr(buf)
    cdef int64_t file_begin = mq_rd_i64(b + IDXH_BEGIN_TIMESTAMP), t
    cdef int32_t count = mq_rd_i32(b + IDXH_INDEX_COUNT)
    _check_index_header(count, mq_rd_i32(b + IDXH_HASH_SLOT_COUNT), max_entries)
    cdef int32_t cur = mq_rd_i32(b + INDEX_HEADER_SIZE + (key_hash % slots) * INDEX_SLOT_SIZE), prev
    cdef Py_ssize_t entries_at = INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE, steps = 0
    cdef const unsigned char *ep
    out = []
    if cur == 0:
        return out, False
    if cur < 0 or cur >= count:
        return out, True
    while len(out) < max_num:
        ep = b + entries_at + <Py_ssize_t>cur * INDEX_ENTRY_SIZE
        t = file_begin + <int64_t>mq_rd_i32(ep + IDXE_TIMEDIFF) * 1000
        if mq_rd_i32(ep + IDXE_KEY_HASH) == key_hash and begin_ts <= t <= end_ts:
            out.append(mq_rd_i64(ep + IDXE_PHYOFFSET))
        prev = mq_rd_i32(ep + IDXE_PREV_INDEX)
        if prev <= 0:
            break
        steps += 1
        # strictly backwards bounds the walk by itself; the step count is the belt to it
        if prev >= cur or steps >= count:
            return out, True
        if t < begin_ts:
            break
        cur = prev
    return out, False


# --- page cache --------------------------------------------------------------------------------
def prefault(unsigned char[::1] buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t page_size=4096):
    """Fault the pages of ``buf[start:end]`` in for writing, content unchanged, GIL released.

    The first write to each page of a fresh mapped file costs a page fault that is several
    times the copy itself; a background thread calls this ahead of the writer (RocketMQ's
    warmMappedFile) so appends find their pages ready.
    """
    if start < 0 or end > buf.shape[0] or start >= end:
        return 0
    cdef unsigned char *b = &buf[0]
    cdef Py_ssize_t p = start - start % page_size, n = 0
    with nogil:
        while p < end:
            mq_touch_for_write(b + p)
            p += page_size
            n += 1
    return n


