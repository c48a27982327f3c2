"""``index_put_one`` (a single message's key, no arrays) writes what ``index_put`` writes,
in both kernels, down to the full file and a damaged header."""
from __future__ import annotations

import numpy as np
import pytest

from mqcore.errors import CorruptFileError
from mqcore.format import layout as L

SLOTS, ENTRIES = 7, 40


def _fresh():
    buf = bytearray(L.index_file_size(SLOTS, ENTRIES))
    L.INDEX_HEADER.pack_into(buf, 0, 0, 0, 0, 0, 0, 1)
    return buf


def test_one_key_at_a_time_is_the_array_put(kernels):
    rng = np.random.default_rng(7)
    hashes = rng.integers(0, 2**31 - 1, 60, dtype=np.int64).astype(np.int32)
    hashes[5:9] = hashes[4]  # chained entries in one slot
    phys = np.arange(60, dtype=np.int64) * 311
    tss = 1_700_000_000_000 + np.arange(60, dtype=np.int64) * 1500
    arrays, single = _fresh(), _fresh()
    assert kernels.index_put(arrays, SLOTS, ENTRIES, hashes, phys, tss, 0) == ENTRIES - 1
    put = [kernels.index_put_one(single, SLOTS, ENTRIES, int(h), int(p), int(t)) for h, p, t in zip(hashes, phys, tss)]
    assert put == [1] * (ENTRIES - 1) + [0] * (60 - ENTRIES + 1)   # refused once full
    assert bytes(single) == bytes(arrays)
    assert kernels.index_query(single, SLOTS, ENTRIES, int(hashes[4]), 0, 2**62, 10) == \
        kernels.index_query(arrays, SLOTS, ENTRIES, int(hashes[4]), 0, 2**62, 10)


def test_bad_input_is_refused(kernels):
    buf = _fresh()
    with pytest.raises(ValueError):
        kernels.index_put_one(buf, SLOTS, ENTRIES, -5, 1, 1)
    L.INDEX_HEADER.pack_into(buf, 0, 0, 0, 0, 0, 0, ENTRIES + 5)  # a damaged count
    with pytest.raises((CorruptFileError, ValueError)):
        kernels.index_put_one(buf, SLOTS, ENTRIES, 5, 1, 1)
    assert bytes(buf[L.INDEX_HEADER_SIZE:]) == bytes(len(buf) - L.INDEX_HEADER_SIZE)  # nothing written
