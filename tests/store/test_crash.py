"""Crash test: SIGKILL a SYNC_FLUSH writer at random moments; every acknowledged
message must be there after recovery, with consecutive queue offsets."""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

from mqcore.config import FlushDiskType, StoreConfig
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
                            seen[rec[4]] = rec[13]
                    offset = got.next_begin_offset
                assert sorted(seen) == list(range(len(seen))), "queue offsets must be consecutive"
                for (ww, off), body in acked.items():
                    if ww == w:
                        assert seen.get(off) == body, f"acknowledged message {w}/{off} lost in round {round_no}"
    assert len(acked) > 100
