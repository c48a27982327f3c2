# Concurrent consumption: a run of listener calls in one step (included by _wire_client.pyx).
# The readable twin, with the contract, is the "concurrent consumption" part of
# mqcore/_wire_client_py.py (ConsumeRun, DrainerState, ListenerRunner).
#
# Atomicity: several consume threads share a ConsumeRun and the watchdog thread reads a
# DrainerState. The twin takes locks; here a claim (read pos, write pos) and a take_done
# (swap the list) run no Python code and allocate nothing between their read and their
# write, so no other thread can run in between (the interpreter lock only changes hands in
# Python code, a blocking call, or a garbage collection triggered by an allocation).
from cpython.list cimport PyList_GET_SIZE

cdef extern from "Python.h":
    Py_ssize_t Py_REFCNT(object o)

RUN_EXHAUSTED = 0
RUN_SETTLE = 1
RUN_SLOW = 2
RUN_OUTCOME = 3
RUN_STOPPED = 4

cdef inline double _mono_s() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


cdef class ConsumeRun:
    """Messages of one queue, consumed in order of ``pos`` by any number of threads."""
    cdef public list msgs
    cdef public Py_ssize_t pos
    cdef public object pq, mq

    def __init__(self, list msgs, pq, mq):
        self.msgs = msgs
        self.pos = 0
        self.pq = pq
        self.mq = mq

    @property
    def remaining(self):
        cdef Py_ssize_t left = PyList_GET_SIZE(self.msgs) - self.pos
        return left if left > 0 else 0

    def claim(self, Py_ssize_t n):
        cdef Py_ssize_t i = self.pos
        if i >= PyList_GET_SIZE(self.msgs):
            return None
        self.pos = i + n
        return self.msgs[i:i + n]

    def close(self):
        self.pos = PyList_GET_SIZE(self.msgs)


cdef class DrainerState:
    """One consume thread's messages consumed and not yet settled, and its running call."""
    cdef public list done
    cdef public object pq, mq, outcome
    cdef public double began

    def __init__(self):
        self.done = []
        self.pq = None
        self.mq = None
        self.outcome = None
        self.began = 0.0

    def take_done(self):
        cdef list fresh = []
        cdef list done = self.done
        self.done = fresh
        return done, self.pq, self.mq

    def set_queue(self, pq, mq):
        self.pq = pq
        self.mq = mq

    def add_done(self, list msgs):
        self.done.extend(msgs)


cdef class ListenerRunner:
    """A concurrent listener's calls over runs (see the twin)."""
    cdef public object listener, context_type, success, reset_retry, clock
    cdef public str retry_topic, stamp_key
    cdef public bytes stamp_prefix, property_separator
    cdef public Py_ssize_t batch_size, settle_every
    cdef public bint system_clock, stopped
    cdef public double slow_s
    cdef public object consumed_ok
    cdef long long _stamp_ms
    cdef object _now, _pair, _joined

    def __init__(self, listener, context_type, success, Py_ssize_t batch_size, str retry_topic, reset_retry,
                 clock, bint system_clock, str stamp_key, bytes stamp_prefix, bytes property_separator,
                 double slow_s, Py_ssize_t settle_every):
        self.listener = listener
        self.context_type = context_type
        self.success = success
        self.batch_size = batch_size if batch_size > 1 else 1
        self.retry_topic = retry_topic
        self.reset_retry = reset_retry
        self.clock = clock
        self.system_clock = system_clock
        self.stamp_key = stamp_key
        self.stamp_prefix = stamp_prefix
        self.property_separator = property_separator
        self.slow_s = slow_s
        self.settle_every = settle_every
        self.stopped = False
        self.consumed_ok = 0
        self._stamp_ms = -1

    cdef int _stamp(self) except -1:
        cdef timespec ts
        cdef long long ms
        if self.system_clock:
            clock_gettime(CLOCK_REALTIME, &ts)
            ms = <long long>ts.tv_sec * 1000 + ts.tv_nsec // 1000000
        else:
            ms = self.clock()
        if ms != self._stamp_ms:
            now = str(ms)
            pair = self.stamp_prefix + now.encode()
            self._pair = pair
            self._joined = self.property_separator + pair
            self._now = now
            self._stamp_ms = ms
        return 0

    def run(self, ConsumeRun run, DrainerState state):
        cdef object pq = run.pq, mq = run.mq, retry = self.retry_topic, success = self.success
        cdef object listener = self.listener, key = self.stamp_key
        cdef list msgs = run.msgs, lst = None, done
        cdef Py_ssize_t bs = self.batch_size, i, j, k, n, ok = 0
        cdef object ctx = None, msg, props, raw, status, t, ack, exc
        cdef object default_ack = None, default_delay = None
        cdef double began, ended
        cdef int code = RUN_EXHAUSTED
        try:
            while True:
                if self.stopped:
                    code = RUN_STOPPED
                    break
                if pq.dropped:
                    run.pos = PyList_GET_SIZE(msgs)
                    break
                # claim (atomic: see the top of this file)
                i = run.pos
                n = PyList_GET_SIZE(msgs)
                if i >= n:
                    break
                j = i + bs
                if j > n:
                    j = n
                run.pos = i + bs
                # the listener's list: the one of the last call if nobody else holds it
                if bs == 1 and lst is not None and Py_REFCNT(lst) == 1 and PyList_GET_SIZE(lst) == 1:
                    lst[0] = msgs[i]
                else:
                    lst = msgs[i:j]
                for k in range(j - i):
                    t = (<object>lst[k]).topic
                    if t is retry or t == retry:
                        self.reset_retry(lst)
                        break
                self._stamp()
                for k in range(j - i):
                    msg = lst[k]
                    props = msg._properties
                    if props is None:
                        raw = msg._props_raw
                        msg._props_raw = raw + self._joined if raw else self._pair
                    else:
                        props[key] = self._now
                if ctx is None or Py_REFCNT(ctx) != 1:
                    ctx = self.context_type(mq)
                    if default_ack is None:
                        default_ack = ctx.ack_index
                        default_delay = ctx.delay_level_when_next_consume
                state.began = began = _mono_s()
                exc = None
                try:
                    status = listener(lst, ctx)
                except Exception as e:  # the caller logs it and retries the batch
                    status = None
                    exc = e
                ended = _mono_s()
                state.began = 0.0
                if exc is None and (status is None or status is success):
                    ack = ctx.ack_index
                    if (ack is default_ack or ack >= j - i - 1) and not pq.dropped:
                        done = state.done
                        if bs == 1:
                            done.append(msgs[i])
                        else:
                            for k in range(i, j):
                                done.append(msgs[k])
                        ok += j - i
                        if ack is not default_ack or ctx.delay_level_when_next_consume is not default_delay:
                            ctx = None  # changed by the listener: a fresh one next time
                        if PyList_GET_SIZE(state.done) >= self.settle_every:
                            code = RUN_SETTLE
                            break
                        if ended - began > self.slow_s and run.pos < n:
                            code = RUN_SLOW
                            break
                        continue
                state.outcome = (msgs[i:j], status, ctx, exc)
                code = RUN_OUTCOME
                break
        finally:
            if ok:
                self.consumed_ok += ok
        return code
