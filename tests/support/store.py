"""A small store for tests: settings with tiny files, a message factory, a queue reader."""
from __future__ import annotations

from mqcore.config import StoreConfig
from mqcore.message import MessageExtBrokerInner, pack_host

BORN = pack_host("10.0.0.7", 40000)
STORE = pack_host("127.0.0.1", 10911)


def small_config(path, **kw) -> StoreConfig:
    base = dict(store_path=str(path), commitlog_file_size_bytes=64 * 1024, consume_queue_file_size_bytes=20 * 50,
                index_slots=97, index_entries=300, flush_interval_commitlog_ms=50,
                flush_interval_consume_queue_ms=50)
    base.update(kw)
    return StoreConfig(**base)


def msg(topic="T", body=b"hello", qid=0, **props) -> MessageExtBrokerInner:
    return MessageExtBrokerInner(topic=topic, body=body, queue_id=qid, properties=dict(props), born_host=BORN,
                                 store_host=STORE, born_timestamp=1_700_000_000_000)


def records(store, topic, qid, offset=0, n=32, **kw):
    """(GetMessageResult, decoded records) of one queue read."""
    got = store.get_message(topic, qid, offset, n, **kw)
    out = []
    for buf in got.buffers:
        out.extend(store.k.decode_records(buf, 0, len(buf), 1000, True))
    return got, out
