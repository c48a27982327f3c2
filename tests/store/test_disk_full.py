"""A full disk: puts are refused with a clear status, reads go on, nothing dies.

Each scenario fills a small tmpfs mounted for the test. The store runs in a child
process, because the fault being guarded against (a store into a mapped page with no
block behind it) kills the whole process with SIGBUS: a test in-process would take
pytest down with it instead of failing.
"""
from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap

import pytest

from mqcore.remoting import ResponseCode, SyncRemotingClient
from tests.broker.test_protocol import decode, pull, send
from tests.support.processes import BrokerProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(180)

FS_BYTES = 8 << 20
FILE_BYTES = 1 << 20


@pytest.fixture
def small_fs():
    """An 8 MiB tmpfs of our own, unmounted afterwards."""
    d = tempfile.mkdtemp(prefix="mqcore-full-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={FS_BYTES}", "tmpfs", d],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(d)
        msg = f"cannot mount a tmpfs for the disk-full test ({r.stderr.strip() or r.returncode}); needs root"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", d], check=False)
        os.rmdir(d)


#: what both children count: the messages of one queue a reader gets back, all of them fetched
_CHILD_HELPERS = textwrap.dedent(r"""
    def _open_store(cfg, now, **kw):
        from mqcore.store.message_store import MessageStore
        s = MessageStore(cfg, clock=lambda: now[0], **kw)
        s.load()
        s.start()
        return s

    def _readable(s, topic, found):
        n, offset = 0, 0
        while True:
            got = s.get_message(topic, 0, offset, 1000)
            if got.status is not found:
                return n
            n += got.message_count
            offset = got.next_begin_offset
""")

# The child: fills the store until puts are refused, then reports what it saw as JSON.
CHILD = _CHILD_HELPERS + textwrap.dedent(r"""
    import json, os, sys
    from mqcore.config import StoreConfig
    from mqcore.message import MessageExtBrokerInner
    from mqcore.store.message_store import MessageStore
    from mqcore.store.results import GetMessageStatus

    root, mode = sys.argv[1], sys.argv[2]
    now = [1_700_000_000_000]
    cfg = StoreConfig(store_path=os.path.join(root, "store"), commitlog_file_size_bytes=1 << 20,
                      consume_queue_file_size_bytes=20 * 1000, index_slots=64, index_entries=256,
                      max_message_size_bytes=256 << 10, prefault_window_bytes=256 << 10)
    # "fallocate": the ratio guard is blinded, so only the block reservation stands between
    # the writer and a SIGBUS; "ratio": the real guard (diskSpaceWarningLevelRatio 90 %)
    blind = (lambda path: (0, 1 << 40)) if mode == "fallocate" else None
    kw = {"space_usage": blind} if blind else {}

    def open_store():
        return _open_store(cfg, now, **kw)

    def readable(s):  # messages of the queue a reader gets back, all of them fetched
        return _readable(s, "Full", GetMessageStatus.FOUND)

    def put(s, i):
        return s.put_message(MessageExtBrokerInner(topic="Full", body=bytes([i % 251]) * (100 << 10),
                                                   properties={"KEYS": "k%d" % i}))

    out = {}
    ballast = os.path.join(root, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"b" * (1 << 20))
    s = open_store()
    stored, refused = 0, None
    for i in range(200):
        r = put(s, i)
        if not r.status.stored:
            refused = r
            break
        stored += 1
    out["stored"] = stored
    out["status"] = refused.status.value if refused else None
    out["remark"] = refused.remark if refused else None
    # refused again at once (no new fallocate per put), reads still served
    out["again"] = put(s, 999).status.value
    out["readable"] = readable(s)
    if mode == "fallocate":
        # space freed: refused until the retry interval has passed, then accepted again
        os.unlink(ballast)
        out["freed_at_once"] = put(s, 1001).status.value
        now[0] += 2000
        out["freed_later"] = put(s, 1002).status.value
        stored += out["freed_later"] == "PUT_OK"
        out["stored"] = stored
    s.shutdown()
    # restart on the (still) full disk
    if mode == "restart":
        # fill what the guard left free, and make the last commitlog file sparse again as a
        # store written by Apache RocketMQ (no fallocate) would be
        last = sorted(os.listdir(cfg.commitlog_dir))[-1]
        path = os.path.join(cfg.commitlog_dir, last)
        data = open(path, "rb").read()
        os.unlink(path)
        with open(path, "wb") as f:
            f.write(data.rstrip(b"\0"))
            f.truncate(1 << 20)
        fd = os.open(os.path.join(root, "filler"), os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"x" * 4096):
                pass
        except OSError:
            pass
        os.close(fd)
    s = open_store()
    out["after_restart"] = put(s, 1000).status.value
    out["readable_after_restart"] = readable(s)
    s.shutdown()
    print("RESULT " + json.dumps(out))
""")


def _run_child(root: str, mode: str) -> dict:
    p = subprocess.run([sys.executable, "-c", CHILD, root, mode], capture_output=True, text=True, timeout=120)
    assert p.returncode != -signal.SIGBUS, f"the store died with SIGBUS:\n{p.stderr[-3000:]}"
    assert p.returncode == 0, p.stderr[-3000:]
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_unreservable_file_refuses_puts_instead_of_sigbus(small_fs):
    out = _run_child(small_fs, "fallocate")
    assert out["status"] == "SERVICE_NOT_AVAILABLE", out
    assert "full" in out["remark"], out
    # 8 MiB holds fewer than 8 files of 1 MiB beside consume queue, index and checkpoint
    assert 30 <= out["stored"] < 80, out
    assert out["again"] == "SERVICE_NOT_AVAILABLE"
    assert out["readable"] == out["stored"] - 1
    assert out["freed_at_once"] == "SERVICE_NOT_AVAILABLE" and out["freed_later"] == "PUT_OK", out
    assert out["after_restart"] == "PUT_OK", out
    assert out["readable_after_restart"] == out["stored"] + 1


def test_ratio_is_checked_before_every_new_file(small_fs):
    out = _run_child(small_fs, "ratio")
    assert out["status"] == "SERVICE_NOT_AVAILABLE", out
    assert "diskSpaceWarningLevelRatio 90%" in out["remark"], out
    # refused before the partition passes 90 %: at most 7 files' worth of 100 KiB bodies
    assert out["stored"] <= 7 * 10, out
    assert out["readable"] == out["stored"]
    assert out["after_restart"] == "SERVICE_NOT_AVAILABLE"


def test_restart_on_full_disk_with_sparse_last_file(small_fs):
    out = _run_child(small_fs, "restart")
    assert out["after_restart"] == "SERVICE_NOT_AVAILABLE", out
    assert out["readable_after_restart"] == out["stored"], out


def test_producer_gets_service_not_available_and_reads_continue(small_fs):
    conf = {"mappedFileSizeCommitLog": FILE_BYTES, "mappedFileSizeConsumeQueue": 20 * 1000,
            "maxMessageSize": 256 << 10, "maxIndexNum": 256, "maxHashSlotNum": 64}
    with BrokerProcess(os.path.join(small_fs, "store"), conf=conf) as b, SyncRemotingClient() as rc:
        codes = []
        for i in range(120):
            r = send(rc, b, "FullT", bytes([i % 251]) * (100 << 10))
            codes.append(r.code)
            if r.code != ResponseCode.SUCCESS:
                break
        assert codes[-1] == ResponseCode.SERVICE_NOT_AVAILABLE, (codes[-3:], r.remark)
        assert "disk is full" in r.remark
        stored = len(codes) - 1
        assert stored > 10
        assert b.proc.poll() is None, b.output()
        got = decode(pull(rc, b, "FullT", 0, sub="*").body)
        assert got and got[0].body[:1] == b"\0"
        # restart on the full disk: the broker comes up, refuses, and serves reads
        b.restart()
        r = send(rc, b, "FullT", b"after restart")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, r.remark
        assert decode(pull(rc, b, "FullT", 0, sub="*").body)
        assert b.proc.poll() is None


def _fill(directory: str) -> str:
    """Fill the file system to 100 % with one file; returns its path."""
    path = os.path.join(directory, "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"x" * 65536):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    return path


def test_topic_creation_on_a_full_disk_is_status_14_and_writes_resume_when_freed(small_fs, tmp_path):
    """A send that auto-creates its topic on a 100 % full disk used to get SYSTEM_ERROR and
    log a traceback (topics.json could not be written); after a start on a full disk, writes
    stayed refused until the first cleanup pass, a minute later. Now: status 14, nothing
    created, and writes resume within 2 s of space being freed, before and after a restart."""
    conf = {"mappedFileSizeCommitLog": FILE_BYTES, "mappedFileSizeConsumeQueue": 20 * 1000,
            "maxMessageSize": 256 << 10, "maxIndexNum": 256, "maxHashSlotNum": 64,
            "logDir": str(tmp_path / "logs")}  # logs off the full disk: a failed log write prints a traceback
    with BrokerProcess(os.path.join(small_fs, "store"), conf=conf) as b, SyncRemotingClient() as rc:
        assert send(rc, b, "Exists", b"x").code == ResponseCode.SUCCESS
        filler = _fill(small_fs)
        r = send(rc, b, "NewOnFull", b"x")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk is full" in r.remark, (r.code, r.remark)
        r = send(rc, b, "%RETRY%cg", b"x")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE, (r.code, r.remark)
        os.unlink(filler)
        assert wait_for(lambda: send(rc, b, "NewOnFull", b"x").code == ResponseCode.SUCCESS, timeout=2)
        # a start on a full disk: refused at once, accepted again within 2 s of space freed
        filler = _fill(small_fs)
        b.restart()
        r = send(rc, b, "Exists", b"y")
        assert r.code == ResponseCode.SERVICE_NOT_AVAILABLE and "disk is full" in r.remark, (r.code, r.remark)
        os.unlink(filler)
        assert wait_for(lambda: send(rc, b, "Exists", b"z").code == ResponseCode.SUCCESS, timeout=2)
        assert b.proc.poll() is None
        assert "Traceback" not in b.output(), b.output()[-3000:]
    log_text = "".join(p.read_text(errors="replace") for p in (tmp_path / "logs").rglob("*") if p.is_file())
    assert "Traceback" not in log_text, log_text[-3000:]


# The child for the consume queue's own reservation: its files are sparse (RocketMQ's 6 MB
# size) and reserved a step at a time, so a queue can need blocks while the commitlog file
# still has room. The disk is filled after the first put; the ratio guard is blinded so only
# the reservation steps stand between a unit written into a hole and a SIGBUS.
CQ_CHILD = _CHILD_HELPERS + inspect.getsource(_fill) + textwrap.dedent(r"""
    import json, os, sys
    from mqcore.config import StoreConfig
    from mqcore.message import MessageExtBrokerInner
    from mqcore.store.message_store import MessageStore
    from mqcore.store.results import GetMessageStatus

    root, mode = sys.argv[1], sys.argv[2]
    now = [1_700_000_000_000]
    cfg = StoreConfig(store_path=os.path.join(root, "store"), commitlog_file_size_bytes=1 << 20,
                      consume_queue_file_size_bytes=6_000_000, index_slots=64, index_entries=256)

    def open_store():
        return _open_store(cfg, now, space_usage=lambda path: (0, 1 << 40))

    def readable(s):  # messages of the queue a reader gets back, all of them fetched
        return _readable(s, "Sparse", GetMessageStatus.FOUND)

    def put(s, i):
        return s.put_message(MessageExtBrokerInner(topic="Sparse", body=b"m%06d" % i))

    def put_batch(s, i):
        return s.put_messages([MessageExtBrokerInner(topic="Sparse", body=b"b%06d" % (i + k)) for k in range(50)])

    out = {}
    s = open_store()
    assert put(s, 0).status.value == "PUT_OK"
    s.get_max_offset_in_queue("Sparse", 0)  # a new queue's file is made off the put's path: a read waits for it
    cq = os.path.join(cfg.store_path, "consumequeue", "Sparse", "0", "%020d" % 0)
    out["cq_blocks_after_one"] = os.stat(cq).st_blocks * 512
    filler = _fill(root)
    stored, refused = 1, None
    for i in range(1, 2000):
        results = [put(s, i)] if mode == "single" else put_batch(s, i)  # a batch's results are per message
        stored += sum(1 for x in results if x.status.stored)
        refused = next((x for x in results if not x.status.stored), None)
        if refused is not None:
            break
    out["stored"] = stored
    out["status"] = refused.status.value if refused else None
    out["remark"] = refused.remark if refused else None
    out["readable"] = readable(s)
    os.unlink(filler)
    now[0] += 2000
    out["freed_later"] = put(s, 5000).status.value
    out["readable_freed"] = readable(s)
    s.shutdown()
    s = open_store()
    out["after_restart"] = put(s, 5001).status.value
    out["readable_after_restart"] = readable(s)
    out["cq_blocks_end"] = os.stat(cq).st_blocks * 512
    s.shutdown()
    print("RESULT " + json.dumps(out))
""")


@pytest.mark.parametrize("mode", ["single", "batch"])
def test_sparse_consume_queue_step_refused_on_full_disk_instead_of_sigbus(small_fs, mode):
    p = subprocess.run([sys.executable, "-c", CQ_CHILD, small_fs, mode], capture_output=True, text=True, timeout=120)
    assert p.returncode != -signal.SIGBUS, f"the store died with SIGBUS:\n{p.stderr[-3000:]}"
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT "):])
    # one message: one page of the 6 MB file has blocks
    assert out["cq_blocks_after_one"] <= 8192, out
    # the commitlog file had room for thousands more; the queue's next step had none
    assert out["status"] == "SERVICE_NOT_AVAILABLE" and "full" in out["remark"], out
    assert 100 <= out["stored"] < 2000, out
    assert out["readable"] == out["stored"], out
    assert out["freed_later"] == "PUT_OK", out
    assert out["readable_freed"] == out["stored"] + 1, out
    assert out["after_restart"] == "PUT_OK", out
    assert out["readable_after_restart"] == out["stored"] + 2, out
    assert out["cq_blocks_end"] < 1 << 20, out
