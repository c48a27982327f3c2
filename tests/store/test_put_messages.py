"""``put_messages``: many single messages in one put-lock hold (delay delivery's path),
stored exactly as one ``put_message`` each would store them."""
from __future__ import annotations

import pytest

from mqcore.config import FlushDiskType
from mqcore.message import SCHEDULE_TOPIC
from mqcore.store.message_store import MessageStore
from mqcore.store.results import GetMessageStatus, PutMessageStatus
from tests.support.store import msg, records, small_config


@pytest.fixture
def open_store(tmp_path, kernels):
    stores = []

    def _open(**kw):
        s = MessageStore(small_config(tmp_path / "store", **kw), kernels=kernels)
        s.load()
        s.start()
        stores.append(s)
        return s

    yield _open
    for s in stores:
        s.shutdown()


def test_mixed_topics_queues_and_refusals(open_store):
    store = open_store()
    arrivals = []
    store.add_arrival_listener(lambda t, q, m: arrivals.append((t, q, m)))
    batch = [msg("A", b"a0", TAGS="x"), msg("B", b"b0", qid=1), msg("bad topic!", b"no"),
             msg("A", b"a1", KEYS="k1"), msg("A", b"delayed", DELAY="2"), msg("B", b"b1", qid=1)]
    results = store.put_messages(batch)
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK, PutMessageStatus.PUT_OK,
                                           PutMessageStatus.MESSAGE_ILLEGAL, PutMessageStatus.PUT_OK,
                                           PutMessageStatus.PUT_OK, PutMessageStatus.PUT_OK]
    assert [(r.queue_id, r.queue_offset) for r in results if r.ok] == [(0, 0), (1, 0), (0, 1), (1, 0), (1, 1)]
    assert [t[13] for t in records(store, "A", 0)[1]] == [b"a0", b"a1"]
    assert [t[13] for t in records(store, "B", 1)[1]] == [b"b0", b"b1"]
    assert [t[13] for t in records(store, SCHEDULE_TOPIC, 1)[1]] == [b"delayed"]
    assert [m.body for m in store.messages_by_key("A", "k1")] == [b"a1"]
    assert sorted(arrivals) == [("A", 0, 2), ("B", 1, 2), (SCHEDULE_TOPIC, 1, 1)]   # one wake-up per queue
    assert results[0].msg_id and results[0].phy_offset < results[1].phy_offset


def test_roll_over_to_the_next_file_inside_one_call(open_store, kernels):
    store = open_store()
    results = store.put_messages([msg("R", b"x" * 4000, UNIQ_KEY=f"U{i}") for i in range(40)])  # > 64 KiB
    assert all(r.ok for r in results) and len(store.commitlog.queue.files) >= 3
    got, _ = records(store, "R", 0, n=32)
    assert got.status is GetMessageStatus.FOUND
    assert store.get_max_offset_in_queue("R", 0) == 40
    assert [m.queue_offset for m in (store.look_message_by_offset(r.phy_offset) for r in results)] == list(range(40))


def test_refused_store_refuses_every_message(open_store):
    store = open_store()
    store.refuse_puts("the disk is full: test")
    results = store.put_messages([msg("A", b"1"), msg("A", b"2")])
    assert all(r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk is full" in r.remark for r in results)
    store.accept_puts()
    assert store.put_messages([]) == []


def test_sync_flush_waits_once_for_the_messages_that_asked(open_store):
    store = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    results = store.put_messages([msg("S", b"1"), msg("S", b"2", WAIT="false")])
    assert all(r.status is PutMessageStatus.PUT_OK for r in results)
    assert store.commitlog.queue.flushed_offset() >= results[0].phy_offset + results[0].wrote_bytes



def test_a_message_with_many_keys_is_found_by_each_across_a_full_index_file(open_store):
    """More than a few keys are put by one array call (a trace message carries hundreds);
    index_entries=300 here, so the third message's keys fill the first file and go on in a
    new one. Each key finds exactly the messages that carry it."""
    store = open_store()
    keys = [f"k{i:03d}" for i in range(140)]
    results = [store.put_message(msg("K", f"m{j}".encode(), KEYS=" ".join(keys[j * 10:j * 10 + 120])))
               for j in range(3)]
    assert all(r.ok for r in results)
    assert len(store.index.files) == 2
    for i in (0, 9, 10, 59, 119, 125, 139):
        expect = {f"m{j}".encode() for j in range(3) if j * 10 <= i < j * 10 + 120}
        got = store.query_message("K", keys[i], 32, 0, 2**62)
        bodies = {bytes(t.body) for buf in got.buffers for t in store.k.decode_records(buf, 0, len(buf), 1, True)}
        assert bodies == expect, i
