"""A small but varied store written through the real ``MessageStore``, and its truth.

Used by the decoder tests (no Spark) and the end-to-end Spark tests. The truth is read
back through the store's own API (consume queues + ``decode_records``), so "the Spark
reader agrees with the store" is what the tests check, not a second copy of our guesses.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
import zlib
from collections.abc import Iterator

from mqcore.config import StoreConfig
from mqcore.format import layout as L
from mqcore.message import MessageExt, MessageExtBrokerInner, pack_host
from mqcore.store.message_store import MessageStore

T0 = 1_700_000_000_000
BORN = pack_host("10.0.0.7", 40000)
BORN6 = pack_host("2001:db8::7", 40001)
STORE = pack_host("127.0.0.1", 10911)
FILE_SIZE = 64 * 1024


class StepClock:
    """Store time advancing 250 ms per call: deterministic and strictly growing."""

    def __init__(self, start: int = T0) -> None:
        self.now = start

    def __call__(self) -> int:
        self.now += 250
        return self.now


def config(path: str, file_size: int = FILE_SIZE) -> StoreConfig:
    return StoreConfig(store_path=str(path), commitlog_file_size_bytes=file_size,
                       consume_queue_file_size_bytes=20 * 200, index_slots=101, index_entries=4000,
                       flush_interval_commitlog_ms=50, flush_interval_consume_queue_ms=50)


def _msg(topic: str, body: bytes, qid: int = 0, born: bytes = BORN, **props) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic=topic, body=body, queue_id=qid, properties=dict(props), born_host=born,
                                 store_host=STORE, born_timestamp=T0 - 5)


def messages(n: int = 600):
    """The put sequence: (kind, MessageExtBrokerInner); kinds drive the assertions."""
    out = []
    for i in range(n):
        r = i % 12
        uniq = "UNIQ%08d" % i
        if r in (0, 1, 2, 3, 4):
            tags = ("TagA", "TagB", None)[i % 3]
            props = {"KEYS": f"order-{i}" + (" shared" if i % 10 == 0 else ""), "UNIQ_KEY": uniq}
            if tags:
                props["TAGS"] = tags
            born = BORN6 if i % 25 == 0 else BORN
            out.append(("plain", _msg("Orders", b"order body %d " % i + b"x" * (i % 150), i % 4, born, **props)))
        elif r in (5, 6):
            out.append(("plain", _msg("Payments", b"pay %d" % i, i % 2, TAGS="pay", KEYS=f"pay-{i}")))
        elif r == 7:
            raw = (b"log line %d " % i) * 40
            out.append(("compressed", MessageExtBrokerInner(
                topic="Logs", body=zlib.compress(raw, 5), queue_id=0, sys_flag=0x1,
                properties={"TAGS": "zip", "UNIQ_KEY": uniq}, born_host=BORN, store_host=STORE,
                born_timestamp=T0)))
        elif r == 8:
            out.append(("delayed", _msg("Payments", b"later %d" % i, 1, TAGS="pay", DELAY="2", UNIQ_KEY=uniq)))
        elif r == 9:
            m = _msg("%RETRY%cg1", b"order body retry %d" % i, 0, RETRY_TOPIC="Orders", TAGS="TagA",
                     ORIGIN_MESSAGE_ID=uniq, KEYS=f"order-{i}")
            m.reconsume_times = 1 + i % 3
            out.append(("retry", m))
        elif r == 10:
            m = _msg("%DLQ%cg1", b"dead %d" % i, 0, RETRY_TOPIC="Orders", KEYS=f"order-{i}", UNIQ_KEY=uniq)
            m.reconsume_times = 16
            out.append(("dlq", m))
        else:
            out.append(("plain", _msg("Logs", b"", 0, TAGS="empty")))  # an empty body
    return out


def write_configs(root: str) -> None:
    """Config JSON the way fastjson writes it (tabs, unquoted integer map keys)."""
    cfg = os.path.join(root, "config")
    os.makedirs(cfg, exist_ok=True)
    with open(os.path.join(cfg, "topics.json"), "w") as f:
        f.write('{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"timestamp":1700000000000\n\t},\n'
                '\t"topicConfigTable":{\n'
                '\t\t"Orders":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",'
                '"topicName":"Orders","topicSysFlag":0,"writeQueueNums":4},\n'
                '\t\t"Payments":{"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG",'
                '"topicName":"Payments","topicSysFlag":0,"writeQueueNums":2}\n\t}\n}')
    with open(os.path.join(cfg, "consumerOffset.json"), "w") as f:
        f.write('{\n\t"offsetTable":{\n\t\t"Orders@cg1":{0:10,1:20,2:0,3:5},\n'
                '\t\t"Payments@cg2":{0:3,1:1},\n\t\t"%RETRY%cg1@cg1":{0:2}\n\t}\n}')
    with open(os.path.join(cfg, "delayOffset.json"), "w") as f:
        f.write('{\n\t"offsetTable":{1:0,2:4}\n}')


def build(root: str, n: int = 600, file_size: int = FILE_SIZE) -> dict[int, tuple[str, MessageExt]]:
    """Write the store at ``root``; returns commitlog offset -> (kind, message as the store reads it)."""
    kinds: dict[int, str] = {}
    with MessageStore(config(root, file_size), clock=StepClock()) as store:
        for kind, m in messages(n):
            r = store.put_message(m)
            assert r.ok, r
            kinds[r.phy_offset] = kind
        truth = store_truth(store)
    write_configs(root)
    return {off: (kinds[off], m) for off, m in truth.items()}


def flip_byte(path: str, at: int) -> None:
    """Invert one byte of a file in place."""
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0xFF]))


def corrupted_copy(store_dir: str, truth: dict, tmp_path) -> tuple[str, int, str, int]:
    """A copy of a built store with one body byte flipped in a record of its second commitlog
    file (only a CRC check sees it): (root, the record's commitlog offset, its file, the
    file's base offset)."""
    root = str(tmp_path / "corrupt")
    shutil.copytree(store_dir, root)
    files = sorted(os.listdir(os.path.join(root, "commitlog")))
    base = int(files[1])
    victim = sorted(o for o, (_, m) in truth.items()
                    if o > base + 5000 and len(m.body) > 20 and not m.born_host.startswith("["))[0]
    path = os.path.join(root, "commitlog", files[1])
    flip_byte(path, victim - base + L.REC_FIXED_V4 + 5)  # inside the body (IPv4 hosts)
    return root, victim, path, base


@contextlib.contextmanager
def live_store(root: str, file_size: int = 32 * 1024) -> Iterator[dict[int, MessageExt]]:
    """A store at ``root`` that a thread keeps writing to (up to 20,000 messages) while the
    block runs. The dict it yields is filled on exit with the store's truth, read after the
    writer stopped: a read taken during the block must be a gapless prefix of it."""
    store = MessageStore(config(root, file_size), clock=StepClock())
    store.load()
    store.start()
    store.put_message(messages(1)[0][1])
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set() and i < 20000:
            store.put_message(messages(12)[i % 12][1])
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    truth: dict[int, MessageExt] = {}
    try:
        yield truth
    finally:
        stop.set()
        t.join()
        truth.update(store_truth(store))
        store.shutdown()


def store_truth(store: MessageStore) -> dict[int, MessageExt]:
    """Every message reachable through the store API: all queues, all offsets."""
    out: dict[int, MessageExt] = {}
    for topic, qids in store.queue_ids().items():
        for qid in qids:
            offset = store.get_min_offset_in_queue(topic, qid)
            end = store.get_max_offset_in_queue(topic, qid)
            while offset < end:
                got = store.get_message(topic, qid, offset, 32)
                assert got.buffers, (topic, qid, offset, got.status)
                for buf in got.buffers:
                    for t in store.k.decode_records(buf, 0, len(buf), 1000, True):
                        m = MessageExt.from_decoded(t)
                        out[m.commitlog_offset] = m
                offset = got.next_begin_offset
    return out


#: the index geometry storegen's stores use (index_slots / index_entries)
GEOMETRY = dict(slots=101, entries=4000)


def expected(kind: str, m) -> dict:
    """What the reader must say about a message the store API returned."""
    orig = m.properties.get("RETRY_TOPIC") or m.properties.get("REAL_TOPIC") or m.topic
    return dict(topic=m.topic, queue_id=m.queue_id, queue_offset=m.queue_offset, store_size=m.store_size,
                body=m.body, body_crc=m.body_crc, flag=m.flag, sys_flag=m.sys_flag,
                born_timestamp=m.born_timestamp, store_timestamp=m.store_timestamp, born_host=m.born_host,
                store_host=m.store_host, reconsume_times=m.reconsume_times,
                prepared_transaction_offset=m.prepared_transaction_offset, tags=m.tags, keys=m.keys,
                msg_id=m.msg_id, offset_msg_id=m.offset_msg_id, properties=m.properties,
                is_retry=kind == "retry", is_dlq=kind == "dlq", is_delayed=kind == "delayed",
                original_topic=orig, delay_level=2 if kind == "delayed" else 0,
                is_compressed=kind == "compressed")
