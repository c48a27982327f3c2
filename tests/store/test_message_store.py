"""Store tests over real files in temp dirs, run on both kernel implementations."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading

import pytest

from mqcore.config import FlushDiskType
from mqcore.errors import CorruptFileError, StoreLockedError
from mqcore.format import layout as L
from mqcore.message import string_to_properties
from mqcore.store.message_store import MessageStore
from mqcore.store.results import GetMessageStatus, PutMessageStatus
from tests.support.store import BORN, STORE, msg, records, small_config

@pytest.fixture
def open_store(tmp_path, kernels):
    stores = []

    def _open(path=None, **kw):
        s = MessageStore(small_config(path or tmp_path / "store", **kw), kernels=kernels)
        s.load()
        s.start()
        stores.append(s)
        return s

    yield _open
    for s in stores:
        s.shutdown()


def test_put_get_round_trip(open_store):
    s = open_store()
    r = s.put_message(msg(body=b"hello", TAGS="TagA", KEYS="k1 k2", UNIQ_KEY="U1", WAIT="true"))
    assert r.status is PutMessageStatus.PUT_OK and r.queue_offset == 0 and r.phy_offset == 0
    assert r.msg_ids == ["7F00000100002A9F0000000000000000"]
    got, recs = records(s, "T", 0)
    assert got.status is GetMessageStatus.FOUND and got.next_begin_offset == 1 and got.max_offset == 1
    props = string_to_properties(recs[0].properties)
    assert recs[0].body == b"hello" and recs[0].queue_offset == 0 and recs[0].phy_offset == 0
    # the broker's view of properties: WAIT removed, CLUSTER added (4.9.8)
    assert props == {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "U1", "CLUSTER": "DefaultCluster"}
    assert recs[0].born_host == "10.0.0.7:40000"


def test_pull_statuses(open_store):
    s = open_store()
    # a queue never written to reads as RocketMQ's empty queue (its store creates it on lookup)
    empty = s.get_message("none", 0, 3, 32)
    assert (empty.status, empty.next_begin_offset, empty.min_offset, empty.max_offset) == \
        (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, 0, 0)
    for i in range(5):
        s.put_message(msg(body=b"m%d" % i))
    assert s.get_message("T", 0, 5, 32).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    bad = s.get_message("T", 0, 9, 32)
    # past the end goes back to the end, min offset 0 or not (4.9.7 and 5.3.3 answer so), never to 0
    assert bad.status is GetMessageStatus.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 5
    got, recs = records(s, "T", 0, 2, 2)
    assert [r.body for r in recs] == [b"m2", b"m3"] and got.next_begin_offset == 4
    assert len(got.buffers) == 1  # adjacent records come back as one zero-copy view


def test_tag_filter(open_store, kernels):
    s = open_store()
    for i, tag in enumerate(["TagA", "TagB", "TagC", "TagA", None]):
        props = {"TAGS": tag} if tag else {}
        s.put_message(msg(body=b"%d" % i, **props))
    codes = {kernels.java_hash("TagA"), kernels.java_hash("TagC")}
    got, recs = records(s, "T", 0, tag_codes=codes)
    assert [r.body for r in recs] == [b"0", b"2", b"3"] and got.next_begin_offset == 5
    got = s.get_message("T", 0, 4, 32, tag_codes=codes)
    assert got.status is GetMessageStatus.NO_MATCHED_MESSAGE and got.next_begin_offset == 5


def test_bad_input_is_refused_and_nothing_is_written(open_store):
    s = open_store(max_message_size_bytes=1000)
    for bad, status in [(msg(topic="bad topic"), PutMessageStatus.MESSAGE_ILLEGAL),
                        (msg(topic="x" * 128), PutMessageStatus.MESSAGE_ILLEGAL),
                        (msg(body=b"x" * 1001), PutMessageStatus.MESSAGE_ILLEGAL),
                        (msg(big="v" * 40000), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED),
                        (msg(qid=-1), PutMessageStatus.MESSAGE_ILLEGAL)]:
        r = s.put_message(bad)
        assert r.status is status and r.remark
    assert s.get_max_phy_offset() == 0
    r = s.put_batch("T", 0, b"\x00\x00\x00\x30garbage", born_host=BORN, store_host=STORE)
    assert r.status is PutMessageStatus.MESSAGE_ILLEGAL and "malformed" in r.remark
    assert s.get_max_phy_offset() == 0


def test_batch_put(open_store, kernels):
    s = open_store()
    s.put_message(msg())
    items = kernels.encode_batch_items([(0, b"b%d" % i, b"UNIQ_KEY\x01B%d\x02KEYS\x01bk%d" % (i, i)) for i in range(10)])
    r = s.put_batch("T", 0, items, born_host=BORN, store_host=STORE, batch_properties={"WAIT": "true"})
    assert r.ok and r.queue_offset == 1 and r.message_count == 10 and len(r.msg_ids) == 10
    got, recs = records(s, "T", 0, 1)
    assert [r.queue_offset for r in recs] == list(range(1, 11))
    assert [r.body for r in recs] == [b"b%d" % i for i in range(10)]
    assert string_to_properties(recs[3].properties) == {"UNIQ_KEY": "B3", "KEYS": "bk3", "CLUSTER": "DefaultCluster"}
    assert [m.body for m in s.messages_by_key("T", "bk7")] == [b"b7"]


def test_rollover_writes_blank_and_keeps_going(open_store, kernels):
    s = open_store()
    body = b"x" * 1000
    n = 200  # ~210 KiB: four 64 KiB commitlog files, four 50-unit consume-queue files
    for i in range(n):
        assert s.put_message(msg(body=body, KEYS="key%d" % i)).ok
    files = s.commitlog.queue.files
    assert len(files) >= 4
    first = files[0]
    # the first file ends with a blank record covering the rest of the file
    table, _, stop, reason = kernels.scan_records(first.buf, 0, first.file_size, 0, True, [1000], 10_000)
    assert reason == L.ScanStop.BLANK
    size, magic = struct.unpack_from(">ii", first.buf, stop)
    assert magic == L.MAGIC_BLANK and size == first.file_size - stop and size >= 8
    assert files[1].name == "%020d" % (64 * 1024)
    offsets = []
    off = 0
    while True:
        got, recs = records(s, "T", 0, off)
        if got.status is not GetMessageStatus.FOUND:
            break
        offsets.extend(r.queue_offset for r in recs)
        off = got.next_begin_offset
    assert offsets == list(range(n))
    assert len(s.queues.get("T", 0).queue.files) == 4
    assert [m.body for m in s.messages_by_key("T", "key150")] == [body]


def test_delay_message_goes_to_schedule_topic(open_store, kernels):
    s = open_store()
    r = s.put_message(msg(topic="Orders", qid=3, body=b"later", TAGS="TagA", DELAY="3"))
    assert r.ok and r.queue_id == 2
    unit = s.queues.get("SCHEDULE_TOPIC_XXXX", 2).unit(0)
    assert unit[2] == r.store_timestamp + 10_000  # tagsCode = deliver time
    m = s.look_message_by_offset(r.phy_offset)
    assert m.topic == "SCHEDULE_TOPIC_XXXX"
    assert m.properties["REAL_TOPIC"] == "Orders" and m.properties["REAL_QID"] == "3"
    r = s.put_message(msg(topic="Orders", DELAY="99"))  # clamped to the last level
    assert r.queue_id == 17 and s.look_message_by_offset(r.phy_offset).properties["DELAY"] == "18"


def test_queries_by_offset_and_time(open_store):
    ticks = iter(range(1_000_000, 10_000_000, 1000))
    s = open_store()
    s.clock = s.writer.clock = lambda: next(ticks)
    for i in range(10):
        s.put_message(msg(body=b"%d" % i))
    assert s.get_offset_in_queue_by_time("T", 0, 1_003_000) == 3
    assert s.get_offset_in_queue_by_time("T", 0, 1_003_400) == 3
    assert s.get_offset_in_queue_by_time("T", 0, 1_003_600) == 4
    assert s.get_offset_in_queue_by_time("T", 0, 99_000_000) == 9
    assert s.get_earliest_message_time("T", 0) == 1_000_000
    assert s.get_min_offset_in_queue("T", 0) == 0 and s.get_max_offset_in_queue("T", 0) == 10


def test_restart_keeps_everything(tmp_path, kernels):
    cfg = small_config(tmp_path / "s")
    with MessageStore(cfg, kernels=kernels) as s:
        for i in range(120):
            s.put_message(msg(body=b"x" * 700, qid=i % 3, KEYS="k%d" % i))
    assert not os.path.exists(cfg.abort_path)
    with MessageStore(cfg, kernels=kernels) as s:
        rep = s.recovery_report
        assert not rep.abnormal and rep.clean, rep.summary()
        assert [s.get_max_offset_in_queue("T", q) for q in range(3)] == [40, 40, 40]
        r = s.put_message(msg(qid=1))
        assert r.queue_offset == 40
        assert [m.body for m in s.messages_by_key("T", "k119")] == [b"x" * 700]
        assert len(s.messages_by_key("T", "k0")) == 1  # not indexed twice by the restart


def test_abnormal_recovery_cuts_torn_tail_and_rebuilds(tmp_path, kernels):
    cfg = small_config(tmp_path / "s")
    s = MessageStore(cfg, kernels=kernels)
    s.load()
    s.start()
    for i in range(30):
        s.put_message(msg(body=b"y" * 100, KEYS="k%d" % i))
    end = s.get_max_phy_offset()
    last = s.commitlog.queue.last
    # simulate a crash mid-append: half a record past the end, and a consume-queue unit for it
    torn = bytearray(200)
    kernels.encode_record(torn, 0, b"T", 0, 0, 30, end, 0, 0, BORN, 0, STORE, 0, 0, b"z" * 50, b"")
    last.buf[last.wrote_position:last.wrote_position + 60] = torn[:60]
    cq = s.queues.get("T", 0)
    cq.put_units_locked([30], [end], [150], [0])
    # "kill -9": no shutdown; release the OS lock so a new store can open the directory
    s.flush_service.shutdown()
    s._lock.release()
    assert os.path.exists(cfg.abort_path)
    # also lose the consume queue's last 5 units, as if they never reached the page cache
    cqf = cq.queue.files[0]
    cqf.buf[25 * 20:31 * 20] = bytes(6 * 20)
    s2 = MessageStore(cfg, kernels=kernels)
    rep = s2.load()
    s2.start()
    try:
        # dropped: the torn bytes up to the last non-zero one, copied aside first
        assert rep.abnormal and rep.stop_offset == end and 40 < rep.dropped_bytes <= 60
        assert rep.stop_reason in ("CORRUPT", "TRUNCATED")
        assert rep.quarantined and os.path.getsize(rep.quarantined[0]) == rep.dropped_bytes
        assert s2.get_max_phy_offset() == end
        assert s2.get_max_offset_in_queue("T", 0) == 30  # unit 30 dropped, units 25-29 rebuilt
        got, recs = records(s2, "T", 0, 24, 32)
        assert [r.queue_offset for r in recs] == list(range(24, 30))
        assert s2.put_message(msg()).queue_offset == 30
        assert [m.body for m in s2.messages_by_key("T", "k29")] == [b"y" * 100]
    finally:
        s2.shutdown()


def test_missing_index_is_rebuilt(tmp_path, kernels):
    cfg = small_config(tmp_path / "s")
    with MessageStore(cfg, kernels=kernels) as s:
        for i in range(50):
            s.put_message(msg(KEYS="k%d" % i))
    open(cfg.abort_path, "w").close()  # claim a crash
    idx = os.path.join(cfg.index_dir, os.listdir(cfg.index_dir)[0])
    with open(idx, "r+b") as f:  # tear the index: the header's end offset no longer matches
        f.seek(L.IDXH_END_PHYOFFSET)
        f.write(struct.pack(">q", 123456))
    with MessageStore(cfg, kernels=kernels) as s:
        assert any("torn index" in n for n in s.recovery_report.notes)
        assert [m.properties["KEYS"] for m in s.messages_by_key("T", "k7")] == ["k7"]


@pytest.mark.parametrize("field,value", [(L.IDXH_INDEX_COUNT, -10), (L.IDXH_INDEX_COUNT, -100_000_000),
                                         (L.IDXH_INDEX_COUNT, 10_000), (L.IDXH_HASH_SLOT_COUNT, -1)])
def test_damaged_index_header_after_clean_shutdown_is_a_report_not_a_crash(tmp_path, kernels, field, value):
    """With no abort file the header used to be trusted: indexCount -1e8 segfaulted the next put."""
    cfg = small_config(tmp_path / "s")
    with MessageStore(cfg, kernels=kernels) as s:
        for i in range(20):
            s.put_message(msg(KEYS="k%d" % i))
    assert not os.path.exists(cfg.abort_path)  # a clean shutdown
    idx = os.path.join(cfg.index_dir, os.listdir(cfg.index_dir)[0])
    with open(idx, "r+b") as f:
        f.seek(field)
        f.write(struct.pack(">i", value))
    with MessageStore(cfg, kernels=kernels) as s:
        notes = [n for n in s.recovery_report.notes if "damaged header" in n]
        assert len(notes) == 1 and os.path.basename(idx) in notes[0]
        kept = os.path.join(cfg.store_path, "quarantine", "index-" + os.path.basename(idx))
        assert os.path.exists(kept)  # the damaged file is kept for an operator, not deleted
        # the index was rebuilt from the commitlog, and new puts index normally
        assert [m.properties["KEYS"] for m in s.messages_by_key("T", "k7")] == ["k7"]
        s.put_message(msg(KEYS="after"))
        assert [m.properties["KEYS"] for m in s.messages_by_key("T", "after")] == ["after"]


def test_wrong_size_file_is_a_clear_error(tmp_path, kernels):
    cfg = small_config(tmp_path / "s")
    with MessageStore(cfg, kernels=kernels) as s:
        for i in range(100):
            s.put_message(msg(body=b"x" * 1000))
    first = os.path.join(cfg.commitlog_dir, "%020d" % 0)
    with open(first, "r+b") as f:
        f.truncate(1000)
    with pytest.raises(CorruptFileError, match="file size"):
        MessageStore(cfg, kernels=kernels).load()


def test_short_last_file_is_extended(tmp_path, kernels):
    cfg = small_config(tmp_path / "s")
    with MessageStore(cfg, kernels=kernels) as s:
        r = s.put_message(msg(body=b"x" * 100))
    last = os.path.join(cfg.commitlog_dir, "%020d" % 0)
    with open(last, "r+b") as f:
        f.truncate(4096)
    with MessageStore(cfg, kernels=kernels) as s:
        assert any("extended short file" in n for n in s.recovery_report.notes)
        assert s.look_message_by_offset(r.phy_offset).body == b"x" * 100


def test_second_process_gets_store_locked(tmp_path, kernels):
    cfg = small_config(tmp_path / "s")
    with MessageStore(cfg, kernels=kernels):
        code = ("import sys\nfrom mqcore.config import StoreConfig\nfrom mqcore.store.message_store import MessageStore\n"
                "from mqcore.errors import StoreLockedError\n"
                f"try:\n    MessageStore(StoreConfig(store_path={str(cfg.store_path)!r})).load()\n"
                "except StoreLockedError as e:\n    print('LOCKED', e)\n    sys.exit(3)\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert p.returncode == 3 and "locked by another process" in p.stdout, p.stderr


def test_sync_flush_group_commit(open_store):
    s = open_store(flush_disk_type=FlushDiskType.SYNC_FLUSH)
    results = []

    def writer(w):
        for i in range(50):
            results.append(s.put_message(msg(qid=w, body=b"%d-%d" % (w, i))))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 200 and all(r.status is PutMessageStatus.PUT_OK for r in results)
    assert s.commitlog.queue.flushed_offset() >= max(r.phy_offset + r.wrote_bytes for r in results)


def test_disk_full_refusal(open_store):
    s = open_store()
    s.refuse_puts("disk full")
    r = s.put_message(msg())
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and r.remark == "disk full"


def test_same_process_second_open_is_refused(tmp_path, kernels):
    """POSIX record locks are per process: the store keeps its own table as well."""
    cfg = small_config(tmp_path / "s")
    with MessageStore(cfg, kernels=kernels):
        with pytest.raises(StoreLockedError, match="already open in this process"):
            MessageStore(cfg, kernels=kernels).load()
    with MessageStore(cfg, kernels=kernels):  # released at shutdown: opens again
        pass


def test_checkpoint_records_the_end_of_the_newest_full_index_file(tmp_path, kernels):
    """RocketMQ's ``indexMsgTimestamp``: a Java broker recovering this store after a crash keeps
    only index files that end at or before it, so it must follow the files as they fill."""
    from mqcore.store.checkpoint import StoreCheckpoint
    cfg = small_config(tmp_path / "store", index_entries=40)
    s = MessageStore(cfg, kernels=kernels)
    s.load()
    s.start()
    try:
        for i in range(100):
            assert s.put_message(msg(KEYS=f"k{i}")).status is PutMessageStatus.PUT_OK
    finally:
        s.shutdown()
    names = sorted(os.listdir(cfg.index_dir))
    assert len(names) >= 3
    with open(os.path.join(cfg.index_dir, names[-2]), "rb") as f:
        _begin, end_ts = struct.unpack(">qq", f.read(16))
    ckpt = StoreCheckpoint(cfg.checkpoint_path)
    try:
        assert ckpt.index_msg_timestamp == end_ts > 0
    finally:
        ckpt.close()


def test_a_clean_restart_re_dispatches_nothing(tmp_path):
    """After a clean stop every record has its unit and its index entries: the restart re-reads
    the last indexed record (dispatch starts on a record boundary) but re-dispatches nothing,
    and says 0 (it said 1 after every clean restart)."""
    cfg = small_config(tmp_path / "s")
    with MessageStore(cfg) as store:
        for i in range(30):
            assert store.put_message(msg("T", b"m%d" % i, i % 2, KEYS=f"k{i}", UNIQ_KEY="U%030d" % i)).ok
    for _ in range(2):
        with MessageStore(cfg) as store:
            report = store.recovery_report
            assert not report.abnormal and report.records_redispatched == 0, report.summary()
            assert "re-dispatched 0" in report.summary()
            assert store.get_max_offset_in_queue("T", 0) == 15
    # messages without any key after the last keyed one: the index's end stays behind them,
    # yet they lack nothing (it said "re-dispatched 5" after this clean stop)
    with MessageStore(cfg) as store:
        for i in range(5):
            assert store.put_message(msg("T", b"bare%d" % i, 0)).ok
    with MessageStore(cfg) as store:
        report = store.recovery_report
        assert not report.abnormal and report.records_redispatched == 0, report.summary()
        assert store.get_max_offset_in_queue("T", 0) == 20
    # a crash (abort file left) still re-dispatches what it must check
    with MessageStore(cfg) as store:
        open(cfg.abort_path, "w").close()
        store._lock.release()
        store._state = "closed"
    with MessageStore(cfg) as store:
        assert store.recovery_report.abnormal and store.recovery_report.records_redispatched > 0
