"""mqbroker as a slave (``brokerRole=SLAVE``) of RocketMQ 4.9's master-slave replication.

Two loops, as Apache's slave runs them:

- ``HAClient`` (HAService.HAClient): connects to the master's HA port, reports this store's
  max physical offset (8 bytes, big-endian) at once, then after every read that moved it
  and every ``report_interval_s``; reads transfers (12-byte header: 8 bytes offset, 4 bytes
  size, then the bytes) and hands them to ``ReplicaAppender``, which copies them into the
  commitlog byte for byte and dispatches them into consume queues and index. A transfer for
  another offset than this store's end closes the connection (Apache's rule); a dropped
  connection is retried with a bounded back-off.
- ``SlaveSync`` (SlaveSynchronize): every ``interval_s`` (and at start) it asks the master,
  over remoting, for its topic configs, consumer offsets, delay offsets and subscription
  groups and stores them as this broker's own config files.

Before the first connection to a master the slave checks it against the master's remoting
answers, so it never writes over what it has: a master whose ``mappedFileSizeCommitLog``
differs, or whose commitlog ends before this slave's (the slave has data the master does not:
diverged), is refused with a logged error and nothing is written. A diverged slave stays
refused until it is restarted (its store moved away or the right master named).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from mqcore.errors import MQError, ProtocolError
from mqcore.format.layout import HA_SLAVE_REPORT, HA_TRANSFER_HEADER
from mqcore.jsonutil import loads_lenient
from mqcore.netaddr import parse_host_port
from mqcore.remoting import RemotingClient, RequestCode, ResponseCode
from mqcore.remoting.command import create_request
from mqcore.service import cancel_and_wait
from mqcore.store.replica import ReplicaAppender, ReplicaMismatch


log = logging.getLogger(__name__)


#: the remark Apache's broker answers a send to a slave with (its store refuses the put as
#: SERVICE_NOT_AVAILABLE); mqcore's send path prefixes "service not available now: "
SLAVE_REFUSAL = "messages are put to the slave (brokerRole=SLAVE): send to the master"

#: the most one read takes from the HA connection (Apache's slave reads into a 4 MiB buffer);
#: also the stream's buffer limit, so a burst is read in few, large pieces
_READ_LIMIT = 4 << 20
#: a transfer header announcing more than this is garbage (the master sends haTransferBatchSize)
_MAX_TRANSFER = 64 << 20


class MasterRefused(Exception):
    """The master may not be followed (geometry, divergence); ``permanent``: until a restart."""

    def __init__(self, why: str, permanent: bool):
        super().__init__(why)
        self.permanent = permanent


class HAClient:
    """Follows one master's HA port; ``master()`` names it (host:port) or None (not known yet)."""

    def __init__(self, appender: ReplicaAppender, master: Callable[[], str | None], *,
                 precheck: Callable[[], Awaitable[None]] | None = None, report_interval_s: float = 5.0,
                 housekeeping_s: float = 20.0, max_backoff_s: float = 5.0, connect_timeout_s: float = 3.0):
        self.appender = appender
        self.master = master
        self.precheck = precheck
        self.report_interval_s = report_interval_s
        self.housekeeping_s = housekeeping_s
        self.max_backoff_s = max_backoff_s
        self.connect_timeout_s = connect_timeout_s
        #: "idle" (no master known), "connecting", "connected", "refused" (see ``refused``)
        self.state = "idle"
        #: why the master is refused (MasterRefused), or None
        self.refused: str | None = None
        #: the master's offset in its last header, and when it came (monotonic s)
        self.master_offset = -1
        self.last_receipt = 0.0
        self.connections = 0
        self._task: asyncio.Task[None] | None = None
        self._master_known = asyncio.Event()

    def master_changed(self) -> None:
        """The master's address may have changed (a registration answer): look again now."""
        self._master_known.set()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None

    async def _run(self) -> None:
        backoff = 0.1
        last_error = ""
        while True:
            addr = self.master()
            if not addr:
                self.state = "idle"
                self._master_known.clear()
                try:
                    await asyncio.wait_for(self._master_known.wait(), self.max_backoff_s)
                except asyncio.TimeoutError:
                    pass
                continue
            received = False
            try:
                self.state = "connecting"
                if self.precheck is not None:
                    await self.precheck()
                self.refused = None
                received = await self._session(addr)
                error = f"master {addr} closed the HA connection"
            except MasterRefused as e:
                self.state, self.refused = "refused", str(e)
                if e.permanent:
                    log.error("%s; this slave stops replicating until it is restarted", e)
                    return
                error = str(e)
            except ReplicaMismatch as e:
                error = f"HA connection to master {addr} dropped: {e}"
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError, MQError) as e:
                error = f"HA connection to master {addr}: {type(e).__name__}: {e}" if str(e) else \
                    f"HA connection to master {addr}: {type(e).__name__}"
            if received:
                backoff = 0.1  # it worked for a while: reconnect at once
            # the same failure again and again (a master down for an hour) is logged once
            if error != last_error:
                log.warning("%s; retrying (every %.1f s at most)", error, self.max_backoff_s)
                last_error = error
            self.state = "connecting"
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.max_backoff_s)

    async def _session(self, addr: str) -> bool:
        """One connection; returns whether any transfer came (raises on errors)."""
        host, port = parse_host_port(addr)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=_READ_LIMIT),
                                                self.connect_timeout_s)
        received = False
        try:
            self.connections += 1
            reported = self.appender.max_offset
            writer.write(HA_SLAVE_REPORT.pack(reported))
            await writer.drain()
            self.state = "connected"
            log.info("HA: following master %s from offset %d", addr, reported)
            last_report = last_read = time.monotonic()
            pending = bytearray()
            while True:
                # whatever has arrived, not one transfer at a time: under load the master's
                # transfers are a few records each, and the dispatch and the report cost
                # mostly per call (Apache's slave, too, handles a read's transfers at once)
                try:
                    async with asyncio.timeout(self.report_interval_s):
                        data = await reader.read(_READ_LIMIT)
                except TimeoutError:
                    data = None
                now = time.monotonic()
                if data is not None:
                    if not data:
                        return received  # the master closed it (a partial transfer is dropped)
                    last_read = now
                    pending += data
                    if self._take_transfers(pending, now):
                        received = True
                elif now - last_read > self.housekeeping_s:
                    raise ConnectionError(f"nothing from the master for {self.housekeeping_s:.0f} s")
                current = self.appender.max_offset
                if current > reported or now - last_report >= self.report_interval_s:
                    writer.write(HA_SLAVE_REPORT.pack(current))
                    await writer.drain()
                    reported, last_report = current, now
        finally:
            writer.close()
            if received:
                log.info("HA: connection to master %s closed at offset %d", addr, self.appender.max_offset)

    def _take_transfers(self, pending: bytearray, now: float) -> bool:
        """Append the complete transfers at the start of ``pending`` (removed from it; a
        partial one stays for the next read), then dispatch them once; returns whether any
        carried bytes."""
        head_size, pos, wrote = HA_TRANSFER_HEADER.size, 0, False
        try:
            with memoryview(pending) as view:
                while len(pending) - pos >= head_size:
                    offset, size = HA_TRANSFER_HEADER.unpack_from(pending, pos)
                    if size < 0 or size > _MAX_TRANSFER:
                        raise ReplicaMismatch(f"a transfer header with size {size}")
                    if len(pending) - pos - head_size < size:
                        break
                    have = self.appender.max_offset
                    # Apache's rule: a slave with data takes bytes only where its log ends
                    if have != 0 and offset != have:
                        raise ReplicaMismatch(f"the master sent offset {offset}, this slave's commitlog ends at {have}")
                    self.master_offset = offset + size
                    self.last_receipt = now
                    if size:
                        start = pos + head_size
                        self.appender.append(offset, view[start:start + size], dispatch=False)
                        wrote = True
                    pos += head_size + size
        finally:
            if wrote:  # what was appended is dispatched even when a later transfer is refused
                self.appender.dispatch()
        del pending[:pos]
        return wrote


class SlaveSync:
    """Copies the master's metadata (SlaveSynchronize) into this broker's tables."""

    def __init__(self, client: RemotingClient, master_addr: Callable[[], str | None], *, topics: Any, offsets: Any,
                 delay_offsets: Any, groups: Any, after_topics: Callable[[], None], file_size: int,
                 max_offset: Callable[[], int], timeout_ms: int = 3000):
        self.client = client
        self.master_addr = master_addr
        self.topics = topics
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.groups = groups
        self.after_topics = after_topics
        self.file_size = file_size
        self.max_offset = max_offset
        self.timeout_ms = timeout_ms
        #: the last sync that worked (time.time()), 0 = never
        self.last_sync = 0.0
        #: (counter, timestamp) of the master's topic / group tables last copied
        self._versions: dict[str, tuple[int, int] | None] = {}

    async def _call(self, addr: str, code: int) -> bytes:
        resp = await self.client.invoke(addr, create_request(code), self.timeout_ms)
        if resp.code != ResponseCode.SUCCESS:
            raise MQError(f"master {addr} answered request {code} with code {resp.code}: {resp.remark}")
        return bytes(resp.body or b"")

    async def sync_all(self) -> None:
        addr = self.master_addr()
        if not addr:
            return
        body = await self._call(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
        # as Apache, a table is replaced only when the master's dataVersion moved; compared with
        # the version last copied, since adding a system topic the master lacks bumps ours
        version = _data_version(body)
        if version is None or version != self._versions.get("topics"):
            self.topics.table.replace_from_json(body)
            self.topics.load()  # the managers' caches (and system topics) from the new table
            self._versions["topics"] = version
            self.after_topics()
        # merged, as Apache's slave does: offsets committed on the slave for groups the master
        # has no entry of are kept (a consumer reading from the slave while the master is away)
        self.offsets.merge_from_json(await self._call(addr, RequestCode.GET_ALL_CONSUMER_OFFSET))
        delay = await self._call(addr, RequestCode.GET_ALL_DELAY_OFFSET)
        if delay:
            self.delay_offsets.replace_from_json(delay)
        body = await self._call(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        version = _data_version(body)
        if version is None or version != self._versions.get("groups"):
            self.groups.table.replace_from_json(body)
            self.groups.load()
            self._versions["groups"] = version
        self.last_sync = time.time()

    async def sync_logged(self) -> None:
        try:
            await self.sync_all()
        except (MQError, OSError, ProtocolError, ValueError) as e:
            log.warning("metadata sync from the master failed: %s", e)

    async def precheck(self) -> None:
        """Before an HA connection: refuse a master this slave must not follow."""
        addr = self.master_addr()
        if not addr:
            return  # only haMasterAddress known: nothing to ask (the HA header checks still hold)
        try:
            conf = (await self._call(addr, RequestCode.GET_BROKER_CONFIG)).decode("utf-8", "replace")
            table = loads_lenient(await self._call(addr, RequestCode.GET_BROKER_RUNTIME_INFO)).get("table", {})
        except (MQError, OSError, ProtocolError, ValueError, AttributeError) as e:
            raise MasterRefused(f"master {addr} did not answer over remoting ({e})", permanent=False) from e
        props = dict(line.split("=", 1) for line in conf.splitlines() if "=" in line)
        size = props.get("mappedFileSizeCommitLog", "").strip()
        if size.isdigit() and int(size) != self.file_size:
            raise MasterRefused(f"master {addr} has mappedFileSizeCommitLog={size}, this slave {self.file_size}: "
                                "a slave copies the master's files byte for byte, so both need the same size",
                                permanent=False)
        master_max = str(table.get("commitLogMaxOffset", "")).strip()
        mine = self.max_offset()
        if master_max.lstrip("-").isdigit() and mine > int(master_max):
            raise MasterRefused(f"this slave's commitlog ends at offset {mine}, past its master {addr}'s end "
                                f"{master_max}: the slave has data the master does not (their stores diverge). "
                                "Nothing was overwritten; move this slave's store away to start it afresh, or "
                                "point it at the master it copied", permanent=True)


def _data_version(body: bytes) -> tuple[int, int] | None:
    try:
        v = loads_lenient(body).get("dataVersion") or {}
        return int(v.get("counter", 0)), int(v.get("timestamp", 0))
    except (ProtocolError, ValueError, AttributeError, TypeError):
        return None


class Slave:
    """A slave broker's replication: the HA client, the metadata sync and what the name
    server's registration answers say about the master. The broker builds it when
    ``brokerRole=SLAVE`` and hands it registration answers (``registered``)."""

    def __init__(self, store: Any, client: RemotingClient, *, ha_master_address: str, topics: Any, offsets: Any,
                 delay_offsets: Any, groups: Any, after_topics: Callable[[], None], sync_interval_s: float = 10.0,
                 report_interval_s: float = 5.0):
        self.store = store
        self.fixed_ha_address = ha_master_address
        #: the master's remoting and HA addresses as the name server last named them
        self.master_addr: str | None = None
        self.ha_addr_from_namesrv: str | None = None
        self.sync_interval_s = sync_interval_s
        self.appender = ReplicaAppender(store)
        self.sync = SlaveSync(client, lambda: self.master_addr, topics=topics, offsets=offsets,
                              delay_offsets=delay_offsets, groups=groups, after_topics=after_topics,
                              file_size=store.commitlog.file_size, max_offset=lambda: store.commitlog.max_offset)
        self.ha = HAClient(self.appender, self.ha_address, precheck=self.sync.precheck,
                           report_interval_s=report_interval_s)
        self._sync_task: asyncio.Task[None] | None = None

    def ha_address(self) -> str | None:
        """haMasterAddress when set (Apache then ignores the name server's), else the name server's."""
        return self.fixed_ha_address or self.ha_addr_from_namesrv

    def registered(self, ext_fields: dict[str, str]) -> None:
        """A name server's answer to this broker's registration (RegisterBrokerResponseHeader)."""
        master = ext_fields.get("masterAddr") or None
        ha = ext_fields.get("haServerAddr") or None
        changed = (master, ha) != (self.master_addr, self.ha_addr_from_namesrv)
        self.master_addr, self.ha_addr_from_namesrv = master, ha
        if changed:
            log.info("name server names master %s (HA %s)", master, ha)
            self.ha.master_changed()

    def start(self) -> None:
        self._sync_task = asyncio.ensure_future(self._sync_loop())
        self.ha.start()

    async def _sync_loop(self) -> None:
        while True:
            await self.sync.sync_logged()
            await asyncio.sleep(self.sync_interval_s)

    async def stop(self) -> None:
        await cancel_and_wait(self._sync_task)
        await self.ha.stop()
