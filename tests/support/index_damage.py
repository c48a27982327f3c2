"""Hand-made index damage: a hash chain that loops (for key queries and start-up checks)."""
from __future__ import annotations

import os
import struct

from mqcore._compat import default_kernels
from mqcore.format import layout as L


def key_hash(topic: str, key: str) -> int:
    k = default_kernels()
    return k.index_hash(k.java_hash(f"{topic}#{key}"))


def make_loop(path: str, slots: int, topic: str, key: str) -> None:
    """Point the slot of ``topic#key`` at the newest entry, the newest entry back at entry 1
    and entry 1 forwards at the newest again: a loop of two entries whose hashes are not
    the key's, so a walk that trusts the links never ends. Written with ``pwrite`` so that a
    broker mapping the file sees it at once."""
    fd = os.open(path, os.O_RDWR)
    try:
        header = os.pread(fd, L.INDEX_HEADER_SIZE, 0)
        count = L.INDEX_HEADER.unpack(header)[5]
        assert count >= 3, f"{path} holds {count - 1} entries; a loop needs two"
        newest, oldest = count - 1, 1
        entries_at = L.INDEX_HEADER_SIZE + slots * L.INDEX_SLOT_SIZE
        os.pwrite(fd, struct.pack(">i", newest),
                  L.INDEX_HEADER_SIZE + (key_hash(topic, key) % slots) * L.INDEX_SLOT_SIZE)
        os.pwrite(fd, struct.pack(">i", oldest), entries_at + newest * L.INDEX_ENTRY_SIZE + L.IDXE_PREV_INDEX)
        os.pwrite(fd, struct.pack(">i", newest), entries_at + oldest * L.INDEX_ENTRY_SIZE + L.IDXE_PREV_INDEX)
    finally:
        os.close(fd)
