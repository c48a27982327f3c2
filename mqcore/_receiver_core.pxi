# The receive ring's per-buffer state in C (included by _pipeline.pyx, before _send_core.pxi).
#
# ``ReceiverCore`` is the C base of the FrameReceiver a connection on the C connection core gets
# (``mqcore.remoting.framing.receiver_class(ChannelCore._receiver_core)``): it declares the ring's
# fields that change per receive buffer, and nothing else - no method, so the Python FrameReceiver
# (mqcore/remoting/framing.py) keeps all the logic and reads and writes these fields as before,
# through the descriptors Cython makes for ``public`` fields. ``ChannelCore`` holds its receiver
# typed as a ReceiverCore, so the usual case of ``get_buffer`` and ``buffer_updated`` (the ring
# holds nothing, a few whole frames arrive and a core takes them all) reads and writes them as
# struct fields: once a wake-up has left the caches cold, each Python attribute (a dict lookup
# behind a type lookup) cost a cache miss or several, per field, per request.
#
# Under MQCORE_PURE_PYTHON=1 there is no ChannelCore and the plain FrameReceiver is used (the
# twin: same fields, in its instance dict); tests/broker/test_receiver_core.py feeds both the
# same bytes in the same random receive splits and compares the fields after every buffer.

from cpython.bytearray cimport PyByteArray_GET_SIZE


cdef class ReceiverCore:
    """C fields of a FrameReceiver's ring (see the top of this file and FrameReceiver)."""
    # the ring (a bytearray, replaced and never resized) and the memoryview of all of it
    cdef public bytearray _ring
    cdef public object _ring_view
    # first unconsumed byte, end of the received bytes, room offered by the last get_buffer,
    # bytes received into the large-frame buffer
    cdef public Py_ssize_t _start, _end, _offered, _big_filled
    # the last recv filled all the room offered: the ring grows at the next get_buffer
    cdef public bint _grow
    # the view of the large frame being received (None: none)
    cdef public object _big_view


cdef inline Py_ssize_t _ring_size(ReceiverCore r) noexcept:
    """len(r._ring); 0 before FrameReceiver.__init__ gave it one."""
    return PyByteArray_GET_SIZE(r._ring) if r._ring is not None else 0
