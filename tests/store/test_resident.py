"""Releasing flushed store pages from the broker's resident memory (MappedFile.release,
MappedFileQueue.release_behind, ``resident_behind_bytes``): the pages leave the process's RSS,
their bytes stay readable, and nothing unflushed is ever released."""
from __future__ import annotations

import os

from mqcore.store.mapped_file import PAGE_SIZE, MappedFile
from mqcore.store.message_store import MessageStore
from tests.support.store import msg, records, small_config


def _rss_kib(path: str) -> int:
    """This process's resident KiB of the mapping of ``path`` (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):
                inside = line.rstrip().endswith(path)
            elif inside and first == "Rss:":
                total += int(line.split()[1])
    return total


def test_release_drops_flushed_pages_from_rss_and_keeps_their_bytes(tmp_path):
    mf = MappedFile.create(str(tmp_path), 0, 4 << 20)
    try:
        pattern = bytes(range(256)) * 4096  # 1 MiB
        mf.buf[:len(pattern)] = pattern
        mf.wrote_position = len(pattern)
        mf.flush()
        assert _rss_kib(mf.path) >= 1024
        assert mf.release(len(pattern) + 12345) == len(pattern)  # never past the flushed bytes
        assert _rss_kib(mf.path) < 64
        assert bytes(mf.buf[:len(pattern)]) == pattern  # read back from the page cache
        with open(mf.path, "rb") as f:
            assert f.read(len(pattern)) == pattern
    finally:
        mf.destroy()


def test_release_never_touches_written_but_unflushed_bytes(tmp_path):
    mf = MappedFile.create(str(tmp_path), 0, 1 << 20)
    try:
        mf.buf[:PAGE_SIZE * 4] = b"a" * (PAGE_SIZE * 4)
        mf.wrote_position = PAGE_SIZE * 4
        mf.flush()
        mf.buf[PAGE_SIZE * 4:PAGE_SIZE * 8] = b"b" * (PAGE_SIZE * 4)  # not flushed
        mf.wrote_position = PAGE_SIZE * 8
        assert mf.release(PAGE_SIZE * 8) == PAGE_SIZE * 4
        assert mf.released_position == PAGE_SIZE * 4
        mf.flush()
        with open(mf.path, "rb") as f:
            assert f.read()[:PAGE_SIZE * 8] == b"a" * (PAGE_SIZE * 4) + b"b" * (PAGE_SIZE * 4)
    finally:
        mf.destroy()


def _store(path, keep):
    cfg = small_config(path, commitlog_file_size_bytes=8 << 20, consume_queue_file_size_bytes=20 * 100_000,
                       prefault_window_bytes=0, resident_behind_bytes=keep)
    store = MessageStore(cfg)
    store.load()
    store.start()
    return store


def _commitlog_rss_kib(store) -> int:
    return sum(_rss_kib(mf.path) for mf in store.commitlog.queue.files)


def test_a_store_keeps_only_its_last_bytes_resident_and_serves_all(tmp_path):
    body = os.urandom(1000)
    kept = _store(tmp_path / "kept", 0)
    released = _store(tmp_path / "released", 256 << 10)
    try:
        for store in (kept, released):
            for _ in range(16):
                store.put_messages([msg("T", body) for _ in range(256)])  # ~4.5 MiB
            store._flush_commitlog(0)
            store._flush_logic()
        assert _commitlog_rss_kib(kept) > 4000
        assert _commitlog_rss_kib(released) < 256 + 64  # the last 256 KiB (+ a partial page)
        queue = released.commitlog.queue
        last = queue.files[-1]
        assert last.released_position <= last.wrote_position - (256 << 10) + PAGE_SIZE
        got = []
        while len(got) < 4096:  # every record, the released ones mapped back from the page cache
            more = records(released, "T", 0, len(got), 1000)[1]
            assert more
            got += more
        assert len(got) == 4096 and all(r.body == body for r in got)
    finally:
        kept.shutdown()
        released.shutdown()
