# The broker's small shared state that the connection cores update per request (included by
# _pipeline.pyx): the put latency ``Histogram`` and the long-polling ``ArrivalGate``. Both are
# plain objects to the Python code that reads them (metrics, the hold service, the general
# send path); the cores reach their fields in C, so a SEND neither boxes a float nor runs a
# Python function for them. The twins are ``mqcore.histogram.Histogram`` and
# ``_pipeline_py.ArrivalGate``; tests/broker/test_broker_state.py runs both.

cimport cython
from libc.stdlib cimport malloc, free


@cython.final
cdef class Histogram:
    """``mqcore.histogram.Histogram`` with its buckets in C: counts per bucket (``bounds``
    upper limits, then +Inf) and a sum. ``observe`` puts a value in the first bucket whose
    bound is >= it (``bisect_left``); ``counts`` is a list made when read."""
    cdef readonly tuple bounds
    cdef double *_bounds
    cdef int64_t *_counts  # len(bounds) + 1
    cdef Py_ssize_t _n
    cdef public double sum

    def __cinit__(self, bounds):
        cdef Py_ssize_t i
        self.bounds = tuple(bounds)
        self._n = len(self.bounds)
        self._bounds = <double *>malloc((self._n + 1) * sizeof(double))
        self._counts = <int64_t *>malloc((self._n + 1) * sizeof(int64_t))
        if self._bounds == NULL or self._counts == NULL:
            raise MemoryError()
        for i in range(self._n):
            self._bounds[i] = <double>self.bounds[i]
        for i in range(self._n + 1):
            self._counts[i] = 0
        self.sum = 0.0

    def __dealloc__(self):
        free(self._bounds)
        free(self._counts)

    cdef inline void add(self, double value) noexcept:
        cdef Py_ssize_t i = 0
        while i < self._n and self._bounds[i] < value:  # bisect_left (NaN: bucket 0, as bisect)
            i += 1
        self._counts[i] += 1
        self.sum += value

    def observe(self, double value):
        self.add(value)

    @property
    def counts(self):
        return [self._counts[i] for i in range(self._n + 1)]

    def cumulative(self):
        """Prometheus buckets: (le, count of observations <= le), +Inf last."""
        cdef list out = []
        cdef int64_t total = 0
        cdef Py_ssize_t i
        for i in range(self._n):
            total += self._counts[i]
            out.append((repr(float(self.bounds[i])), total))
        out.append(("+Inf", total + self._counts[self._n]))
        return out


@cython.final
cdef class ArrivalGate:
    """A store arrival listener that passes ``(topic, queue_id, max_offset)`` on to
    ``listener`` only while ``waiting`` > 0. The long-polling hold service counts its parked
    pulls here (on the event loop), so a put with nothing parked wakes nobody: the compiled
    put reads the count in C and calls nothing, the Python dispatcher's call returns from C.
    The hold service raises the count before it checks the queue's max offset once more,
    and a put reads it after it moved the max offset, so no arrival is missed."""
    cdef readonly object listener
    cdef public Py_ssize_t waiting

    def __init__(self, listener):
        self.listener = listener
        self.waiting = 0

    def __call__(self, topic, queue_id, max_offset):
        if self.waiting > 0:
            self.listener(topic, queue_id, max_offset)
