"""IndexFile and IndexService: the hash index of message keys (store-format.md §4).

Each file holds ``slots`` 4-byte slot heads and ``entries`` 20-byte entries; a key
``topic#key`` hashes (Java ``String.hashCode``, abs) into a slot whose chain links
entries newest first. Files are named by their creation time
(``yyyyMMddHHmmssSSS``, local time). Hash collisions are not resolved here: a query
returns every candidate and the caller compares keys.

Threads: ``build_locked`` runs under the store's put lock; queries take the
service lock only to copy the file list.
"""
from __future__ import annotations

import logging
import os
import struct
import threading
import time
from typing import Callable

import numpy as np

from mqcore.format import layout as L
from mqcore.format.index_chains import chains_sound
from mqcore.kernel_api import Buffer, StoreKernels
from mqcore.store.hot_state import on_kernels
from mqcore.store.mapped_file import MappedFile

log = logging.getLogger(__name__)



def index_file_name(ts_ms: int) -> str:
    t = time.localtime(ts_ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + "%03d" % (ts_ms % 1000)


class IndexFile:
    """One index file: a 40-byte header, hash slots and chained entries (``IndexFile``)."""

    def __init__(self, path: str, slots: int, entries: int, *, create: bool = False,
                 file_class: type[MappedFile] = MappedFile):
        self.slots = slots
        self.entries = entries
        self.mf = file_class(path, L.index_file_size(slots, entries), create=create)
        #: a query found a chain link that does not point backwards: no longer queried, and
        #: rebuilt from the commitlog at the next start (``chain_problem`` finds it there)
        self.damaged = False

    @property
    def path(self) -> str:
        return self.mf.path

    def header(self) -> tuple[int, int, int, int, int, int]:
        """(begin ts, end ts, begin phy, end phy, hash slot count, index count)."""
        return L.INDEX_HEADER.unpack_from(self.mf.buf, 0)

    def init_header(self, begin_ts: int, end_ts: int, begin_phy: int, end_phy: int) -> None:
        # a new file inherits the previous file's end values (IndexService.getAndCreateLastIndexFile)
        L.INDEX_HEADER.pack_into(self.mf.buf, 0, begin_ts, end_ts, begin_phy, end_phy, 0, 1)

    @property
    def end_timestamp(self) -> int:
        return self.header()[1]

    @property
    def end_phy_offset(self) -> int:
        return self.header()[3]

    @property
    def begin_phy_offset(self) -> int:
        return self.header()[2]

    def is_full(self) -> bool:
        return self.header()[5] >= self.entries

    def entry_count(self) -> int:
        return self.header()[5] - 1

    def header_problem(self) -> str | None:
        """What makes the header unusable (the kernels would refuse it), or None.

        Checked at every load, clean shutdown or not: a file can be damaged while the
        broker is stopped, and the kernels trust nothing they are given.
        """
        _, _, begin_phy, end_phy, slot_count, count = self.header()
        if not 1 <= count <= self.entries:
            return f"indexCount {count} is outside 1..{self.entries}"
        if not 0 <= slot_count <= count:
            return f"hashSlotCount {slot_count} is outside 0..{count}"
        if begin_phy < 0 or end_phy < begin_phy:
            return f"commitlog offsets {begin_phy}..{end_phy} are impossible"
        return None

    def is_consistent(self) -> bool:
        """Cheap torn-file check: the newest entry must be the header's end offset."""
        begin_ts, end_ts, begin_phy, end_phy, _, count = self.header()
        if count < 1 or count > self.entries or end_ts < begin_ts and count > 1:
            return False
        if count == 1:
            return True
        at = L.INDEX_HEADER_SIZE + self.slots * L.INDEX_SLOT_SIZE + (count - 1) * L.INDEX_ENTRY_SIZE
        phy: int = struct.unpack_from(">q", self.mf.buf, at + L.IDXE_PHYOFFSET)[0]
        return phy == end_phy

    def chain_problem(self) -> str | None:
        """The first damaged slot head or chain link (one could make a key query loop), or None."""
        return chains_sound(self.mf.buf, self.slots, self.header()[5])

    def flush(self) -> None:
        self.mf.wrote_position = self.mf.file_size
        self.mf.flush()

    def close(self) -> bool:
        return self.mf.close()

    def destroy(self) -> bool:
        return self.mf.destroy()


class IndexService:
    """The index files: builds entries for keys and unique ids, answers key queries, cleans up."""

    def __init__(self, directory: str, slots: int, entries: int, kernels: StoreKernels,
                 clock: Callable[[], int]) -> None:
        self.directory = directory
        self.slots = slots
        self.entries = entries
        self.k = kernels
        self.clock = clock
        self.files: list[IndexFile] = []
        #: ``MappedFile`` on the kernels' base (``hot_state``): the send pipeline reads the target's fields
        self._file_class = on_kernels(MappedFile, kernels)
        self._index_file_class = on_kernels(IndexFile, kernels)
        self._lock = threading.Lock()

    def load(self, abnormal: bool, checkpoint_index_ts: int) -> list[str]:
        """Map existing files; after a crash drop files that are torn (see ``is_consistent``).

        Returns notes for the recovery report. RocketMQ drops every file newer than the
        checkpoint after a crash; we keep the ones whose header and newest entry agree, since
        a process crash (kill -9) loses nothing written to the page cache, and rebuild the
        rest from the commitlog.
        """
        notes: list[str] = []
        damaged_at: int | None = None
        if not os.path.isdir(self.directory):
            return notes
        for name in sorted(os.listdir(self.directory)):
            path = os.path.join(self.directory, name)
            if not (name.isdigit() and len(name) == 17):
                notes.append(f"ignored {path}: not an index file name")
                continue
            if os.path.getsize(path) != L.index_file_size(self.slots, self.entries):
                notes.append(f"deleted {path}: size does not match index settings; it will be rebuilt")
                os.unlink(path)
                continue
            f = self._index_file_class(path, self.slots, self.entries, file_class=self._file_class)
            problem = f.header_problem()
            if problem is not None:
                f.close()
                moved = self._quarantine(path)
                notes.append(f"moved index file {path} with a damaged header ({problem}) to {moved}; "
                             "its entries will be rebuilt from the commitlog")
                damaged_at = len(self.files) if damaged_at is None else damaged_at
                continue
            if abnormal and not f.is_consistent():
                notes.append(f"deleted torn index file {path}; it will be rebuilt from the commitlog")
                f.destroy()
                continue
            problem = f.chain_problem()
            if problem is not None:
                f.close()
                moved = self._quarantine(path)
                log.error("index file %s is damaged (%s); moved to %s, its entries are rebuilt from the "
                          "commitlog", path, problem, moved)
                notes.append(f"moved index file {path} with damaged hash chains ({problem}) to {moved}; "
                             "its entries will be rebuilt from the commitlog")
                damaged_at = len(self.files) if damaged_at is None else damaged_at
                continue
            self.files.append(f)
        if damaged_at is not None:
            notes.extend(self._drop_newer(damaged_at))
        return notes

    def _drop_newer(self, keep: int) -> list[str]:
        """Delete the files after the first ``keep``: a damaged file before them is rebuilt from
        the end of the last file kept, and entries are only ever appended in commitlog order."""
        notes = []
        while len(self.files) > keep:
            f = self.files.pop()
            notes.append(f"deleted index file {f.path} (newer than a damaged one); it will be rebuilt from the "
                         "commitlog")
            f.destroy()
        return notes

    def _quarantine(self, path: str) -> str:
        """Move a damaged file to ``<store>/quarantine/`` (kept for an operator, never read again)."""
        qdir = os.path.join(os.path.dirname(os.path.abspath(self.directory)), "quarantine")
        os.makedirs(qdir, exist_ok=True)
        target = os.path.join(qdir, "index-" + os.path.basename(path))
        os.replace(path, target)
        return target

    # --- building -------------------------------------------------------------------------------
    def _new_file_locked(self) -> IndexFile:
        now = self.clock()
        name = index_file_name(now)
        while os.path.exists(os.path.join(self.directory, name)):
            now += 1
            name = index_file_name(now)
        os.makedirs(self.directory, exist_ok=True)
        f = self._index_file_class(os.path.join(self.directory, name), self.slots, self.entries, create=True,
                                   file_class=self._file_class)
        if self.files:
            prev = self.files[-1]
            _, end_ts, _, end_phy, _, _ = prev.header()
            f.init_header(end_ts, end_ts, end_phy, end_phy)
            prev.flush()
        else:
            f.init_header(0, 0, 0, 0)
        self.files.append(f)
        log.info("created index file %s", f.path)
        return f

    def end_phy_offset(self) -> int:
        return self.files[-1].end_phy_offset if self.files else 0

    def last_full_end_timestamp(self) -> int:
        """End timestamp of the newest full file, 0 while none is full: what RocketMQ keeps in the
        checkpoint as ``indexMsgTimestamp``. After a crash, a Java broker destroys every index
        file that ends later than it, so a 0 there would cost a migrated store its key lookups."""
        with self._lock:
            for f in reversed(self.files):
                if f.is_full():
                    return f.header()[1]
        return 0

    def build_locked(self, hashes: np.ndarray, phys: np.ndarray, timestamps: np.ndarray) -> list[IndexFile]:
        """Put keys into the newest file, opening new ones when full; returns files filled up."""
        filled = []
        i = 0
        n = len(hashes)
        while i < n:
            f = self.files[-1] if self.files and not self.files[-1].is_full() else None
            if f is None:
                if self.files:
                    filled.append(self.files[-1])
                with self._lock:
                    f = self._new_file_locked()
            f.mf.reserve()  # a file loaded from disk may be sparse: never write into holes
            i = self.k.index_put(f.mf.buf, self.slots, self.entries, hashes, phys, timestamps, i)
        return filled

    def target_locked(self) -> tuple[Buffer, int, int] | None:
        """``(buffer, slots, entries)`` of the newest index file when it exists and its
        blocks are reserved, for a kernel that puts a message's keys in one call (the send
        pipeline); None: ``build_one_locked`` puts them (it creates files)."""
        f = self.files[-1] if self.files else None
        if f is None or not f.mf.reserved:
            return None
        return f.mf.buf, self.slots, self.entries

    def build_one_locked(self, key_hash: int, phy: int, timestamp: int) -> None:
        """``build_locked`` of one key (a single message's put), without arrays."""
        f = self.files[-1] if self.files else None
        for _ in range(2):  # the newest file, or once it is full a new one
            if f is None:
                with self._lock:
                    f = self._new_file_locked()
            f.mf.reserve()  # a file loaded from disk may be sparse: never write into holes
            if self.k.index_put_one(f.mf.buf, self.slots, self.entries, key_hash, phy, timestamp):
                return
            f = None

    # --- querying ---------------------------------------------------------------------------------
    def query(self, key_hash: int, max_num: int, begin_ts: int, end_ts: int) -> tuple[list[int], int, int]:
        """Candidate phy offsets, newest file first; plus (last update ts, last update phy).

        Holds the service lock while reading so disk cleanup cannot unmap a file under it.
        """
        out: list[int] = []
        last_ts = last_phy = 0
        with self._lock:
            files = list(self.files)
            for f in reversed(files):
                f_begin, f_end, _, f_end_phy, _, _ = f.header()
                if f is files[-1]:
                    last_ts, last_phy = f_end, f_end_phy
                if f_begin <= end_ts and f_end >= begin_ts and not f.damaged:  # time ranges overlap
                    found, damaged = self.k.index_query(f.mf.buf, self.slots, self.entries, key_hash, begin_ts,
                                                        end_ts, max_num - len(out))
                    out.extend(found)
                    if damaged:
                        f.damaged = True
                        log.error("index file %s has a damaged hash chain (a link that does not point "
                                  "backwards); it is no longer queried and will be rebuilt from the "
                                  "commitlog at the next start", f.path)
                if f_begin < begin_ts or len(out) >= max_num:
                    break
        return out, last_ts, last_phy

    # --- maintenance -------------------------------------------------------------------------------
    def flush(self) -> None:
        with self._lock:
            files = list(self.files)
        for f in files[-2:]:
            f.flush()

    def truncate_beyond(self, phy_offset: int) -> int:
        """Drop files holding entries at or past ``phy_offset``; returns the offset to rebuild from."""
        rebuild_from = self.end_phy_offset()
        with self._lock:
            while self.files and self.files[-1].end_phy_offset >= phy_offset and self.files[-1].entry_count() > 0:
                f = self.files.pop()
                rebuild_from = f.begin_phy_offset
                log.warning("index file %s holds entries at or past commitlog offset %d; rebuilding it", f.path,
                            phy_offset)
                f.destroy()
        return min(rebuild_from, self.end_phy_offset()) if self.files else 0

    def delete_expired(self, commitlog_min: int,
                       last_modified_ms: Callable[[MappedFile], int] = MappedFile.last_modified_ms,
                       ) -> list[tuple[str, int, int]]:
        """Delete files (never the last) whose entries all point below ``commitlog_min``.

        Returns (path, end phy offset, last modified ms) per deleted file. Files leave the
        list under the lock (queries hold it while reading), then are unmapped outside it.
        """
        gone: list[IndexFile] = []
        with self._lock:
            while len(self.files) > 1 and self.files[0].end_phy_offset < commitlog_min:
                gone.append(self.files.pop(0))
        out = []
        for f in gone:
            info = (f.path, f.end_phy_offset, last_modified_ms(f.mf))
            f.destroy()
            out.append(info)
        return out

    def close(self) -> None:
        with self._lock:
            for f in self.files:
                f.flush()
                f.close()
            self.files = []
