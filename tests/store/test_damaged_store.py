"""A damaged store: recovery after a long ASYNC_FLUSH run scans only the tail, truncation
leaves no phantom bytes, a missing middle commitlog file is reported as data loss, and
consume queues missing units are rebuilt at every start."""
from __future__ import annotations

import logging
import os
import shutil

from mqcore.config import FlushDiskType, StoreConfig
from mqcore.message import MessageExtBrokerInner
from mqcore.store.message_store import MessageStore
from mqcore.store.results import GetMessageStatus, PutMessageStatus
from mqcore.tools.mqstore import main as mqstore_main
from tests.support.index_damage import make_loop

FILE = 64 * 1024


def cfg(path, **kw) -> StoreConfig:
    base = dict(store_path=str(path), commitlog_file_size_bytes=FILE, consume_queue_file_size_bytes=20 * 200,
                index_slots=101, index_entries=400, prefault_window_bytes=0)
    base.update(kw)
    return StoreConfig(**base)


def put_n(store, n, topic="T", queue_id=0, size=200, start=0):
    for i in range(start, start + n):
        r = store.put_message(MessageExtBrokerInner(topic=topic, body=b"%06d" % i + b"x" * size, queue_id=queue_id,
                                                    properties={"TAGS": "a", "KEYS": f"{topic}-{i}"}))
        assert r.status is PutMessageStatus.PUT_OK


def pull_all(store, topic="T", queue_id=0, start=None) -> list[bytes]:
    out, offset = [], store.get_min_offset_in_queue(topic, queue_id) if start is None else start
    while True:
        got = store.get_message(topic, queue_id, offset, 64)
        if got.status is not GetMessageStatus.FOUND:
            return out
        body = got.body()
        from mqcore._compat import kernels
        out += [rec.body for rec in kernels.decode_records(body, 0, len(body), 1000, False)]
        offset = got.next_begin_offset


# --- the checkpoint advances under steady ASYNC_FLUSH load ----------------------------------------
def test_async_flush_checkpoint_advances_so_crash_recovery_scans_only_the_tail(tmp_path):
    """Steady load: a producer's put lands while every flush is in its fsync (made
    deterministic by doing that put from inside the flush call). The checkpoint must still
    advance, so recovery after a crash scans the unflushed tail, not the whole log."""
    now = [1_700_000_000_000]

    def clock():
        now[0] += 100  # store times 100 ms apart: recovery's 3 s margin is 30 messages
        return now[0]

    store = MessageStore(cfg(tmp_path / "store"), clock=clock)
    store.load()
    open(store.config.abort_path, "a").close()  # running, as start() marks it (no flush threads here)
    flush = store.commitlog.flush

    def flush_while_a_producer_writes(least_pages):
        flushed = flush(least_pages)
        put_n(store, 1, start=10**6)
        return flushed

    store.commitlog.flush = flush_while_a_producer_writes
    while len(store.commitlog.queue.files) < 24:
        put_n(store, 40)
        store._flush_commitlog(0)
        store._flush_logic()
    # the crash: what is on disk now is what a restart finds (the page cache survives a kill -9)
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "store", crashed, ignore=shutil.ignore_patterns("lock"))
    store.commitlog.flush = flush
    store.shutdown()
    again = MessageStore(cfg(crashed))
    report = again.load()
    try:
        assert report.abnormal and len(again.commitlog.queue.files) >= 24
        # proportional to what was not flushed: the last file or two, not all 24
        assert report.bytes_scanned <= 3 * FILE, report.bytes_scanned
        assert report.commitlog_max_offset > 22 * FILE
    finally:
        again.shutdown()


# --- truncation zeroes what it drops ---------------------------------------------------------------
def test_recovery_zeroes_the_dropped_tail_no_phantom_and_verify_passes(tmp_path, capsys):
    path = tmp_path / "store"
    with MessageStore(cfg(path)) as store:
        put_n(store, 20)
        last_phy = store.get_commitlog_offset_in_queue("T", 0, 19)
    # a torn last record (its body bytes half written) and a crash: the abort file is left
    cl_file = path / "commitlog" / ("%020d" % 0)
    with open(cl_file, "r+b") as f:
        f.seek(last_phy + 150)
        f.write(b"\xff" * 20)
    open(path / "abort", "w").close()
    store = MessageStore(cfg(path))
    report = store.load()
    assert report.dropped_bytes > 0 and report.cq_units_dropped == 1
    assert store.get_max_offset_in_queue("T", 0) == 19
    store.start()
    store.shutdown()                                   # clean stop right after the recovery
    assert mqstore_main(["verify", str(path)]) == 0, capsys.readouterr().out
    # a later clean start must not find the dropped unit again
    with MessageStore(cfg(path)) as store:
        assert store.get_max_offset_in_queue("T", 0) == 19
        put_n(store, 1, start=20)
        bodies = pull_all(store)
        assert len(bodies) == 20 and bodies[-1].startswith(b"000020")
    with open(cl_file, "rb") as f:
        data = f.read()
    assert data[last_phy + 150:last_phy + 170] != b"\xff" * 20


# --- a missing middle commitlog file is data loss, said loudly ------------------------------------
def test_deleted_middle_commitlog_file_is_reported_as_data_loss_with_its_range(tmp_path, caplog):
    path = tmp_path / "store"
    with MessageStore(cfg(path)) as store:
        put_n(store, 1000)
        middle = store.commitlog.queue.files[1]
        lo, hi = middle.file_from_offset, middle.end_offset
        first_lost, end_lost = store.queues.get("T", 0).offsets_in_phy_range(lo, hi)
    assert end_lost > first_lost
    os.unlink(path / "commitlog" / ("%020d" % lo))
    store = MessageStore(cfg(path))
    with caplog.at_level(logging.ERROR, logger="mqcore.store.recovery"):
        report = store.load()
    try:
        assert not report.clean
        assert len(report.data_loss) == 1
        loss = report.data_loss[0]
        assert f"[{lo}, {hi})" in loss and f"T-0: {end_lost - first_lost}" in loss, loss
        assert any("DATA LOSS" in r.getMessage() and f"[{lo}, {hi})" in r.getMessage() for r in caplog.records)
        assert "DATA LOSS" in report.summary()
        # what survived is still served
        assert store.get_message("T", 0, end_lost, 4).status is GetMessageStatus.FOUND
        # the units into the gap are dropped (a pull skips them), the index is rebuilt without them
        assert report.cq_units_lost == end_lost - first_lost
        assert "pointing into lost commitlog ranges" in report.summary()
        got = store.get_message("T", 0, first_lost, 32)
        assert got.status is GetMessageStatus.MESSAGE_WAS_REMOVING and got.next_begin_offset > first_lost
        assert store.messages_by_key("T", f"T-{first_lost}") == []
        assert [m.body[:6] for m in store.messages_by_key("T", f"T-{end_lost}")] == [b"%06d" % end_lost]
        put_n(store, 3, start=1000)
    finally:
        store.shutdown()
    assert mqstore_main(["verify", str(path)]) == 0
    store = MessageStore(cfg(path))
    try:
        again = store.load()
        assert again.clean and not again.data_loss, again.summary()  # reported once, then closed
        assert len(pull_all(store, start=end_lost)) == 1000 - end_lost + 3
    finally:
        store.shutdown()


# --- consume queues missing units are rebuilt at every start --------------------------------------
def test_deleted_or_truncated_consume_queue_files_are_rebuilt_on_a_normal_start(tmp_path):
    path = tmp_path / "store"
    with MessageStore(cfg(path)) as store:
        put_n(store, 1000, queue_id=0)
        put_n(store, 900, queue_id=1)
        put_n(store, 50, topic="U", queue_id=0)
        assert len(store.queues.get("T", 0).queue.files) > 2
    q0 = path / "consumequeue" / "T" / "0"
    q1 = path / "consumequeue" / "T" / "1"
    for name in os.listdir(q0):                         # every file of T-0 deleted (its directory stays)
        os.unlink(q0 / name)
    last = sorted(os.listdir(q1))[-1]                    # T-1's last file cut short
    os.truncate(q1 / last, 20 * 7)
    store = MessageStore(cfg(path))
    report = store.load()                                # a normal start: no abort file
    try:
        assert not report.abnormal and not report.clean
        assert any(q.startswith("T-0:") for q in report.rebuilt_queues), report.summary()
        assert any(q.startswith("T-1:") for q in report.rebuilt_queues), report.summary()
        assert not any(q.startswith("U-0:") for q in report.rebuilt_queues)
        assert store.get_max_offset_in_queue("T", 0) == 1000 and store.get_max_offset_in_queue("T", 1) == 900
        store.start()
        b0, b1 = pull_all(store, "T", 0), pull_all(store, "T", 1)
        assert len(b0) == 1000 and b0[0].startswith(b"000000") and b0[-1].startswith(b"000999")
        assert len(b1) == 900 and b1[-1].startswith(b"000899")
        assert len(pull_all(store, "U", 0)) == 50
    finally:
        store.shutdown()


def test_a_deleted_topic_is_not_resurrected_by_the_check(tmp_path):
    path = tmp_path / "store"
    with MessageStore(cfg(path)) as store:
        put_n(store, 30, topic="Gone")
        put_n(store, 30, topic="Kept")
        store.delete_topic("Gone")
    with MessageStore(cfg(path)) as store:
        assert store.get_max_offset_in_queue("Gone", 0) == 0
        assert "no consume queue directory" in store.recovery_report.summary()
        assert len(pull_all(store, "Kept")) == 30


def test_a_deleted_topic_stays_deleted_when_the_index_lags(tmp_path):
    """Messages without keys leave the index behind the log, so a normal start re-dispatches
    from the index's end; that must not recreate the queue of a deleted topic."""
    path = tmp_path / "store"
    with MessageStore(cfg(path)) as store:
        put_n(store, 10, topic="Kept")
        for i in range(30):
            assert store.put_message(MessageExtBrokerInner(topic="Gone", body=b"g%d" % i)).ok
        for i in range(5):
            assert store.put_message(MessageExtBrokerInner(topic="Kept", body=b"k%d" % i)).ok
        store.delete_topic("Gone")
    with MessageStore(cfg(path)) as store:
        # re-read from the index's end (the 35 keyless records), none of them lacking anything
        assert store.recovery_report.records_redispatched == 0, store.recovery_report.summary()
        assert store.get_max_offset_in_queue("Gone", 0) == 0
        assert not os.path.exists(path / "consumequeue" / "Gone")
        assert store.get_max_offset_in_queue("Kept", 0) == 15


# --- a looping index chain -------------------------------------------------------------------------
def test_a_looping_index_chain_is_bounded_then_rebuilt_at_start(tmp_path, capsys, caplog):
    """A key query over a chain that loops answers (the walk ends at the bad link and the
    file is no longer queried); the next start finds the loop, moves the file to quarantine,
    rebuilds its entries from the commitlog, and verify is clean."""
    path = tmp_path / "store"
    with MessageStore(cfg(path, index_entries=4000)) as store:
        put_n(store, 300)
        index_file = store.index.files[-1].path
        make_loop(index_file, 101, "T", "never-sent")
        with caplog.at_level(logging.ERROR, logger="mqcore.store.index"):
            assert store.messages_by_key("T", "never-sent") == []
        assert any("damaged hash chain" in r.getMessage() for r in caplog.records)
        assert store.index.files[-1].damaged
        put_n(store, 20, start=300)  # writes go on; the damaged file is only not queried
    assert mqstore_main(["verify", str(path)]) != 0  # the loop is on disk
    capsys.readouterr()
    store = MessageStore(cfg(path, index_entries=4000))
    report = store.load()
    try:
        assert any("damaged hash chains" in n for n in report.notes), report.notes
        assert os.listdir(path / "quarantine")
        assert [m.body[:6] for m in store.messages_by_key("T", "T-7")] == [b"000007"]
        assert [m.body[:6] for m in store.messages_by_key("T", "T-319")] == [b"000319"]
    finally:
        store.shutdown()
    assert mqstore_main(["verify", str(path)]) == 0, capsys.readouterr().out
