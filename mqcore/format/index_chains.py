"""The structural check of an index file's hash chains (store-format.md §4), shared by
``mqstore verify`` and the store's start-up checks.

Entries are appended in order and each one's ``prev_index`` names the slot's previous head,
so a sound chain only ever points strictly backwards and never leaves its slot. An entry
that points forwards or at itself can close a loop: a key query walking it would never end.
This check reads the slot heads and the used entries as numpy views (no copy) in chunks, so
a file with 20 million entries costs one pass over the bytes its entries use.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from mqcore.format import layout as L

#: entries checked per numpy pass (bounds the temporary arrays, not the view)
CHUNK_ENTRIES = 1 << 20

# ``buf`` below: anything exposing the buffer protocol (mmap, bytes, memoryview), typed Any as
# the kernels' buffers are in mqcore.kernel_api


def slot_heads(buf: Any, slots: int) -> np.ndarray:
    return np.frombuffer(buf, dtype=">i4", count=slots, offset=L.INDEX_HEADER_SIZE)


def entries_view(buf: Any, slots: int, first: int, count: int) -> np.ndarray:
    """Entries ``first .. first+count-1`` as an ``INDEX_ENTRY_DTYPE`` array (zero-copy)."""
    at = L.INDEX_HEADER_SIZE + slots * L.INDEX_SLOT_SIZE + first * L.INDEX_ENTRY_SIZE
    return np.frombuffer(buf, dtype=L.INDEX_ENTRY_DTYPE, count=count, offset=at)


def chain_problems(buf: Any, slots: int, count: int, name: str, examples: int = 20) -> list[tuple[str, str]]:
    """(kind, message) per damaged slot head or chain entry, at most ``examples`` per reason.

    ``count`` is the header's indexCount (entries 1..count-1 are used); the caller has
    checked it against the file's geometry. An empty list: every chain is sound.
    """
    out: list[tuple[str, str]] = []
    heads = slot_heads(buf, slots).astype(np.int64)
    used = np.flatnonzero(heads != 0)
    out_of_range = (heads[used] < 1) | (heads[used] >= count)
    for s in used[out_of_range][:examples]:
        out.append(("index slot", f"{name}: slot {int(s)} points at entry {int(heads[s])} of {count - 1}"))
    used = used[~out_of_range]
    if count <= 1:
        return out
    hashes = entries_view(buf, slots, 0, count)["key_hash"].astype(np.int64)
    wrong = np.flatnonzero(hashes[heads[used]] % slots != used)
    for i in wrong[:examples]:
        out.append(("index slot", f"{name}: slot {int(used[i])} heads entry {int(heads[used[i]])} whose "
                                  f"key hash belongs to slot {int(hashes[heads[used[i]]] % slots)}"))
    shown: dict[str, int] = {}
    for lo in range(1, count, CHUNK_ENTRIES):
        chunk = entries_view(buf, slots, lo, min(count, lo + CHUNK_ENTRIES) - lo)
        n = np.arange(lo, lo + len(chunk), dtype=np.int64)
        h = hashes[lo:lo + len(chunk)]
        prev = chunk["prev_index"].astype(np.int64)
        bad_prev = (prev < 0) | (prev >= n)
        chained = ~bad_prev & (prev > 0)
        bad_chain = np.zeros(len(n), bool)
        bad_chain[chained] = hashes[prev[chained]] % slots != h[chained] % slots
        for mask, why in (((h < 0), "negative key hash"), (bad_prev, "prev index does not point backwards"),
                          (bad_chain, "prev entry is in another slot"),
                          (chunk["time_diff"] < 0, "negative time difference")):
            for i in np.flatnonzero(mask)[:examples - shown.get(why, 0)]:
                out.append(("index entry", f"{name}: entry {int(n[i])}: {why}"))
                shown[why] = shown.get(why, 0) + 1
    return out


def chains_sound(buf: Any, slots: int, count: int) -> str | None:
    """The first chain problem of an index file, or None (the store's start-up check)."""
    found = chain_problems(buf, slots, count, "", examples=1)
    return found[0][1].lstrip(": ") if found else None
