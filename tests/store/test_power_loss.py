"""Power cuts under load: the store on a file system that drops what was not synced.

kill -9 keeps the page cache, so the crash tests cannot show that SYNC_FLUSH keeps its
promise; a power cut does not keep it. The store here lives on ``tests/support/powercut_fs``
(FUSE): data written, by ``write`` or through a shared mapping, reaches its disk directory
only at ``fsync``/``fdatasync`` - the broker flushes its mapped files with fdatasync, and
the kernel writes a mapping's dirty pages to the FUSE process before it sends the sync
(checked first below, so the model is known to see the broker's mapped writes). A cut drops
the rest; the broker is killed at that instant; the file system is mounted again from its
disk directory, and the broker restarts on what survived.

* SYNC_FLUSH, 20 cycles at random moments under load from four producers: every
  acknowledged message is delivered after the restart, nothing delivered was not sent, and
  ``mqstore verify`` passes at the end.
* ASYNC_FLUSH: what survives is, per queue, a prefix of what was acknowledged (only the
  unflushed tail is lost), recovery reports where the kept log ends and that messages
  acknowledged later were lost, and verify passes.
"""
from __future__ import annotations

import mmap
import os
import random
import shutil
import threading
import time

import pytest

from mqcore.errors import MQError
from mqcore.remoting import ResponseCode, SyncRemotingClient
from mqcore.tools.mqstore import main as mqstore_main
from tests.support.powercut_fs import PowerCutMount
from tests.support.processes import BrokerProcess
from tests.support.protocol import decode, pull, send

pytestmark = pytest.mark.timeout(600)

TOPIC = "PowerCut"
QUEUES = 2
PRODUCERS = 4
CONF = {"mappedFileSizeCommitLog": 4 << 20, "mappedFileSizeConsumeQueue": 20 * 20_000,
        "maxHashSlotNum": 5_000, "maxIndexNum": 20_000}


@pytest.fixture
def powercut(tmp_path):
    """(mount, disk directory) of a power-cut file system; fails clearly without FUSE."""
    if not os.path.exists("/dev/fuse") or shutil.which("fusermount3") is None:
        pytest.fail("the power-loss test needs /dev/fuse and fusermount3 (Debian fuse3; scripts/setup.d/50-fuse.sh)")
    disk, mnt = str(tmp_path / "disk"), str(tmp_path / "mnt")
    m = PowerCutMount(disk, mnt)
    with m:
        yield m, disk


def test_the_model_sees_mapped_writes_at_fdatasync_and_drops_the_rest(powercut):
    """What makes the broker's write path testable here: a shared mapping's dirty pages
    reach the FUSE process when the file is synced, and what was not synced is lost."""
    m, disk = powercut
    fd = os.open(os.path.join(m.mountpoint, "f"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 1 << 20)
        mm = mmap.mmap(fd, 1 << 20)
        mm[0:6] = b"synced"
        os.fdatasync(fd)
        mm[8192:8200] = b"unsynced"
        os.pwrite(fd, b"written", 20_000)
        assert os.pread(fd, 7, 20_000) == b"written"  # readable before the cut
        m.cut_power()
        with pytest.raises(OSError):
            os.fdatasync(fd)  # the power is off
        mm.close()
    finally:
        os.close(fd)
    m.unmount()
    with open(os.path.join(disk, "f"), "rb") as f:
        data = f.read()
    assert data[:6] == b"synced" and data[8192:8200] == bytes(8) and data[20_000:20_007] == bytes(7)
    m.mount()


class Load:
    """Producers sending numbered bodies until stopped; what was sent and acknowledged."""

    def __init__(self, broker: BrokerProcess, tag: str, producers: int = PRODUCERS) -> None:
        self.broker = broker
        self.tag = tag
        self.sent: set[bytes] = set()
        self.acked: dict[int, list[bytes]] = {q: [] for q in range(QUEUES)}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(producers)]

    def _run(self, t: int) -> None:
        qid = t % QUEUES
        with SyncRemotingClient() as rc:
            i = 0
            while not self.stop.is_set():
                body = f"{self.tag}-p{t}-{i:06d}".encode()
                with self.lock:
                    self.sent.add(body)
                try:
                    r = send(rc, self.broker, TOPIC, body, queue_id=qid)
                except MQError:
                    return  # the broker is gone
                if r.code == ResponseCode.SUCCESS:
                    with self.lock:
                        self.acked[qid].append(body)
                i += 1

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


def delivered(rc, broker) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for qid in range(QUEUES):
        bodies: list[bytes] = []
        offset = 0
        while True:
            r = pull(rc, broker, TOPIC, offset, queue_id=qid, sub="*")
            if r.code != ResponseCode.SUCCESS:
                break
            bodies += [m.body for m in decode(r.body)]
            offset = int(r.ext_fields["nextBeginOffset"])
        out[qid] = bodies
    return out


def on_mount(conf: dict, mnt: str) -> dict:
    """The store's data files on the mount; its root (the lock file, and config/ for topics and
    offsets) beside it: POSIX record locks fail with EINVAL through this FUSE binding."""
    return dict(conf, storePathCommitLog=os.path.join(mnt, "commitlog"),
                storePathConsumeQueue=os.path.join(mnt, "consumequeue"), storePathIndex=os.path.join(mnt, "index"),
                storeCheckpoint=os.path.join(mnt, "checkpoint"), abortFile=os.path.join(mnt, "abort"))


def cut_under_load(rng: random.Random, m: PowerCutMount, broker: BrokerProcess, tag: str,
                   producers: int = PRODUCERS) -> Load:
    with Load(broker, tag, producers) as load:
        time.sleep(rng.uniform(0.3, 1.5))
        m.cut_power()
        broker.kill9()
    m.unmount()
    m.mount()
    return load


def test_sync_flush_loses_no_acknowledged_message_over_twenty_power_cuts(powercut, tmp_path):
    m, disk = powercut
    rng = random.Random(2024)
    conf = on_mount(dict(CONF, flushDiskType="SYNC_FLUSH", logDir=str(tmp_path / "logs")), m.mountpoint)
    store = str(tmp_path / "root")
    acked: set[bytes] = set()
    sent: set[bytes] = set()
    broker = BrokerProcess(store, conf=conf).start()
    try:
        for cycle in range(20):
            load = cut_under_load(rng, m, broker, f"c{cycle:02d}")
            acked.update(b for bodies in load.acked.values() for b in bodies)
            sent |= load.sent
            broker.restart()
            with SyncRemotingClient() as rc:
                got = delivered(rc, broker)
            bodies = [b for q in got.values() for b in q]
            missing = acked - set(bodies)
            assert not missing, f"cycle {cycle}: {len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
            assert set(bodies) <= sent, f"cycle {cycle}: delivered what was never sent"
            assert len(bodies) == len(set(bodies)), f"cycle {cycle}: a message delivered twice"
            assert "Traceback" not in broker.output(), broker.output()[-3000:]
        assert len(acked) > 200, len(acked)  # the cuts happened under real load
        print(f"\nSYNC_FLUSH: 20 power cuts, {len(acked)} acknowledged messages, none lost")
        assert broker.stop() == 0
    finally:
        broker.stop()
    assert mqstore_main(["verify", disk]) == 0


def test_async_flush_loses_only_the_unflushed_tail_and_says_where_recovery_cut(powercut, tmp_path):
    m, disk = powercut
    rng = random.Random(7)
    conf = on_mount(dict(CONF, flushDiskType="ASYNC_FLUSH", logDir=str(tmp_path / "logs")), m.mountpoint)
    store = str(tmp_path / "root")
    broker = BrokerProcess(store, conf=conf).start()
    lost_total = 0
    reports: list[str] = []
    try:
        with SyncRemotingClient() as rc:
            before = delivered(rc, broker)
        for cycle in range(5):
            # one producer per queue: its acknowledgements are in queue-offset order
            load = cut_under_load(rng, m, broker, f"a{cycle}", producers=QUEUES)
            broker.restart()
            out = broker.output()
            assert "abnormal" in out, out[-3000:]
            # the loss is reported: where the kept log ends, and that later acks are gone
            reports.append(next(line for line in out.splitlines() if "had not been flushed and is lost" in line))
            with SyncRemotingClient() as rc:
                got = delivered(rc, broker)
            for qid in range(QUEUES):
                mine = load.acked[qid]
                assert got[qid][:len(before[qid])] == before[qid]  # earlier cycles' survivors stay
                new = got[qid][len(before[qid]):]
                assert set(new) <= load.sent, f"cycle {cycle}: delivered what was never sent"
                acked_new = [b for b in new if b in set(mine)]
                # only an unflushed tail is lost: the survivors are the first acknowledged ones
                assert acked_new == mine[:len(acked_new)], (
                    f"cycle {cycle} queue {qid}: a hole, not a tail: first acked {mine[:3]}, survivors {new[:3]}, "
                    f"{len(acked_new)} of {len(mine)} acked survive; {broker.output()[-2500:]}")
                lost_total += len(mine) - len(acked_new)
            with SyncRemotingClient() as rc:
                before = delivered(rc, broker)
        assert broker.stop() == 0
    finally:
        broker.stop()
    assert mqstore_main(["verify", disk]) == 0
    print(f"\nASYNC_FLUSH: {lost_total} acknowledged messages lost in 5 power cuts (unflushed)\n" + "\n".join(reports))
