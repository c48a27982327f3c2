"""What the HA pairing tests check on a master and its slave, whichever broker plays which part
(mqbroker or Apache 4.9.7): a fast backlog, the commitlog over the replicated range byte for
byte, the consume queues unit by unit, the index by a sample of keys, the metadata sync, and a
consumer reading everything from the slave.

    send_fast(ns, topic, n)                         # n messages "ha-<i>", keys "k<i>", in batches
    assert commitlog_mismatch(m_store, s_store, file_size, end) is None
    assert consume_queue_mismatch(m_store, s_store, topic, counts) is None   # both stopped
    assert keys_on(addr, topic, sample_keys(n)) == bodies_of(sample_keys(n))
"""
from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

from mqcore.client import Message, Producer, PushConsumer
from mqcore.errors import BrokerError
from mqcore.format.layout import CONSUME_QUEUE_DIR
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.support.protocol import decode
from tests.support.waiting import wait_for

CQ_UNIT = 20  # a consume queue entry: commitlog offset (8), size (4), tags code (8)


def body_of(i: int) -> bytes:
    return f"ha-{i}".encode()


def send_fast(namesrv_addr: str, topic: str, n: int, *, start: int = 0, batch: int = 200,
              body=body_of) -> None:
    """``n`` messages (``body(i)``, key ``k<i>``) in SEND_BATCH_MESSAGE requests of ``batch``:
    a 100,000-message backlog in seconds where single sends take minutes."""
    with Producer("pg-ha-fast", namesrv_addr=namesrv_addr, send_msg_timeout_ms=10000) as p:
        for first in range(start, start + n, batch):
            last = min(first + batch, start + n)
            r = p.send_batch([Message(topic, body(i), keys=[f"k{i}"]) for i in range(first, last)])
            assert r.ok, (first, r)


def commitlog_bytes(store_dir: str | Path, file_size: int, begin: int, end: int) -> bytes:
    """Bytes ``begin`` .. ``end`` of a store's commitlog, across its files (named by offset)."""
    out = bytearray()
    pos = begin
    while pos < end:
        base = pos - pos % file_size
        with open(Path(store_dir) / "commitlog" / f"{base:020d}", "rb") as f:
            f.seek(pos - base)
            chunk = f.read(min(end, base + file_size) - pos)
        if not chunk:
            raise AssertionError(f"{store_dir}: commitlog ends before offset {pos}")
        out += chunk
        pos += len(chunk)
    return bytes(out)


def commitlog_mismatch(master_store: str | Path, slave_store: str | Path, file_size: int, end: int,
                       step: int = 1 << 20) -> int | None:
    """The first offset below ``end`` where the two commitlogs differ (a missing file counts),
    or None: byte-identical over the replicated range."""
    for pos in range(0, end, step):
        stop = min(end, pos + step)
        try:
            a = commitlog_bytes(master_store, file_size, pos, stop)
            b = commitlog_bytes(slave_store, file_size, pos, stop)
        except (OSError, AssertionError):
            return pos
        if a != b:
            return pos + next(i for i in range(len(a)) if i >= len(b) or a[i] != b[i])
    return None


def consume_queue_units(store_dir: str | Path, topic: str, queue_id: int, count: int) -> bytes:
    """The first ``count`` units of a consume queue, its files concatenated in offset order
    (the two brokers' queue files may differ in size; the units may not)."""
    d = Path(store_dir) / CONSUME_QUEUE_DIR / topic / str(queue_id)
    out = bytearray()
    for name in sorted(os.listdir(d)) if d.is_dir() else []:
        out += (d / name).read_bytes()
        if len(out) >= count * CQ_UNIT:
            break
    return bytes(out[:count * CQ_UNIT])


def consume_queue_mismatch(master_store: str | Path, slave_store: str | Path, topic: str,
                           counts: dict[int, int]) -> str | None:
    """Where the consume queues of ``topic`` differ (``counts``: queue id -> units), or None."""
    for q, count in counts.items():
        a = consume_queue_units(master_store, topic, q, count)
        b = consume_queue_units(slave_store, topic, q, count)
        if len(a) != count * CQ_UNIT:
            return f"queue {q}: the master's files hold {len(a) // CQ_UNIT} of {count} units"
        if a != b:
            unit = next(i for i in range(0, len(a), CQ_UNIT) if a[i:i + CQ_UNIT] != b[i:i + CQ_UNIT]) // CQ_UNIT
            at = slice(unit * CQ_UNIT, (unit + 1) * CQ_UNIT)
            return f"queue {q} unit {unit}: master {a[at].hex()}, slave {b[at].hex()}"
    return None


def max_offsets(addr: str, topic: str, queues: int = 4) -> dict[int, int]:
    """GET_MAX_OFFSET of each queue (0 where the broker does not know the queue yet)."""
    out = {}
    with SyncRemotingClient() as rc:
        for q in range(queues):
            r = rc.invoke(addr, create_request(RC.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}), 5000)
            out[q] = int(r.ext_fields["offset"]) if r.code == ResponseCode.SUCCESS else 0
    return out


def commitlog_end(admin, addr: str, tries: int = 20) -> int:
    """The broker's commitLogMaxOffset. Apache 4.9.7 answers GET_BROKER_RUNTIME_INFO with a
    NoSuchElementException now and then right after a burst of sends (its stats sampler's
    lists raced): asked again."""
    for attempt in range(tries):
        try:
            return int(admin.broker_runtime_stats(addr)["commitLogMaxOffset"])
        except BrokerError:
            if attempt == tries - 1:
                raise
            time.sleep(0.2)
    raise AssertionError("unreachable")


def sample_keys(n: int, k: int = 40, seed: int = 35) -> list[int]:
    """The first, the last and ``k`` random message numbers below ``n``."""
    return sorted({0, n - 1, *random.Random(seed).sample(range(n), k)})


def keys_on(addr: str, topic: str, numbers: list[int]) -> dict[int, list[bytes]]:
    """QUERY_MESSAGE on one broker for key ``k<i>`` of each number: the bodies of the messages
    that carry it (the index is a hash: others are dropped)."""
    out: dict[int, list[bytes]] = {}
    with SyncRemotingClient() as rc:
        for i in numbers:
            r = rc.invoke(addr, create_request(RC.QUERY_MESSAGE, {
                "topic": topic, "key": f"k{i}", "maxNum": "32", "beginTimestamp": "0",
                "endTimestamp": str(1 << 62)}), 5000)
            found = decode(bytes(r.body)) if r.code == ResponseCode.SUCCESS and r.body else []
            out[i] = [m.body for m in found if f"k{i}" in m.keys]
    return out


def _body(addr: str, code: int) -> bytes:
    with SyncRemotingClient() as rc:
        r = rc.invoke(addr, create_request(code), 5000)
        return bytes(r.body or b"") if r.code == ResponseCode.SUCCESS else b""


def metadata_synced(master: str, slave: str, topic: str, group: str, *, topics: bool = True) -> bool:
    """The slave's topics hold ``topic`` (``topics``), its subscription groups ``group``, and its
    consumer offsets of ``topic@group`` are the master's."""
    if topics and topic.encode() not in _body(slave, RC.GET_ALL_TOPIC_CONFIG):
        return False
    if f'"{group}"'.encode() not in _body(slave, RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG):
        return False
    key = f"{topic}@{group}"
    want = offsets_of(master, key)
    return bool(want) and offsets_of(slave, key) == want


def offsets_of(addr: str, key: str) -> dict[int, int]:
    """GET_ALL_CONSUMER_OFFSET's table for ``topic@group``: queue id -> offset. Read by hand:
    Apache's fastjson writes the queue ids as bare numbers (``{0:7}``), which json.loads refuses."""
    raw = _body(addr, RC.GET_ALL_CONSUMER_OFFSET).decode(errors="replace")
    at = raw.find(f'"{key}"')
    if at < 0:
        return {}
    table = raw[raw.index("{", at) + 1:raw.index("}", at)]
    out = {}
    for item in table.split(","):
        if ":" in item:
            q, off = item.split(":", 1)
            out[int(q.strip().strip('"'))] = int(off)
    return out


def consume_all(namesrv_addr: str, topic: str, group: str, n: int, timeout: float = 90,
                **consumer_conf) -> set[bytes]:
    """A push consumer (``group``, from the first offset) reads ``topic``; the distinct bodies it
    got once it has ``n`` of them, or when ``timeout`` passed."""
    got: set[bytes] = set()
    lock = threading.Lock()

    def listener(msgs, _ctx) -> None:
        with lock:
            got.update(bytes(m.body) for m in msgs)

    c = PushConsumer(group, namesrv_addr=namesrv_addr, consume_from_where="first", **consumer_conf)
    c.subscribe(topic)
    c.register_listener(listener)
    with c:
        def have() -> int:
            with lock:
                return len(got)
        wait_for(lambda: have() >= n, timeout=timeout, step=0.2)
    with lock:
        return set(got)
