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
from time import perf_counter as _perf_counter

cdef object _chan_log = _logging.getLogger("mqcore.remoting.channel")
cdef str _RETRY_PREFIX = "%RETRY%"
cdef int _PERM_WRITE = 2
cdef Py_ssize_t _MAX_ROUTES = 4096
cdef Py_ssize_t _STOP_AT = 11  # item field: the position after the frame


cdef class SendCore:
    """The send pipeline's common case in C for one receive buffer; state stays on the
    Python ``SendPipeline`` (configuration-derived parts, remembered routes), read here."""
    cdef readonly object pipeline
    cdef object peer_host
    cdef object not_allowed
    cdef int version

    def __init__(self, pipeline, peer_host, not_allowed, int version):
        self.pipeline = pipeline
        self.peer_host = peer_host
        self.not_allowed = not_allowed
        self.version = version

    cpdef tuple take(self, channel, object view, Py_ssize_t start, Py_ssize_t end):
        """``(stop, answers)``: the position after the plain sends taken from the head of
        ``view[start:end]`` and their answer frames (None when nothing was taken)."""
        cdef object p = self.pipeline
        cdef object send = p.send
        cdef object cfg = send.cfg
        if cfg is not p._cfg:  # replaced as a whole by a run-time configuration change
            p.configure(cfg)
        cdef object parts = p._answer_parts
        cdef object cluster = p._cluster
        # SYNC_FLUSH (waits in the pool), a read-only broker, a region or cluster name the
        # kernels do not write: the general path
        if send.pool is not None or not (cfg.broker_permission & _PERM_WRITE) or parts is None or cluster is None:
            return start, None
        cdef object store = send.store
        # --- read ---
        cdef list items = <list>(_parse_plain(view, start, end, p.max_frame_bytes, cluster, store.index is not None))
        if not items:
            return start, None
        # --- route ---
        cdef object topics = send.topics
        cdef dict routes = <dict>p._routes
        cdef object version = topics.version
        if version != p._routes_version:
            routes.clear()
            p._routes_version = version
        cdef Py_ssize_t routed = 0, n = len(items)
        cdef tuple item
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
        cdef object store_host = send.store_host()
        cdef object stats = send.stats
        t0 = _perf_counter()
        stored, _refusal = store.put_plain_sends(items, self.peer_host(channel), store_host)
        if not stored:
            return start, None  # the general path answers the refusal of the first one
        stats.put_latency.observe(_perf_counter() - t0)
        # --- answer --- (counters per run of a topic)
        on_put = stats.on_put_many
        cdef list done = <list>stored
        cdef Py_ssize_t i, taken = len(done), run_count = 0, run_bytes = 0
        cdef str run_topic = <str>(<tuple>items[0])[1]
        for i in range(taken):
            item = <tuple>items[i]
            if <str>item[1] != run_topic:
                on_put(run_topic, run_count, run_bytes)
                run_topic, run_count, run_bytes = <str>item[1], 0, 0
            run_count += 1
            run_bytes += <Py_ssize_t>(<tuple>done[i])[2]
        on_put(run_topic, run_count, run_bytes)
        if store_host != p._host_key:
            p._hex(store_host)
        answers = send_answers(parts[0], parts[1], p._host_hex, items, done, self.version)
        return (<tuple>items[taken - 1])[_STOP_AT], answers


cdef object _parse_plain(object view, Py_ssize_t start, Py_ssize_t end, Py_ssize_t max_frame_bytes, object cluster,
                         bint indexed):
    return parse_plain_sends(view, start, end, max_frame_bytes, cluster, indexed)[0]


cdef class ChannelCore:
    """C base of a server Channel (see the top of this file). The attributes are the
    Channel's own (its Python methods use them as before); a subclass also derives from
    the Python Channel and names its ``buffer_updated`` as ``_buffer_updated_py``."""
    cdef public object _receiver, _frames, _transport, _loop, _read_paused, _cork, last_activity
    cdef public object _partial_since
    cdef public Py_ssize_t _rx_bytes, _partial_rx, _cork_bytes
    cdef public bint _closed, _in_frames

    def get_buffer(self, Py_ssize_t sizehint):
        return self._receiver.get_buffer()

    def buffer_updated(self, Py_ssize_t nbytes):
        cdef object frames = self._frames
        cdef object core = None
        if frames is not None and not self._in_frames and not self._closed and not self._read_paused:
            core = getattr(frames, "core", None)
        if core is None:
            self._buffer_updated_py(nbytes)
            return
        receiver = self._receiver
        receiver.received(nbytes)
        self._rx_bytes += nbytes
        now = self._loop.time()
        self.last_activity = now
        ready = receiver.complete_frames()
        if ready is None:
            self._process_frames()
        else:
            view, start, end = <tuple>ready
            self._in_frames = True
            try:
                stop, answers = (<SendCore?>core).take(self, view, start, end)
            except Exception:  # a bug must not kill the server (as _process_frames does)
                self._in_frames = False
                _chan_log.exception("closing %s after an unexpected error while reading", self)
                self.close("internal error")
                return
            self._in_frames = False
            if stop != start:
                receiver.consumed(stop)
            if stop == end:  # everything received was taken (the usual case): one write
                transport = self._transport
                if answers is not None and not self._closed and transport is not None:
                    transport.write(answers)
                self._partial_since = None
                return
            self._process_frames(answers)  # the rest the usual way, after these answers
        # the Channel's bookkeeping of a partial frame (Channel.buffer_updated)
        if self._read_paused:
            self._partial_since = None
            return
        buffered = receiver.buffered_bytes
        if not buffered:
            self._partial_since = None
        elif self._partial_since is None:
            self._partial_since = now
            self._partial_rx = self._rx_bytes - buffered
