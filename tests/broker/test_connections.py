"""What connections cost a live broker, and what it does with peers that hold them without
progress: 10,000 idle connections, a frame trickled byte by byte, a connection waiting on the
frame budget. Memory is the broker process's RSS, read with psutil."""
from __future__ import annotations

import resource
import socket
import struct
import time

import psutil
import pytest

from mqcore.remoting import ResponseCode, SyncRemotingClient
from tests.support.processes import BrokerProcess
from tests.support.protocol import send
from tests.support.waiting import settled, wait_for

pytestmark = pytest.mark.timeout(300)

IDLE = 10_000
#: the issue's bound for an idle connection (it was a 128 KiB ring before any byte arrived)
MAX_BYTES_PER_IDLE = 16 * 1024


@pytest.fixture
def many_files():
    """Room for 10,000 sockets here and in the broker (which inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = IDLE + 1000
    if hard < need:
        pytest.fail(f"RLIMIT_NOFILE hard limit {hard} < {need}: raise it for the suite (ulimit -Hn)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _round(addr: tuple[str, int], proc: psutil.Process, base_fds: int) -> tuple[int, int]:
    """Open IDLE connections and wait until the broker holds them all; returns (RSS with
    them open, RSS once they are closed and the broker let go of them)."""
    socks = []
    try:
        for _ in range(IDLE):
            socks.append(socket.create_connection(addr, timeout=10))
        assert wait_for(lambda: proc.num_fds() >= base_fds + IDLE, timeout=60), proc.num_fds() - base_fds
        # the last accepts' channels are set up once RSS stops growing
        held = settled(lambda: proc.memory_info().rss, slack=256 << 10)
    finally:
        for s in socks:
            s.close()
    assert wait_for(lambda: proc.num_fds() <= base_fds + 10, timeout=60), proc.num_fds() - base_fds
    return held, settled(lambda: proc.memory_info().rss, slack=256 << 10)


def test_ten_thousand_idle_connections_cost_a_few_kib_each_and_are_given_back(tmp_path, many_files):
    with BrokerProcess(tmp_path / "store") as b, SyncRemotingClient() as rc:
        assert send(rc, b, "Warm", b"x").code == ResponseCode.SUCCESS
        proc = psutil.Process(b.proc.pid)
        host, port = b.broker_addr.rsplit(":", 1)
        base_fds, base = proc.num_fds(), proc.memory_info().rss
        held, after = _round((host, int(port)), proc, base_fds)
        per_idle = (held - base) / IDLE
        assert per_idle <= MAX_BYTES_PER_IDLE, f"{per_idle:.0f} bytes per idle connection"
        # every object of a closed connection is freed (tracemalloc says so), but the allocator
        # keeps part of the pages it took: what closing kept is reused by the next 10,000
        # instead of added to, so nothing leaks and RSS stays at the first round's peak
        held2, after2 = _round((host, int(port)), proc, base_fds)
        assert held2 - base <= 1.1 * (held - base), (held, held2)
        # RSS, not objects: allow for the allocator's noise on a loaded machine (a leak is +100 %)
        assert after2 - after <= 0.25 * (held - base), (after, after2)
        assert send(rc, b, "Warm", b"y").code == ResponseCode.SUCCESS
        print(f"\nbroker RSS: base {base >> 10} KiB, {IDLE} idle connections +{(held - base) >> 10} KiB "
              f"({per_idle:.0f} B each), after close +{(after - base) >> 10} KiB, second round +"
              f"{(held2 - base) >> 10} / +{(after2 - base) >> 10} KiB")


def test_a_trickled_frame_is_closed_and_a_steady_one_is_not(tmp_path):
    """A 16 MiB frame announced and sent at 1 byte per 0.5 s kept its connection for ever (a
    trickle counts as activity); below serverFrameMinBytesPerSecond for more than 10 s it is
    closed now, while a frame arriving at 4 KiB/s on another connection goes on."""
    with BrokerProcess(tmp_path / "store", conf={"serverFrameMinBytesPerSecond": 1024}) as b:
        host, port = b.broker_addr.rsplit(":", 1)
        slow = socket.create_connection((host, int(port)), timeout=5)
        steady = socket.create_connection((host, int(port)), timeout=5)
        slow.sendall(struct.pack(">ii", 16 << 20, 0))
        steady.sendall(struct.pack(">ii", 16 << 20, 0))
        t0 = time.monotonic()
        closed_after = None
        while time.monotonic() - t0 < 30:
            try:
                slow.send(b"x")
            except OSError:
                closed_after = time.monotonic() - t0
                break
            steady.sendall(b"y" * 2048)
            time.sleep(0.5)
            slow.setblocking(False)
            try:
                if slow.recv(1) == b"":
                    closed_after = time.monotonic() - t0
                    break
            except BlockingIOError:
                pass
            finally:
                slow.setblocking(True)
        assert closed_after is not None and 10 <= closed_after <= 25, closed_after
        steady.sendall(b"y" * 2048)  # still open: the peer never closed it
        steady.setblocking(False)
        with pytest.raises(BlockingIOError):
            steady.recv(1)
        assert "below the minimum 1024 (serverFrameMinBytesPerSecond)" in b.output()
        slow.close()
        steady.close()
