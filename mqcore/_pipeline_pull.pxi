# --- PULL: the pull pipeline's kernels (included by _pipeline.pyx) ---
#
# ``parse_pulls`` walks the complete frames at the head of a receive buffer and reads every
# plain PULL_MESSAGE in C: a JSON header of ASCII text without escapes, the usual top-level
# keys, extFields of string values with every field the pull header requires and no other
# (the fields a 4.x client sends, and ``bname``), numbers in
# their canonical decimal spelling and range. It stops at the first frame it cannot read
# exactly as the generic codec and ``PullMessageRequestHeader`` would (a binary header, an
# escape, a duplicate field, a number Python's ``int`` reads but Java does not...): that frame
# goes to the general path. ``pull_answer`` writes a pull answer's length prefix, header word
# and JSON header (the generic encoder's bytes); the body (the store's views) follows it.
# The twin is ``_pipeline_py`` (PULL section); tests/broker/test_pull_pipeline.py checks both.

cdef enum:
    PULL_MESSAGE = 11
    # extFields of the pull header, as indexes and bits
    P_GROUP = 0
    P_TOPIC = 1
    P_QUEUE_ID = 2
    P_QUEUE_OFFSET = 3
    P_MAX_MSG_NUMS = 4
    P_SYS_FLAG = 5
    P_COMMIT_OFFSET = 6
    P_SUSPEND = 7
    P_SUB_VERSION = 8
    P_SUBSCRIPTION = 9
    P_EXPRESSION_TYPE = 10
    P_BNAME = 11             # the broker name a 5.x-era client adds: read as text, not used
    P_FIELDS = 12
    P_REQUIRED = (1 << 9) - 1   # group .. subVersion


cdef struct PullHeader:
    int32_t code
    int32_t flag
    int32_t opaque
    int seen_top
    int seen_ext
    Span ext[12]


cdef inline bint _plain_text(const unsigned char *b, Span *s) noexcept nogil:
    """No escape and ASCII only: the bytes are the string (Python and Java read the same)."""
    return not s.escaped and not s.high


cdef int _pull_key(const unsigned char *b, Span *k) noexcept nogil:
    """The index of a pull header field, or -1 for another key."""
    cdef Py_ssize_t n = k.end - k.at
    cdef const unsigned char *p = b + k.at
    if n == 5 and memcmp(p, b"topic", 5) == 0:
        return P_TOPIC
    if n == 5 and memcmp(p, b"bname", 5) == 0:
        return P_BNAME
    if n == 7 and memcmp(p, b"queueId", 7) == 0:
        return P_QUEUE_ID
    if n == 7 and memcmp(p, b"sysFlag", 7) == 0:
        return P_SYS_FLAG
    if n == 10 and memcmp(p, b"maxMsgNums", 10) == 0:
        return P_MAX_MSG_NUMS
    if n == 10 and memcmp(p, b"subVersion", 10) == 0:
        return P_SUB_VERSION
    if n == 11 and memcmp(p, b"queueOffset", 11) == 0:
        return P_QUEUE_OFFSET
    if n == 12 and memcmp(p, b"commitOffset", 12) == 0:
        return P_COMMIT_OFFSET
    if n == 12 and memcmp(p, b"subscription", 12) == 0:
        return P_SUBSCRIPTION
    if n == 13 and memcmp(p, b"consumerGroup", 13) == 0:
        return P_GROUP
    if n == 14 and memcmp(p, b"expressionType", 14) == 0:
        return P_EXPRESSION_TYPE
    if n == 20 and memcmp(p, b"suspendTimeoutMillis", 20) == 0:
        return P_SUSPEND
    return -1


cdef Py_ssize_t _pull_ext(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, PullHeader *h) noexcept nogil:
    """extFields: the pull header's fields (string values, plain text), each once."""
    cdef Span key, value
    cdef int idx
    p = _ws(b, p, end)
    if p >= end or b[p] != 123:
        return -1
    p = _ws(b, p + 1, end)
    if p < end and b[p] == 125:
        return p + 1
    while True:
        p = _string(b, p, end, &key)
        if p < 0 or not _plain_text(b, &key):
            return -1
        p = _ws(b, p, end)
        if p >= end or b[p] != 58:
            return -1
        p = _string(b, _ws(b, p + 1, end), end, &value)
        if p < 0 or not _plain_text(b, &value):
            return -1
        idx = _pull_key(b, &key)
        if idx < 0 or h.seen_ext & (1 << idx):
            # another field (the request checks judge some, e.g. a "group"), or a duplicate
            # (the generic reader keeps the last): the general path decides
            return -1
        h.seen_ext |= 1 << idx
        h.ext[idx] = value
        p = _ws(b, p, end)
        if p >= end:
            return -1
        if b[p] == 44:
            p = _ws(b, p + 1, end)
            continue
        if b[p] == 125:
            return p + 1
        return -1


cdef Py_ssize_t _pull_header(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, PullHeader *h) noexcept nogil:
    cdef Span key, value
    cdef int bit
    cdef int32_t ignored
    h.seen_top = 0
    h.seen_ext = 0
    h.code = -1
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
            p = _pull_ext(b, p, end, h)
        elif _key_is(b, &key, "flag", 4):
            bit = T_FLAG
            p = _int32(b, p, end, &h.flag)
        elif _key_is(b, &key, "opaque", 6):
            bit = T_OPAQUE
            p = _int32(b, p, end, &h.opaque)
        elif _key_is(b, &key, "version", 7):
            bit = T_VERSION
            p = _int32(b, p, end, &ignored)
        elif _key_is(b, &key, "language", 8) or _key_is(b, &key, "serializeTypeCurrentRPC", 23) \
                or _key_is(b, &key, "remark", 6):
            bit = T_LANGUAGE if key.end - key.at == 8 else (T_REMARK if key.end - key.at == 6 else T_SERIALIZE)
            p = _string(b, p, end, &value)
            if p >= 0 and not _plain_text(b, &value):
                return -1
        else:
            return -1
        if p < 0 or h.seen_top & bit:
            return -1
        h.seen_top |= bit
        p = _ws(b, p, end)
        if p >= end:
            return -1
        if b[p] == 44:
            p = _ws(b, p + 1, end)
            continue
        if b[p] == 125:
            p = _ws(b, p + 1, end)
            return p if p == end else -1
        return -1


cdef bint _canonical(const unsigned char *b, Span *s, int64_t lo, int64_t hi, int64_t *out) noexcept nogil:
    """A decimal as Java's ``Long.parseLong`` and Python's ``int`` both read it the same:
    an optional minus, digits, no leading zero (``007`` and ``+7`` go to the general path)."""
    cdef Py_ssize_t p = s.at, digits
    cdef bint neg = False
    cdef uint64_t v = 0
    if p < s.end and b[p] == 45:
        neg = True
        p += 1
    digits = s.end - p
    if digits < 1 or digits > 19 or (digits > 1 and b[p] == 48):
        return False
    while p < s.end:
        if not 48 <= b[p] <= 57:
            return False
        v = v * 10 + (b[p] - 48)
        p += 1
    if neg:
        if v > <uint64_t>9223372036854775807 + 1:
            return False
        if v == <uint64_t>9223372036854775807 + 1:
            out[0] = <int64_t>(-9223372036854775807 - 1)
        else:
            out[0] = -<int64_t>v
    else:
        if v > <uint64_t>9223372036854775807:
            return False
        out[0] = <int64_t>v
    return lo <= out[0] <= hi


cdef class _Names:
    """The str objects of the names the last requests carried (a pull's group, topic,
    subscription, expression type; a send's topic), each given again while its bytes are the
    same: a connection's requests carry the same few names, and a str made once keeps its
    hash (the cores' memories are dicts keyed by these names). Values, not identities, are
    the contract: the twin makes new ones."""
    cdef list raw, text  # per slot (pulls: 0 group, 1 topic, 2 subscription, 3 expression type; sends: 0 topic, 1 AccessKey)

    def __cinit__(self):
        self.raw = [b"", b"", b"", b""]
        self.text = ["", "", "", ""]

    cdef str get(self, const unsigned char *b, Span *s, int slot):
        cdef Py_ssize_t n = s.end - s.at
        cdef bytes raw = <bytes>self.raw[slot]
        if len(raw) == n and memcmp(PyBytes_AS_STRING(raw), b + s.at, n) == 0:
            return <str>self.text[slot]
        text = PyUnicode_DecodeASCII(<const char *>b + s.at, n, NULL)
        self.raw[slot] = PyBytes_FromStringAndSize(<const char *>b + s.at, n)
        self.text[slot] = text
        return text


cdef inline object _ascii(const unsigned char *b, Span *s, _Names names, int slot):
    if names is None:
        return PyUnicode_DecodeASCII(<const char *>b + s.at, s.end - s.at, NULL)
    return names.get(b, s, slot)


cdef bint _pull_fields(const unsigned char *b, Py_ssize_t hdr_at, Py_ssize_t hdr_end, PullHeader *h,
                       int64_t *n) noexcept:
    """Read a plain pull's header into ``h`` and its numbers into ``n`` (indexed by field)."""
    cdef int i
    if _pull_header(b, hdr_at, hdr_end, h) < 0:
        return False
    if not h.seen_top & T_CODE or h.code != PULL_MESSAGE or h.flag & (FLAG_RESPONSE | FLAG_ONEWAY):
        return False
    if h.seen_ext & P_REQUIRED != P_REQUIRED:
        return False
    for i in range(P_QUEUE_ID, P_SUB_VERSION + 1):
        if i == P_QUEUE_ID or i == P_MAX_MSG_NUMS or i == P_SYS_FLAG:  # int fields
            if not _canonical(b, &h.ext[i], -2147483648, 2147483647, &n[i]):
                return False
        elif not _canonical(b, &h.ext[i], -9223372036854775807 - 1, 9223372036854775807, &n[i]):
            return False
    return True


cdef tuple _pull_item(const unsigned char *b, PullHeader *h, int64_t *n, Py_ssize_t frame_end, _Names names):
    """A ``parse_pulls`` item of the frame read by ``_pull_frame``."""
    subscription = _ascii(b, &h.ext[P_SUBSCRIPTION], names, 2) if h.seen_ext & (1 << P_SUBSCRIPTION) else None
    expression_type = _ascii(b, &h.ext[P_EXPRESSION_TYPE], names, 3) \
        if h.seen_ext & (1 << P_EXPRESSION_TYPE) else None
    group = _ascii(b, &h.ext[P_GROUP], names, 0)
    topic = _ascii(b, &h.ext[P_TOPIC], names, 1)
    return (h.opaque, group, topic, n[P_QUEUE_ID], n[P_QUEUE_OFFSET], n[P_MAX_MSG_NUMS], n[P_SYS_FLAG],
            n[P_COMMIT_OFFSET], n[P_SUSPEND], subscription, expression_type, frame_end)


cdef Py_ssize_t _pull_frame(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_frame_bytes,
                            PullHeader *h, int64_t *n) noexcept:
    """The end of the plain pull frame at ``pos`` (its header in ``h``, numbers in ``n``), or
    -1 when the frame there is incomplete or not one ``_parse_pulls`` reads."""
    cdef Py_ssize_t length, total, hlen
    cdef int32_t word
    if end - pos < FRAME_LENGTH_SIZE + HEADER_WORD_SIZE:
        return -1
    length = <uint32_t>mq_rd_i32(b + pos)
    if length > max_frame_bytes or length < HEADER_WORD_SIZE:
        return -1
    total = FRAME_LENGTH_SIZE + length
    if total > end - pos:
        return -1
    word = mq_rd_i32(b + pos + FRAME_LENGTH_SIZE)
    if (word >> 24) & 0xFF:  # not JSON
        return -1
    hlen = word & 0xFFFFFF
    if hlen > length - HEADER_WORD_SIZE:
        return -1
    if not _pull_fields(b, pos + 8, pos + 8 + hlen, h, n):
        return -1
    return pos + total


def parse_pulls(object buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_frame_bytes):
    """The plain pulls at the head of ``buf[start:end]`` (complete frames only) and where
    reading stopped: ``(items, stop)``. An item is ``(opaque, group, topic, queue_id,
    queue_offset, max_msg_nums, sys_flag, commit_offset, suspend_timeout_millis,
    subscription, expression_type, frame_end)`` (the last two None when absent)."""
    cdef list items = []
    return items, _parse_pulls(buf, start, end, max_frame_bytes, items, None)


cdef Py_ssize_t _parse_pulls(object buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_frame_bytes,
                             list items, _Names names) except -1:
    cdef Py_buffer view
    cdef const unsigned char *b
    cdef Py_ssize_t pos = start, nxt
    cdef PullHeader h
    cdef int64_t n[9]
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if end > view.len or start < 0 or start > end:
            raise ValueError(f"range {start}..{end} is outside a buffer of {view.len} bytes")
        b = <const unsigned char *>view.buf
        while True:
            nxt = _pull_frame(b, pos, end, max_frame_bytes, &h, n)
            if nxt < 0:
                break
            items.append(_pull_item(b, &h, n, nxt, names))
            pos = nxt
        return pos
    finally:
        PyBuffer_Release(&view)


cdef bytes _PA_EXT = b'{"code":'
cdef bytes _PA_NEXT = b',"extFields":{"suggestWhichBrokerId":"0","nextBeginOffset":"'
cdef bytes _PA_MIN = b'","minOffset":"'
cdef bytes _PA_MAX = b'","maxOffset":"'
cdef bytes _PA_OPAQUE = b'"},"flag":1,"language":"JAVA","opaque":'
cdef bytes _PA_REMARK = b',"remark":"'
cdef bytes _PA_VERSION = b'","serializeTypeCurrentRPC":"JSON","version":'


def pull_answer(int32_t code, int32_t opaque, bytes remark, int64_t next_begin_offset, int64_t min_offset,
                int64_t max_offset, int64_t body_len, int32_t version):
    """A pull answer's length prefix, header word and JSON header: the bytes
    ``PullProcessor``'s response and the generic encoder give, for a body of ``body_len``
    bytes sent after it. ``remark`` (the store status) is plain ASCII."""
    return _pull_answer(code, opaque, remark, next_begin_offset, min_offset, max_offset, body_len, version)


cdef bytes _pull_answer(int32_t code, int32_t opaque, bytes remark, int64_t next_begin_offset, int64_t min_offset,
                        int64_t max_offset, int64_t body_len, int32_t version):
    # written on the stack and copied once into the answer's bytes (its longest: 8 + the
    # fixed text, five numbers of up to 20 characters and a remark of up to 64)
    cdef char f[448]
    cdef char *o = f + 8
    cdef Py_ssize_t n = 0, hlen
    cdef int64_t length
    if body_len < 0 or len(remark) > 64:
        raise ValueError("a pull answer's remark is a short status name and its body length is not negative")
    n += _put(o + n, _PA_EXT, len(_PA_EXT))
    n += _dec(o + n, code)
    n += _put(o + n, _PA_NEXT, len(_PA_NEXT))
    n += _dec(o + n, next_begin_offset)
    n += _put(o + n, _PA_MIN, len(_PA_MIN))
    n += _dec(o + n, min_offset)
    n += _put(o + n, _PA_MAX, len(_PA_MAX))
    n += _dec(o + n, max_offset)
    n += _put(o + n, _PA_OPAQUE, len(_PA_OPAQUE))
    n += _dec(o + n, opaque)
    n += _put(o + n, _PA_REMARK, len(_PA_REMARK))
    n += _put(o + n, PyBytes_AS_STRING(remark), len(remark))
    n += _put(o + n, _PA_VERSION, len(_PA_VERSION))
    n += _dec(o + n, version)
    o[n] = 125
    n += 1
    hlen = n
    length = HEADER_WORD_SIZE + hlen + body_len
    if length > 2147483647:
        raise ValueError(f"a pull answer of {length} bytes exceeds the int32 length field")
    f[0] = <char>(length >> 24); f[1] = <char>(length >> 16); f[2] = <char>(length >> 8); f[3] = <char>length
    f[4] = 0; f[5] = <char>(hlen >> 16); f[6] = <char>(hlen >> 8); f[7] = <char>hlen
    return PyBytes_FromStringAndSize(f, 8 + hlen)


# --- the pull pipeline's connection core ---------------------------------------------------------
# ``PullCore.take`` is ``PullPipeline.__call__`` compiled, for a receive buffer whose first frame
# is a pull (``ChannelCore.buffer_updated`` peeks at the header with ``_first_is_pull``): the same
# stages in the same order - read, check, route, filter, lookup, commit, answer - with the store's
# lookup done by the store kernels' ``PullReader`` (``pull_lookup`` holding each mapped file's
# fixed parts; no result object), the commit and the pull counters done in place (the methods
# are called when the broker's offsets or stats are another class's), and the answers collected into
# one list the channel core hands to ``transport.writelines`` (the bodies are the commitlog's
# views, not copied). It stops where ``__call__`` stops (a refusal, SQL92, a pull to park for
# long polling, a frame it cannot read) and the Python Channel goes on from there; the
# cross-path tests (tests/broker/test_pull_pipeline.py) compare both with the general path.

cdef int _PULL_COMMIT = 1
cdef int _PULL_SUSPEND = 2
cdef int _PULL_SUBSCRIPTION = 4
cdef int _PERM_READ = 4
cdef Py_ssize_t _MAX_PASSED = 4096  # check verdicts remembered (new names only empty the memory)
cdef Py_ssize_t _PULL_CORK_BYTES = 256 * 1024  # the Channel's _CORK_BYTES: answers flushed early above it
cdef str _NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"
cdef bytes _PULL_OPENING = b'{"code":11,'


cdef bint _first_is_pull(object view, Py_ssize_t start, Py_ssize_t end) except -1:
    """The first frame of ``view[start:end]`` opens its JSON header with code 11 (PULL_MESSAGE),
    as every 4.x client writes it: the pull core is tried first, else the send core."""
    cdef Py_buffer b
    cdef bint yes
    if end - start < 8 + 11:
        return False
    PyObject_GetBuffer(view, &b, PyBUF_SIMPLE)
    yes = end <= b.len and memcmp(<const char *>b.buf + start + 8, PyBytes_AS_STRING(_PULL_OPENING), 11) == 0
    PyBuffer_Release(&b)
    return yes


cdef class PullCore:
    """The pull pipeline's common case in C for one receive buffer; the state (remarks, filter
    verdicts) stays on the Python ``PullPipeline``, read here."""
    cdef readonly object pipeline
    cdef object pull, clients, stats, offsets, reader, commitlog, names_pass, lookup, topics, groups, ensure
    cdef object passed_topics, passed_groups, filter_
    cdef dict queue_map, code_by_name, kinds, remarks, filters, consumers
    #: (topic, group, subscription when the request carries one) -> (the topic's read queue
    #: count, the offset table's key of (group, topic), the pull counters' key): the pulls whose
    #: names passed the request checks, whose topic is readable and whose group exists and may
    #: consume, valid while ``topics.version`` and ``groups.version`` are ``passed_topics`` and
    #: ``passed_groups``
    cdef dict passed
    # the commit and count stages done in place (ConsumerOffsetTable.commit and
    # BrokerStats.on_pulled, when the broker's are those methods: ``pipeline.in_place``):
    # the offset table's lock (fixed), the counters' dicts (fixed)
    cdef bint commit_in_place, count_in_place
    #: the store kernels' ``PullReader(commitlog).lookup`` (``lookup``), else ``pull_lookup``
    cdef bint reader_lookup
    cdef _Names names  # the names of the last pulls read, as str
    cdef object offsets_lock
    cdef dict pull_requests, pulled
    # the reader's transfer caps, read again when its configuration object is replaced
    cdef object cfg_seen
    cdef object cap_count, cap_bytes
    #: the pipeline asks the groups' own consume switch (whose changes move ``groups.version``);
    #: otherwise the pipeline's ``consume_enabled`` is asked per pull and nothing is remembered
    cdef bint remember
    cdef int32_t success, not_found, offset_moved
    cdef object filter_units  # an int, boxed once (the lookup takes it per pull)
    cdef int32_t version
    # what stays the same from one pull to the next of a connection, kept in C so a pull
    # builds no key to look them up (each is the dict entry it stands for, checked by identity
    # of the names ``_Names`` hands out again):
    #: the last check/route verdict ``passed`` gave (None: none) and its key's parts
    cdef object last_topic, last_group, last_sub
    cdef tuple last_memo
    #: the last filter verdict by the request's (subscription, expression type) key
    cdef object f_sub, f_expr, f_codes
    cdef bint f_known, f_tag
    #: the last filter verdict by a heartbeat subscription (held: its identity is the key)
    cdef object h_sub, h_codes
    cdef bint h_tag
    # the pipeline's settings, fixed when it is built
    cdef Py_ssize_t max_frame_bytes
    cdef object consume_enabled
    #: the offset table lock's bound methods (commit in place)
    cdef object lock_acquire, lock_release

    def __init__(self, pipeline, names_pass, dict code_by_name, dict kinds, tuple codes, int64_t filter_units,
                 int32_t version):
        """``code_by_name``: store status name -> answer code; ``kinds``: answer code -> the pull
        counter's label; ``codes``: (SUCCESS, PULL_NOT_FOUND, PULL_OFFSET_MOVED)."""
        self.pipeline = pipeline
        pull = pipeline.pull
        self.pull, self.clients, self.stats, self.offsets = pull, pull.clients, pull.stats, pull.offsets
        store = pull.store
        self.reader, self.commitlog = store.reader, store.commitlog
        self.queue_map = <dict>store.queues.queues
        reader_class = getattr(store.k, "PullReader", None)
        self.reader_lookup = reader_class is not None
        self.lookup = reader_class(store.commitlog).lookup if self.reader_lookup else store.k.pull_lookup
        self.names_pass = names_pass
        self.code_by_name, self.kinds = code_by_name, kinds
        self.remarks = <dict>pipeline._remarks
        self.filters = <dict>pipeline._filters
        self.topics, self.groups, self.ensure = pull.topics, pull.groups, pull.groups.ensure
        self.consumers = <dict>pull.clients.consumers
        self.passed = {}
        self.names = _Names()
        self.passed_topics = self.passed_groups = None
        self.remember = pipeline.consume_enabled is None or pipeline.consume_enabled == pull.groups.consume_enabled
        self.filter_ = pipeline._filter
        self.commit_in_place, self.count_in_place = pipeline.in_place
        if self.commit_in_place:
            self.offsets_lock = self.offsets._lock
            self.lock_acquire, self.lock_release = self.offsets_lock.acquire, self.offsets_lock.release
        self.max_frame_bytes, self.consume_enabled = pipeline.max_frame_bytes, pipeline.consume_enabled
        if self.count_in_place:
            self.pull_requests, self.pulled = <dict>self.stats.pull_requests, <dict>self.stats.pulled
        self.success, self.not_found, self.offset_moved = codes
        self.filter_units = filter_units
        self.version = version

    cpdef tuple take(self, channel, object view, Py_ssize_t start, Py_ssize_t end):
        """``(stop, answers)``: the position after the pulls taken from the head of
        ``view[start:end]`` and their answers as a list of buffers (None when nothing was
        taken). Answers above 256 KiB are written on the way (as the Channel's cork does);
        taking stops once the channel stops reading (its peer is behind)."""
        cdef Py_buffer vb
        cdef const unsigned char *b
        cdef PullHeader h
        cdef int64_t n[9]
        cdef Py_ssize_t pos = start, nxt
        PyObject_GetBuffer(view, &vb, PyBUF_SIMPLE)
        try:
            if end > vb.len or start < 0 or start > end:
                raise ValueError(f"range {start}..{end} is outside a buffer of {vb.len} bytes")
            b = <const unsigned char *>vb.buf
            # --- read --- (parse_pulls, one frame at a time: no item tuples)
            nxt = _pull_frame(b, pos, end, self.max_frame_bytes, &h, n)
            if nxt < 0:
                return start, None
            return self._take(channel, b, start, end, nxt, &h, n)
        finally:
            PyBuffer_Release(&vb)

    cdef tuple _take(self, channel, const unsigned char *b, Py_ssize_t start, Py_ssize_t end, Py_ssize_t nxt,
                     PullHeader *h, int64_t *n):
        """``take`` with the buffer held and its first frame read (into ``h`` and ``n``)."""
        cdef object pull = self.pull, names_pass = self.names_pass
        cdef object consume_enabled = self.consume_enabled, filter_ = self.filter_, lookup = self.lookup
        cdef dict passed = self.passed, filters = self.filters
        cdef object topics_version = self.topics.version, groups_version = self.groups.version
        # (the same objects: unchanged, without a comparison)
        if (topics_version is not self.passed_topics or groups_version is not self.passed_groups) and \
                (topics_version != self.passed_topics or groups_version != self.passed_groups):
            passed.clear()
            self.last_memo = None
            self.passed_topics, self.passed_groups = topics_version, groups_version
        cdef object commitlog = self.commitlog
        cdef dict queue_map = self.queue_map, remarks = self.remarks
        cdef object cfg = self.reader.cfg
        if cfg is not self.cfg_seen:  # replaced as a whole by a store configuration update
            self.cap_count = cfg.max_transfer_count_on_message_in_memory
            self.cap_bytes = cfg.max_transfer_bytes_on_message_in_memory
            self.cfg_seen = cfg
        cdef object cap_count = self.cap_count, cap_bytes = self.cap_bytes
        cdef dict pull_requests = self.pull_requests, pulled = self.pulled, table
        cdef tuple memo
        cdef list answers = []
        cdef Py_ssize_t pos = start, nbytes = 0
        cdef tuple got
        cdef int sys_flag
        cdef int32_t code, queue_id
        cdef int64_t total, body_len, queue_offset
        cdef bint tag
        cdef bytes remark, prefix
        cdef _Names names = self.names
        while nxt >= 0:
            # the frame's fields (parse_pulls' item: opaque, group, topic, queue_id, queue_offset,
            # max_msg_nums, sys_flag, commit_offset, suspend_timeout_millis, subscription,
            # expression_type, frame_end)
            subscription = names.get(b, &h.ext[P_SUBSCRIPTION], 2) if h.seen_ext & (1 << P_SUBSCRIPTION) else None
            expression_type = names.get(b, &h.ext[P_EXPRESSION_TYPE], 3) \
                if h.seen_ext & (1 << P_EXPRESSION_TYPE) else None
            group = names.get(b, &h.ext[P_GROUP], 0)
            topic = names.get(b, &h.ext[P_TOPIC], 1)
            queue_id, queue_offset, sys_flag = <int32_t>n[P_QUEUE_ID], n[P_QUEUE_OFFSET], <int>n[P_SYS_FLAG]
            # --- check --- / --- route --- (validate.pull_names_pass, PullProcessor.route: any
            # refusal is the general path's to answer)
            sub_key = subscription if sys_flag & _PULL_SUBSCRIPTION else None
            memo = self.last_memo
            if memo is None or topic is not self.last_topic or group is not self.last_group \
                    or sub_key is not self.last_sub:
                key = (topic, group, sub_key)
                memo = passed.get(key)
                if memo is None:  # in the general path's order: the group is made (auto-creation) last
                    if not names_pass(topic, group, sys_flag, subscription, consume_enabled):
                        break
                    tc = self.topics.get(topic)
                    if tc is None or not (tc.perm & _PERM_READ):
                        break
                    queues = tc.read_queue_nums
                    if queue_id < 0 or queue_id >= queues or not self.ensure(group):
                        break
                    memo = (queues, self.offsets.key(group, topic) if self.commit_in_place else None, (group, topic))
                    if self.remember:
                        if len(passed) >= _MAX_PASSED:
                            passed.clear()
                        passed[key] = memo
                if self.remember:  # (else nothing is remembered: last_memo stays None)
                    self.last_topic, self.last_group, self.last_sub, self.last_memo = topic, group, sub_key, memo
            if queue_id < 0 or queue_id >= <Py_ssize_t>memo[0]:
                break
            # --- filter --- (PullPipeline._filter's remembered verdict, asked here; the method on a miss).
            # A request's own subscription is the verdict's key: the group's heartbeat
            # subscription is then read only on a miss (the method is given it as the general path is)
            if sys_flag & _PULL_SUBSCRIPTION:
                sub = None
                by_request = True
            else:
                g = self.consumers.get(group)
                sub = (<dict>g.subscriptions).get(topic) if g is not None else None
                by_request = sub is None
            if by_request and self.f_known and subscription is self.f_sub and expression_type is self.f_expr:
                tag, codes = self.f_tag, self.f_codes  # the last request key's verdict
            elif not by_request and sub is self.h_sub:
                tag, codes = self.h_tag, self.h_codes  # the last heartbeat subscription's verdict
            else:
                fkey = (subscription, expression_type) if by_request else id(sub)
                got = filters.get(fkey)
                if got is None or (got[0] is not sub and not by_request):
                    if sys_flag & _PULL_SUBSCRIPTION:
                        g = self.consumers.get(group)
                        sub = (<dict>g.subscriptions).get(topic) if g is not None else None
                    got = filter_(sys_flag, subscription, expression_type, sub)
                    tag, codes = got[0], got[1]
                else:
                    tag, codes = got[1], got[2]
                if by_request:
                    self.f_sub, self.f_expr, self.f_tag, self.f_codes, self.f_known = \
                        subscription, expression_type, tag, codes, True
                else:
                    self.h_sub, self.h_tag, self.h_codes = sub, tag, codes
            if not tag:
                break  # SQL92 (or its refusal): the general path's filter stage
            # --- lookup ---
            cq = queue_map.get((topic, queue_id))
            if cq is None:
                looked = None
            elif self.reader_lookup:
                looked = lookup(cq, queue_offset, n[P_MAX_MSG_NUMS], cap_count, cap_bytes, codes, self.filter_units)
            else:
                looked = lookup(cq, commitlog, queue_offset, n[P_MAX_MSG_NUMS], cap_count, cap_bytes, codes,
                                self.filter_units)
            if looked is None:  # no such queue, or a run not readable as one view: the store's reader
                result, code_obj = pull.lookup(topic, queue_id, queue_offset, n[P_MAX_MSG_NUMS], codes)
                name = result.status._name_
                code = code_obj
                got = (name, result.next_begin_offset, result.min_offset, result.max_offset, result.buffers,
                       result.message_count, result.buffer_total_size)
            else:
                got = <tuple>looked
                name = got[0]
                if name == _NO_MESSAGE_IN_QUEUE:  # PullProcessor.lookup's answer for an empty queue
                    code = self.offset_moved if queue_offset != 0 else self.not_found
                else:
                    code = self.code_by_name[name]
            if code == self.not_found and sys_flag & _PULL_SUSPEND and n[P_SUSPEND] > 0:
                break  # nothing yet: the general path parks it (long polling)
            # --- commit ---
            if sys_flag & _PULL_COMMIT and n[P_COMMIT_OFFSET] >= 0:
                if self.commit_in_place:  # ConsumerOffsetTable.commit
                    self.lock_acquire()
                    try:
                        table = <dict>self.offsets._table  # replaced as a whole when the file is loaded
                        queues_of = table.get(memo[1])
                        if queues_of is None:
                            queues_of = table[memo[1]] = {}
                        queues_of[queue_id] = n[P_COMMIT_OFFSET]
                    finally:
                        self.lock_release()
                else:
                    self.offsets.commit(group, topic, queue_id, n[P_COMMIT_OFFSET])
            total = got[6]
            kind = self.kinds.get(code, "other")
            if self.count_in_place:  # BrokerStats.on_pulled
                pull_requests[kind] = pull_requests.get(kind, 0) + 1
                if got[5]:
                    counters = pulled.get(memo[2])
                    if counters is None:
                        counters = pulled[memo[2]] = [0, 0]
                    (<list>counters)[0] += got[5]
                    (<list>counters)[1] += total
            else:
                self.stats.on_pulled(group, topic, kind, got[5], total)
            # --- answer ---
            remark = remarks.get(name)
            if remark is None:
                remark = remarks[name] = (<str>name).encode("ascii")
            body_len = total if code == self.success else 0
            prefix = _pull_answer(code, h.opaque, remark, got[1], got[2], got[3], body_len, self.version)
            answers.append(prefix)
            if body_len:
                answers.extend(<list>got[4])
            nbytes += len(prefix) + body_len
            pos = nxt
            if nbytes > _PULL_CORK_BYTES:
                channel._transport.writelines(answers)
                answers = []
                nbytes = 0
                if channel._read_paused or channel._closed:
                    break  # the peer is behind on its answers: the rest waits (memory bound per connection)
            nxt = _pull_frame(b, pos, end, self.max_frame_bytes, h, n)
        if pos == start:
            return start, None
        return pos, answers
