# The connection core of a broker with a send pipeline (included by _pipeline.pyx).
#
# ``ChannelCore`` is the C base of the remoting Channel a broker's server creates when the
# compiled kernels are in use (``SendPipeline.channel_class``): the event loop calls its
# ``get_buffer``/``buffer_updated`` without a Python frame, and when every frame of a receive
# buffer is a plain send the pipeline takes (the usual case of a client with one request in
# flight) ``SendCore.take`` runs the pipeline's stages - read, route, store, answer - and the
# answers leave in one ``transport.write``, all without the Channel's Python methods. Anything
# else - a frame the pipeline does not take, a partial or large frame, a paused or closed
# channel, a re-entrant call - goes to the Channel's Python methods exactly as before, so the
# pure-Python Channel (with the twin kernels) stays the reference: SendPipeline.__call__ and
# this file run the same stages, and tests/broker/test_send_pipeline.py compares the answers
# and store files of both against the general path.

import logging as _logging
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC, CLOCK_REALTIME

cdef object _chan_log = _logging.getLogger("mqcore.remoting.channel")
cdef str _RETRY_PREFIX = "%RETRY%"
cdef int _PERM_WRITE = 2
cdef Py_ssize_t _MAX_ROUTES = 4096
cdef Py_ssize_t _STOP_AT = 11  # item field: the position after the frame


# Each Python call the core makes per request costs more than its work once the code is cold
# (after a wake-up), so the small steps below are the shell's own, compiled: each says which
# Python method it stands for, and the tests compare the files and answers byte for byte.

cdef inline double _monotonic_s() noexcept:
    """time.perf_counter (CLOCK_MONOTONIC on Linux), for the put latency histogram."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef extern from "<time.h>" nogil:
    enum: CLOCK_MONOTONIC_COARSE


cdef inline double _activity_time_s() noexcept:
    """The loop's time() for a connection's activity stamps: CLOCK_MONOTONIC (the clock of
    asyncio's and uvloop's loop.time()) at the kernel's tick (a few ms, as fine as an idle or
    slow-frame verdict needs; read without the clock source: a quarter of the cost)."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline int64_t _realtime_ms() noexcept:
    """mqcore.clock.system_clock_ms (time.time_ns() // 1_000_000)."""
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline void _observe(object histogram, double value) except *:
    """histogram.observe(value): in C on the compiled Histogram's buckets (_broker_state.pxi)."""
    if type(histogram) is Histogram:
        (<Histogram>histogram).add(value)
    else:
        histogram.observe(value)


# The store's objects on their C bases (mqcore/store/hot_state.py): StorePlainSends reads what
# a put reads of them as struct fields (the store built on the twin kernels takes the writer's
# Python body instead).
from mqcore._store cimport (MappedFileCore, MappedFileQueueCore, ConsumeQueueCore, MessageWriterCore, DispatcherCore,
                            IndexServiceCore, IndexFileCore)


# Each object is checked to be on its base before it is read as one; the store's own classes
# (``cls``: the exact class the store makes them of) pass with one pointer comparison, without
# the walk over the class's bases a checked cast makes (a cold type object after a wake-up).
cdef inline MappedFileCore _as_file(object o, type cls):
    return <MappedFileCore>o if type(o) is cls else <MappedFileCore?>o


cdef type _on_base(object cls, type base):
    return cls if isinstance(cls, type) and issubclass(cls, base) else None


cdef inline MappedFileCore _last_reserved(MappedFileQueueCore queue, type file_class):
    """MappedFileQueue.last when its blocks are reserved, else None (CommitLog.last_locked)."""
    cdef list files = queue.files
    if not files:
        return None
    cdef MappedFileCore mf = _as_file(files[len(files) - 1], file_class)
    return mf if mf.reserved else None


cdef inline MappedFileCore _last_unit_file(MappedFileQueueCore queue, type file_class):
    """The last consume-queue file when the unit at its write position is reserved (a
    consume queue's blocks are reserved in steps ahead of it), else None."""
    cdef list files = queue.files
    if not files:
        return None
    cdef MappedFileCore mf = _as_file(files[len(files) - 1], file_class)
    return mf if mf.reserved_end - mf.wrote_position >= CQ_UNIT_SIZE else None


cdef inline MappedFileCore _index_target(IndexServiceCore index, type index_file_class, type file_class):
    """The file of IndexService.target_locked(), or None (its slots and entries are the
    service's, fixed)."""
    if index is None:
        return None
    cdef list files = index.files
    if not files:
        return None
    f = files[len(files) - 1]
    cdef IndexFileCore ixf = <IndexFileCore>f if type(f) is index_file_class else <IndexFileCore?>f
    cdef MappedFileCore mf = _as_file(ixf.mf, file_class)
    return mf if mf.reserved else None


cdef inline void _units_arrived(object dispatcher, list listeners, object topic, int32_t queue_id,
                                int64_t max_offset, int64_t store_ts) except *:
    """Dispatcher.unit_written_locked(topic, queue_id, max_offset, store_ts) (``listeners``:
    the dispatcher's list, which listeners are added to in place)."""
    dispatcher.last_store_timestamp = store_ts
    for listener in listeners:
        if type(listener) is ArrivalGate and (<ArrivalGate>listener).waiting <= 0:
            continue  # no pull parked (the usual case): the gate's call would return at once
        listener(topic, queue_id, max_offset)


# --- plain ACL in the fast path (aclEnable; mqcore/acl/fast.py says what may be cached) ---
cdef Py_ssize_t _ACL_CACHE_MAX = 1024  # hosts, accounts, topics remembered at most (then forgotten)


cdef extern from "_sha1.h" nogil:
    void mq_hmac_sha1_key(const unsigned char *key, size_t klen, uint32_t *inner, uint32_t *outer)
    void mq_hmac_sha1(const uint32_t *inner, const uint32_t *outer, const unsigned char *a, size_t alen,
                      const unsigned char *b, size_t blen, unsigned char *out)
    void mq_b64_digest20(const unsigned char *d, char *out)

# bodies up to this size are signed-checked by _sha1.h's HMAC (no Python call); longer ones
# by OpenSSL's, whose SHA-1 runs on the CPU's SHA extensions (faster once the hashing dominates)
cdef Py_ssize_t _SHORT_SIGNED = 2048


def hmac_sha1(bytes key, bytes a, bytes b):
    """HMAC-SHA1(key, a + b) by _sha1.h, as SendAcl computes it (the tests compare it with
    Python's hmac; the twin has none: only the core checks signatures in C)."""
    cdef uint32_t inner[5]
    cdef uint32_t outer[5]
    cdef unsigned char d[20]
    mq_hmac_sha1_key(<const unsigned char *>PyBytes_AS_STRING(key), len(key), inner, outer)
    mq_hmac_sha1(inner, outer, <const unsigned char *>PyBytes_AS_STRING(a), len(a),
                 <const unsigned char *>PyBytes_AS_STRING(b), len(b), d)
    return PyBytes_FromStringAndSize(<const char *>d, 20)


cdef bint _b64_digest_is(const unsigned char *d, bytes given):
    """Is ``given`` Base64(``d``'s 20 bytes, an HMAC-SHA1: 28 characters)? Compared in time
    independent of where they differ, as the validator's hmac.compare_digest."""
    cdef const unsigned char *g = <const unsigned char *>PyBytes_AS_STRING(given)
    cdef char e[28]
    cdef Py_ssize_t i
    cdef unsigned char diff = 0
    if len(given) != 28:
        return False
    mq_b64_digest20(d, e)
    for i in range(28):
        diff |= <unsigned char>e[i] ^ g[i]
    return diff == 0


cdef class _AclAccount:
    """One account's file-derived answers (SendAcl keeps them per plain_acl.yml version)."""
    cdef object account, mac
    cdef dict white, topics  # host -> own white address matches; topic -> may send
    cdef uint32_t inner[5]  # the secret's HMAC-SHA1 states (_sha1.h)
    cdef uint32_t outer[5]


cdef class SendAcl:
    """Plain ACL's check of a signed plain send, in the validator's order (validator.py):
    a globally white host, the account, its white address, the signature (verified for each
    request: it covers the header and the body), the topic's permission. What depends only
    on the file, the host, the access key and the topic is remembered until ``source()``
    gives another config (a reload replaces it as a whole). ``allowed`` counts only the
    requests the ACL hook lets through; the rest go to the general path, whose hook
    answers the refusal."""
    cdef object decisions, source, cfg_seen
    cdef dict white, accounts  # host -> globally white; access key -> _AclAccount

    def __init__(self, decisions):
        self.decisions = decisions  # mqcore.acl.fast.SendAclDecisions
        self.source = decisions.source
        self.white, self.accounts = {}, {}

    cdef _AclAccount _account(self, object cfg, object access_key):
        """The account's remembered answers, or None for a key the file does not know."""
        cdef _AclAccount acc = self.accounts.get(access_key)
        if acc is not None:
            return acc
        found = self.decisions.account(cfg, access_key)
        if found is None:
            return None  # (not remembered: a stream of bad keys must not fill the cache)
        if len(self.accounts) >= _ACL_CACHE_MAX:
            self.accounts.clear()
        acc = _AclAccount()
        acc.account, acc.mac = found
        acc.white, acc.topics = {}, {}
        key = (<str>acc.account.secret_key).encode("utf-8")
        mq_hmac_sha1_key(<const unsigned char *>PyBytes_AS_STRING(key), len(key), acc.inner, acc.outer)
        self.accounts[access_key] = acc
        return acc

    cdef Py_ssize_t allowed(self, object host, list items) except -1:
        """How many of ``items`` (signed plain sends from ``host``), from the first, the ACL
        hook lets through. The config, the host's and an account's answers are looked up once
        per run of items that share them."""
        cdef object cfg = self.source()
        if cfg is not self.cfg_seen:
            self.white, self.accounts = {}, {}
            self.cfg_seen = cfg
        w = self.white.get(host)
        if w is None:
            if len(self.white) >= _ACL_CACHE_MAX:
                self.white.clear()
            w = self.white[host] = bool(self.decisions.host_white(cfg, host))
        cdef Py_ssize_t i, n = len(items)
        if w:
            return n
        cdef _AclAccount acc = None
        cdef object last_key = None, last_topic = None, access_key, topic, given, ok = False
        cdef bint account_white = False
        cdef tuple item
        cdef bytes content, body, digest
        cdef unsigned char d[20]
        for i in range(n):
            item = <tuple>items[i]
            access_key = item[12]
            if access_key is None:
                return i
            if acc is None or (access_key is not last_key and access_key != last_key):
                acc = self._account(cfg, access_key)
                if acc is None:
                    return i
                w = acc.white.get(host)
                if w is None:
                    if len(acc.white) >= _ACL_CACHE_MAX:
                        acc.white.clear()
                    w = acc.white[host] = bool(self.decisions.account_white(acc.account, host))
                account_white = w
                last_key, last_topic = access_key, None
            if account_white:
                continue  # the account's own white address: no signature needed (RocketMQ's rule)
            given = item[13]
            if given is None:
                return i
            content, body = <bytes>item[14], <bytes>item[10]
            if len(body) <= _SHORT_SIGNED:
                mq_hmac_sha1(acc.inner, acc.outer, <const unsigned char *>PyBytes_AS_STRING(content), len(content),
                             <const unsigned char *>PyBytes_AS_STRING(body), len(body), d)
                if not _b64_digest_is(d, <bytes>given):
                    return i
            else:
                mac = acc.mac.copy()
                mac.update(content)
                mac.update(body)  # OpenSSL's update: at hash speed, without the GIL
                digest = mac.digest()
                if len(digest) != 20 or not _b64_digest_is(<const unsigned char *>PyBytes_AS_STRING(digest),
                                                           <bytes>given):
                    return i
            topic = item[1]
            if last_topic is None or (topic is not last_topic and topic != last_topic):
                ok = acc.topics.get(topic)
                if ok is None:
                    if len(acc.topics) >= _ACL_CACHE_MAX:
                        acc.topics.clear()
                    ok = acc.topics[topic] = bool(self.decisions.may_send(acc.account, topic))
                last_topic = topic
            if not ok:
                return i
        return n


cdef class SendCore:
    """The send pipeline's common case in C for one receive buffer; state stays on the
    Python ``SendPipeline`` (configuration-derived parts, remembered routes), read here."""
    cdef readonly object pipeline
    cdef object peer_host
    cdef object not_allowed
    cdef int version
    # the broker's parts that never change (the configuration is read per buffer)
    cdef object send, store, topics, stats
    cdef dict routes
    cdef dict put_counts  # stats.put (BrokerStats' field, never replaced)
    # what take reads from the configuration and the pipeline, kept while ``send.cfg`` is the
    # same object (a run-time change replaces it as a whole): one identity test per buffer
    # instead of the configuration's and the pipeline's attributes
    cdef object cfg_seen, parts, cluster
    cdef bint writable, indexed, pool_free
    # send.store_host(): the broker's address, fixed once it listens (asked again while empty
    # and after a configuration change) - a Python call per buffer otherwise
    cdef bytes store_host
    cdef Py_ssize_t max_frame_bytes
    cdef object routes_version  # topics.version the shared routes were last cleared for, as seen here
    cdef object host_key  # the store host the answer's hex was made for (SendPipeline._hex)
    cdef bytes host_hex
    cdef _Names names  # the topic of the last send read, as str (kept with its hash)
    cdef SendAcl acl  # aclEnable: each send's check (None: no ACL)

    def __init__(self, pipeline, peer_host, not_allowed, int version, acl=None):
        self.pipeline = pipeline
        self.send = pipeline.send
        self.store, self.topics, self.stats = self.send.store, self.send.topics, self.send.stats
        self.routes = <dict>pipeline._routes
        self.put_counts = <dict>self.stats.put
        self.peer_host = peer_host
        self.not_allowed = not_allowed
        self.version = version
        self.routes_version = -1
        self.names = _Names()
        self.acl = None if acl is None else SendAcl(acl)

    cpdef tuple take(self, channel, object view, Py_ssize_t start, Py_ssize_t end):
        """``(stop, answers)``: the position after the plain sends taken from the head of
        ``view[start:end]`` and their answer frames (None when nothing was taken)."""
        cdef object p = self.pipeline
        cdef object send = self.send
        cdef object cfg = send.cfg
        if cfg is not self.cfg_seen:
            if cfg is not p._cfg:  # replaced as a whole by a run-time configuration change
                p.configure(cfg)
            self.parts, self.cluster = p._answer_parts, p._cluster
            self.writable = (cfg.broker_permission & _PERM_WRITE) != 0
            self.max_frame_bytes = p.max_frame_bytes
            self.indexed = self.store.index is not None
            # SYNC_FLUSH (the pool) or SYNC_MASTER (a slave's ack) answer later: the general path
            self.pool_free = send.pool is None and send.replica is None
            self.store_host = None
            self.cfg_seen = cfg
        cdef object parts = self.parts
        cdef object cluster = self.cluster
        # SYNC_FLUSH (waits in the pool), a read-only broker, a region or cluster name the
        # kernels do not write: the general path
        if not self.pool_free or not self.writable or parts is None or cluster is None:
            return start, None
        cdef object store = self.store
        # --- read ---
        cdef SendAcl acl = self.acl
        cdef tuple item
        cdef list items = _parse_plain(view, start, end, self.max_frame_bytes, cluster, self.indexed, self.names,
                                       acl is not None)
        if not items:
            return start, None
        cdef Py_ssize_t allowed = 0
        if acl is not None:  # --- ACL --- (what the hook would refuse: the general path answers)
            if isinstance(channel, ChannelCore):  # the peer's host, read once per connection
                host = (<ChannelCore>channel)._remote_host
                if host is None:
                    host = (<ChannelCore>channel)._remote_host = channel.remote_host
            else:
                host = channel.remote_host
            allowed = acl.allowed(host, items)
            if not allowed:
                return start, None
            if allowed < len(items):
                del items[allowed:]
        # --- route ---
        cdef object topics = self.topics
        cdef dict routes = self.routes
        cdef object version = topics.version
        if version is not self.routes_version and version != self.routes_version:  # (same object: unchanged)
            # the routes are shared with SendPipeline.__call__: whichever sees a new version
            # first clears them (twice is harmless: they are only remembered checks)
            if version != p._routes_version:
                routes.clear()
                p._routes_version = version
            self.routes_version = version
        cdef Py_ssize_t routed = 0, n = len(items)
        cdef object queues, tc
        cdef str topic
        for item in items:
            topic = <str>item[1]
            queues = routes.get(topic)
            if queues is None:
                tc = topics.get(topic)
                if tc is None or not (tc.perm & _PERM_WRITE) or topic.startswith(_RETRY_PREFIX) \
                        or topic in self.not_allowed:
                    break  # auto-creation, retry/DLQ, refusals: the general path's stages
                if len(routes) >= _MAX_ROUTES:
                    routes.clear()
                queues = max(tc.read_queue_nums, tc.write_queue_nums)
                routes[topic] = queues
            if item[2] >= queues:
                break  # the general path answers the queue id
            routed += 1
        if not routed:
            return start, None
        if routed < n:
            del items[routed:]
        # --- store ---
        cdef object store_host = self.store_host
        if store_host is None:
            store_host = send.store_host()
            if store_host:
                self.store_host = store_host
        cdef object stats = self.stats
        cdef double t0 = _monotonic_s()
        if isinstance(channel, ChannelCore):  # the peer's address, parsed once per connection
            born_host = (<ChannelCore>channel)._born_host
            if born_host is None:
                born_host = (<ChannelCore>channel)._born_host = self.peer_host(channel)
        else:
            born_host = self.peer_host(channel)
        putter = store.put_plain_sends  # the writer's StorePlainSends (tests wrap it)
        cdef list stored
        if type(putter) is StorePlainSends:
            stored, _refusal = (<StorePlainSends>putter).put(items, born_host, store_host)
        else:
            stored, _refusal = putter(items, born_host, store_host)
        if not stored:
            return start, None  # the general path answers the refusal of the first one
        _observe(stats.put_latency, _monotonic_s() - t0)
        # --- answer --- (counters per run of a topic)
        cdef dict put_counts = self.put_counts
        cdef list done = <list>stored
        cdef Py_ssize_t i, taken = len(done), run_count = 0, run_bytes = 0
        cdef str run_topic = <str>(<tuple>items[0])[1]
        for i in range(taken):
            item = <tuple>items[i]
            if <str>item[1] != run_topic:
                _count_puts(stats, put_counts, run_topic, run_count, run_bytes)
                run_topic, run_count, run_bytes = <str>item[1], 0, 0
            run_count += 1
            run_bytes += <Py_ssize_t>(<tuple>done[i])[2]
        _count_puts(stats, put_counts, run_topic, run_count, run_bytes)
        if store_host is not self.host_key:
            self.host_hex, self.host_key = p._hex(store_host), store_host
        answers = _send_answers(parts[0], parts[1], self.host_hex, items, done, self.version)
        return (<tuple>items[taken - 1])[_STOP_AT], answers


cdef inline void _count_puts(object stats, dict put_counts, str topic, Py_ssize_t count, Py_ssize_t size) except *:
    """BrokerStats.on_put_many, its usual case (the topic's counters exist) in place."""
    c = put_counts.get(topic)
    if c is None:
        stats.on_put_many(topic, count, size)
        return
    c[0] += count
    c[1] += size


cdef list _parse_plain(object view, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_frame_bytes, bytes cluster,
                       bint indexed, _Names names, bint signed=False):
    """parse_plain_sends(...)[0], without the Python call (and the last topic's str given again)."""
    cdef Py_buffer b
    cdef Py_ssize_t stop
    PyObject_GetBuffer(view, &b, PyBUF_SIMPLE)
    try:
        if end > b.len or start < 0 or start > end:
            raise ValueError(f"range {start}..{end} is outside a buffer of {b.len} bytes")
        return _parse(<const unsigned char *>b.buf, start, end, max_frame_bytes,
                      <const unsigned char *>PyBytes_AS_STRING(cluster), len(cluster), indexed, names, &stop,
                      signed)
    finally:
        PyBuffer_Release(&b)


cdef class ChannelCore:
    """C base of a server Channel (see the top of this file). The attributes are the
    Channel's own (its Python methods use them as before); a subclass also derives from
    the Python Channel and names its ``buffer_updated`` as ``_buffer_updated_py``. Its
    receiver is a FrameReceiver on ``ReceiverCore`` (``_receiver_core``, which the Channel
    builds it on), held typed: the ring's fields are read here as struct fields."""
    cdef public ReceiverCore _receiver
    cdef public object _frames, _transport, _loop, _cork
    cdef public set _read_paused  # the reasons reading is paused (empty: reading)
    cdef public object _partial_since
    # the loop's time of the last traffic (a C double: no float object per receive buffer)
    cdef public double last_activity
    # the loop's time() is CLOCK_MONOTONIC in seconds (Channel.__init__: asyncio's and uvloop's
    # loops): read here in C, without calling loop.time() per receive buffer
    cdef public bint _monotonic_loop
    cdef object _born_host  # the record's BORNHOST of this peer (SendCore.take)
    cdef object _remote_host  # Channel.remote_host, read once (SendCore.take's ACL check)
    cdef object _core, _pull_core, _core_of  # the frames processor's ``core``/``pull_core`` (fixed when it is built), and that processor
    # the transport's bound write and writelines, and that transport: a bound method is called
    # without looking the method up on the transport's type per receive buffer
    cdef object _write, _writelines, _write_of
    cdef public Py_ssize_t _rx_bytes, _partial_rx, _cork_bytes
    cdef public bint _closed, _in_frames

    #: the C base of this channel's FrameReceiver (Channel.__init__ reads it)
    _receiver_core = ReceiverCore

    def get_buffer(self, Py_ssize_t sizehint):
        cdef ReceiverCore receiver = self._receiver
        cdef Py_ssize_t size = _ring_size(receiver)
        # FrameReceiver.get_buffer's usual case: the ring exists, holds nothing and need not
        # grow - all of it is offered (the same view, no slice)
        if receiver._end == 0 and size and not receiver._grow and receiver._big_view is None:
            receiver._offered = size
            return receiver._ring_view
        return receiver.get_buffer()

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef object frames = self._frames
        cdef object core = None, pull_core = None
        if frames is not None and not self._in_frames and not self._closed and not self._read_paused:
            if frames is not self._core_of:  # the frames processor's cores, read once per processor
                self._core = getattr(frames, "core", None)
                self._pull_core = getattr(frames, "pull_core", None)  # PullCore (_pipeline_pull.pxi)
                self._core_of = frames
            core, pull_core = self._core, self._pull_core
        if core is None and pull_core is None:
            self._buffer_updated_py(nbytes)
            return
        cdef ReceiverCore receiver = self._receiver
        if receiver._big_view is not None:  # a large frame under way: the Channel's own
            self._buffer_updated_py(nbytes)
            return
        cdef Py_ssize_t start = receiver._start, end = receiver._end + nbytes, stop
        # FrameReceiver.received and complete_frames, for the ring
        receiver._end = end
        if nbytes >= receiver._offered and 2 * nbytes >= _ring_size(receiver):
            receiver._grow = True
        self._rx_bytes += nbytes
        cdef double now = _activity_time_s() if self._monotonic_loop else self._loop.time()
        self.last_activity = now
        if end - start < 8:  # not even a frame's length and header word
            self._process_frames()
        else:
            view = receiver._ring_view
            self._in_frames = True
            try:
                # by the first frame's request code: its pipeline's core (answers: a list of
                # buffers from the pull core, one bytes object from the send core)
                if pull_core is not None and _first_is_pull(view, start, end):
                    stop, answers = (<PullCore?>pull_core).take(self, view, start, end)
                elif core is not None:
                    stop, answers = (<SendCore?>core).take(self, view, start, end)
                else:
                    stop, answers = start, None
            except Exception:  # a bug must not kill the server (as _process_frames does)
                self._in_frames = False
                _chan_log.exception("closing %s after an unexpected error while reading", self)
                self.close("internal error")
                return
            self._in_frames = False
            if stop == end:  # everything received was taken (the usual case): one write
                receiver._start = receiver._end = 0  # FrameReceiver.consumed
                transport = self._transport
                if answers is not None and not self._closed and transport is not None:
                    if transport is not self._write_of:  # the transport's methods, bound once
                        self._write, self._writelines = transport.write, transport.writelines
                        self._write_of = transport
                    if type(answers) is list:
                        self._writelines(answers)
                    else:
                        self._write(answers)
                self._partial_since = None
                return
            if stop != start:
                receiver.consumed(stop)
            self._process_frames(answers)  # the rest the usual way, after these answers
        # the Channel's bookkeeping of a partial frame (Channel.buffer_updated)
        if self._read_paused:
            self._partial_since = None
            return
        cdef Py_ssize_t buffered = receiver._end - receiver._start + receiver._big_filled  # buffered_bytes
        if not buffered:
            self._partial_since = None
        elif self._partial_since is None:
            self._partial_since = now
            self._partial_rx = self._rx_bytes - buffered


cdef bint _put_pending(StorePlainSends sps, MappedFileCore mf, tuple item, bytes topic_b, int32_t queue_id,
                       int64_t queue_offset, int64_t sys_flag, bytes born_host, bytes store_host, Py_ssize_t limit,
                       object ix_buf, Py_ssize_t index_slots, Py_ssize_t index_entries, list pending, int64_t *phy_out,
                       Py_ssize_t *size_out, bint *indexed) except -1:
    """MessageWriter._put_plain_locked for a record whose queue is pending (the unit is kept,
    not written: ConsumeQueue.put_one_locked's pending case; no arrival until the file is
    made, as Dispatcher.dispatch_unit_locked tells none): False when the record does not fit
    in the last commitlog file (the general steps roll it)."""
    cdef Py_ssize_t pos = mf.wrote_position
    cdef int64_t phy = mf.file_from_offset + pos
    cdef int64_t store_ts = _realtime_ms() if sps.system_clock else sps.clock()
    indexed[0] = False
    cdef Py_ssize_t size = _append_plain(
        mf.buf, pos, limit, phy, topic_b, queue_id, item[5], queue_offset, sys_flag, item[4], born_host, store_ts,
        store_host, item[6], <bytes>item[10], item[7], sps.unit_scratch, 0, item[8], ix_buf, index_slots,
        index_entries, item[9], indexed)
    if not size:
        return False
    mf.wrote_position = pos + size  # commitlog.commit_locked
    sps.w.last_store_timestamp = store_ts
    pending.append((queue_offset, phy, size, item[8]))  # ConsumeQueue.put_one_locked (pending)
    sps.d.last_store_timestamp = store_ts  # Dispatcher.dispatch_unit_locked
    phy_out[0], size_out[0] = phy, size
    return True


cdef class StorePlainSends:
    """``MessageWriter.put_plain_sends`` compiled (the writer calls ``StorePlainSends(self)`` and
    binds the result in place of its Python body, which the twin kernels keep running): the
    same steps in the same order under one hold of the put lock, so the files are the same
    byte for byte. The store's parts that never change (commitlog and its file queue,
    dispatcher and its listener list, queue map, offsets, lock, clock, index and its
    geometry) are held here, and the small steps the Python body calls methods for (the
    last file, the next consume-queue unit, the index target, the clock, the arrival
    listeners) are done in place by the helpers at the top of this file. What moves per put
    - the writer's refusals and configuration, the files' positions and buffers, the consume
    queue's offsets - is read and written as the C fields of the store's objects
    (``MessageWriterCore``, ``MappedFileCore``, ...: mqcore/store/hot_state.py); a store not
    built on them (the twin kernels) gets the writer's Python body. The refusals every put
    gets are read as two fields first (``refuse_reason``, ``disk_full_reason``): when either
    is set the writer's Python body decides, as it does for everything else rare - a file
    roll, a queue's first unit, a full index file (``_put_plain_general_locked``)."""
    cdef object writer, commitlog, dispatcher, clock, queues
    cdef object acquire, release  # the put lock's methods, bound once
    cdef MessageWriterCore w  # the writer on its C base; None: the Python body puts
    cdef DispatcherCore d
    cdef MappedFileQueueCore commitlog_files
    cdef IndexServiceCore index
    # the topic last put and its UTF-8, and the (topic, queue id) key last looked up (most
    # puts are to the queue before): no str, bytes or tuple made for them per put
    cdef str topic_seen
    cdef bytes topic_b_seen
    cdef tuple key_seen
    # the exact classes of the store's files, consume queues, their file queues and index files
    cdef type file_class, queue_class, file_queue_class, index_file_class
    cdef Py_ssize_t index_slots, index_entries  # fixed when the store is built
    cdef list listeners
    cdef dict queue_map, offsets
    cdef Py_ssize_t v6_bytes, limit
    cdef int64_t born_v6, store_v6
    cdef bint system_clock  # the clock is mqcore.clock.system_clock_ms: read it in C
    cdef object cfg_seen  # the writer's configuration max_body was read from
    cdef Py_ssize_t max_body
    # where append_plain writes the unit of a record to a pending queue (no file yet: its
    # unit waits in ConsumeQueue.pending_units, as put_one_locked keeps it)
    cdef bytearray unit_scratch

    def __init__(self, writer):
        self.writer = writer
        self.commitlog, self.dispatcher, self.clock = writer.commitlog, writer.dispatcher, writer.clock
        self.queues = self.dispatcher.queues
        self.queue_map = <dict>self.queues.queues
        self.offsets = <dict>writer.queue_offsets
        index = self.dispatcher.index
        cl_files = self.commitlog.queue
        if isinstance(writer, MessageWriterCore) and isinstance(self.dispatcher, DispatcherCore) \
                and isinstance(cl_files, MappedFileQueueCore) and (index is None or isinstance(index, IndexServiceCore)):
            self.w, self.d, self.commitlog_files, self.index = writer, self.dispatcher, cl_files, index
            # each only when it is on its base (else None: every object takes the checked cast)
            self.file_class = _on_base(getattr(cl_files, "file_class", None), MappedFileCore)
            self.file_queue_class = type(cl_files)
            self.queue_class = _on_base(getattr(self.queues, "_queue_class", None), ConsumeQueueCore)
            self.index_file_class = _on_base(getattr(index, "_index_file_class", None), IndexFileCore)
        self.listeners = self.dispatcher.listeners
        if index is not None:
            self.index_slots, self.index_entries = index.slots, index.entries
        self.acquire, self.release = writer.lock.acquire, writer.lock.release
        cdef Py_ssize_t min_blank
        self.v6_bytes, self.born_v6, self.store_v6, min_blank = writer.plain_consts
        self.limit = self.commitlog.file_size - min_blank
        from mqcore.clock import system_clock_ms
        self.system_clock = self.clock is system_clock_ms
        self.unit_scratch = bytearray(CQ_UNIT_SIZE)

    def __call__(self, list items, bytes born_host, bytes store_host):
        return self.put(items, born_host, store_host)

    cdef tuple put(self, list items, bytes born_host, bytes store_host):
        cdef MessageWriterCore w = self.w
        if w is None:  # the store's objects are the twin's
            return self.writer.put_plain_sends_py(items, born_host, store_host)
        cdef object writer = self.writer
        cdef list stored = []
        if w.wait_flushed is not None or not items:
            return stored, None
        if w.refuse_reason or w.disk_full_reason is not None:
            return writer.put_plain_sends_py(items, born_host, store_host)
        cdef int64_t host_mask = self.born_v6 | self.store_v6, host_flag = 0
        if len(born_host) == self.v6_bytes:
            host_flag |= self.born_v6
        if len(store_host) == self.v6_bytes:
            host_flag |= self.store_v6
        cfg = w.cfg
        if cfg is not self.cfg_seen:  # replaced as a whole by a store configuration update
            self.max_body, self.cfg_seen = cfg.max_message_size_bytes, cfg
        cdef Py_ssize_t max_body = self.max_body, limit = self.limit
        dispatcher, clock, queues = self.dispatcher, self.clock, self.queues
        cdef IndexServiceCore index = self.index
        cdef dict queue_map = self.queue_map, offsets = self.offsets
        cdef tuple item
        cdef object key = None, cq = None, topic_b = b"", topic, ix_buf = None
        cdef ConsumeQueueCore cqc = None
        cdef MappedFileQueueCore cq_files_c = None
        # the queue's ConsumeQueue.pending_units while it waits for its first file (else None)
        cdef object pending = None
        cdef bint plain_dispatch
        cdef type file_class
        cdef MappedFileCore mf, unit_mf, ix_mf
        cdef MappedFileQueueCore commitlog_files = self.commitlog_files
        cdef Py_ssize_t index_slots = self.index_slots, index_entries = self.index_entries
        cdef list listeners = self.listeners
        # the queue whose units arrived last and are not told yet (arrived_topic None: none)
        cdef object arrived_topic = None
        cdef int32_t arrived_queue = 0
        cdef int64_t arrived_max = 0, arrived_ts = 0
        cdef Py_ssize_t size, pos, upos = 0
        cdef bint indexed = False
        cdef bint system_clock = self.system_clock
        cdef int64_t queue_offset, phy, store_ts, sys_flag
        cdef int32_t queue_id
        cdef bytes body
        cdef object release = self.release
        self.acquire()
        try:
            if w.refuse_reason or w.disk_full_reason is not None:
                release()
                release = None
                return writer.put_plain_sends_py(items, born_host, store_host)
            plain_dispatch = self.d.no_new_queues_below <= 0
            file_class = self.file_class
            # the commitlog file and index file appends go to; fetched again after the general
            # steps (which may roll either)
            mf = _last_reserved(commitlog_files, file_class) if plain_dispatch else None
            ix_mf = _index_target(index, self.index_file_class, file_class)
            ix_buf = ix_mf.buf if ix_mf is not None else None
            try:
                for item in items:
                    topic, queue_id, body = item[1], item[2], item[10]
                    if len(body) > max_body:
                        break  # the general path answers the refusal
                    if key is None or queue_id != (<tuple>key)[1] or topic != (<tuple>key)[0]:
                        key = self.key_seen  # the queue of the last put's last item (an equal key)
                        if key is None or queue_id != (<tuple>key)[1] or topic != (<tuple>key)[0]:
                            key = self.key_seen = (topic, queue_id)
                        if topic != self.topic_seen:
                            self.topic_b_seen, self.topic_seen = (<str>topic).encode(), topic
                        topic_b = self.topic_b_seen
                        cq = queue_map.get(key)  # ConsumeQueues.find_or_create, once the queue exists
                        pending = None
                        if cq is None:
                            cq = queues.find_or_create(topic, queue_id)
                            pending = cq.pending_units  # (a queue not in the map: pending, or made inline)
                        cqc = <ConsumeQueueCore>cq if type(cq) is self.queue_class else <ConsumeQueueCore?>cq
                        cq_files = cqc.queue
                        cq_files_c = <MappedFileQueueCore>cq_files if type(cq_files) is self.file_queue_class \
                            else <MappedFileQueueCore?>cq_files
                    sys_flag = (<int64_t>item[3] & ~host_mask) | host_flag
                    queue_offset = offsets.get(key, 0)
                    # ConsumeQueue.next_unit_locked: the unit goes at the end of the last file
                    unit_mf = _last_unit_file(cq_files_c, file_class) if mf is not None else None
                    if unit_mf is not None:
                        upos = unit_mf.wrote_position
                        if unit_mf.file_from_offset + upos != queue_offset * CQ_UNIT_SIZE:
                            unit_mf = None
                    size = 0
                    if unit_mf is not None:
                        pos = mf.wrote_position
                        phy = mf.file_from_offset + pos
                        store_ts = _realtime_ms() if system_clock else clock()
                        if phy >= cqc.max_physic_offset:  # a fresh record: put_one_locked would write its unit
                            indexed = False
                            size = _append_plain(
                                mf.buf, pos, limit, phy, topic_b, queue_id, item[5], queue_offset, sys_flag,
                                item[4], born_host, store_ts, store_host, item[6], body, item[7], unit_mf.buf,
                                upos, item[8], ix_buf, index_slots if ix_mf is not None else 0,
                                index_entries if ix_mf is not None else 0, item[9], &indexed)
                    if size:
                        mf.wrote_position = pos + size  # commitlog.commit_locked
                        unit_mf.wrote_position = upos + CQ_UNIT_SIZE  # ConsumeQueue.unit_written_locked
                        cqc.max_physic_offset = phy + size
                        offsets[key] = queue_offset + 1
                        w.last_store_timestamp = store_ts
                        if not indexed:
                            dispatcher.index_keys_locked(item[9], phy, store_ts)
                            ix_mf = _index_target(index, self.index_file_class, file_class)
                            ix_buf = ix_mf.buf if ix_mf is not None else None
                        if arrived_topic is not None and (arrived_topic != topic or arrived_queue != queue_id):
                            _units_arrived(dispatcher, listeners, arrived_topic, arrived_queue, arrived_max, arrived_ts)
                        arrived_topic, arrived_queue, arrived_max, arrived_ts = topic, queue_id, queue_offset + 1, store_ts
                    elif unit_mf is None and mf is not None and pending is not None and len(<list>pending) \
                            and _put_pending(self, mf, item, topic_b, queue_id, queue_offset, sys_flag, born_host,
                                             store_host, limit, ix_buf, index_slots if ix_mf is not None else 0,
                                             index_entries if ix_mf is not None else 0, <list>pending, &phy, &size,
                                             &indexed):
                        # a queue waiting for its first file, after its first unit (whose put the
                        # general steps made: the partition's check): _put_plain_locked's steps
                        offsets[key] = queue_offset + 1
                        if not indexed:
                            dispatcher.index_keys_locked(item[9], phy, w.last_store_timestamp)
                            ix_mf = _index_target(index, self.index_file_class, file_class)
                            ix_buf = ix_mf.buf if ix_mf is not None else None
                    else:
                        if arrived_topic is not None:  # the general steps notify their own unit: keep the order
                            _units_arrived(dispatcher, listeners, arrived_topic, arrived_queue, arrived_max, arrived_ts)
                            arrived_topic = None
                        size = writer.record_size_plain(body, topic_b, item[7], sys_flag)
                        if size > limit:
                            break  # more than one commitlog file holds: the general path refuses it
                        phy, refusal = writer._put_plain_general_locked(item, topic_b, sys_flag, size, queue_offset,
                                                                        born_host, store_host)
                        if refusal is not None:
                            return stored, refusal
                        mf = _last_reserved(commitlog_files, file_class) if plain_dispatch else None
                        ix_mf = _index_target(index, self.index_file_class, file_class)
                        ix_buf = ix_mf.buf if ix_mf is not None else None
                    stored.append((queue_offset, phy, size))
            finally:
                if arrived_topic is not None:
                    _units_arrived(dispatcher, listeners, arrived_topic, arrived_queue, arrived_max, arrived_ts)
        finally:
            if release is not None:
                release()
        return stored, None
