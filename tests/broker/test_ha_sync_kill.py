"""SYNC_MASTER killed (SIGKILL) at random moments under load: nothing acknowledged is lost.

Real processes: a name server, an mqbroker SYNC_MASTER and its mqbroker slave. Twenty times
the master is killed at a random moment while a producer keeps a window of async sends open,
then restarted. A SYNC_MASTER answers SEND_OK only once its slave reported the message's end
(Apache's GroupTransferService), so every message the producer saw acknowledged must already
be readable on the slave when the master dies: its consume queue covers the acknowledged queue
offset at once, and at the end, with the master gone, a consumer reads each acknowledged body
from the slave. The seed is printed with a failure, to replay it.
"""
from __future__ import annotations

import random
import threading
import time

import pytest

from mqcore.client import Message, Producer, PushConsumer
from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request
from tests.client.integration.helpers import FAST, create_topic
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(180)  # the bound: under 3 minutes

CYCLES = 20
FILE = 1 << 20  # small files: the load crosses commitlog files on both
MASTER = {"mappedFileSizeCommitLog": str(FILE), "brokerRole": "SYNC_MASTER", "flushDiskType": "ASYNC_FLUSH"}
SLAVE = {"mappedFileSizeCommitLog": str(FILE), "brokerId": "1", "brokerRole": "SLAVE"}
TOPIC, QUEUES = "HaKillTopic", 4
WINDOW = 64  # async sends open at once


def _slave_max_offsets(rc: SyncRemotingClient, addr: str) -> dict[int, int]:
    out = {}
    for q in range(QUEUES):
        r = rc.invoke(addr, create_request(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(q)}), 5000)
        out[q] = int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else -1
    return out


class _Load:
    """Keeps ``WINDOW`` async sends open until ``stop``; ``acked`` maps each SEND_OK body to
    its (queue, queue offset)."""

    def __init__(self, p: Producer, cycle: int):
        self.p, self.cycle = p, cycle
        self.acked: dict[bytes, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._open = threading.Semaphore(WINDOW)
        self._stop = threading.Event()
        self._futures: list = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _done(self, body: bytes, f) -> None:
        self._open.release()
        if not f.cancelled() and f.exception() is None and f.result().ok:
            r = f.result()
            with self._lock:
                self.acked[body] = (r.message_queue.queue_id, r.queue_offset)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            if not self._open.acquire(timeout=0.1):
                continue
            body = f"c{self.cycle}-{i}".encode()
            i += 1
            try:
                f = self.p.send_async(Message(TOPIC, body))
            except Exception:  # noqa: BLE001 - the master is dying: a refused send is not acknowledged
                self._open.release()
                time.sleep(0.01)
                continue
            f.add_done_callback(lambda f, body=body: self._done(body, f))
            self._futures.append(f)

    def __enter__(self) -> "_Load":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)
        for f in self._futures:  # every send answered or failed (send_msg_timeout_ms)
            try:
                f.result(15)
            except Exception:  # noqa: BLE001 - failed sends are not acknowledged: what the test allows
                pass


def _sync_send_ok(p: Producer, acked: dict[bytes, tuple[int, int]], cycle: int) -> bool:
    """One synchronous send (the slave is connected once one is answered SEND_OK)."""
    body = f"c{cycle}-warm-{len(acked)}-{time.monotonic_ns()}".encode()
    try:
        r = p.send(Message(TOPIC, body))
    except Exception:  # noqa: BLE001 - the master is starting, or its slave not yet connected
        return False
    if r.ok:
        acked[body] = (r.message_queue.queue_id, r.queue_offset)
    return r.ok


def test_sync_master_killed_at_random_moments_keeps_every_acknowledged_message_on_the_slave(tmp_path):
    seed = random.randrange(1 << 30)
    rnd = random.Random(seed)
    acked: dict[bytes, tuple[int, int]] = {}
    with NamesrvProcess() as ns, \
            BrokerProcess(tmp_path / "m", namesrv=ns.addr, conf=MASTER) as master, \
            BrokerProcess(tmp_path / "s", namesrv=ns.addr, conf=SLAVE) as slave, \
            SyncRemotingClient() as rc, \
            Producer("pg-ha-kill", namesrv_addr=ns.addr, send_msg_timeout_ms=2000, max_async_inflight=WINDOW,
                     **{k: v for k, v in FAST.items() if k in ("poll_name_server_interval_ms",
                                                               "heartbeat_broker_interval_ms")}) as p:
        create_topic(master.broker_addr, ns.addr, TOPIC, queues=QUEUES)
        for cycle in range(CYCLES):
            if cycle:
                master.restart()
            # SLAVE_NOT_AVAILABLE until the slave reconnected: wait for one SEND_OK
            assert wait_for(lambda: _sync_send_ok(p, acked, cycle), timeout=60), f"cycle {cycle}, seed {seed}"
            with _Load(p, cycle) as load:
                time.sleep(rnd.uniform(0.05, 0.6))
                master.kill9()
            acked.update(load.acked)
            assert load.acked, f"cycle {cycle}: nothing acknowledged under load (seed {seed})"
            # acknowledged means on the slave already: its consume queues cover it now, no waiting
            have = _slave_max_offsets(rc, slave.broker_addr)
            behind = [(b, qo) for b, qo in load.acked.items() if qo[1] >= have[qo[0]]]
            assert not behind, f"cycle {cycle}: {len(behind)} acknowledged, not on the slave " \
                               f"(e.g. {behind[:3]}, slave queues {have}; seed {seed})"

        # the master stays dead: every acknowledged body is read from the slave
        got: set[bytes] = set()
        lock = threading.Lock()

        def sink(msgs, _ctx):
            with lock:
                got.update(m.body for m in msgs)

        c = PushConsumer("cg-ha-kill", namesrv_addr=ns.addr, **dict(FAST, consume_from_where="first",
                                                                      consume_message_batch_max_size=32))
        c.subscribe(TOPIC)
        c.register_listener(sink)
        with c:
            assert wait_for(lambda: set(acked) <= got, timeout=90), \
                f"{len(set(acked) - got)} of {len(acked)} acknowledged missing on the slave (seed {seed})"
    assert len(acked) > CYCLES * 10, len(acked)
