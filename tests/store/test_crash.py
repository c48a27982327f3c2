"""Crash tests.

* SIGKILL a writer at random moments: every acknowledged message must be there after
  recovery, with consecutive queue offsets. This proves *process-crash* durability and
  recovery. It does not prove SYNC_FLUSH: a killed process leaves its writes in the page
  cache, so the same test passes with ASYNC_FLUSH.
* A power-cut model for SYNC_FLUSH: every ``fdatasync`` of a store file snapshots what the
  file holds at that moment (what a power cut would leave on disk), and every acknowledged
  put must already be in a snapshot when the ack returns. The same check fails with
  ASYNC_FLUSH (acks run ahead of the flush), which the last test shows.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

from mqcore.config import FlushDiskType, StoreConfig
from mqcore.message import MessageExtBrokerInner, pack_host
from mqcore.store.mapped_file import MappedFile
from mqcore.store.message_store import MessageStore
from mqcore.store.results import GetMessageStatus

WRITER = textwrap.dedent("""
    import sys, threading
    from mqcore.config import StoreConfig, FlushDiskType
    from mqcore.message import MessageExtBrokerInner
    from mqcore.store.message_store import MessageStore
    from mqcore.store.results import PutMessageStatus
    cfg = StoreConfig(store_path=sys.argv[1], commitlog_file_size_bytes=256 * 1024,
                      consume_queue_file_size_bytes=20 * 500, index_slots=1009, index_entries=4000,
                      flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store = MessageStore(cfg)
    store.load(); store.start()
    round_no = sys.argv[2]
    out_lock = threading.Lock()
    def writer(w):
        i = 0
        while True:
            body = b"%s-%d-%d" % (round_no.encode(), w, i) * (1 + i % 7)
            r = store.put_message(MessageExtBrokerInner(topic="Crash", body=body, queue_id=w,
                                                        properties={"KEYS": "r%s-%d-%d" % (round_no, w, i)}))
            if r.status is PutMessageStatus.PUT_OK:
                with out_lock:
                    sys.stdout.write("ACK %d %d %s\\n" % (w, r.queue_offset, body.hex()))
                    sys.stdout.flush()
            i += 1
    print("READY", flush=True)
    ts = [threading.Thread(target=writer, args=(w,), daemon=True) for w in range(3)]
    for t in ts: t.start()
    for t in ts: t.join()
""")


def test_sigkill_under_sync_flush_loses_no_acknowledged_message(tmp_path):
    store_dir = str(tmp_path / "store")
    rng = random.Random(7)
    acked: dict[tuple[int, int], bytes] = {}
    for round_no in range(4):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, store_dir, str(round_no)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
            deadline = time.monotonic() + rng.uniform(0.3, 1.5)
            lines = []
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
            os.kill(proc.pid, signal.SIGKILL)
            # lines already written to the pipe were acknowledged before the kill
            rest = proc.stdout.read()
        finally:
            proc.kill()
            proc.wait(30)
        for line in lines + rest.splitlines(keepends=True):
            if line.startswith("ACK ") and line.endswith("\n"):
                _, w, off, body = line.split()
                acked[(int(w), int(off))] = bytes.fromhex(body)
        assert os.path.exists(os.path.join(store_dir, "abort"))
        cfg = StoreConfig(store_path=store_dir, commitlog_file_size_bytes=256 * 1024,
                          consume_queue_file_size_bytes=20 * 500, index_slots=1009, index_entries=4000,
                          flush_disk_type=FlushDiskType.SYNC_FLUSH)
        with MessageStore(cfg) as store:
            assert store.recovery_report.abnormal
            for w in range(3):
                offset, seen = 0, {}
                while True:
                    got = store.get_message("Crash", w, offset, 32)
                    if got.status is not GetMessageStatus.FOUND:
                        break
                    for buf in got.buffers:
                        for rec in store.k.decode_records(buf, 0, len(buf), 1000, True):
                            seen[rec.queue_offset] = rec.body
                    offset = got.next_begin_offset
                assert sorted(seen) == list(range(len(seen))), "queue offsets must be consecutive"
                for (ww, off), body in acked.items():
                    if ww == w:
                        assert seen.get(off) == body, f"acknowledged message {w}/{off} lost in round {round_no}"
    assert len(acked) > 100


# --- power-cut model ----------------------------------------------------------------------------------
class DurableCopies:
    """What each file would hold after a power cut: its content as of its latest fdatasync
    (or, for a mapped file's flush, msync)."""

    def __init__(self, monkeypatch):
        self.copies: dict[str, bytes] = {}
        self._lock = threading.Lock()
        real = os.fdatasync

        def fdatasync(fd):
            path = os.readlink(f"/proc/self/fd/{fd}")
            content = os.pread(fd, os.fstat(fd).st_size, 0)  # everything this call makes durable
            real(fd)
            with self._lock:
                self.copies[path] = content
        monkeypatch.setattr(os, "fdatasync", fdatasync)
        real_sync = MappedFile._sync

        def msync(mf, start, end):  # a mapped file's flush: msync of its dirty pages
            with open(mf.path, "rb") as f:
                content = f.read()
            real_sync(mf, start, end)
            with self._lock:
                self.copies[os.path.realpath(mf.path)] = content
        monkeypatch.setattr(MappedFile, "_sync", msync)

    def holds(self, path: str, pos: int, data: bytes) -> bool:
        with self._lock:
            copy = self.copies.get(os.path.realpath(path), b"")
        return copy[pos:pos + len(data)] == data


def _acks_durable_at_ack_time(tmp_path, monkeypatch, flush_type: FlushDiskType, puts: int) -> tuple[int, int]:
    """(acks, acks whose record was already in the durable copy when the put returned)."""
    durable = DurableCopies(monkeypatch)
    cfg = StoreConfig(store_path=str(tmp_path / "s"), commitlog_file_size_bytes=64 * 1024,
                      consume_queue_file_size_bytes=20 * 500, index_slots=101, index_entries=1000,
                      flush_disk_type=flush_type, flush_interval_commitlog_ms=10_000, prefault_window_bytes=0)
    host = pack_host("127.0.0.1", 10911)
    acks = durable_acks = 0
    lock = threading.Lock()
    with MessageStore(cfg) as store:
        def writer(w):
            nonlocal acks, durable_acks
            for i in range(puts):
                r = store.put_message(MessageExtBrokerInner(topic="Power", body=b"w%d-%d" % (w, i) * 20,
                                                            queue_id=w, born_host=host, store_host=host))
                assert r.ok
                f = store.commitlog.queue.find_by_offset(r.phy_offset)
                record = bytes(store.select_one_message_by_offset(r.phy_offset))
                ok = durable.holds(f.path, r.phy_offset - f.file_from_offset, record)
                with lock:
                    acks += 1
                    durable_acks += ok
        threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return acks, durable_acks


def test_sync_flush_acks_only_what_a_power_cut_would_keep(tmp_path, monkeypatch):
    acks, durable_acks = _acks_durable_at_ack_time(tmp_path, monkeypatch, FlushDiskType.SYNC_FLUSH, 60)
    assert acks == 180 and durable_acks == acks


def test_the_power_cut_model_catches_async_flush(tmp_path, monkeypatch):
    """The model can fail: ASYNC_FLUSH acknowledges puts the disk does not hold yet."""
    acks, durable_acks = _acks_durable_at_ack_time(tmp_path, monkeypatch, FlushDiskType.ASYNC_FLUSH, 20)
    assert acks == 60 and durable_acks < acks
