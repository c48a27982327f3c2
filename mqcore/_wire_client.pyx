# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Client wire kernels (the extension ``mqcore._wire_client``): a JSON request frame written
in one step, a flat JSON answer header read in one step, one request/answer exchange on a
socket with the interpreter lock released while it waits (the blocking send
path), and ``SendTemplate``: a plain ``Producer.send`` in one call (frame from a per-queue
template, exchange, the usual answer read straight into the SendResult). Their readable twin, with the full contract, is ``mqcore/_wire_client_py.py``.
The encoder and decoder are "exact or nothing": whatever they cannot reproduce byte for
byte gives None, and the caller uses the generic codec of ``mqcore.remoting.command``.

A separate extension from the store's kernels (``mqcore._store``): the client's wire work
has nothing to share with the store's byte layouts, and a client-only change does not
rebuild the store.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from libc.errno cimport errno, EAGAIN, EINTR
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

# the properties writer the store's batch encoder uses (one copy of messageProperties2String in C)
from mqcore._store cimport _dict_props_len, _dict_props_write

cdef extern from "_sha1.h" nogil:
    void mq_hmac_sha1_key(const unsigned char* key, size_t klen, uint32_t inner[5], uint32_t outer[5])
    void mq_hmac_sha1(const uint32_t inner[5], const uint32_t outer[5], const unsigned char* a, size_t alen,
                      const unsigned char* b, size_t blen, unsigned char out[20])
    void mq_b64_digest20(const unsigned char d[20], char out[28])

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd* fds, unsigned long nfds, int timeout)
    enum:
        POLLIN
        POLLPRI
        POLLOUT
        POLLERR
        POLLHUP

cdef extern from "<sys/socket.h>" nogil:
    ssize_t send(int fd, const void* buf, size_t n, int flags)
    ssize_t recv(int fd, void* buf, size_t n, int flags)
    enum:
        MSG_NOSIGNAL
        MSG_DONTWAIT

cdef extern from "<time.h>" nogil:
    struct timespec:
        long tv_sec
        long tv_nsec
    int clock_gettime(int clk, timespec* ts)
    enum:
        CLOCK_MONOTONIC

cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1
    bint PyUnicode_IS_ASCII(object o)
    void* PyUnicode_DATA(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)

cdef int64_t _WC_INT32_MIN = -2147483648
cdef int64_t _WC_INT32_MAX = 2147483647

# per ASCII byte: 1 = copied as is, 2 = short escape (\b \t \n \f \r \" \\), 6 = \u00XX with
# decimal digits only; 0 = not handled (the two JSON writers escape it differently: \u001A vs
# \u001a, or U+007F, which fastjson escapes and orjson does not)
cdef unsigned char _WC_ESC_LEN[128]

cdef void _wc_init_table():
    cdef int c
    for c in range(128):
        if 0x20 <= c < 0x7f:
            _WC_ESC_LEN[c] = 1
        elif c <= 0x09 or 0x10 <= c <= 0x19:
            _WC_ESC_LEN[c] = 6
        else:
            _WC_ESC_LEN[c] = 0
    for c in (0x08, 0x09, 0x0a, 0x0c, 0x0d, 0x22, 0x5c):
        _WC_ESC_LEN[c] = 2

_wc_init_table()


cdef inline bint _wc_int32(object value):
    if type(value) is not int:
        return False
    return _WC_INT32_MIN <= value <= _WC_INT32_MAX


cdef Py_ssize_t _wc_quoted_len(object text):
    """Bytes of ``text`` as a quoted JSON string, -1 when not handled."""
    if not PyUnicode_IS_ASCII(text):
        return -1
    cdef const unsigned char* s = <const unsigned char*>PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), i, total = 2
    cdef unsigned char e
    for i in range(n):
        e = _WC_ESC_LEN[s[i]]
        if e == 0:
            return -1
        total += e
    return total


cdef char* _wc_put_quoted(char* out, object text):
    out[0] = b'"'
    out = _wc_put_escaped(out + 1, text)
    out[0] = b'"'
    return out + 1


cdef char* _wc_put_escaped(char* out, object text):
    """``text`` escaped as inside a JSON string (``_wc_quoted_len`` accepted it)."""
    cdef const unsigned char* s = <const unsigned char*>PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), i
    cdef unsigned char c, e
    for i in range(n):
        c = s[i]
        e = _WC_ESC_LEN[c]
        if e == 1:
            out[0] = c
            out += 1
        elif e == 2:
            out[0] = b'\\'
            if c == 0x08:
                out[1] = b'b'
            elif c == 0x09:
                out[1] = b't'
            elif c == 0x0a:
                out[1] = b'n'
            elif c == 0x0c:
                out[1] = b'f'
            elif c == 0x0d:
                out[1] = b'r'
            else:
                out[1] = c
            out += 2
        else:  # \u00XX, XX decimal (0x00-0x09, 0x10-0x19)
            out[0] = b'\\'
            out[1] = b'u'
            out[2] = b'0'
            out[3] = b'0'
            out[4] = <char>(0x30 + (c >> 4))
            out[5] = <char>(0x30 + (c & 0xF))
            out += 6
    return out


cdef int _wc_itoa(char* dst, int64_t value) noexcept nogil:
    """``value`` in decimal into ``dst`` (24 bytes), its length: what ``%lld`` writes, without
    printf's format parsing (three numbers per send frame)."""
    cdef char tmp[24]
    cdef int n = 0, i
    cdef uint64_t u = <uint64_t>value
    if value < 0:
        u = <uint64_t>0 - u
    while True:
        tmp[n] = <char>(0x30 + u % 10)
        n += 1
        u //= 10
        if u == 0:
            break
    i = 0
    if value < 0:
        dst[0] = 0x2d
        i = 1
    while n:
        n -= 1
        dst[i] = tmp[n]
        i += 1
    return i


cdef inline char* _wc_put(char* out, const char* s, Py_ssize_t n):
    memcpy(out, s, n)
    return out + n


def encode_request_frame(code, str language, version, opaque, flag, tuple keys, tuple values,
                         const unsigned char[::1] body):
    if not (_wc_int32(code) and _wc_int32(version) and _wc_int32(opaque) and _wc_int32(flag)):
        return None
    if flag & 1:  # a response (FLAG_RESPONSE) always carries extFields: not a request's layout
        return None
    cdef Py_ssize_t count = len(keys), i, n, header_len, body_len = body.shape[0], lang_len
    if len(values) != count:
        return None
    lang_len = _wc_quoted_len(language)
    if lang_len < 0:
        return None
    # the members' texts (ints and bools rendered), then the size of the whole header
    cdef list texts = [None] * count
    cdef Py_ssize_t ext_len = 0, members = 0
    cdef object key, value, text
    for i in range(count):
        value = values[i]
        if value is None:
            continue
        key = keys[i]
        if type(key) is not str:
            return None
        if type(value) is str:
            text = value
        elif type(value) is bool:
            text = "true" if value else "false"
        elif type(value) is int:
            text = str(value)
        else:
            return None
        n = _wc_quoted_len(key)
        if n < 0:
            return None
        ext_len += n + 1
        n = _wc_quoted_len(text)
        if n < 0:
            return None
        ext_len += n
        texts[i] = text
        members += 1
    cdef char nums[4][24]
    cdef int nlen[4]
    nlen[0] = _wc_itoa(nums[0], <int64_t>code)
    nlen[1] = _wc_itoa(nums[1], <int64_t>flag)
    nlen[2] = _wc_itoa(nums[2], <int64_t>opaque)
    nlen[3] = _wc_itoa(nums[3], <int64_t>version)
    # {"code":N,"extFields":{...},"flag":N,"language":"X","opaque":N,"serializeTypeCurrentRPC":"JSON","version":N}
    header_len = (8 + nlen[0] + 8 + nlen[1] + 12 + lang_len + 10 + nlen[2]
                  + 33 + 11 + nlen[3] + 1)
    if members:
        header_len += 14 + ext_len + (members - 1) + 1
    if header_len > 0xFFFFFF or 4 + header_len + body_len > _WC_INT32_MAX:
        return None
    frame = PyBytes_FromStringAndSize(NULL, 8 + header_len + body_len)
    cdef char* start = PyBytes_AS_STRING(frame)
    cdef char* out = start
    cdef uint32_t length = <uint32_t>(4 + header_len + body_len)
    cdef uint32_t word = <uint32_t>header_len  # serialize type JSON (0) in the top byte
    out[0] = <char>(length >> 24); out[1] = <char>(length >> 16); out[2] = <char>(length >> 8); out[3] = <char>length
    out[4] = <char>(word >> 24); out[5] = <char>(word >> 16); out[6] = <char>(word >> 8); out[7] = <char>word
    out += 8
    out = _wc_put(out, b'{"code":', 8)
    out = _wc_put(out, nums[0], nlen[0])
    if members:
        out = _wc_put(out, b',"extFields":{', 14)
        n = 0
        for i in range(count):
            text = texts[i]
            if text is None:
                continue
            if n:
                out[0] = b','
                out += 1
            out = _wc_put_quoted(out, keys[i])
            out[0] = b':'
            out = _wc_put_quoted(out + 1, text)
            n += 1
        out[0] = b'}'
        out += 1
    out = _wc_put(out, b',"flag":', 8)
    out = _wc_put(out, nums[1], nlen[1])
    out = _wc_put(out, b',"language":', 12)
    out = _wc_put_quoted(out, language)
    out = _wc_put(out, b',"opaque":', 10)
    out = _wc_put(out, nums[2], nlen[2])
    out = _wc_put(out, b',"serializeTypeCurrentRPC":"JSON"', 33)
    out = _wc_put(out, b',"version":', 11)
    out = _wc_put(out, nums[3], nlen[3])
    out[0] = b'}'
    out += 1
    if body_len:
        memcpy(out, &body[0], body_len)
        out += body_len
    if out - start != 8 + header_len + body_len:  # the size computation above is the contract
        raise AssertionError("encode_request_frame: size mismatch")
    return frame


# --- answers ---------------------------------------------------------------------------------
cdef enum:
    _WC_CODE = 1
    _WC_OPAQUE = 2
    _WC_FLAG = 4
    _WC_VERSION = 8
    _WC_REMARK = 16
    _WC_EXT = 32
    _WC_LANGUAGE = 64
    _WC_SERIALIZE = 128


include "_json_scan.pxi"


cdef Py_ssize_t _wc_string_end(const unsigned char* s, Py_ssize_t p, Py_ssize_t n) noexcept:
    """``s[p]`` opens a string: the index of its closing quote, -1 when it has an escape, a
    control or non-ASCII byte, or no end."""
    if p >= n or s[p] != 0x22:
        return -1
    p += 1
    cdef unsigned char c
    while p < n:
        c = s[p]
        if c == 0x22:
            return p
        if c == 0x5c or c < 0x20 or c >= 0x80:
            return -1
        p += 1
    return -1


cdef Py_ssize_t _wc_int32_end(const unsigned char* s, Py_ssize_t p, Py_ssize_t n, int64_t* out) noexcept:
    """An int32 as JSON writes one (optional minus, no leading zero) at ``s[p]``: its end, -1 if not."""
    cdef bint neg = p < n and s[p] == 0x2d
    if neg:
        p += 1
    cdef Py_ssize_t digits = p
    cdef int64_t v = 0
    while p < n and 0x30 <= s[p] <= 0x39:
        if p - digits >= 10:
            return -1
        v = v * 10 + (s[p] - 0x30)
        p += 1
    if p == digits or (p - digits > 1 and s[digits] == 0x30):
        return -1
    if p < n and (s[p] == 0x2e or s[p] == 0x65 or s[p] == 0x45):
        return -1
    if neg:
        v = -v
    if v < _WC_INT32_MIN or v > _WC_INT32_MAX:
        return -1
    out[0] = v
    return p


cdef inline bint _wc_name_is(const unsigned char* s, Py_ssize_t a, Py_ssize_t b, const char* name,
                             Py_ssize_t n) noexcept:
    return b - a == n and memcmp(s + a, name, n) == 0


cdef inline Py_ssize_t _wc_value_at(const unsigned char* s, Py_ssize_t e, Py_ssize_t n) noexcept:
    """After a key whose closing quote is at ``e``: where its value begins (past ``:`` and the
    blanks around it), or -1."""
    cdef Py_ssize_t p = _ws(s, e + 1, n)
    if p >= n or s[p] != 0x3a:
        return -1
    return _ws(s, p + 1, n)


cdef inline Py_ssize_t _wc_string_value(const unsigned char* s, Py_ssize_t e, Py_ssize_t n, Py_ssize_t* at) noexcept:
    """After a key whose closing quote is at ``e``: ``: "value"``; the value's closing quote
    (its text is ``s[at[0]:that]``), or -1."""
    cdef Py_ssize_t p = _wc_value_at(s, e, n)
    if p < 0:
        return -1
    at[0] = p + 1
    return _wc_string_end(s, p, n)


cdef inline int _wc_top_key(const unsigned char* s, Py_ssize_t q, Py_ssize_t e) noexcept:
    """The bit of the answer header's top-level key ``s[q:e]`` (0: not one of them)."""
    if _wc_name_is(s, q, e, b"code", 4):
        return _WC_CODE
    if _wc_name_is(s, q, e, b"opaque", 6):
        return _WC_OPAQUE
    if _wc_name_is(s, q, e, b"flag", 4):
        return _WC_FLAG
    if _wc_name_is(s, q, e, b"version", 7):
        return _WC_VERSION
    if _wc_name_is(s, q, e, b"remark", 6):
        return _WC_REMARK
    if _wc_name_is(s, q, e, b"extFields", 9):
        return _WC_EXT
    if _wc_name_is(s, q, e, b"language", 8):
        return _WC_LANGUAGE
    if _wc_name_is(s, q, e, b"serializeTypeCurrentRPC", 23):
        return _WC_SERIALIZE
    return 0


cdef inline Py_ssize_t _wc_top_member(const unsigned char* s, Py_ssize_t p, Py_ssize_t n, int* bit, int seen,
                                      int64_t* ints) noexcept:
    """At a top-level member's name: its key's bit into ``bit`` and, for the four numbers, the
    value into ``ints``; the position after a number or of any other value (-1: malformed,
    unknown or repeated key)."""
    cdef Py_ssize_t e = _wc_string_end(s, p, n), q = p + 1
    if e < 0:
        return -1
    p = _wc_value_at(s, e, n)
    if p < 0:
        return -1
    bit[0] = _wc_top_key(s, q, e)
    if bit[0] == 0 or seen & bit[0]:
        return -1
    if bit[0] <= _WC_VERSION:
        return _wc_int32_end(s, p, n, &ints[0 if bit[0] == _WC_CODE else 1 if bit[0] == _WC_OPAQUE
                                            else 2 if bit[0] == _WC_FLAG else 3])
    return p


def decode_json_answer(const unsigned char[::1] header):
    if header.shape[0] == 0:
        return None
    return _wc_decode_answer(&header[0], header.shape[0])


cdef object _wc_decode_answer(const unsigned char* s, Py_ssize_t n):
    cdef Py_ssize_t p = 0, q, e
    cdef int seen = 0, bit
    cdef bint more
    cdef int64_t ints[4]
    ints[0] = 0; ints[1] = 0; ints[2] = 0; ints[3] = 0
    cdef object remark = None
    cdef dict ext = {}
    cdef object key
    p = _ws(s, p, n)
    if p >= n or s[p] != 0x7b:
        return None
    p = _ws(s, p + 1, n)
    if p < n and s[p] == 0x7d:
        return None  # {}: no code
    while True:
        p = _wc_top_member(s, p, n, &bit, seen, ints)
        if p < 0:
            return None
        seen |= bit
        if bit <= _WC_VERSION:
            pass  # the number was read by _wc_top_member
        elif bit == _WC_EXT:
            if p >= n or s[p] != 0x7b:
                return None
            p = _ws(s, p + 1, n)
            if p < n and s[p] == 0x7d:
                p += 1
            else:
                while True:
                    e = _wc_string_end(s, p, n)
                    if e < 0:
                        return None
                    key = (<const char*>s)[p + 1:e].decode("ascii")
                    if key in ext:
                        return None
                    e = _wc_string_value(s, e, n, &p)
                    if e < 0:
                        return None
                    ext[key] = (<const char*>s)[p:e].decode("ascii")
                    p = _next_member(s, e + 1, n, &more)
                    if p < 0:
                        return None
                    if not more:
                        break
        else:  # remark, language, serializeTypeCurrentRPC: strings
            e = _wc_string_end(s, p, n)
            if e < 0:
                return None
            if bit == _WC_REMARK:
                remark = (<const char*>s)[p + 1:e].decode("ascii")
            p = e + 1
        p = _next_member(s, p, n, &more)
        if p < 0:
            return None
        if not more:
            break
    if _ws(s, p, n) != n or not (seen & _WC_CODE):
        return None
    return (ints[0], ints[1], ints[2], remark, ext)


# --- one exchange on a socket ---------------------------------------------------------------
#: what ``exchange`` returns for a failure: the kind in the low byte, errno above it
cdef enum:
    _X_WRITE_TIMEOUT = 1
    _X_READ_TIMEOUT = 2
    _X_PEER_CLOSED = 3
    _X_WRITE_FAILED = 4
    _X_READ_FAILED = 5
EXCHANGE_WRITE_TIMEOUT = _X_WRITE_TIMEOUT
EXCHANGE_READ_TIMEOUT = _X_READ_TIMEOUT
EXCHANGE_PEER_CLOSED = _X_PEER_CLOSED
EXCHANGE_WRITE_FAILED = _X_WRITE_FAILED
EXCHANGE_READ_FAILED = _X_READ_FAILED
#: the answer bytes ``exchange`` reads itself; a longer answer goes to the caller's frame reader
EXCHANGE_BUFFER_BYTES = 8192
DEF _XBUF = 8192
#: the longest a read may wait inside ``recv`` on a blocking socket (its SO_RCVTIMEO, which the
#: caller sets): ``exchange`` waits there only while more than this is left (see the twin)
EXCHANGE_WAIT_SLICE_MS = 100
DEF _XSLICE_MS = 100
#: ``SendTemplate.send`` writes frames up to this size on its stack (larger ones into a bytes)
DEF _FRAME_SCRATCH = 4096


cdef inline int _wc_wait_ms(double deadline) noexcept nogil:
    """Milliseconds left until ``deadline`` (CLOCK_MONOTONIC seconds, what ``time.monotonic()``
    reads), rounded up so a wait never spins at 0; -1 when it has passed."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    cdef double left = deadline - (<double>ts.tv_sec + <double>ts.tv_nsec * 1e-9)
    if left <= 0:
        return -1
    cdef double ms = left * 1000.0
    cdef int whole = <int>ms if ms < 2147483647.0 else 2147483647
    return whole + 1 if whole < ms else whole


cdef int _wc_roundtrip(int fd, const unsigned char* src, Py_ssize_t total, double deadline,
                      unsigned char* buf, Py_ssize_t* got_out, Py_ssize_t* need_out,
                      int* err_out) except -1 nogil:
    """Write ``src[:total]`` and read into ``buf`` (``_XBUF`` bytes) until one whole answer
    frame (or one too long for ``buf``) is there: 0, or the failure kind (errno in
    ``err_out``); -1 when a signal handler raised (Ctrl-C)."""
    cdef Py_ssize_t done = 0, got = 0, need = -1
    cdef ssize_t n
    cdef int wait, rc, kind = 0, err = 0
    cdef pollfd pfd
    cdef uint32_t length
    pfd.fd = fd
    while done < total:  # the request, all of it
        n = send(fd, src + done, total - done, MSG_NOSIGNAL | MSG_DONTWAIT)
        if n >= 0:
            done += n
            continue
        if errno == EINTR:  # a signal: run its Python handler (Ctrl-C raises here), then go on
            with gil:
                PyErr_CheckSignals()
            continue
        if errno != EAGAIN:
            kind = _X_WRITE_FAILED
            err = errno
            break
        wait = _wc_wait_ms(deadline)
        if wait < 0:
            kind = _X_WRITE_TIMEOUT
            break
        pfd.events = POLLOUT | POLLERR | POLLHUP
        rc = poll(&pfd, 1, wait)
        if rc < 0 and errno == EINTR:
            with gil:
                PyErr_CheckSignals()
        elif rc < 0:
            kind = _X_WRITE_FAILED
            err = errno
            break
    # the answer. On a blocking socket with SO_RCVTIMEO (BlockingConnection's) the read itself
    # waits: one system call per answer instead of poll + recv. It waits there only while more
    # than a slice (its SO_RCVTIMEO at most) is left; near the deadline, and for good once a
    # read found nothing (the slice ran out, or the socket is non-blocking), poll waits exactly.
    cdef bint readable = False  # poll said so: the read returns at once
    cdef bint wait_in_recv = True
    while kind == 0:  # one frame, as long as it fits in buf
        if not readable:
            wait = _wc_wait_ms(deadline)
            if wait < 0:
                kind = _X_READ_TIMEOUT
                break
            if not wait_in_recv or wait <= _XSLICE_MS:
                pfd.events = POLLIN | POLLPRI | POLLERR | POLLHUP
                rc = poll(&pfd, 1, wait)
                if rc > 0:
                    readable = True
                elif rc < 0 and errno == EINTR:
                    with gil:
                        PyErr_CheckSignals()
                elif rc < 0:
                    kind = _X_READ_FAILED
                    err = errno
                    break
                continue
        n = recv(fd, buf + got, _XBUF - got, MSG_DONTWAIT if readable else 0)
        readable = False
        if n > 0:
            got += n
            if need < 0 and got >= 4:
                length = (<uint32_t>buf[0] << 24) | (<uint32_t>buf[1] << 16) | (<uint32_t>buf[2] << 8) | buf[3]
                need = 4 + <Py_ssize_t>length
            if need >= 0 and (got >= need or need > _XBUF):
                break  # a whole frame (or more), or one too long for buf: decided by the caller
            continue
        if n == 0:
            kind = _X_PEER_CLOSED
            break
        if errno == EINTR:  # a signal: run its Python handler (Ctrl-C raises here), then go on
            with gil:
                PyErr_CheckSignals()
            continue
        if errno != EAGAIN:
            kind = _X_READ_FAILED
            err = errno
            break
        wait_in_recv = False  # nothing came (woken without data, a slice ran out): poll from now on
    got_out[0] = got
    need_out[0] = need
    err_out[0] = err
    return kind


cdef object _wc_answer_of(const unsigned char* buf, Py_ssize_t got, Py_ssize_t need, int64_t opaque):
    """The decoded answer when ``buf`` holds exactly one flat JSON response to ``opaque``
    with no body, else None."""
    cdef uint32_t word
    cdef Py_ssize_t hlen
    if got == need and need >= 8:
        word = (<uint32_t>buf[4] << 24) | (<uint32_t>buf[5] << 16) | (<uint32_t>buf[6] << 8) | buf[7]
        hlen = word & 0xFFFFFF
        if word >> 24 == 0 and 8 + hlen == need and hlen:  # JSON, header up to the end (no body)
            answer = _wc_decode_answer(buf + 8, hlen)
            if answer is not None and (<tuple>answer)[2] & 1 and (<tuple>answer)[1] == opaque:
                return answer
    return None


def exchange(int fd, const unsigned char[::1] frame, int64_t opaque, double deadline):
    cdef Py_ssize_t total = frame.shape[0], got = 0, need = -1
    cdef int kind, err = 0
    cdef unsigned char buf[_XBUF]
    cdef const unsigned char* src = &frame[0] if total else NULL
    with nogil:
        kind = _wc_roundtrip(fd, src, total, deadline, buf, &got, &need, &err)
    if kind:
        return kind | (err << 8)
    answer = _wc_answer_of(buf, got, need, opaque)
    if answer is not None:
        return answer
    return PyBytes_FromStringAndSize(<char*>buf, got)


# --- the blocking send: one call per Producer.send ------------------------------------------
cdef bytes _wc_quote_bytes(object text):
    """``text`` as a quoted JSON string (bytes), None when not handled."""
    if type(text) is not str:
        return None
    cdef Py_ssize_t n = _wc_quoted_len(text)
    if n < 0:
        return None
    out = PyBytes_FromStringAndSize(NULL, n)
    _wc_put_quoted(PyBytes_AS_STRING(out), text)
    return out


cdef inline bint _wc_plain_int_type(object value):
    return type(value) is int and -9223372036854775807 - 1 <= value <= 9223372036854775807


def send_template(code, str language, version, producer_group, topic, default_topic, default_topic_queue_nums,
                  queue_id, broker_name, mq, result_type, send_ok, access_key=None, secret_key=None):
    if not (_wc_int32(code) and _wc_int32(version) and type(default_topic_queue_nums) is int
            and _wc_int32(queue_id)):
        return None
    lang, group, t, dt, broker = (_wc_quote_bytes(language), _wc_quote_bytes(producer_group), _wc_quote_bytes(topic),
                                  _wc_quote_bytes(default_topic), _wc_quote_bytes(broker_name))
    if lang is None or group is None or t is None or dt is None or broker is None:
        return None
    nums, qid = str(default_topic_queue_nums).encode(), str(queue_id).encode()
    head = (b'{"code":' + str(code).encode() + b',"extFields":{"a":' + group + b',"b":' + t + b',"c":' + dt
            + b',"d":"' + nums + b'","e":"' + qid + b'","f":"0","g":"')
    after = b'},"flag":0,"language":' + lang + b',"opaque":'
    tail = b',"serializeTypeCurrentRPC":"JSON","version":' + str(version).encode() + b'}'
    if access_key is None:
        return SendTemplate(head, b'","j":"0","k":"false","m":"false","n":' + broker + after, tail, mq, queue_id,
                            result_type, send_ok)
    ak = _wc_quote_bytes(access_key)
    if ak is None or type(secret_key) is not str or not secret_key:
        return None
    # the signature's content: every extFields value in key order (AccessKey sorts first), the
    # values fixed per queue joined here once; the send adds born, flag and properties
    prefix = (<str>access_key).encode() + (<str>producer_group).encode() + (<str>topic).encode() \
        + (<str>default_topic).encode() + nums + qid + b"0"
    suffix = b"0falsefalse" + (<str>broker_name).encode()
    mid = b'","j":"0","k":"false","m":"false","n":' + broker + b',"AccessKey":' + ak + b',"Signature":"'
    return SendTemplate(head, mid, tail, mq, queue_id, result_type, send_ok, b'"' + after, prefix, suffix,
                        (<str>secret_key).encode())


cdef inline int64_t _wc_plain_int(object text, Py_ssize_t max_digits):
    """What ``headers._plain_int`` reads (1..max_digits ASCII digits), -1 for anything else."""
    if type(text) is not str or not PyUnicode_IS_ASCII(text):
        return -1
    cdef const unsigned char* s = <const unsigned char*>PyUnicode_DATA(text)
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), i
    if n == 0 or n > max_digits:
        return -1
    cdef int64_t v = 0
    for i in range(n):
        if not (0x30 <= s[i] <= 0x39):
            return -1
        v = v * 10 + (s[i] - 0x30)
    return v


#: a signed template signs bodies up to this size itself (five SHA-1 blocks of C per 320 bytes);
#: a longer one goes the generic way, to OpenSSL's SHA-1 with the CPU's SHA extensions
DEF _SIGNED_BODY_MAX = 2048
#: the header values a signed template's signature covers, at most (else the generic path)
DEF _SIGN_SCRATCH = 4096

cdef class _ResultMaker


cdef class SendTemplate:
    """The constant parts of one queue's SEND_MESSAGE_V2 frame (see the twin)."""
    cdef readonly bytes head, mid, tail, mid2, sign_prefix, sign_suffix
    cdef readonly object mq, result_type, send_ok
    cdef readonly int64_t queue_id
    cdef readonly bint signed
    cdef uint32_t inner[5]  # the secret key's HMAC-SHA1 states (_sha1.h)
    cdef uint32_t outer[5]
    cdef _ResultMaker _results  # the SendResult's slots written directly: no Python __init__ per send

    def __init__(self, bytes head, bytes mid, bytes tail, mq, int64_t queue_id, result_type, send_ok,
                 bytes mid2=b"", bytes sign_prefix=None, bytes sign_suffix=None, bytes secret=None):
        self.head, self.mid, self.tail, self.mid2 = head, mid, tail, mid2
        self.mq, self.queue_id, self.result_type, self.send_ok = mq, queue_id, result_type, send_ok
        self._results = _ResultMaker(result_type)
        self.signed = secret is not None
        self.sign_prefix, self.sign_suffix = sign_prefix or b"", sign_suffix or b""
        if self.signed:
            mq_hmac_sha1_key(<const unsigned char*>PyBytes_AS_STRING(secret), len(secret), self.inner, self.outer)

    def frame(self, int64_t opaque, born, flag, dict properties, bytes body):
        return self._frame(opaque, born, flag, properties, body)

    cdef object _frame(self, int64_t opaque, object born, object flag, dict properties, bytes body,
                       char* scratch=NULL, Py_ssize_t cap=0, Py_ssize_t* written=NULL):
        """The frame as bytes, None when declined; given ``scratch``, a frame of at most ``cap``
        bytes is written there instead (its size in ``written``) and True is returned (``send``:
        no bytes object per send)."""
        if not (_wc_plain_int_type(born) and _wc_plain_int_type(flag)) or opaque < 0 or opaque > _WC_INT32_MAX:
            return None
        # the properties string (messageProperties2String) as JSON would quote it, measured first
        cdef Py_ssize_t props_len = 0, n, pairs = 0
        cdef object k, v
        for k, v in properties.items():
            if v is None:
                continue
            if type(k) is not str or type(v) is not str:
                return None
            n = _wc_quoted_len(k)
            if n < 0:
                return None
            props_len += n - 2 + 6  # name, \u0001
            n = _wc_quoted_len(v)
            if n < 0:
                return None
            props_len += n - 2
            pairs += 1
        if pairs > 1:
            props_len += 6 * (pairs - 1)  # \u0002 between pairs
        cdef char nums[3][24]
        cdef int nlen[3]
        nlen[0] = _wc_itoa(nums[0], <int64_t>born)
        nlen[1] = _wc_itoa(nums[1], <int64_t>flag)
        nlen[2] = _wc_itoa(nums[2], <int64_t>opaque)
        cdef Py_ssize_t head_n = len(self.head), mid_n = len(self.mid), tail_n = len(self.tail)
        cdef Py_ssize_t body_len = len(body)
        cdef Py_ssize_t header_len = head_n + nlen[0] + 7 + nlen[1] + 7 + props_len + mid_n + nlen[2] + tail_n
        cdef char sig[28]
        if self.signed:
            if body_len > _SIGNED_BODY_MAX or not _wc_sign(self, nums, nlen, properties, body, sig):
                return None  # the generic path signs it (OpenSSL's SHA-1 for a long body)
            header_len += 28 + len(self.mid2)
        if header_len > 0xFFFFFF or 4 + header_len + body_len > _WC_INT32_MAX:
            return None
        cdef char* start
        if scratch != NULL and 8 + header_len + body_len <= cap:
            frame = True
            start = scratch
            written[0] = 8 + header_len + body_len
        else:
            frame = PyBytes_FromStringAndSize(NULL, 8 + header_len + body_len)
            start = PyBytes_AS_STRING(frame)
        cdef char* out = start
        cdef uint32_t length = <uint32_t>(4 + header_len + body_len)
        cdef uint32_t word = <uint32_t>header_len
        out[0] = <char>(length >> 24); out[1] = <char>(length >> 16); out[2] = <char>(length >> 8); out[3] = <char>length
        out[4] = <char>(word >> 24); out[5] = <char>(word >> 16); out[6] = <char>(word >> 8); out[7] = <char>word
        out = _wc_put(out + 8, PyBytes_AS_STRING(self.head), head_n)
        out = _wc_put(out, nums[0], nlen[0])
        out = _wc_put(out, b'","h":"', 7)
        out = _wc_put(out, nums[1], nlen[1])
        out = _wc_put(out, b'","i":"', 7)
        n = 0
        for k, v in properties.items():
            if v is None:
                continue
            if n:
                out = _wc_put(out, b'\\u0002', 6)
            out = _wc_put_escaped(out, k)
            out = _wc_put(out, b'\\u0001', 6)
            out = _wc_put_escaped(out, v)
            n += 1
        out = _wc_put(out, PyBytes_AS_STRING(self.mid), mid_n)
        if self.signed:
            out = _wc_put(out, sig, 28)
            out = _wc_put(out, PyBytes_AS_STRING(self.mid2), len(self.mid2))
        out = _wc_put(out, nums[2], nlen[2])
        out = _wc_put(out, PyBytes_AS_STRING(self.tail), tail_n)
        if body_len:
            out = _wc_put(out, PyBytes_AS_STRING(body), body_len)
        if out - start != 8 + header_len + body_len:  # the size computation above is the contract
            raise AssertionError("SendTemplate.frame: size mismatch")
        return frame

    def send(self, int fd, int64_t opaque, born, flag, dict properties, bytes body, double deadline, str uniq_id):
        cdef char scratch[_FRAME_SCRATCH]  # the usual frame is written here: no bytes object per send
        cdef Py_ssize_t total = 0
        frame = self._frame(opaque, born, flag, properties, body, scratch, _FRAME_SCRATCH, &total)
        if frame is None:
            return None
        cdef const unsigned char* src = <const unsigned char*>scratch
        if frame is not True:
            src = <const unsigned char*>PyBytes_AS_STRING(frame)
            total = len(<bytes>frame)
        cdef Py_ssize_t got = 0, need = -1
        cdef int kind, err = 0
        cdef unsigned char buf[_XBUF]
        with nogil:
            kind = _wc_roundtrip(fd, src, total, deadline, buf, &got, &need, &err)
        if kind:
            return kind | (err << 8)
        cdef uint32_t word
        if got == need and need > 8:  # the usual answer, read straight into the SendResult
            word = (<uint32_t>buf[4] << 24) | (<uint32_t>buf[5] << 16) | (<uint32_t>buf[6] << 8) | buf[7]
            if word == <uint32_t>(need - 8):  # JSON, header up to the end (no body)
                result = _wc_send_result(self, buf + 8, need - 8, opaque, uniq_id)
                if result is not None:
                    return result
        answer = _wc_answer_of(buf, got, need, opaque)
        if answer is None:
            return PyBytes_FromStringAndSize(<char*>buf, got)
        result = self._result(<tuple>answer, uniq_id)
        return answer if result is None else result

    def read_answer(self, const unsigned char[::1] header, int64_t opaque, str uniq_id):
        cdef Py_ssize_t n = header.shape[0]
        if n == 0:
            return None
        result = _wc_send_result(self, &header[0], n, opaque, uniq_id)
        if result is not None:
            return result
        answer = _wc_decode_answer(&header[0], n)
        if answer is None or not ((<tuple>answer)[2] & 1 and (<tuple>answer)[1] == opaque):
            return None
        result = self._result(<tuple>answer, uniq_id)
        return answer if result is None else result

    def result(self, tuple answer, str uniq_id):
        return self._result(answer, uniq_id)

    cdef object _result(self, tuple answer, str uniq_id):
        if answer[0] != 0:  # SUCCESS only: any other code is the caller's to map (or raise)
            return None
        cdef dict ext = answer[4]
        msg_id = ext.get("msgId")
        if type(msg_id) is not str or _wc_plain_int(ext.get("queueId"), 9) != self.queue_id:
            return None
        cdef int64_t offset = _wc_plain_int(ext.get("queueOffset"), 18)
        if offset < 0:
            return None
        transaction_id = ext.get("transactionId")
        region = ext.get("MSG_REGION")
        trace = ext.get("TRACE_ON")
        if trace is None or trace == "true":
            trace_on = True
        elif trace == "false":
            trace_on = False
        else:
            return None
        if (transaction_id is not None and type(transaction_id) is not str) or (
                region is not None and type(region) is not str):
            return None
        return self._results.make(self.send_ok, uniq_id, self.mq, offset, msg_id, transaction_id,
                                  "DefaultRegion" if region is None else region, trace_on)


cdef enum:
    _WS_MSG_ID = 1
    _WS_QUEUE_ID = 2
    _WS_QUEUE_OFFSET = 4
    _WS_TRANSACTION_ID = 8
    _WS_REGION = 16
    _WS_TRACE_ON = 32


cdef object _wc_send_result(SendTemplate t, const unsigned char* s, Py_ssize_t n, int64_t opaque, str uniq_id):
    """``t._result(decode_json_answer(header), uniq_id)`` for a response to ``opaque``, read
    without the ext dict: the SendResult, or None for anything else (another code, an ext
    field the send's answer does not carry, a value it would not read plainly); the caller
    then takes the general way, which gives the same answer for what this reads."""
    cdef Py_ssize_t p = 0, q, e, k, vq
    cdef int seen = 0, bit, fields = 0, field
    cdef bint more
    cdef int64_t ints[4]
    cdef int64_t queue_id = -1, offset = -1
    cdef object msg_id = None, transaction_id = None, region = None
    cdef bint trace_on = True
    ints[0] = 0; ints[1] = 0; ints[2] = 0; ints[3] = 0
    p = _ws(s, p, n)
    if p >= n or s[p] != 0x7b:
        return None
    p = _ws(s, p + 1, n)
    while True:
        p = _wc_top_member(s, p, n, &bit, seen, ints)
        if p < 0:
            return None
        seen |= bit
        if bit <= _WC_VERSION:
            pass  # the number was read by _wc_top_member
        elif bit == _WC_EXT:
            if p >= n or s[p] != 0x7b:
                return None
            p = _ws(s, p + 1, n)
            if p < n and s[p] == 0x7d:
                p += 1
            else:
                while True:
                    e = _wc_string_end(s, p, n)
                    if e < 0:
                        return None
                    k = p + 1
                    if _wc_name_is(s, k, e, b"msgId", 5):
                        field = _WS_MSG_ID
                    elif _wc_name_is(s, k, e, b"queueId", 7):
                        field = _WS_QUEUE_ID
                    elif _wc_name_is(s, k, e, b"queueOffset", 11):
                        field = _WS_QUEUE_OFFSET
                    elif _wc_name_is(s, k, e, b"transactionId", 13):
                        field = _WS_TRANSACTION_ID
                    elif _wc_name_is(s, k, e, b"MSG_REGION", 10):
                        field = _WS_REGION
                    elif _wc_name_is(s, k, e, b"TRACE_ON", 8):
                        field = _WS_TRACE_ON
                    else:
                        return None  # not a field of a send's answer: the general way reads it
                    if fields & field:
                        return None
                    fields |= field
                    e = _wc_string_value(s, e, n, &vq)  # the value is s[vq:e]
                    if e < 0:
                        return None
                    if field == _WS_QUEUE_ID:
                        queue_id = _wc_digits(s + vq, e - vq, 9)
                        if queue_id < 0:
                            return None
                    elif field == _WS_QUEUE_OFFSET:
                        offset = _wc_digits(s + vq, e - vq, 18)
                        if offset < 0:
                            return None
                    elif field == _WS_TRACE_ON:
                        if _wc_name_is(s, vq, e, b"true", 4):
                            trace_on = True
                        elif _wc_name_is(s, vq, e, b"false", 5):
                            trace_on = False
                        else:
                            return None
                    elif field == _WS_MSG_ID:
                        msg_id = (<const char*>s)[vq:e].decode("ascii")
                    elif field == _WS_TRANSACTION_ID:
                        transaction_id = (<const char*>s)[vq:e].decode("ascii")
                    else:
                        region = (<const char*>s)[vq:e].decode("ascii")
                    p = _next_member(s, e + 1, n, &more)
                    if p < 0:
                        return None
                    if not more:
                        break
        else:  # remark, language, serializeTypeCurrentRPC: strings (read for their shape only)
            e = _wc_string_end(s, p, n)
            if e < 0:
                return None
            p = e + 1
        p = _next_member(s, p, n, &more)
        if p < 0:
            return None
        if not more:
            break
    if _ws(s, p, n) != n or not (seen & _WC_CODE):
        return None
    # code SUCCESS, a response to this request, naming this queue
    if ints[0] != 0 or not (ints[2] & 1) or ints[1] != opaque or msg_id is None or queue_id != t.queue_id \
            or offset < 0:
        return None
    return t._results.make(t.send_ok, uniq_id, t.mq, offset, msg_id, transaction_id,
                           "DefaultRegion" if region is None else region, trace_on)


cdef inline int64_t _wc_digits(const unsigned char* s, Py_ssize_t n, Py_ssize_t max_digits) noexcept:
    """1..max_digits ASCII digits as a number (``headers._plain_int``), -1 for anything else."""
    if n == 0 or n > max_digits:
        return -1
    cdef int64_t v = 0
    cdef Py_ssize_t i
    for i in range(n):
        if not (0x30 <= s[i] <= 0x39):
            return -1
        v = v * 10 + (s[i] - 0x30)
    return v


# --- auto-batching: a send_async's per-message work in one call -------------------------------
# (the twin, with the contract: ``AutoBatcher`` / ``PendingBatch`` in mqcore/_wire_client_py.py)
import threading as _threading
import time as _time

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_Next
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int32_t

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)
    void PyObject_GC_Track(void* op)
    int PyObject_GC_IsTracked(object op)
    bint PyObject_IS_GC(object op)
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)

cdef extern from "<time.h>" nogil:
    enum:
        CLOCK_REALTIME

#: ``AutoBatcher.add`` answers besides a future and None (see the twin)
JOIN_CHECK = 1
JOIN_WAIT = 2
#: what ``on_batch(action, batch)`` is asked to do, on the loop (see the twin)
BATCH_LAUNCH = 1
BATCH_LEAVE_SOON = 2
BATCH_ARM_TIMER = 3
#: a SEND_BATCH item's fixed part: TOTALSIZE, MAGIC, BODYCRC, FLAG, BODYLENGTH, then PROPERTIESLENGTH
DEF _ITEM_FIXED = 20
DEF _ITEM_OVERHEAD = 22
DEF _MAX_PROPERTIES = 32767
#: the smallest buffer a batch reserves (a batch of a few small messages)
DEF _MIN_RESERVE = 4096
#: answered batches' buffers a batcher keeps for the next batches (each at most batch_max_bytes)
DEF _MAX_SPARES = 2

cdef extern from "Python.h":
    ctypedef struct PyByteArrayObject:
        Py_ssize_t ob_exports
cdef bytearray _EMPTY_BUF = bytearray()

cdef str _PENDING = "PENDING"
cdef str _FINISHED = "FINISHED"  # concurrent.futures' state names
cdef str _K_DELAY = "DELAY"
cdef str _K_TRAN = "TRAN_MSG"
cdef str _K_TAGS = "TAGS"
cdef str _K_WAIT = "WAIT"
cdef str _K_UNIQ = "UNIQ_KEY"
cdef str _FALSE = "false"
cdef str _RETRY_PREFIX = "%RETRY%"
cdef const char* _HEX = b"0123456789ABCDEF"


cdef inline void _wc_be32(char* o, int32_t v) noexcept:
    cdef uint32_t u = <uint32_t>v
    o[0] = <char>(u >> 24); o[1] = <char>(u >> 16); o[2] = <char>(u >> 8); o[3] = <char>u


cdef class UniqIdWriter:
    """``UniqIdGenerator.next_id()`` written in C, sharing the generator's counter and month
    base (see the twin)."""
    cdef object ids
    cdef object counter
    cdef bytes fixed_hex
    cdef object clock
    cdef bint system_clock
    cdef int64_t start_ms
    cdef int64_t next_start_ms

    def __init__(self, ids, bint system_clock):
        self.ids = ids
        self.counter = ids._counter
        self.fixed_hex = ids.fixed_hex.encode("ascii")
        self.clock = ids.clock
        self.system_clock = system_clock
        self.start_ms = ids._start_ms
        self.next_start_ms = ids._next_start_ms

    cdef str _next(self):
        cdef int64_t now
        cdef timespec ts
        if self.system_clock:
            clock_gettime(CLOCK_REALTIME, &ts)
            now = <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000
        else:
            now = self.clock()
        if now >= self.next_start_ms:
            self.ids._rebase(now)
            self.start_ms = self.ids._start_ms
            self.next_start_ms = self.ids._next_start_ms
        cdef uint32_t diff = <uint32_t>((now - self.start_ms) & 0xFFFFFFFF)
        cdef uint32_t count = <uint32_t>(<int64_t>next(self.counter) & 0xFFFF)
        cdef Py_ssize_t fixed = len(self.fixed_hex), i
        out = PyUnicode_New(fixed + 12, 127)
        cdef char* o = <char*>PyUnicode_DATA(out)
        memcpy(o, PyBytes_AS_STRING(self.fixed_hex), fixed)
        o += fixed
        for i in range(8):
            o[i] = _HEX[(diff >> (28 - 4 * i)) & 0xF]
        for i in range(4):
            o[8 + i] = _HEX[(count >> (12 - 4 * i)) & 0xF]
        return out

    def next_id(self):
        return self._next()

    def stamp_all(self, msgs):
        """Every message's ``UNIQ_KEY``, in order; a message without one gets a new one."""
        cdef list out = []
        cdef PyObject* v
        cdef dict props
        for msg in msgs:
            props = msg._properties
            v = PyDict_GetItem(props, _K_UNIQ)
            if v == NULL or not <object>v:
                uniq = self._next()
                props[_K_UNIQ] = uniq
                out.append(uniq)
            else:
                out.append(<object>v)
        return out


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    ctypedef struct PyTypeObject:
        PyObject* (*tp_alloc)(PyTypeObject*, Py_ssize_t)
        void* tp_new
    PyTypeObject PyMemberDescr_Type
    PyTypeObject PyBaseObject_Type

DEF _T_OBJECT_EX = 16
DEF _READONLY = 1
#: ``SendResult``'s fields in its constructor's order (what ``result_for`` passes)
_RESULT_FIELDS = ("status", "msg_id", "message_queue", "queue_offset", "offset_msg_id", "transaction_id",
                  "region_id", "trace_on")




cdef bint _wc_sign(SendTemplate t, char nums[3][24], int nlen[3], dict properties, bytes body, char* sig):
    """``sig`` = base64 of HMAC-SHA1(secret, the extFields values in key order + body), as
    ``SessionCredentials.sign`` computes it; False when the values do not fit the scratch."""
    cdef unsigned char content[_SIGN_SCRATCH]
    cdef Py_ssize_t n = 0, m, pre = len(t.sign_prefix), suf = len(t.sign_suffix)
    cdef bint first = True
    if pre + nlen[0] + nlen[1] + suf > _SIGN_SCRATCH:
        return False
    memcpy(content, PyBytes_AS_STRING(t.sign_prefix), pre)
    n = pre
    memcpy(content + n, nums[0], nlen[0])
    n += nlen[0]
    memcpy(content + n, nums[1], nlen[1])
    n += nlen[1]
    for k, v in properties.items():  # messageProperties2String, raw (``_frame`` checked: ASCII str)
        if v is None:
            continue
        m = PyUnicode_GET_LENGTH(k) + PyUnicode_GET_LENGTH(v) + 2
        if n + m + suf > _SIGN_SCRATCH:
            return False
        if not first:
            content[n] = 2
            n += 1
        first = False
        memcpy(content + n, PyUnicode_DATA(k), PyUnicode_GET_LENGTH(k))
        n += PyUnicode_GET_LENGTH(k)
        content[n] = 1
        n += 1
        memcpy(content + n, PyUnicode_DATA(v), PyUnicode_GET_LENGTH(v))
        n += PyUnicode_GET_LENGTH(v)
    memcpy(content + n, PyBytes_AS_STRING(t.sign_suffix), suf)
    n += suf
    cdef unsigned char digest[20]
    mq_hmac_sha1(t.inner, t.outer, content, n, <const unsigned char*>PyBytes_AS_STRING(body), len(body), digest)
    mq_b64_digest20(digest, sig)
    return True


cdef class _ResultMaker:
    """Makes ``result_type(*fields)`` objects. When the type is a plain ``__slots__`` class
    (``SendResult``: a slotted dataclass, no ``__post_init__``), its slots are written
    directly (what its generated ``__init__`` does, without running Python code: that was
    most of a batched future's ``result()``); otherwise the type is called."""
    cdef object cls
    cdef bint direct
    cdef Py_ssize_t off[8]

    def __init__(self, cls):
        self.cls = cls
        self.direct = False
        cdef PyMemberDef* m
        # a dataclass's generated __init__ only assigns its fields, in this order
        if (not isinstance(cls, type) or "__dataclass_fields__" not in cls.__dict__ or hasattr(cls, "__post_init__")
                or tuple(cls.__dataclass_fields__) != _RESULT_FIELDS):
            return
        if (<PyTypeObject*><PyObject*>cls).tp_new != PyBaseObject_Type.tp_new:
            return
        for i, name in enumerate(_RESULT_FIELDS):
            d = getattr(cls, name, None)
            if type(d) is not <object><PyObject*>&PyMemberDescr_Type:
                return
            m = (<PyMemberDescrObject*><PyObject*>d).d_member
            if m.type != _T_OBJECT_EX or m.flags & _READONLY:
                return
            self.off[i] = m.offset
        self.direct = True

    cdef object make(self, status, msg_id, mq, queue_offset, offset_id, tx, region, trace):
        if not self.direct:
            return self.cls(status, msg_id, mq, queue_offset, offset_id, tx, region, trace)
        one = self.cls.__new__(self.cls)
        _wc_fill(one, self.off[0], status)
        _wc_fill(one, self.off[1], msg_id)
        _wc_fill(one, self.off[2], mq)
        _wc_fill(one, self.off[3], queue_offset)
        _wc_fill(one, self.off[4], offset_id)
        _wc_fill(one, self.off[5], tx)
        _wc_fill(one, self.off[6], region)
        _wc_fill(one, self.off[7], trace)
        return one


cdef inline void _wc_fill(object obj, Py_ssize_t offset, object value) noexcept:
    """A slot of a new object (still NULL): what ``setattr`` does, without the lookup."""
    Py_INCREF(value)
    (<PyObject**>(<char*><PyObject*>obj + offset))[0] = <PyObject*>value


cdef class PendingBatch:
    """One batch of an aggregation key: filled on callers' threads, then sent by the loop; also
    the shared state of its messages' futures (see the twin)."""
    cdef readonly object key
    cdef readonly str topic
    cdef readonly object queue
    cdef readonly object tags
    cdef readonly bint wait
    cdef bytearray _buf  # the items so far in its first ``_used`` bytes; never resized in place
    cdef Py_ssize_t _used
    cdef list _spares  # its batcher's spare buffers (None: a batch made on its own)
    cdef readonly list uniq_ids
    cdef readonly bint open
    cdef public object timer
    cdef public bint launched
    cdef public Py_ssize_t window_slots
    cdef public list externals
    cdef readonly object condition
    cdef public str state
    cdef public object result
    cdef public object error
    cdef public list watchers
    cdef _ResultMaker _results
    cdef list _offset_ids
    cdef tuple _common
    cdef list _made  # settled_result's results, by index (made when first asked for)

    def __init__(self, key, str topic, queue, tags, bint wait, condition, result_type):
        self.key = key
        self.topic = topic
        self.queue = queue
        self.tags = tags
        self.wait = wait
        self._buf = _EMPTY_BUF
        self._used = 0
        self._spares = None
        self.uniq_ids = []
        self.open = True
        self.timer = None
        self.launched = False
        self.window_slots = 0
        self.externals = None
        self.condition = condition
        self.state = _PENDING
        self.result = None
        self.error = None
        self.watchers = None
        self._results = result_type if type(result_type) is _ResultMaker else _ResultMaker(result_type)
        self._offset_ids = None
        self._made = None

    @property
    def count(self):
        return len(self.uniq_ids)

    @property
    def size(self):
        return self._used

    @property
    def body(self):
        """The items so far, as a view (no copy: the loop hands it to the transport as it is)."""
        return memoryview(self._buf)[:self._used]

    @property
    def capacity(self):
        return PyByteArray_GET_SIZE(self._buf)

    def drop_body(self):
        """The batch was answered: its futures (which keep it alive as long as the caller keeps
        them) need only the ids and the answer, not the encoded messages. Its buffer becomes
        one of the batcher's spares unless a view of it is still alive (the transport's, an
        error's traceback...): reusing it then could change bytes someone may still read."""
        cdef bytearray buf = self._buf
        self._buf = _EMPTY_BUF
        self._used = 0
        if (self._spares is not None and buf is not _EMPTY_BUF and (<PyByteArrayObject*>buf).ob_exports == 0
                and len(self._spares) < _MAX_SPARES):
            self._spares.append(buf)

    cdef char* _room(self, Py_ssize_t size, Py_ssize_t hint, Py_ssize_t limit) except NULL:
        """Where the next ``size`` bytes go. A batch's buffer is a spare of its batcher (one an
        answered batch gave back) when one is large enough, else a new one reserved at ``hint``
        (the size the last batch reached), else doubling, up to ``limit``: in the steady state
        no batch allocates, page-faults or copies its items more than once. Growing takes a
        new buffer, never a resize, so a view of the old one stays valid."""
        cdef Py_ssize_t need = self._used + size, cap = PyByteArray_GET_SIZE(self._buf), i
        cdef bytearray bigger = None
        if need > cap:
            cap = max(hint, 2 * cap, _MIN_RESERVE)
            if cap > limit:
                cap = limit
            if cap < need:
                cap = need
            if self._spares:
                for i in range(len(self._spares) - 1, -1, -1):
                    if PyByteArray_GET_SIZE(self._spares[i]) >= need:
                        bigger = self._spares.pop(i)
                        break
            if bigger is None:
                bigger = PyByteArray_FromStringAndSize(NULL, cap)
            if self._used:
                memcpy(PyByteArray_AS_STRING(bigger), PyByteArray_AS_STRING(self._buf), self._used)
            self._buf = bigger
        return PyByteArray_AS_STRING(self._buf) + self._used

    def track(self, future):
        """Have the cyclic collector track ``future`` (one of this batch's, untracked by ``add``)
        again: it is about to hold something that could close a reference cycle."""
        gc_track(future)

    def settled_result(self, Py_ssize_t index):
        """Message ``index``'s ``SendResult`` once the batch is settled with a result (None
        before, or when it failed or was cancelled), made on first use and then the same object
        for every caller: a ``BatchFuture``'s ``result()`` in one call."""
        if self.error is not None or self.state != _FINISHED:
            return None
        cdef list made = self._made
        if made is None:
            made = self._made = [None] * len(self.uniq_ids)
        one = made[index]
        if one is None:
            one = made[index] = self.result_for(index)
        return one

    def result_for(self, Py_ssize_t index):
        """Message ``index``'s own ``SendResult`` out of the batch's (``split_batch_results``)."""
        cdef list ids = self._offset_ids
        cdef tuple common
        if ids is None:
            r = self.result
            ids = list(r.offset_msg_ids)
            if len(ids) < len(self.uniq_ids):  # a broker that listed fewer ids: the rest get the batch's
                ids.extend([r.offset_msg_id] * (len(self.uniq_ids) - len(ids)))
            # what every message's result shares, read once per batch
            self._common = (r.status, r.message_queue, r.queue_offset, r.transaction_id, r.region_id, r.trace_on)
            self._offset_ids = ids
        common = self._common
        one = self._results.make(common[0], self.uniq_ids[index], common[1], common[2] + index, ids[index],
                                 common[3], common[4], common[5])
        # its fields are strs, ints, an enum and the batch's queue: it cannot close a cycle, so the
        # collector need not walk the thousands a pipelining caller keeps (as CPython untracks a
        # tuple or dict of atomic values)
        PyObject_GC_UnTrack(<PyObject*>one)
        return one


cdef class WindowSlots:
    """The async-send window of a producer (``max_async_inflight``), a counting semaphore whose
    uncontended take and give are C, not a Python lock round (see the twin). The count is
    changed only with the GIL held and no Python code in between, so it needs no lock of its
    own; a waiter sleeps on ``freed`` (a ``threading.Condition``), counted in ``_waiting``
    before it looks at the count, so a give that sees no waiter happened before that look."""
    cdef Py_ssize_t _free
    cdef readonly Py_ssize_t _waiting
    cdef object _freed

    def __init__(self, Py_ssize_t count):
        if count < 0:
            raise ValueError("WindowSlots count must be >= 0")
        self._free = count
        self._waiting = 0
        self._freed = _threading.Condition(_threading.Lock())

    cdef inline bint _take(self) noexcept:
        if self._free > 0:
            self._free -= 1
            return True
        return False

    def acquire(self, bint blocking=True, timeout=None):
        if self._free > 0:
            self._free -= 1
            return True
        if not blocking:
            return False
        deadline = None if timeout is None else _time.monotonic() + timeout
        with self._freed:
            self._waiting += 1
            try:
                while self._free <= 0:
                    remaining = None if deadline is None else deadline - _time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._freed.wait(remaining)
            finally:
                self._waiting -= 1
            self._free -= 1
            return True

    def release(self):
        self._give(1)

    def release_many(self, Py_ssize_t count):
        if count > 0:
            self._give(count)

    cdef int _give(self, Py_ssize_t count) except -1:
        self._free += count
        if self._waiting:
            with self._freed:
                self._freed.notify(count)
        return 0

    @property
    def free(self):
        return self._free


cdef class AutoBatcher:
    """The pending batches of one producer and ``add``, the per-message step (see the twin)."""
    cdef readonly object lock
    cdef readonly dict pending
    cdef readonly dict inflight_per_key
    cdef public Py_ssize_t held_bytes
    cdef public bint closed
    cdef readonly Py_ssize_t batch_max_bytes
    cdef readonly Py_ssize_t total_batch_max_bytes
    cdef readonly Py_ssize_t max_inflight_batches
    cdef readonly Py_ssize_t max_message_bytes
    cdef object checked_topics
    cdef UniqIdWriter ids
    cdef object future_type
    cdef readonly object condition
    cdef object result_type
    cdef object on_batch
    cdef object window
    cdef PendingBatch last
    #: the size the last batch to leave reached: what a new batch reserves
    cdef readonly Py_ssize_t recent_batch_bytes
    #: buffers of answered batches, for the next ones (``PendingBatch.drop_body``)
    cdef readonly list spares

    def __init__(self, *, lock, Py_ssize_t batch_max_bytes, Py_ssize_t total_batch_max_bytes,
                 Py_ssize_t max_inflight_batches, Py_ssize_t max_message_bytes, checked_topics, ids,
                 bint system_clock, future_type, condition, result_type, on_batch, window=None):
        self.lock = lock
        self.pending = {}
        self.inflight_per_key = {}
        self.held_bytes = 0
        self.closed = False
        self.batch_max_bytes = batch_max_bytes
        self.total_batch_max_bytes = total_batch_max_bytes
        self.max_inflight_batches = max_inflight_batches
        self.max_message_bytes = max_message_bytes
        self.checked_topics = checked_topics
        self.ids = UniqIdWriter(ids, system_clock)
        self.future_type = future_type
        self.condition = condition
        self.result_type = _ResultMaker(result_type)
        self.on_batch = on_batch
        self.window = window
        self.last = None
        self.recent_batch_bytes = 0
        self.spares = []

    def add(self, msg, queue=None, future=None, int window_slot=0, bint checked=False):
        cdef object topic = msg.topic
        cdef object body = msg.body
        cdef object props = msg._properties
        if type(topic) is not str or type(body) is not bytes or type(props) is not dict:
            return None
        cdef dict p = <dict>props
        cdef PyObject* v = PyDict_GetItem(p, _K_DELAY)
        if v != NULL and <object>v:
            return None
        v = PyDict_GetItem(p, _K_TRAN)
        if v != NULL and <object>v:
            return None
        if (<str>topic).startswith(_RETRY_PREFIX):
            return None
        cdef Py_ssize_t blen = len(<bytes>body)
        if not checked and (blen == 0 or blen > self.max_message_bytes or topic not in self.checked_topics):
            return JOIN_CHECK
        v = PyDict_GetItem(p, _K_UNIQ)
        if v == NULL or not <object>v:
            p[_K_UNIQ] = self.ids._next()
        cdef int32_t flag = msg.flag
        cdef Py_ssize_t plen = _dict_props_len(p)
        if plen < 0 or plen > _MAX_PROPERTIES:
            return None
        cdef Py_ssize_t size = _ITEM_OVERHEAD + blen + plen
        if size >= self.batch_max_bytes:
            return None
        v = PyDict_GetItem(p, _K_TAGS)
        cdef object tags = <object>v if v != NULL else None
        v = PyDict_GetItem(p, _K_WAIT)
        cdef bint wait = v == NULL or not (<object>v == _FALSE)
        if window_slot == 1:
            if not ((<WindowSlots>self.window)._take() if type(self.window) is WindowSlots
                    else self.window.acquire(False)):
                return JOIN_WAIT
        cdef PendingBatch batch, full = None, fresh = None
        cdef Py_ssize_t index = 0
        cdef char* o
        cdef bint room = False
        self.lock.acquire()
        try:
            if self.closed or self.held_bytes + size > self.total_batch_max_bytes:
                batch = None
            else:
                batch = self.last
                if not (batch is not None and batch.open and batch.queue is queue and batch.wait == wait
                        and batch.topic == topic and batch.tags == tags):
                    key = (topic, queue, tags, wait)
                    batch = self.pending.get(key)
                    if batch is None:
                        batch = fresh = PendingBatch(key, topic, queue, tags, wait, self.condition, self.result_type)
                        fresh._spares = self.spares
                        self.pending[key] = batch
                if batch is not fresh and batch._used + size > self.batch_max_bytes:
                    full = self._detach(batch)  # leaves now; this message starts the next one
                    key = batch.key
                    batch = fresh = PendingBatch(key, topic, queue, tags, wait, self.condition, self.result_type)
                    fresh._spares = self.spares
                    self.pending[key] = batch
                self.last = batch
                o = batch._room(size, self.recent_batch_bytes, self.batch_max_bytes)
                _wc_be32(o, <int32_t>size)
                _wc_be32(o + 4, 0)
                _wc_be32(o + 8, 0)
                _wc_be32(o + 12, flag)
                _wc_be32(o + 16, <int32_t>blen)
                memcpy(o + _ITEM_FIXED, PyBytes_AS_STRING(body), blen)
                o[_ITEM_FIXED + blen] = <char>(plen >> 8)
                o[_ITEM_FIXED + blen + 1] = <char>plen
                try:
                    _dict_props_write(p, <unsigned char*>(o + _ITEM_OVERHEAD + blen), plen)
                except BaseException:
                    if batch is fresh:  # announced to nobody yet: it must not stay pending
                        self._forget(batch)
                    raise
                batch._used += size
                index = len(batch.uniq_ids)
                batch.uniq_ids.append(p[_K_UNIQ])
                if window_slot:
                    batch.window_slots += 1
                self.held_bytes += size
                if future is not None:
                    if batch.externals is None:
                        batch.externals = []
                    batch.externals.append((index, future))
                if batch._used >= self.batch_max_bytes:
                    full = self._detach(batch)
                    fresh = None
                if fresh is not None:
                    room = self.inflight_per_key.get(fresh.key, 0) < self.max_inflight_batches
        finally:
            self.lock.release()
        if batch is None:  # declined: closed, or over the memory budget
            if window_slot == 1:
                self.window.release()
            return None
        if future is None:
            future = self.future_type.__new__(self.future_type)
            future._cell = batch
            future._index = index
            PyObject_GC_UnTrack(<PyObject*>future)  # see BatchFuture: tracked again once it could be in a cycle
        if full is not None:
            self.on_batch(BATCH_LAUNCH, full)
        if fresh is not None:
            self.on_batch(BATCH_LEAVE_SOON if room else BATCH_ARM_TIMER, fresh)
        return future

    cdef PendingBatch _detach(self, PendingBatch batch):
        if self.pending.get(batch.key) is batch:
            del self.pending[batch.key]
        batch.open = False
        self.recent_batch_bytes = batch._used
        self.inflight_per_key[batch.key] = self.inflight_per_key.get(batch.key, 0) + 1
        return batch

    cdef int _forget(self, PendingBatch batch) except -1:
        """An empty batch that never got a message (its first one failed to encode)."""
        if self.pending.get(batch.key) is batch:
            del self.pending[batch.key]
        batch.open = False
        if self.last is batch:
            self.last = None
        return 0

    def detach(self, PendingBatch batch):
        """Take ``batch`` out of the pending table and count it in flight (the lock held)."""
        return self._detach(batch)


def gc_track(obj):
    """Have the cyclic garbage collector track ``obj`` again (a future the batcher untracked
    that now holds something that could close a cycle); no-op when it is tracked."""
    if PyObject_IS_GC(obj) and not PyObject_GC_IsTracked(obj):
        PyObject_GC_Track(<PyObject*>obj)


# --- concurrent consumption: a run of listener calls in one step ---------------------------------
include "_consume_run.pxi"
