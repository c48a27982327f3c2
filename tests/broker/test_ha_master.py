"""mqbroker as an HA master (RocketMQ 4.9's HAService protocol): a slave reporting its max
offset receives the commitlog byte for byte; malformed peers lose only their connection."""
import socket
import struct

import pytest

from mqcore.client import Message, Producer
from mqcore.testing import TestBroker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

FILE = 1024 * 1024


class Slave:
    """A minimal HA slave, as Apache's HAClient: report the offset, read header + body."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.data = bytearray()
        self.start = None

    def report(self, offset: int) -> None:
        self.sock.sendall(struct.pack(">q", offset))

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def read_transfer(self) -> tuple[int, int]:
        head = self._exact(12)
        off, size = int.from_bytes(head[:8], "big", signed=True), int.from_bytes(head[8:], "big", signed=True)
        body = self._exact(size)
        if self.start is None:
            self.start = off
        assert off == self.start + len(self.data), "transfers are contiguous"
        self.data += body
        return off, size


def _broker(**conf):
    return TestBroker({"mappedFileSizeCommitLog": str(FILE), "haSendHeartbeatInterval": "200",
                       "haTransferBatchSize": "4096", **conf})


def _commitlog_bytes(b, lo, hi) -> bytes:
    cl = b.broker.store.commitlog
    out = bytearray()
    pos = lo
    while pos < hi:
        mf = cl.queue.find_by_offset(pos)
        p = pos - mf.file_from_offset
        n = min(hi - pos, mf.wrote_position - p)
        out += bytes(mf.view(p, n))
        pos += n
    return bytes(out)


def test_a_slave_receives_the_commitlog_byte_for_byte_across_files():
    with _broker() as b:
        with Producer("pg", namesrv_addr=b.namesrv_addr) as p:
            for i in range(3000):  # ~1.5 files of 1 MiB: the stream crosses a file boundary
                p.send(Message("HaTopic", b"x" * 400 + str(i).encode()))
        cl = b.broker.store.commitlog
        end = cl.max_offset
        assert end > FILE
        s = Slave(b.broker.ha_port)
        s.report(0)  # an empty slave starts at the last file, as Apache's master does
        while s.start is None or s.start + len(s.data) < end:
            off, size = s.read_transfer()
            assert size <= 4096
        assert s.start == end - end % FILE
        assert bytes(s.data) == _commitlog_bytes(b, s.start, end)
        # a slave that reports offset 100 gets the log from exactly there
        s2 = Slave(b.broker.ha_port)
        s2.report(100)
        while s2.start is None or s2.start + len(s2.data) < FILE:
            s2.read_transfer()
        assert s2.start == 100
        assert bytes(s2.data[:FILE - 100]) == _commitlog_bytes(b, 100, FILE)
        # idle: heartbeats (size 0) at the end
        s.report(end)
        assert s.read_transfer() == (end, 0)
        s.sock.close()
        s2.sock.close()


@pytest.mark.parametrize("report", [-1, -(2 ** 63), 2 ** 62, "garbage"])
def test_malformed_reports_close_only_that_connection(report):
    with _broker() as b:
        with Producer("pg", namesrv_addr=b.namesrv_addr) as p:
            p.send(Message("HaTopic", b"first"))
            good = Slave(b.broker.ha_port)
            good.report(0)
            good.read_transfer()
            bad = socket.create_connection(("127.0.0.1", b.broker.ha_port), timeout=10)
            bad.sendall(b"\xff\x00garbage!" if report == "garbage" else struct.pack(">q", report))
            assert bad.recv(4096) in (b"",) or _drained_then_closed(bad)
            bad.close()
            assert wait_for(lambda: len(b.broker.ha.connections) == 1)
            # the broker and the well-behaved slave carry on
            p.send(Message("HaTopic", b"second"))
            end = b.broker.store.commitlog.max_offset
            while good.start + len(good.data) < end:
                good.read_transfer()
            assert good.data.endswith(b"second") or b"second" in bytes(good.data)


def _drained_then_closed(sock) -> bool:
    while True:
        if not sock.recv(65536):
            return True


def test_a_peer_that_never_reads_is_dropped_with_bounded_memory():
    with _broker() as b:
        with Producer("pg", namesrv_addr=b.namesrv_addr) as p:
            for i in range(2000):
                p.send(Message("HaTopic", b"y" * 1000))
        lazy = socket.socket()
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        lazy.connect(("127.0.0.1", b.broker.ha_port))
        lazy.sendall(struct.pack(">q", 0))  # asks for ~2 MB and never reads
        for c in list(b.broker.ha.connections):
            assert c.writer.transport.get_write_buffer_size() <= b.broker.ha.write_limit + 64 * 1024
        assert wait_for(lambda: not b.broker.ha.connections, timeout=30) or all(
            c.writer.transport.get_write_buffer_size() <= b.broker.ha.write_limit + 64 * 1024
            for c in b.broker.ha.connections)
        lazy.close()


def test_a_slave_behind_the_masters_oldest_file_gets_nothing_wrong_and_is_named_in_the_log(caplog):
    """Its commitlog files deleted under a lagging slave, the master sends that slave only
    heartbeats at its offset, as Apache's master does (nothing else to send from there), and
    says once why; the connection, the broker and its other slaves carry on."""
    with _broker(fileReservedTime="1", deleteWhen="04") as b:
        with Producer("pg", namesrv_addr=b.namesrv_addr) as p:
            for _ in range(2600):  # three commitlog files of 1 MiB
                p.send(Message("HaTopic", b"z" * 1000))
            cl = b.broker.store.commitlog
            b.advance(hours=2)  # the first files are past fileReservedTime
            b.broker.cleanup.request_manual_delete()
            last_file = cl.max_offset - cl.max_offset % FILE
            assert last_file >= 2 * FILE
            # every file but the one being written goes
            assert wait_for(lambda: cl.min_offset == last_file, timeout=30), cl.min_offset
            with caplog.at_level("WARNING", logger="mqcore.broker.ha"):
                lagging = Slave(b.broker.ha_port)
                lagging.report(100)  # inside the deleted first file
                assert lagging.read_transfer() == (100, 0)  # a heartbeat, no data
                assert wait_for(lambda: "cannot catch up" in caplog.text, timeout=10), caplog.text
                assert f"needs commitlog offset 100, but this master's oldest data starts at {cl.min_offset}" \
                    in caplog.text
                fresh = Slave(b.broker.ha_port)
                fresh.report(cl.min_offset)
                off, size = fresh.read_transfer()
                assert off == cl.min_offset and size > 0
                assert fresh.data == _commitlog_bytes(b, off, off + size)
                p.send(Message("HaTopic", b"after"))
                assert lagging.read_transfer() == (100, 0)
                assert caplog.text.count("cannot catch up") == 1
            lagging.sock.close()
            fresh.sock.close()
