"""The reader without Spark: planning, Arrow batches, options, snapshots, configs, index.

Every answer is compared with what the store's own API returns for the same store.
"""
from __future__ import annotations

import datetime as dt
import os
import shutil
import threading
import zlib

import pyarrow as pa
import pytest

from mqcore.errors import ConfigError, RecordDecodeError
from mqcore.spark import configs
from mqcore.spark.decode import ARROW_SCHEMA, SplitStats, iter_split, read_table
from mqcore.spark.files import NotAStoreError, locate_store, scan_file, take_snapshot
from mqcore.spark.index import lookup_key
from mqcore.spark.options import ReadOptions
from mqcore.spark.plan import plan_splits
from mqcore.store.message_store import MessageStore
from tests.support import storegen
from tests.support.storegen import GEOMETRY, expected


def by_offset(table: pa.Table) -> dict[int, dict]:
    rows = table.to_pylist()
    out = {r["commitlog_offset"]: r for r in rows}
    assert len(out) == len(rows), "a record was read twice"
    return out


def ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def actual(row: dict) -> dict:
    r = dict(row)
    r["born_timestamp"] = ms(r["born_timestamp"])
    r["store_timestamp"] = ms(r["store_timestamp"])
    r["properties"] = dict(r["properties"])
    del r["commitlog_offset"]
    return r


def test_every_message_once_with_its_fields(store_dir, store_truth):
    table = read_table(store_dir)
    assert table.schema == ARROW_SCHEMA
    rows = by_offset(table)
    assert set(rows) == set(store_truth)
    assert len(os.listdir(os.path.join(store_dir, "commitlog"))) >= 4  # the fixture rolls files over
    kinds = {kind for kind, _ in store_truth.values()}
    assert kinds == {"plain", "compressed", "delayed", "retry", "dlq"}
    for off, (kind, m) in store_truth.items():
        assert actual(rows[off]) == expected(kind, m), off


def test_topic_time_and_offset_filters_match_the_store(store_dir, store_truth):
    times = sorted(m.store_timestamp for _, m in store_truth.values())
    lo, hi = times[len(times) // 4], times[len(times) // 2]
    offsets = sorted(store_truth)
    olo, ohi = offsets[100], offsets[700]
    table = read_table(store_dir, topics="Orders,%DLQ%cg1", startTime=lo, endTime=hi, startOffset=olo,
                       endOffset=ohi)
    want = {o for o, (_, m) in store_truth.items()
            if m.topic in ("Orders", "%DLQ%cg1") and lo <= m.store_timestamp <= hi and olo <= o < ohi}
    assert want and set(by_offset(table)) == want


@pytest.mark.parametrize("use_cq", ["true", "false", "auto"])
def test_topic_read_via_consume_queues_or_walk(store_dir, store_truth, use_cq):
    opts = ReadOptions.from_options({"path": store_dir, "topics": "Payments,SCHEDULE_TOPIC_XXXX",
                                     "useConsumeQueue": use_cq})
    dirs = locate_store(store_dir)
    splits = plan_splits(dirs, take_snapshot(dirs), opts)
    if use_cq != "auto":
        assert any(s.by_queue for s in splits) == (use_cq == "true")
    got = {}
    for s in splits:
        for b in iter_split(s, opts):
            got.update(by_offset(pa.Table.from_batches([b])))
    want = {o for o, (_, m) in store_truth.items() if m.topic in ("Payments", "SCHEDULE_TOPIC_XXXX")}
    assert set(got) == want


def test_rare_topic_prunes_files_via_consume_queue(store_dir, store_truth, tmp_path):
    dirs = locate_store(store_dir)
    snap = take_snapshot(dirs)
    splits = plan_splits(dirs, snap, ReadOptions(path=store_dir, topics=("Logs",)))
    assert splits and all(s.by_queue for s in splits)  # a small share of every file: looked up
    # a topic only in the first file: the other files are not even opened
    root = str(tmp_path / "early")
    with MessageStore(storegen.config(root, 32 * 1024), clock=storegen.StepClock()) as store:
        early = [store.put_message(storegen._msg("Early", b"e%d" % i)).phy_offset for i in range(5)]
        for i in range(1000):
            store.put_message(storegen._msg("Bulk", b"b" * 100))
    dirs = locate_store(root)
    snap = take_snapshot(dirs)
    splits = plan_splits(dirs, snap, ReadOptions(path=root, topics=("Early",)))
    assert len(snap.files) > 3 and [s.base_offset for s in splits] == [0]
    assert set(by_offset(read_table(root, topics="Early"))) == set(early)
    # a topic without consume queues may still have records (deleted queues): it is walked
    assert len(plan_splits(dirs, snap, ReadOptions(path=root, topics=("Nope",)))) == len(snap.files)


def test_time_range_prunes_files(store_dir, store_truth):
    dirs = locate_store(store_dir)
    snap = take_snapshot(dirs)
    last_first_ts = snap.first_ts[-1]
    splits = plan_splits(dirs, snap, ReadOptions(path=store_dir, min_store_ts=last_first_ts + 1,
                                                 time_slack_ms=0))
    assert [s.path for s in splits] == [snap.files[-1].path]
    got = set(by_offset(read_table(store_dir, startTime=last_first_ts + 1, timeSlackMs=0)))
    assert got == {o for o, (_, m) in store_truth.items() if m.store_timestamp > last_first_ts}


@pytest.mark.parametrize("split_size", [700, 5000, 1 << 20])
def test_byte_range_splits_resync(store_dir, store_truth, split_size):
    dirs = locate_store(store_dir)
    opts = ReadOptions(path=store_dir, split_size=split_size, include_body=False)
    splits = plan_splits(dirs, take_snapshot(dirs), opts)
    got: list[int] = []
    for s in splits:
        for b in iter_split(s, opts):
            got += b.column("commitlog_offset").to_pylist()
    assert sorted(got) == sorted(store_truth) and len(got) == len(set(got))
    if split_size < 1000:
        assert sum(not s.aligned for s in splits) > 10


def test_body_projection_and_decompression(store_dir, store_truth):
    rows = by_offset(read_table(store_dir, includeBody=False, topics="Logs"))
    assert all(r["body"] is None for r in rows.values())
    rows = by_offset(read_table(store_dir, decompress=True, topics="Logs"))
    compressed = [o for o, (kind, _) in store_truth.items() if kind == "compressed"]
    assert compressed
    for o in compressed:
        assert rows[o]["body"] == zlib.decompress(store_truth[o][1].body)
        assert rows[o]["is_compressed"] and rows[o]["body"].startswith(b"log line")


def test_columns_option_builds_only_those_columns(store_dir, store_truth):
    full = by_offset(read_table(store_dir, topics="Orders"))
    table = read_table(store_dir, topics="Orders", columns="Body, commitlog_offset,properties")
    assert table.schema.names == ["commitlog_offset", "body", "properties"]  # table order, not option order
    assert table.schema == pa.schema([ARROW_SCHEMA.field(n) for n in table.schema.names])
    for r in table.to_pylist():
        whole = full[r["commitlog_offset"]]
        assert (r["body"], r["properties"]) == (whole["body"], whole["properties"])
    no_body = read_table(store_dir, topics="Orders", columns="topic,queue_offset")
    assert no_body.num_rows == len(full) and set(no_body["topic"].to_pylist()) == {"Orders"}
    with pytest.raises(ConfigError, match="nosuch is not a column"):
        read_table(store_dir, columns="topic,nosuch")


def test_each_column_alone_equals_the_full_read(store_dir):
    """The kernel skips the work of unwanted columns (and the properties scan when nothing
    reads it): every column read alone, or next to one other, must equal the full read's."""
    full = read_table(store_dir, splitSize="5000")
    offsets = full["commitlog_offset"].to_pylist()
    for name in ARROW_SCHEMA.names:
        for extra in ({"commitlog_offset"} - {name}, {"commitlog_offset", "properties"} - {name}):
            cols = ",".join(sorted({name} | extra))
            part = read_table(store_dir, columns=cols, splitSize="5000")
            assert part["commitlog_offset"].to_pylist() == offsets, cols
            assert part[name].to_pylist() == full[name].to_pylist(), cols


def test_not_a_store_and_bad_options(tmp_path):
    with pytest.raises(NotAStoreError, match="not a RocketMQ store"):
        read_table(str(tmp_path))
    with pytest.raises(NotAStoreError, match="not a directory"):
        read_table(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="unknown option 'topcis'"):
        ReadOptions.from_options({"topcis": "A"})
    with pytest.raises(ConfigError, match="splitsize"):
        ReadOptions.from_options({"splitSize": "lots"})
    assert ReadOptions.from_options({"startTime": "2023-11-14T22:13:20Z"}).min_store_ts == 1_700_000_000_000
    assert ReadOptions.from_options({"splitSize": "128m"}).split_size == 128 << 20

def test_corrupt_records_fail_or_skip_and_count(store_dir, store_truth, tmp_path):
    root, victim, _, _ = storegen.corrupted_copy(store_dir, store_truth, tmp_path)
    with pytest.raises(RecordDecodeError, match=f"commitlog offset {victim}.*onCorrupt=skip"):
        read_table(root, verifyCrc=True)
    assert len(read_table(root)) == len(store_truth)  # without CRC checks the body is just different
    dirs = locate_store(root)
    opts = ReadOptions(path=root, verify_crc=True, on_corrupt="skip")
    stats = SplitStats()
    got = set()
    for s in plan_splits(dirs, take_snapshot(dirs), opts):
        for b in iter_split(s, opts, stats=stats):
            got |= set(b.column("commitlog_offset").to_pylist())
    assert got == set(store_truth) - {victim} and stats.corrupt == 1
    snap = take_snapshot(dirs)
    health = [scan_file(f.path, f.base_offset, snap.data_end(i)) for i, f in enumerate(snap.files)]
    assert sum(h.records for h in health) == len(store_truth) - 1
    assert [h.corrupt_records for h in health][:3] == [0, 1, 0]
    assert all(h.end == "BLANK" for h in health[:-1])


def test_live_store_reads_a_consistent_prefix(tmp_path):
    """A writer appends while we read: each read is exactly the records below its snapshot end."""
    root = str(tmp_path / "live")
    store = MessageStore(storegen.config(root, 32 * 1024), clock=storegen.StepClock())
    store.load()
    store.start()
    stop = threading.Event()
    puts: list[int] = []

    def writer():
        i = 0
        while not stop.is_set() and i < 3000:
            m = storegen.messages(12)[i % 12][1]
            puts.append(store.put_message(m).phy_offset)
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    reads = []
    try:
        dirs = locate_store(root)
        # read until the end has been seen to move a few times (or the writer is done): a fixed
        # number of reads can all finish before a starved writer's first flush on a busy machine
        while t.is_alive() and len({end for end, _ in reads}) < 4:
            snap = take_snapshot(dirs)
            opts = ReadOptions(path=root, verify_crc=True)
            rows: list[int] = []
            for s in plan_splits(dirs, snap, opts):
                for b in iter_split(s, opts):
                    rows += b.column("commitlog_offset").to_pylist()
            reads.append((snap.end_offset, rows))
    finally:
        stop.set()
        t.join()
        truth = storegen.store_truth(store)
        store.shutdown()
    assert len(reads) >= 3 and len({end for end, _ in reads}) >= 2  # the end really moved
    for end, rows in reads:
        assert rows == sorted(o for o in truth if o < end)


def test_configs_lenient_and_bak_fallback(store_dir, tmp_path):
    dirs = locate_store(store_dir)
    assert [t.topic for t in configs.topics(dirs)] == ["Orders", "Payments"]
    offs = {(r.topic, r.group, r.queue_id): r.offset for r in configs.consumer_offsets(dirs)}
    assert offs[("Orders", "cg1", 1)] == 20 and offs[("%RETRY%cg1", "cg1", 0)] == 2
    assert configs.delay_offsets(dirs) == [(1, 0), (2, 4)]
    assert configs.subscription_groups(dirs) == []
    root = str(tmp_path / "bak")
    shutil.copytree(store_dir, root)
    cfg = os.path.join(root, "config", "consumerOffset.json")
    shutil.copy(cfg, cfg + ".bak")
    with open(cfg, "w") as f:
        f.write("{\n\t\"offsetTable\":{\n\t\t\"Orders@cg1\":{0:")  # torn write
    assert len(configs.consumer_offsets(locate_store(root))) == len(offs)


def test_key_lookup_matches_the_store(store_dir, store_truth):
    dirs = locate_store(store_dir)
    with MessageStore(storegen.config(store_dir, 32 * 1024)) as store:
        for topic, key in [("Orders", "shared"), ("Orders", "order-1"), ("Orders", "UNIQ00000013"),
                           ("Payments", "pay-5"), ("Orders", "nope")]:
            want = sorted(m.commitlog_offset for m in store.messages_by_key(topic, key, 64))
            got = lookup_key(dirs, topic, key, **GEOMETRY).column("commitlog_offset").to_pylist()
            assert sorted(got) == want, (topic, key)
            brute = sorted(o for o, (_, m) in store_truth.items()
                           if m.topic == topic and (key in m.keys or m.properties.get("UNIQ_KEY") == key))
            assert want == brute[:64] or len(brute) > 64
