"""The master side of RocketMQ 4.9's HA protocol (HAService/HAConnection), on asyncio.

A slave connects and keeps reporting its max physical offset as 8 big-endian bytes; the
master streams the commitlog from there, each transfer a 12-byte header (8 bytes phy
offset, 4 bytes size) followed by at most ``batch`` bytes of the log; while there is
nothing new it sends a header with size 0 every ``heartbeat_s``. As in Apache, the first
report decides the start: a slave that reports 0 starts at the beginning of the master's
last commitlog file; any other offset is served from where it points.

With SYNC_MASTER a send waits for a slave (``HAServer.wait_replica``, Apache's
``CommitLog.submitReplicaRequest`` and ``GroupTransferService``): answered at once with
SLAVE_NOT_AVAILABLE when no slave is connected or the best one is ``fallbehind_max`` or more
behind, else when some slave has reported an offset at or past the message's end, or with
FLUSH_SLAVE_TIMEOUT after ``timeout_s`` (the message is stored either way).

Each connection is on its own: a report that is negative, beyond the master's end, or a
peer that stops reading (its writes stay buffered past ``write_limit``) closes only that
connection, so a bad peer costs a bounded amount of memory and never the broker.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from mqcore.format.layout import HA_SLAVE_REPORT, HA_TRANSFER_HEADER

if TYPE_CHECKING:
    from mqcore.store.commitlog import CommitLog

log = logging.getLogger(__name__)


class HAConnection:
    def __init__(self, server: "HAServer", reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.server = server
        self.reader = reader
        self.writer = writer
        self.peer = writer.get_extra_info("peername")
        #: what the slave last reported having (its ack offset); -1 before the first report
        self.ack_offset = -1
        #: time.monotonic() when this slave last had everything the master had (lag in time)
        self.caught_up_at = time.monotonic()
        self._reported = asyncio.Event()
        self._next = -1
        self._told_gone = False  # the "cannot catch up" warning is given once a connection

    async def run(self) -> None:
        tasks = [asyncio.ensure_future(self._read_reports()), asyncio.ensure_future(self._transfer())]
        try:
            done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in pending:
                t.cancel()
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    log.warning("HA connection %s closed: %s", self.peer, t.exception())
        finally:
            self.writer.close()

    async def _read_reports(self) -> None:
        while True:
            data = await self.reader.readexactly(HA_SLAVE_REPORT.size)
            (offset,) = HA_SLAVE_REPORT.unpack(data)
            if offset < 0 or offset > self.server.max_offset():
                raise ValueError(f"slave reported offset {offset}, outside 0..{self.server.max_offset()}")
            self.ack_offset = offset
            if offset >= self.server.max_offset():
                self.caught_up_at = time.monotonic()
            self.server.on_ack(self, offset)
            self._reported.set()

    def _start_offset(self) -> int:
        """Apache's rule: a slave with nothing starts at the last file's start."""
        if self.ack_offset == 0:
            size = self.server.file_size
            return self.server.max_offset() - self.server.max_offset() % size
        return self.ack_offset

    async def _transfer(self) -> None:
        await self._reported.wait()
        self._next = self._start_offset()
        loop = asyncio.get_running_loop()
        last_write = loop.time()
        while True:
            transport = self.writer.transport
            if transport.get_write_buffer_size() > self.server.write_limit:
                raise ConnectionError("slave does not read what it is sent")
            chunk = self.server.read(self._next, self.server.batch)
            if chunk:
                self.writer.write(HA_TRANSFER_HEADER.pack(self._next, len(chunk)) + chunk)
                self._next += len(chunk)
                last_write = loop.time()
                await self._drain()
                continue
            if not self._told_gone and self._next < self.server.min_offset():
                # Apache's master also just waits here (its getCommitLogData finds nothing); say why
                self._told_gone = True
                log.warning("HA slave %s needs commitlog offset %d, but this master's oldest data starts at %d "
                            "(its files were deleted): the slave cannot catch up; give it a copy of this "
                            "store, or an empty store (it then starts at the master's last file)",
                            _addr_text(self.peer), self._next, self.server.min_offset())
            if loop.time() - last_write >= self.server.heartbeat_s:
                self.writer.write(HA_TRANSFER_HEADER.pack(self._next, 0))
                last_write = loop.time()
                await self._drain()
            await self.server.wait_data(self.server.heartbeat_s)

    async def _drain(self) -> None:
        try:
            await asyncio.wait_for(self.writer.drain(), self.server.heartbeat_s * 4)
        except asyncio.TimeoutError:
            raise ConnectionError("slave stopped reading") from None


class HAServer:
    """Serves the HA port; ``read(offset, n)`` returns committed commitlog bytes (or b"")."""

    def __init__(self, read: Callable[[int, int], bytes], max_offset: Callable[[], int], file_size: int,
                 batch: int = 32 * 1024, heartbeat_s: float = 5.0, write_limit: int = 4 * 1024 * 1024,
                 min_offset: Callable[[], int] = lambda: 0):
        self.read = read
        self.max_offset = max_offset
        #: the oldest commitlog offset still held (files below it were deleted)
        self.min_offset = min_offset
        self.file_size = file_size
        self.batch = batch
        self.heartbeat_s = heartbeat_s
        self.write_limit = write_limit
        self.connections: set[HAConnection] = set()
        #: the store arrival listener that wakes the transfers (an ``ArrivalGate``: its ``waiting``
        #: is the number of connected slaves, so with none a put calls nothing); set by the broker
        self.arrival_gate: Any = None
        self._data = asyncio.Event()
        self._server: asyncio.base_events.Server | None = None
        self.port = 0
        #: the highest offset any slave has reported (Apache's push2SlaveMaxOffset: never lowered)
        self.push2slave_max = 0
        #: SYNC_MASTER waits: (end offset, deadline, future), in put order, so ends and deadlines
        #: both grow along the deque (a put's end is past the one before it; the timeout is one)
        self._waiters: collections.deque[tuple[int, float, asyncio.Future[bool]]] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None
        #: (master offset, time.monotonic()) when data arrived, at most one a millisecond while
        #: a slave is connected, dropped once every slave has it: a slave acknowledging offset
        #: ``a`` lags by the age of the first sample past ``a`` (``lag``)
        self._arrivals: collections.deque[tuple[int, float]] = collections.deque(maxlen=65536)

    def notify(self) -> None:
        """New commitlog data: wake the transfers (and note when it came, for ``lag``)."""
        self._data.set()
        now = time.monotonic()
        arrivals = self._arrivals
        if not arrivals or now - arrivals[-1][1] >= 0.001:
            arrivals.append((self.max_offset(), now))

    async def wait_data(self, timeout: float) -> None:
        self._data.clear()
        try:
            await asyncio.wait_for(self._data.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    def on_ack(self, conn: HAConnection, offset: int) -> None:
        if offset > self.push2slave_max:
            self.push2slave_max = offset
        arrivals = self._arrivals
        if arrivals and arrivals[0][0] <= offset:
            low = min(c.ack_offset for c in self.connections) if self.connections else offset
            while arrivals and arrivals[0][0] <= low:
                arrivals.popleft()
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            fut = waiters.popleft()[2]
            if not fut.done():
                fut.set_result(True)

    def slave_ok(self, end: int, fallbehind_max: int) -> bool:
        """Apache's ``isSlaveOK``: a slave is connected and not ``fallbehind_max`` behind ``end``."""
        return bool(self.connections) and end - self.push2slave_max < fallbehind_max

    def wait_replica(self, end: int, timeout_s: float) -> "asyncio.Future[bool]":
        """A future: True once a slave has reported ``end`` or more, False after ``timeout_s``."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        if self.push2slave_max >= end:
            fut.set_result(True)
            return fut
        self._waiters.append((end, loop.time() + timeout_s, fut))
        if self._timer is None:
            self._timer = loop.call_at(self._waiters[0][1], self._expire)
        return fut

    def _expire(self) -> None:
        """Time out the waits whose deadline passed; re-arm for the next one."""
        self._timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        waiters = self._waiters
        while waiters and (waiters[0][1] <= now or waiters[0][2].done()):
            fut = waiters.popleft()[2]
            if not fut.done():
                fut.set_result(False)
        if waiters:
            self._timer = loop.call_at(waiters[0][1], self._expire)

    def lag(self) -> list[dict[str, Any]]:
        """Per connected slave: its address, ack offset, bytes behind the master and ms behind
        (the age of the oldest data it has not acknowledged; 0 when it has everything)."""
        top = self.max_offset()
        now = time.monotonic()
        arrivals = list(self._arrivals)
        out = []
        for c in list(self.connections):
            ack = c.ack_offset
            behind = max(0, top - ack) if ack >= 0 else top
            ms = 0
            if behind:
                # the first arrival past the ack; none noted (data from before the slave came):
                # since it connected or last had everything
                first = next((t for off, t in arrivals if off > ack), None)
                ms = int((now - (first if first is not None else c.caught_up_at)) * 1000)
            out.append({"addr": _addr_text(c.peer), "ack_offset": ack, "behind_bytes": behind, "behind_ms": ms})
        return out

    @property
    def slave_ack_offset(self) -> int:
        return max((c.ack_offset for c in self.connections), default=-1)

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._accept, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = HAConnection(self, reader, writer)
        self.connections.add(conn)
        self._count_slaves()
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)
            self._count_slaves()

    def _count_slaves(self) -> None:
        if self.arrival_gate is not None:
            self.arrival_gate.waiting = len(self.connections)

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        while self._waiters:  # a stopping broker answers what still waits as timed out
            fut = self._waiters.popleft()[2]
            if not fut.done():
                fut.set_result(False)
        if self._server is not None:
            self._server.close()
            for c in list(self.connections):
                c.writer.close()
            await self._server.wait_closed()


def _addr_text(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def commitlog_reader(commitlog: CommitLog) -> Callable[[int, int], bytes]:
    """``read(offset, n)`` over a CommitLog: up to ``n`` written bytes of the file holding offset."""
    def read(offset: int, n: int) -> bytes:
        mf = commitlog.queue.find_by_offset(offset)
        if mf is None:
            return b""
        pos = offset - mf.file_from_offset
        avail = min(n, mf.wrote_position - pos)
        if avail <= 0:
            return b""
        view = mf.view(pos, avail)
        return b"" if view is None else bytes(view)  # None: the file is being unmapped (deleted)
    return read
