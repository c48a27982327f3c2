"""How an mqbroker slave reads its master's HA stream: a read's transfers at once.

Real processes: an mqbroker master writes a commitlog and is stopped; a stand-in master (a
socket in this test, named by the slave's ``haMasterAddress``) then serves those bytes over
RocketMQ 4.9's HA protocol in two ways:

- a burst: hundreds of small transfers in one write. The slave takes what one read brings at
  once, and reports its offset after the read, not after each transfer (as Apache's slave
  does: a report, a dispatch per transfer cost the slave most of its time under load);
- a trickle: transfers cut anywhere (inside a header, inside a record) and sent in small
  pieces with pauses, so every read ends in the middle of something.

Either way the slave's commitlog and consume queues end byte for byte as the master's.
"""
from __future__ import annotations

import glob
import os
import random
import socket
import struct
import threading
import time

import pytest

from mqcore.admin.api import MQAdmin
from mqcore.client import Message, Producer
from tests.client.integration.helpers import create_topic
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

FILE = 1 << 20
TOPIC = "HaReadsTopic"
HEADER = struct.Struct(">qi")
REPORT = struct.Struct(">q")


def _files(store, sub: str) -> dict[str, bytes]:
    root = os.path.join(store, sub)
    return {os.path.relpath(p, root): open(p, "rb").read()
            for p in sorted(glob.glob(os.path.join(root, "**"), recursive=True)) if os.path.isfile(p)}


class _StandInMaster:
    """Accepts one slave and serves ``log[:end]``: the first ``burst_end`` bytes as small
    transfers in one write, the rest trickled; records every report the slave sends."""

    def __init__(self, log: bytes, burst_end: int, seed: int):
        self.log, self.burst_end, self.rnd = log, burst_end, random.Random(seed)
        self.reports: list[tuple[float, int]] = []
        self.error: BaseException | None = None
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.port = self._srv.getsockname()[1]
        self._done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _transfers(self, start: int, end: int, lo: int, hi: int) -> bytes:
        out, pos = bytearray(), start
        while pos < end:
            n = min(end - pos, self.rnd.randint(lo, hi))
            out += HEADER.pack(pos, n) + self.log[pos:pos + n]
            pos += n
        return bytes(out)

    def _run(self) -> None:
        try:
            conn, _ = self._srv.accept()
            with conn:
                first = conn.recv(REPORT.size, socket.MSG_WAITALL)
                assert REPORT.unpack(first)[0] == 0, first  # an empty slave
                threading.Thread(target=self._read_reports, args=(conn,), daemon=True).start()
                burst = self._transfers(0, self.burst_end, 64, 256)  # hundreds of transfers
                conn.sendall(burst)
                assert wait_for(lambda: self.reported() >= self.burst_end, timeout=30), self.reported()
                rest = self._transfers(self.burst_end, len(self.log), 1, 3000)
                pos = 0
                while pos < len(rest):  # pieces cut anywhere: inside headers and records
                    n = self.rnd.randint(1, 700)
                    conn.sendall(rest[pos:pos + n])
                    pos += n
                    time.sleep(self.rnd.choice((0, 0, 0.001, 0.003)))
                self._done.wait(60)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def _read_reports(self, conn: socket.socket) -> None:
        while True:
            data = conn.recv(REPORT.size, socket.MSG_WAITALL)
            if len(data) < REPORT.size:
                return
            self.reports.append((time.monotonic(), REPORT.unpack(data)[0]))

    def reported(self) -> int:
        return self.reports[-1][1] if self.reports else -1

    def close(self) -> None:
        self._done.set()
        self._srv.close()


def test_a_slave_takes_a_reads_transfers_at_once_and_copies_a_trickle_byte_for_byte(tmp_path):
    conf = {"mappedFileSizeCommitLog": str(FILE)}
    with NamesrvProcess() as ns, BrokerProcess(tmp_path / "m", namesrv=ns.addr, conf=conf) as master, \
            MQAdmin(ns.addr) as admin:
        create_topic(master.broker_addr, ns.addr, TOPIC)
        with Producer("pg-ha-reads", namesrv_addr=ns.addr) as p:
            for f in [p.send_async(Message(TOPIC, b"r" * (50 + i % 400), keys=f"k{i}")) for i in range(1500)]:
                assert f.result(30).ok
        end = int(admin.broker_runtime_stats(master.broker_addr)["commitLogMaxOffset"])
        assert 300_000 < end < FILE  # one file
    log = open(tmp_path / "m" / "commitlog" / f"{0:020d}", "rb").read()[:end]
    seed = random.randrange(1 << 30)
    stand_in = _StandInMaster(log, burst_end=end // 3, seed=seed)
    try:
        with BrokerProcess(tmp_path / "s", conf={**conf, "brokerId": "1", "brokerRole": "SLAVE",
                                                 "haMasterAddress": f"127.0.0.1:{stand_in.port}"}):
            assert wait_for(lambda: stand_in.reported() == end or stand_in.error is not None, timeout=60), \
                (stand_in.reported(), end, seed)
            assert stand_in.error is None, (stand_in.error, seed)
            during_burst = [o for _t, o in stand_in.reports if o <= stand_in.burst_end]
            # the burst is ~1,000 transfers (64-256 bytes each); one report per read, and a
            # read takes what has arrived (a report per transfer: ~1,000 reports)
            assert len(during_burst) < 50, (len(during_burst), seed)
    finally:
        stand_in.close()
    assert _files(tmp_path / "s", "commitlog") == _files(tmp_path / "m", "commitlog")
    assert _files(tmp_path / "s", "consumequeue") == _files(tmp_path / "m", "consumequeue")
