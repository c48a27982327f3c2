# The JSON steps the remoting header readers share, included by the broker's pipeline kernels
# (_pipeline.pyx, requests) and the client's wire kernels (_wire_client.pyx, answers) so each
# extension keeps them inline: the blanks between tokens and the step after an object member.


cdef inline Py_ssize_t _ws(const unsigned char *b, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """Past the JSON blanks (space, tab, LF, CR) at ``p``."""
    while p < end and (b[p] == 32 or b[p] == 9 or b[p] == 10 or b[p] == 13):
        p += 1
    return p


cdef inline Py_ssize_t _next_member(const unsigned char *b, Py_ssize_t p, Py_ssize_t end, bint *more) noexcept nogil:
    """After an object member's value: past ``,`` and the blanks after it (``more``: a key
    follows), or just past ``}`` (not ``more``); -1 for anything else."""
    p = _ws(b, p, end)
    if p >= end:
        return -1
    if b[p] == 44:
        more[0] = True
        return _ws(b, p + 1, end)
    if b[p] == 125:
        more[0] = False
        return p + 1
    return -1
