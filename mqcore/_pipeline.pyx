# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The broker's request pipeline kernels (wire side): from a connection's received bytes to
the fields of each plain send, and from a stored send to its answer frame.

``parse_plain_sends`` walks the complete frames of a receive buffer and reads every plain
send - SEND_MESSAGE_V2 with the usual short-key JSON header, a request expecting an answer,
no transaction bits, no DELAY / TRAN_MSG / CLUSTER / timer property - in C: header fields, the
record's properties (WAIT dropped, CLUSTER appended, as the store's general put writes
them), the consume-queue tags code and the index key hashes. It stops at the first frame
it cannot read exactly as the generic codec and the general send path would (an escape it
does not decode, a duplicate key, a number out of its range, a non-ASCII byte in the
properties...) and returns where it stopped: that frame and the rest go to the general
path, with nothing of them done here. The pure-Python twin is ``_pipeline_py``;
tests/broker/test_send_pipeline.py checks that both read the same frames the same way and
that the answers and files equal the general path's.

``send_answer`` writes one SEND answer frame: the JSON header the generic encoder gives
for a stored message (keys in Java HashMap order), length prefix included.

Kernels never keep a view past the call, never log, never read the clock.
"""
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy, memcmp
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeASCII
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE

IMPLEMENTATION = "cython"

cdef extern from "_endian.h":
    int32_t mq_rd_i32(const unsigned char *p) nogil

# --- frame and header numbers (remoting-protocol: length, header word, header, body) ---
cdef enum:
    FRAME_LENGTH_SIZE = 4
    HEADER_WORD_SIZE = 4
    SEND_MESSAGE_V2 = 310
    FLAG_RESPONSE = 1
    FLAG_ONEWAY = 2
    TX_MASK = 0xC            # sys flag bits of a transaction's prepared / commit / rollback state
    MAX_PROPERTIES_BYTES = 32767
    MAX_TOPIC_LENGTH = 127
    MAX_GROUP_LENGTH = 255
    MAX_KEYS = 2048          # index keys read per message (more: the general path); a trace message has ~400
    STACK_SCRATCH = 8192     # a header up to this size is decoded on the stack

# extFields keys a..n of the v2 header, as bits
cdef enum:
    K_A = 1 << 0
    K_B = 1 << 1
    K_C = 1 << 2
    K_D = 1 << 3
    K_E = 1 << 4
    K_F = 1 << 5
    K_G = 1 << 6
    K_H = 1 << 7
    K_REQUIRED = K_A | K_B | K_C | K_D | K_E | K_F | K_G | K_H

# top-level JSON keys, as bits (a duplicate one is declined)
cdef enum:
    T_CODE = 1
    T_EXT = 2
    T_FLAG = 4
    T_LANGUAGE = 8
    T_OPAQUE = 16
    T_SERIALIZE = 32
    T_VERSION = 64
    T_REMARK = 128

cdef struct Span:
    Py_ssize_t at
    Py_ssize_t end
    bint escaped
    bint high  # a byte >= 128 inside (not ASCII)


cdef struct Header:
    int32_t code
    int32_t flag
    int32_t opaque
    int seen_top
    int seen_ext
    Span ext[14]
    # plain ACL's extFields (read only when ``signed``): AccessKey, SecurityToken, Signature
    bint signed
    int seen_acl
    Span acl[3]


# --- a JSON subset reader: what a 4.x client sends, anything else declined (returns -1) ---
include "_json_scan.pxi"


cdef Py_ssize_t _string(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, Span *s) noexcept nogil:
    """A JSON string starting at its quote; its raw span (escapes kept) in ``s``, and whether
    it holds a byte >= 128 (read here so the ASCII check needs no second pass)."""
    cdef unsigned char c
    if p >= end or b[p] != 34:
        return -1
    p += 1
    s.at = p
    s.escaped = False
    s.high = False
    while p < end:
        c = b[p]
        if 35 <= c < 128 and c != 92:  # the usual byte: printable ASCII, not a quote or backslash
            p += 1
            continue
        if c == 34:
            s.end = p
            return p + 1
        if c == 92:
            s.escaped = True
            p += 2
            continue
        if c < 32:
            return -1  # a raw control character: not JSON, the generic reader decides
        if c >= 128:
            s.high = True
        p += 1
    return -1


cdef Py_ssize_t _int32(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, int32_t *out) noexcept nogil:
    cdef bint neg = False
    cdef int64_t v = 0
    cdef int digits = 0
    if p < end and b[p] == 45:
        neg = True
        p += 1
    while p < end and 48 <= b[p] <= 57:
        v = v * 10 + (b[p] - 48)
        digits += 1
        if digits > 10:
            return -1
        p += 1
    if digits == 0 or (digits > 1 and b[p - digits] == 48):
        return -1  # no digits, or a leading zero (not JSON)
    if p < end and (b[p] == 46 or b[p] == 101 or b[p] == 69):
        return -1  # a fraction or exponent: the generic reader decides
    if neg:
        v = -v
    if v < -2147483648 or v > 2147483647:
        return -1
    out[0] = <int32_t>v
    return p


cdef inline bint _key_is(const unsigned char *b, Span *s, const char *name, Py_ssize_t n) noexcept nogil:
    return not s.escaped and s.end - s.at == n and memcmp(b + s.at, name, n) == 0


cdef Py_ssize_t _ext(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, Header *h) noexcept nogil:
    """extFields: an object of one-letter keys a..n with string values."""
    cdef Span key, value
    cdef Span *slot
    cdef int bit, idx
    cdef bint more
    p = _ws(b, p, end)
    if p >= end or b[p] != 123:
        return -1
    p = _ws(b, p + 1, end)
    if p < end and b[p] == 125:
        return p + 1
    while True:
        p = _string(b, p, end, &key)
        if p < 0 or key.escaped:
            return -1
        if key.end - key.at != 1:
            # a signed request's ACL fields (AclClientRPCHook), when the caller checks them
            if not h.signed:
                return -1
            if _key_is(b, &key, "AccessKey", 9):
                idx = 0
            elif _key_is(b, &key, "SecurityToken", 13):
                idx = 1
            elif _key_is(b, &key, "Signature", 9):
                idx = 2
            else:
                return -1
            if h.seen_acl & (1 << idx):
                return -1
            h.seen_acl |= 1 << idx
            slot = &h.acl[idx]
        else:
            idx = b[key.at] - 97
            if idx < 0 or idx > 13:
                return -1
            bit = 1 << idx
            if h.seen_ext & bit:
                return -1
            h.seen_ext |= bit
            slot = &h.ext[idx]
        # either kind of key: `: "string"`, then `,` (the next key) or `}`
        p = _ws(b, p, end)
        if p >= end or b[p] != 58:
            return -1
        p = _ws(b, p + 1, end)
        p = _string(b, p, end, &value)
        if p < 0:
            return -1
        slot[0] = value
        p = _next_member(b, p, end, &more)
        if p < 0 or not more:
            return p


cdef Py_ssize_t _header(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, Header *h) noexcept nogil:
    cdef Span key, value
    cdef int bit
    cdef int32_t ignored
    cdef bint more
    h.seen_top = 0
    h.seen_ext = 0
    h.seen_acl = 0
    h.flag = 0
    h.opaque = 0
    p = _ws(b, p, end)
    if p >= end or b[p] != 123:
        return -1
    p = _ws(b, p + 1, end)
    while True:
        p = _string(b, p, end, &key)
        if p < 0:
            return -1
        p = _ws(b, p, end)
        if p >= end or b[p] != 58:
            return -1
        p = _ws(b, p + 1, end)
        if _key_is(b, &key, "code", 4):
            bit = T_CODE
            p = _int32(b, p, end, &h.code)
        elif _key_is(b, &key, "extFields", 9):
            bit = T_EXT
            p = _ext(b, p, end, h)
        elif _key_is(b, &key, "flag", 4):
            bit = T_FLAG
            p = _int32(b, p, end, &h.flag)
        elif _key_is(b, &key, "opaque", 6):
            bit = T_OPAQUE
            p = _int32(b, p, end, &h.opaque)
        elif _key_is(b, &key, "version", 7):
            bit = T_VERSION
            p = _int32(b, p, end, &ignored)
        elif _key_is(b, &key, "language", 8):
            bit = T_LANGUAGE
            p = _string(b, p, end, &value)
        elif _key_is(b, &key, "serializeTypeCurrentRPC", 23):
            bit = T_SERIALIZE
            p = _string(b, p, end, &value)
        elif _key_is(b, &key, "remark", 6):
            bit = T_REMARK
            p = _string(b, p, end, &value)
        else:
            return -1
        if p < 0 or h.seen_top & bit:
            return -1
        h.seen_top |= bit
        p = _next_member(b, p, end, &more)
        if p < 0:
            return -1
        if not more:
            p = _ws(b, p, end)
            return p if p == end else -1


cdef inline int _hex(unsigned char c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef Py_ssize_t _unescape(const unsigned char *b, Span *s, unsigned char *out, Py_ssize_t cap) noexcept nogil:
    """The string's text into ``out`` (ASCII only: a \\u escape above 0x7F, or a raw byte
    above 0x7F, declines); its length, or -1."""
    cdef Py_ssize_t p = s.at, n = 0
    cdef int c, d, i
    cdef unsigned char x
    while p < s.end:
        if n >= cap:
            return -1
        x = b[p]
        if x >= 128:
            return -1
        if x != 92:
            out[n] = x
            n += 1
            p += 1
            continue
        if p + 1 >= s.end:
            return -1
        x = b[p + 1]
        if x == 117:  # \uXXXX
            if p + 6 > s.end:
                return -1
            c = 0
            for i in range(4):
                d = _hex(b[p + 2 + i])
                if d < 0:
                    return -1
                c = c * 16 + d
            if c >= 128:
                return -1
            out[n] = <unsigned char>c
            p += 6
        else:
            if x == 34 or x == 92 or x == 47:
                out[n] = x
            elif x == 98:
                out[n] = 8
            elif x == 102:
                out[n] = 12
            elif x == 110:
                out[n] = 10
            elif x == 114:
                out[n] = 13
            elif x == 116:
                out[n] = 9
            else:
                return -1
            p += 2
        n += 1
    return n


cdef int64_t _decimal(const unsigned char *b, Span *s, int max_digits) noexcept nogil:
    """A header number as ``plain_send_v2_fields`` takes it: 1..max_digits ASCII digits."""
    cdef Py_ssize_t n = s.end - s.at, i
    cdef int64_t v = 0
    if s.escaped or n <= 0 or n > max_digits:
        return -1
    for i in range(n):
        if not 48 <= b[s.at + i] <= 57:
            return -1
        v = v * 10 + (b[s.at + i] - 48)
    return v


cdef bint _name_ok(const unsigned char *p, Py_ssize_t n, Py_ssize_t max_len) noexcept nogil:
    """``[%|a-zA-Z0-9_-]``, 1..max_len characters (topic and group names)."""
    cdef Py_ssize_t i
    cdef unsigned char c
    if n <= 0 or n > max_len:
        return False
    for i in range(n):
        c = p[i]
        if not ((97 <= c <= 122) or (65 <= c <= 90) or (48 <= c <= 57) or c == 37 or c == 124 or c == 95
                or c == 45):
            return False
    return True


cdef inline uint32_t _poly(uint32_t h, const unsigned char *p, Py_ssize_t n) noexcept nogil:
    # String.hashCode over ASCII text (one UTF-16 unit per byte)
    cdef Py_ssize_t i
    for i in range(n):
        h = 31 * h + p[i]
    return h


cdef inline int32_t _index_hash(int32_t h) noexcept nogil:
    if h == <int32_t>(-2147483648):
        return 0
    return -h if h < 0 else h


cdef inline bint _is(const unsigned char *p, Py_ssize_t n, const char *name, Py_ssize_t k) noexcept nogil:
    return n == k and memcmp(p, name, k) == 0


cdef object _plain_send(const unsigned char *b, Py_ssize_t hdr_at, Py_ssize_t hdr_end, Py_ssize_t body_at,
                        Py_ssize_t frame_end, const unsigned char *cluster, Py_ssize_t cluster_len,
                        bint indexed, unsigned char *scratch, Py_ssize_t half, _Names names, bint signed=False):
    """The item of one frame, or None when the general path must read it (``names``: the
    send core's, which gives its last topic's str again). ``signed``: the frame may carry
    plain ACL's fields, and the item gets three more - the AccessKey (str, or None), the
    Signature's text (bytes, or None) and the signed content's header part (bytes: the
    decoded values of the other extFields in key order, as ``signing.request_signature``
    joins them; the body follows it in the signature)."""
    cdef Header h
    h.signed = signed
    cdef Span *s
    cdef int64_t queue_id, sys_flag, born_ts, flag, reconsume
    cdef Py_ssize_t n, plen, p, q, k, seg_end, out_n, i, j, kept = 0
    cdef Py_ssize_t names_at[128]
    cdef Py_ssize_t names_len[128]
    cdef Py_ssize_t tags_at = -1, tags_len = 0, uniq_at = -1, uniq_len = 0, keys_at = -1, keys_len = 0
    cdef unsigned char *props
    cdef unsigned char *out
    cdef uint32_t th
    cdef int32_t tags_code = 0
    if _header(b, hdr_at, hdr_end, &h) < 0:
        return None
    if not h.seen_top & T_CODE or h.code != SEND_MESSAGE_V2 or h.flag & (FLAG_RESPONSE | FLAG_ONEWAY):
        return None
    if h.seen_ext & K_REQUIRED != K_REQUIRED:
        return None
    # numbers as plain_send_v2_fields reads them (d: default queue count, only checked)
    if _decimal(b, &h.ext[3], 9) < 0:
        return None
    queue_id = _decimal(b, &h.ext[4], 9)
    sys_flag = _decimal(b, &h.ext[5], 9)
    born_ts = _decimal(b, &h.ext[6], 18)
    flag = _decimal(b, &h.ext[7], 9)
    if queue_id < 0 or sys_flag < 0 or born_ts < 0 or flag < 0:
        return None
    reconsume = 0
    if h.seen_ext & (1 << 9):
        reconsume = _decimal(b, &h.ext[9], 9)
        if reconsume < 0:
            return None
    if h.seen_ext & (1 << 11) and _decimal(b, &h.ext[11], 9) < 0:
        return None
    if h.seen_ext & (1 << 10):  # k: unit mode, true/false
        s = &h.ext[10]
        if s.escaped or not (_is(b + s.at, s.end - s.at, "true", 4) or _is(b + s.at, s.end - s.at, "false", 5)):
            return None
    if h.seen_ext & (1 << 12):  # m: batch, only false here
        s = &h.ext[12]
        if s.escaped or not _is(b + s.at, s.end - s.at, "false", 5):
            return None
    if h.seen_ext & (1 << 13) and h.ext[13].escaped:
        return None
    if sys_flag & TX_MASK:
        return None  # a transaction's half message: the general path's transaction stage
    # names: the request guard's rules (a refusal is the general path's answer)
    s = &h.ext[1]
    if s.escaped or not _name_ok(b + s.at, s.end - s.at, MAX_TOPIC_LENGTH):
        return None
    if h.ext[0].escaped or not _name_ok(b + h.ext[0].at, h.ext[0].end - h.ext[0].at, MAX_GROUP_LENGTH):
        return None
    if h.ext[2].escaped:
        return None
    # properties: decoded, split, checked, rewritten as the store writes them
    plen = 0
    if h.seen_ext & (1 << 8):
        plen = _unescape(b, &h.ext[8], scratch, half)
        if plen < 0:
            return None
    props = scratch
    out = scratch + half  # room for the properties, a separator and CLUSTER (see the caller)
    out_n = 0
    p = 0
    while p < plen:
        q = p
        while q < plen and props[q] != 2:
            q += 1
        seg_end = q
        k = p
        while k < seg_end and props[k] != 1:
            k += 1
        if p < k and k < seg_end - 1:  # a valid segment (others are skipped, as the reader does)
            for i in range(k + 1, seg_end):
                if props[i] == 1:
                    return None  # a separator inside a value: the general path decides
            n = k - p
            if _is(props + p, n, "DELAY", 5) or _is(props + p, n, "TRAN_MSG", 8) or _is(props + p, n, "CLUSTER", 7):
                return None  # the delay / transaction stages, or a CLUSTER the store would replace
            if _is(props + p, n, "TIMER_DELIVER_MS", 16) or _is(props + p, n, "TIMER_DELAY_SEC", 15) \
                    or _is(props + p, n, "TIMER_DELAY_MS", 14) or _is(props + p, n, "__STARTDELIVERTIME", 18):
                return None  # a timer message: the store's timer rewrite (mqcore.store.timer.rewrite)
            for j in range(kept):
                if names_len[j] == n and memcmp(props + names_at[j], props + p, n) == 0:
                    return None  # a repeated name
            if kept == 128:
                return None
            names_at[kept] = p
            names_len[kept] = n
            kept += 1
            if not _is(props + p, n, "WAIT", 4):
                if out_n:
                    out[out_n] = 2
                    out_n += 1
                if out_n + (seg_end - p) > MAX_PROPERTIES_BYTES:
                    return None
                memcpy(out + out_n, props + p, seg_end - p)
                if _is(props + p, n, "TAGS", 4):
                    tags_at, tags_len = out_n + n + 1, seg_end - k - 1
                elif _is(props + p, n, "UNIQ_KEY", 8):
                    uniq_at, uniq_len = out_n + n + 1, seg_end - k - 1
                elif _is(props + p, n, "KEYS", 4):
                    keys_at, keys_len = out_n + n + 1, seg_end - k - 1
                out_n += seg_end - p
        p = seg_end + 1
    if cluster_len:
        if out_n + 1 + 8 + cluster_len > MAX_PROPERTIES_BYTES:
            return None
        if out_n:
            out[out_n] = 2
            out_n += 1
        memcpy(out + out_n, b"CLUSTER\x01", 8)
        memcpy(out + out_n + 8, cluster, cluster_len)
        out_n += 8 + cluster_len
    if tags_at >= 0:
        tags_code = <int32_t>_poly(0, out + tags_at, tags_len)
    # index keys: topic#UNIQ_KEY, then topic#word per KEYS word
    cdef list hashes = []
    cdef uint32_t base
    if indexed and (uniq_at >= 0 or keys_at >= 0):
        base = _poly(0, b + h.ext[1].at, h.ext[1].end - h.ext[1].at)
        base = 31 * base + 35  # '#'
        if uniq_at >= 0:
            hashes.append(_index_hash(<int32_t>_poly(base, out + uniq_at, uniq_len)))
        if keys_at >= 0:
            i = keys_at
            while i < keys_at + keys_len:
                j = i
                while j < keys_at + keys_len and out[j] != 32:
                    j += 1
                if j > i:
                    if len(hashes) >= MAX_KEYS:
                        return None
                    hashes.append(_index_hash(<int32_t>_poly(base, out + i, j - i)))
                i = j + 1
    if names is None:
        topic = PyUnicode_DecodeASCII(<const char *>b + h.ext[1].at, h.ext[1].end - h.ext[1].at, NULL)
    else:
        topic = names.get(b, &h.ext[1], 0)
    if signed:
        return _signed_item(b, &h, props, plen, topic, queue_id, sys_flag, born_ts, flag, reconsume, out, out_n,
                            tags_code, hashes, body_at, frame_end, names)
    return (h.opaque, topic, <int>queue_id, <int>sys_flag, born_ts, <int>flag, <int>reconsume,
            PyBytes_FromStringAndSize(<const char *>out, out_n), tags_code, hashes,
            PyBytes_FromStringAndSize(<const char *>b + body_at, frame_end - body_at), frame_end)


cdef object _signed_item(const unsigned char *b, Header *h, const unsigned char *props, Py_ssize_t plen, object topic,
                         int64_t queue_id, int64_t sys_flag, int64_t born_ts, int64_t flag, int64_t reconsume,
                         const unsigned char *out, Py_ssize_t out_n, int32_t tags_code, list hashes,
                         Py_ssize_t body_at, Py_ssize_t frame_end, _Names names):
    """A signed frame's item (``_plain_send``'s, and the ACL fields); None when a value
    would need decoding the fast path does not do (the general path checks it)."""
    cdef Py_ssize_t total = 0, i, n
    cdef Span *s
    cdef char *c
    for i in range(2):  # AccessKey, SecurityToken: covered by the signature, as written
        if h.seen_acl & (1 << i):
            s = &h.acl[i]
            if s.escaped or s.high:
                return None
            total += s.end - s.at
    if h.seen_acl & 4 and (h.acl[2].escaped or h.acl[2].high):
        return None
    for i in range(14):
        if h.seen_ext & (1 << i):
            if i == 8:
                total += plen  # the properties, decoded (ASCII: _unescape declines the rest)
                continue
            s = &h.ext[i]
            if s.escaped or s.high:  # (read unescaped above; a non-ASCII one would need UTF-8 checks)
                return None
            total += s.end - s.at
    content = PyBytes_FromStringAndSize(NULL, total)
    c = PyBytes_AS_STRING(content)
    n = 0
    for i in range(2):
        if h.seen_acl & (1 << i):
            s = &h.acl[i]
            memcpy(c + n, b + s.at, s.end - s.at)
            n += s.end - s.at
    for i in range(14):  # the keys a..n sort after the capitalised ACL keys
        if h.seen_ext & (1 << i):
            if i == 8:
                memcpy(c + n, props, plen)
                n += plen
            else:
                s = &h.ext[i]
                memcpy(c + n, b + s.at, s.end - s.at)
                n += s.end - s.at
    access_key = None
    if h.seen_acl & 1:  # (the send core's names: slot 1, the access key, given again while the same)
        access_key = PyUnicode_DecodeASCII(<const char *>b + h.acl[0].at, h.acl[0].end - h.acl[0].at, NULL) \
            if names is None else names.get(b, &h.acl[0], 1)
    signature = PyBytes_FromStringAndSize(<const char *>b + h.acl[2].at, h.acl[2].end - h.acl[2].at) \
        if h.seen_acl & 4 else None
    return (h.opaque, topic, <int>queue_id, <int>sys_flag, born_ts, <int>flag, <int>reconsume,
            PyBytes_FromStringAndSize(<const char *>out, out_n), tags_code, hashes,
            PyBytes_FromStringAndSize(<const char *>b + body_at, frame_end - body_at), frame_end,
            access_key, signature, content)


def parse_plain_sends(object buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_frame_bytes,
                      bytes cluster, bint indexed):
    """The plain sends at the head of ``buf[start:end]`` (complete frames only) and where
    reading stopped: ``(items, stop)``. Reading stops at an incomplete frame, at one the
    generic reader must see (too large, malformed: it raises there) and at the first
    frame that is not a plain send. An item is ``(opaque, topic, queue_id, sys_flag,
    born_timestamp, flag, reconsume_times, properties, tags_code, key_hashes, body,
    frame_end)``; ``properties`` are the record's (WAIT dropped, ``cluster`` appended when
    not empty) and ``key_hashes`` the index hashes (none unless ``indexed``)."""
    cdef const unsigned char *cl = <const unsigned char *>PyBytes_AS_STRING(cluster)
    cdef Py_ssize_t cl_len = len(cluster)
    # the raw buffer protocol, not a typed memoryview: acquiring one of those costs more
    # than reading a frame
    cdef Py_buffer view
    cdef Py_ssize_t stop
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if end > view.len or start < 0 or start > end:
            raise ValueError(f"range {start}..{end} is outside a buffer of {view.len} bytes")
        items = _parse(<const unsigned char *>view.buf, start, end, max_frame_bytes, cl, cl_len, indexed, None, &stop)
        return items, stop
    finally:
        PyBuffer_Release(&view)


cdef list _parse(const unsigned char *b, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_frame_bytes,
                 const unsigned char *cl, Py_ssize_t cl_len, bint indexed, _Names names, Py_ssize_t *stop,
                 bint signed=False):
    """The items of the plain sends at the head of ``b[start:end]``; where reading stopped in ``stop``."""
    cdef list items = []
    cdef Py_ssize_t pos = start, length, total, hlen
    cdef int32_t word
    cdef unsigned char stack[2 * STACK_SCRATCH]
    cdef unsigned char *scratch
    cdef Py_ssize_t half
    while end - pos >= FRAME_LENGTH_SIZE + HEADER_WORD_SIZE:
        length = <uint32_t>mq_rd_i32(b + pos)
        if length > max_frame_bytes or length < HEADER_WORD_SIZE:
            break
        total = FRAME_LENGTH_SIZE + length
        if total > end - pos:
            break
        word = mq_rd_i32(b + pos + FRAME_LENGTH_SIZE)
        if (word >> 24) & 0xFF:  # not JSON
            break
        hlen = word & 0xFFFFFF
        if hlen > length - HEADER_WORD_SIZE:
            break
        # the decoded properties are no longer than the header; the rewritten ones gain at
        # most a separator and the CLUSTER pair
        half = hlen + cl_len + 16
        if half <= STACK_SCRATCH:
            scratch = stack
            item = _plain_send(b, pos + 8, pos + 8 + hlen, pos + 8 + hlen, pos + total, cl, cl_len, indexed,
                               scratch, half, names, signed)
        else:
            scratch = <unsigned char *>PyMem_Malloc(2 * half)
            if scratch == NULL:
                raise MemoryError()
            try:
                item = _plain_send(b, pos + 8, pos + 8 + hlen, pos + 8 + hlen, pos + total, cl, cl_len, indexed,
                                   scratch, half, names, signed)
            finally:
                PyMem_Free(scratch)
        if item is None:
            break
        items.append(item)
        pos += total
    stop[0] = pos
    return items


cdef char *_HEX = b"0123456789ABCDEF"
cdef bytes _AT_OFFSET = b'","queueOffset":"'
cdef bytes _AT_OPAQUE = b'"},"flag":1,"language":"JAVA","opaque":'
cdef bytes _AT_VERSION = b',"serializeTypeCurrentRPC":"JSON","version":'


cdef Py_ssize_t _dec(char *o, int64_t v) noexcept nogil:
    cdef char tmp[24]
    cdef Py_ssize_t n = 0, i
    cdef bint neg = v < 0
    cdef uint64_t u = <uint64_t>(-v) if neg else <uint64_t>v
    while True:
        tmp[n] = <char>(48 + u % 10)
        n += 1
        u //= 10
        if u == 0:
            break
    i = 0
    if neg:
        o[0] = 45
        i = 1
    while n:
        n -= 1
        o[i] = tmp[n]
        i += 1
    return i


cdef inline Py_ssize_t _put(char *o, const char *s, Py_ssize_t n) noexcept nogil:
    memcpy(o, s, n)
    return n


cdef Py_ssize_t _answer(char *f, const char *bq, Py_ssize_t bq_len, const char *bm, Py_ssize_t bm_len,
                       const char *hh, Py_ssize_t hh_len, int32_t queue_id, int64_t phy, int64_t queue_offset,
                       int32_t opaque, int32_t version) noexcept:
    """One answer frame at ``f`` (room: the three texts + 256 bytes); returns its length."""
    cdef char *o = f + 8
    cdef Py_ssize_t n = 0, i, hlen
    n += _put(o + n, bq, bq_len)
    n += _dec(o + n, queue_id)
    n += _put(o + n, bm, bm_len)
    n += _put(o + n, hh, hh_len)
    for i in range(16):
        o[n + i] = _HEX[(<uint64_t>phy >> (60 - 4 * i)) & 0xF]
    n += 16
    n += _put(o + n, _AT_OFFSET, len(_AT_OFFSET))
    n += _dec(o + n, queue_offset)
    n += _put(o + n, _AT_OPAQUE, len(_AT_OPAQUE))
    n += _dec(o + n, opaque)
    n += _put(o + n, _AT_VERSION, len(_AT_VERSION))
    n += _dec(o + n, version)
    o[n] = 125
    n += 1
    hlen = n
    # length = header word + header; header word = JSON (0) << 24 | header length
    f[0] = <char>((hlen + 4) >> 24); f[1] = <char>((hlen + 4) >> 16); f[2] = <char>((hlen + 4) >> 8)
    f[3] = <char>(hlen + 4)
    f[4] = 0; f[5] = <char>(hlen >> 16); f[6] = <char>(hlen >> 8); f[7] = <char>hlen
    return 8 + hlen


def send_answer(bytes before_queue_id, bytes before_msg_id, bytes host_hex, int32_t queue_id, int64_t phy,
                int64_t queue_offset, int32_t opaque, int32_t version):
    """A stored send's answer frame (length, header word, JSON header): the bytes
    ``SendProcessor.response`` and the generic encoder give. ``before_queue_id`` and
    ``before_msg_id`` are the header's text around the queue id (they carry the region and
    trace setting), ``host_hex`` the store host's part of the message id."""
    cdef Py_ssize_t cap = len(before_queue_id) + len(before_msg_id) + len(host_hex) + 256
    cdef bytes frame = PyBytes_FromStringAndSize(NULL, cap)
    cdef Py_ssize_t n = _answer(PyBytes_AS_STRING(frame), PyBytes_AS_STRING(before_queue_id), len(before_queue_id),
                                PyBytes_AS_STRING(before_msg_id), len(before_msg_id), PyBytes_AS_STRING(host_hex),
                                len(host_hex), queue_id, phy, queue_offset, opaque, version)
    return frame[:n]


def send_answers(bytes before_queue_id, bytes before_msg_id, bytes host_hex, list items, list stored,
                 int32_t version):
    """The answer frames of a stored batch, back to back in one bytes object (the
    channel's one write): ``send_answer`` of ``items[i]`` (``parse_plain_sends`` items:
    opaque, queue id) stored as ``stored[i]`` (``(queue_offset, phy_offset, size)``), for
    every stored item (``stored`` may be shorter than ``items``)."""
    return _send_answers(before_queue_id, before_msg_id, host_hex, items, stored, version)


cdef bytes _send_answers(bytes before_queue_id, bytes before_msg_id, bytes host_hex, list items, list stored,
                         int32_t version):
    # one answer (the usual receive buffer) is written on the stack and copied once into its
    # bytes; a batch into a bytes of its largest size, cut to the written length
    cdef char stack[512]
    cdef Py_ssize_t count = len(stored), i, n = 0
    if count > len(items):
        raise ValueError("more stored results than items")
    cdef Py_ssize_t bq_len = len(before_queue_id), bm_len = len(before_msg_id), hh_len = len(host_hex)
    cdef Py_ssize_t room = bq_len + bm_len + hh_len + 256
    cdef bytes out = None
    cdef char *f = stack
    if room * count > <Py_ssize_t>sizeof(stack):
        out = PyBytes_FromStringAndSize(NULL, room * count)
        f = PyBytes_AS_STRING(out)
    cdef tuple item, st
    for i in range(count):
        item = <tuple>items[i]
        st = <tuple>stored[i]
        n += _answer(f + n, PyBytes_AS_STRING(before_queue_id), bq_len, PyBytes_AS_STRING(before_msg_id), bm_len,
                     PyBytes_AS_STRING(host_hex), hh_len, <int32_t>item[2], <int64_t>st[1], <int64_t>st[0],
                     <int32_t>item[0], version)
    if out is None:
        return PyBytes_FromStringAndSize(stack, n)
    return out[:n] if n != room * count else out


# --- the latency histogram and the long-polling gate the cores update in C ---
include "_broker_state.pxi"

# --- the connection core: a receive buffer of plain sends without the Channel's Python ---
include "_receiver_core.pxi"
include "_send_core.pxi"


# --- the store stage: one plain send into the commitlog, its consume queue and the index ---
from mqcore._store cimport (_record_size, _write_record, _index_entry, CQ_UNIT_SIZE, CQ_PHYOFFSET, CQ_SIZE,
                            CQ_TAGSCODE, INDEX_HEADER_SIZE, INDEX_SLOT_SIZE, INDEX_ENTRY_SIZE,
                            IDXH_BEGIN_TIMESTAMP, IDXH_END_TIMESTAMP, IDXH_BEGIN_PHYOFFSET, IDXH_END_PHYOFFSET,
                            IDXH_HASH_SLOT_COUNT, IDXH_INDEX_COUNT, HOST_V4_BYTES, HOST_V6_BYTES,
                            SYSFLAG_BORNHOST_V6, SYSFLAG_STOREHOST_V6)

cdef extern from "_endian.h":
    int64_t mq_rd_i64(const unsigned char *p) nogil
    void mq_wr_i32(unsigned char *p, int32_t x) nogil
    void mq_wr_i64(unsigned char *p, int64_t x) nogil


cdef bint _index_keys(unsigned char *b, Py_ssize_t blen, Py_ssize_t slots, Py_ssize_t max_entries, list hashes,
                      int64_t phy, int64_t ts) except -1:
    """Every key of ``hashes`` into the index file in ``b``, or none when they do not all
    fit or the header is not one this kernel trusts (the index service then decides)."""
    cdef Py_ssize_t n = len(hashes), i
    cdef int32_t h
    if slots <= 0 or max_entries <= 0 or blen < INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE \
            + max_entries * INDEX_ENTRY_SIZE:
        return False
    cdef int64_t begin_ts = mq_rd_i64(b + IDXH_BEGIN_TIMESTAMP)
    cdef int64_t begin_phy = mq_rd_i64(b + IDXH_BEGIN_PHYOFFSET)
    cdef int32_t slot_count = mq_rd_i32(b + IDXH_HASH_SLOT_COUNT), count = mq_rd_i32(b + IDXH_INDEX_COUNT)
    if count < 1 or count > max_entries or slot_count < 0 or slot_count > count or count + n > max_entries:
        return False
    for i in range(n):
        h = hashes[i]
        if h < 0:
            raise ValueError("index key hashes must be >= 0 (index_hash)")
    for i in range(n):
        _index_entry(b, slots, INDEX_HEADER_SIZE + slots * INDEX_SLOT_SIZE, <int32_t>hashes[i], phy, ts,
                     &begin_ts, &begin_phy, &slot_count, &count)
    mq_wr_i64(b + IDXH_BEGIN_TIMESTAMP, begin_ts)
    mq_wr_i64(b + IDXH_END_TIMESTAMP, ts)
    mq_wr_i64(b + IDXH_BEGIN_PHYOFFSET, begin_phy)
    mq_wr_i64(b + IDXH_END_PHYOFFSET, phy)
    mq_wr_i32(b + IDXH_HASH_SLOT_COUNT, slot_count)
    mq_wr_i32(b + IDXH_INDEX_COUNT, count)
    return True


def append_plain(object commitlog, Py_ssize_t pos, Py_ssize_t limit, int64_t phy, bytes topic, int32_t queue_id,
                 int32_t flag, int64_t queue_offset, int32_t sys_flag, int64_t born_timestamp, bytes born_host,
                 int64_t store_timestamp, bytes store_host, int32_t reconsume_times, bytes body, bytes properties,
                 object consume_queue, Py_ssize_t unit_pos, int32_t tags_code, object index, Py_ssize_t slots,
                 Py_ssize_t max_entries, list key_hashes):
    """One plain send's record at ``commitlog[pos:]``, its consume-queue unit at
    ``consume_queue[unit_pos:]`` and (when ``index`` is a buffer) its index keys, in one
    call: the bytes ``encode_record``, the consume queue's unit and ``index_put_one`` give.

    Returns ``(size, indexed)``: ``size`` 0 when the record does not end by ``limit``
    (nothing is written: the caller rolls the file the general way); ``indexed`` False
    when the keys were not written (no index buffer, not all of them fit, or a header this
    kernel does not trust: the index service then puts them)."""
    cdef bint indexed = False
    cdef Py_ssize_t size = _append_plain(commitlog, pos, limit, phy, topic, queue_id, flag, queue_offset, sys_flag,
                                         born_timestamp, born_host, store_timestamp, store_host, reconsume_times,
                                         body, properties, consume_queue, unit_pos, tags_code, index, slots,
                                         max_entries, key_hashes, &indexed)
    return size, indexed


cdef Py_ssize_t _append_plain(object commitlog, Py_ssize_t pos, Py_ssize_t limit, int64_t phy, bytes topic,
                              int32_t queue_id, int32_t flag, int64_t queue_offset, int32_t sys_flag,
                              int64_t born_timestamp, bytes born_host, int64_t store_timestamp, bytes store_host,
                              int32_t reconsume_times, bytes body, bytes properties, object consume_queue,
                              Py_ssize_t unit_pos, int32_t tags_code, object index, Py_ssize_t slots,
                              Py_ssize_t max_entries, list key_hashes, bint *indexed_out) except -1:
    """append_plain's work for C callers (the connection core): the size (0: nothing
    written), and whether the keys were indexed in ``indexed_out``."""
    cdef Py_ssize_t topic_len = len(topic), props_len = len(properties), body_len = len(body)
    cdef Py_ssize_t born_len = len(born_host), store_len = len(store_host)
    if born_len != (HOST_V6_BYTES if sys_flag & SYSFLAG_BORNHOST_V6 else HOST_V4_BYTES) or \
            store_len != (HOST_V6_BYTES if sys_flag & SYSFLAG_STOREHOST_V6 else HOST_V4_BYTES):
        raise ValueError("a host's length does not match the sys flag's V6 bits")
    if topic_len > 127 or props_len > MAX_PROPERTIES_BYTES:
        raise ValueError("topic longer than 127 bytes or properties longer than 32767 bytes")
    cdef Py_ssize_t size = _record_size(body_len, topic_len, props_len, sys_flag)
    cdef Py_buffer cl, cq, ix
    if pos < 0 or pos + size > limit:
        return 0
    PyObject_GetBuffer(commitlog, &cl, PyBUF_WRITABLE)
    try:
        PyObject_GetBuffer(consume_queue, &cq, PyBUF_WRITABLE)
        try:
            if pos + size > cl.len or unit_pos < 0 or unit_pos + CQ_UNIT_SIZE > cq.len:
                raise ValueError("the record or the unit does not fit in its buffer")
            _write_record(<unsigned char *>cl.buf + pos, <const unsigned char *>PyBytes_AS_STRING(topic), topic_len,
                          queue_id, flag, queue_offset, phy, sys_flag, born_timestamp,
                          <const unsigned char *>PyBytes_AS_STRING(born_host), born_len, store_timestamp,
                          <const unsigned char *>PyBytes_AS_STRING(store_host), store_len, reconsume_times, 0,
                          <const unsigned char *>PyBytes_AS_STRING(body), body_len,
                          <const unsigned char *>PyBytes_AS_STRING(properties), props_len, NULL, 0)
            mq_wr_i64(<unsigned char *>cq.buf + unit_pos + CQ_PHYOFFSET, phy)
            mq_wr_i32(<unsigned char *>cq.buf + unit_pos + CQ_SIZE, <int32_t>size)
            mq_wr_i64(<unsigned char *>cq.buf + unit_pos + CQ_TAGSCODE, tags_code)
        finally:
            PyBuffer_Release(&cq)
    finally:
        PyBuffer_Release(&cl)
    if index is not None and key_hashes:
        PyObject_GetBuffer(index, &ix, PyBUF_WRITABLE)
        try:
            indexed_out[0] = _index_keys(<unsigned char *>ix.buf, ix.len, slots, max_entries, key_hashes, phy,
                                         store_timestamp)
        finally:
            PyBuffer_Release(&ix)
    else:
        indexed_out[0] = not key_hashes
    return size


include "_pipeline_pull.pxi"
