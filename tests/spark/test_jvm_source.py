"""format("rocketmq-jvm"), the Java DataSource V2 reader: same rows as format("rocketmq").

Every comparison reads the same store through both readers in the shared session and
compares whole rows (all columns, or a pruned set), so any value the Java decoder gets
differently from the Python kernels fails here.
"""
from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import struct

import pytest

from mqcore.format import layout as L
from mqcore.spark import jvm
from mqcore.spark.files import locate_store, take_snapshot

pytestmark = pytest.mark.spark
if os.environ.get("CI"):
    import pyspark.sql.functions as F
else:
    F = pytest.importorskip("pyspark.sql.functions")

JVM = jvm.FORMAT
SPLIT = 5000  # bytes: small against the 32 KiB files, so records straddle split boundaries


def rows_of(df) -> list[dict]:
    """Rows as comparable dicts in commitlog order (every read here keeps commitlog_offset)."""
    out = []
    for r in df.collect():
        d = r.asDict(recursive=True)
        if d.get("body") is not None:
            d["body"] = bytes(d["body"])
        out.append(d)
    return sorted(out, key=lambda d: d["commitlog_offset"])


def both(spark, path: str, columns=None, where=None, **options):
    """(python rows, jvm rows) of the same read."""
    out = []
    for fmt in ("rocketmq", JVM):
        reader = spark.read.format(fmt)
        for k, v in options.items():
            reader = reader.option(k, str(v))
        df = reader.load(path)
        if where is not None:
            df = df.where(where)
        if columns is not None:
            df = df.select(*columns)
        out.append(rows_of(df))
    return out


def test_layout_constants_agree_with_the_python_layout():
    src = open(os.path.join(jvm.SOURCES, "io", "mqcore", "spark", "RecordLayout.java")).read()
    consts = dict(re.findall(r"static final int (\w+) = (-?(?:0x)?[0-9A-Fa-f]+);", src))
    assert len(consts) > 25
    for name, value in consts.items():
        assert getattr(L, name) == int(value, 0), name
    assert "HOST_V6_EXTRA = HOST_V6_BYTES - HOST_V4_BYTES" in src


def test_same_schema(jvm_reader, store_dir):
    assert jvm_reader.read.format(JVM).load(store_dir).schema == jvm_reader.read.format("rocketmq").load(
        store_dir).schema


def test_same_rows_all_columns_across_files_and_splits(jvm_reader, store_dir, store_truth):
    snap = take_snapshot(locate_store(store_dir))
    assert len(snap.files) > 3  # splits and files: records straddle both kinds of boundary
    file_size = 32 * 1024  # the built_store fixture's
    straddling = [o for o, (_, m) in store_truth.items()
                  if (o % file_size) // SPLIT != (o % file_size + m.store_size - 1) // SPLIT]
    assert straddling
    kinds = {k for k, _ in store_truth.values()}
    assert {"retry", "dlq", "delayed", "compressed"} <= kinds
    assert any(m.born_host.startswith("[") for _, m in store_truth.values())  # IPv6 hosts
    py, jv = both(jvm_reader, store_dir, splitSize=SPLIT)
    assert len(jv) == len(store_truth)
    assert jv == py
    # one partition per file gives the same rows
    _, whole = both(jvm_reader, store_dir, splitSize=0)
    assert whole == py


@pytest.mark.parametrize("columns", [
    ["commitlog_offset", "msg_id"],
    ["offset_msg_id", "born_host", "store_host", "commitlog_offset"],
    ["keys", "tags", "commitlog_offset"],
    ["properties", "original_topic", "delay_level", "is_delayed", "commitlog_offset"],
    ["queue_id", "queue_offset", "store_size", "body_crc", "flag", "sys_flag", "born_timestamp",
     "store_timestamp", "reconsume_times", "prepared_transaction_offset", "is_retry", "is_dlq",
     "is_compressed", "commitlog_offset"],
    ["body", "topic", "commitlog_offset"],
    ["delay_level", "is_delayed", "commitlog_offset"],  # DELAY looked for without parsing the rest
])
def test_same_rows_pruned_columns(jvm_reader, store_dir, columns):
    py, jv = both(jvm_reader, store_dir, columns=columns, splitSize=SPLIT)
    assert jv == py and len(jv[0]) == len(columns)
    plan = jvm_reader.read.format(JVM).load(store_dir).select(*columns)._jdf.queryExecution().executedPlan().toString()
    assert "ColumnarToRow" in plan  # Spark reads the batches as columns


def test_count_reads_no_column(jvm_reader, store_dir, store_truth):
    assert jvm_reader.read.format(JVM).option("splitSize", SPLIT).load(store_dir).count() == len(store_truth)


def test_options_match_the_python_reader(jvm_reader, store_dir, store_truth):
    offsets = sorted(store_truth)
    times = sorted(m.store_timestamp for _, m in store_truth.values())
    cases = [
        dict(topics="Orders,Payments"),
        dict(startTime=times[100], endTime=dt.datetime.fromtimestamp(times[700] / 1000, dt.timezone.utc)
             .strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"),
        dict(startOffset=offsets[250] + 1, endOffset=offsets[900]),  # starts inside a record: resync
        dict(includeBody="false", topics="Logs"),
        dict(snapshotOffset=offsets[600]),
        dict(batchSize=4096, maxRowsPerBatch=7),
    ]
    for opts in cases:
        py, jv = both(jvm_reader, store_dir, splitSize=SPLIT, **opts)
        assert jv == py, opts
        assert jv, opts


def test_pushed_filters_match_and_leave_spark_nothing_to_filter(jvm_reader, store_dir, store_truth):
    times = sorted(m.store_timestamp for _, m in store_truth.values())
    offsets = sorted(store_truth)
    lo = dt.datetime.fromtimestamp(times[300] / 1000, dt.timezone.utc)
    hi = dt.datetime.fromtimestamp(times[900] / 1000, dt.timezone.utc)
    cond = ((F.col("topic").isin("Orders", "Payments")) & (F.col("store_timestamp") >= lo)
            & (F.col("store_timestamp") < hi) & (F.col("commitlog_offset") > offsets[350]))
    py, jv = both(jvm_reader, store_dir, where=cond, columns=["commitlog_offset", "tags", "topic"],
                  splitSize=SPLIT)
    want = sorted(o for o, (_, m) in store_truth.items() if m.topic in ("Orders", "Payments")
                  and times[300] <= m.store_timestamp < times[900] and o > offsets[350])
    assert [r["commitlog_offset"] for r in jv] == want and jv == py
    df = jvm_reader.read.format(JVM).load(store_dir).where(cond).select("commitlog_offset")
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "Orders" not in plan.split("BatchScan")[0]  # no Filter above the scan: pushed, exactly
    assert "topics=Orders,Payments" in plan or "topics=Payments,Orders" in plan


def test_committed_end_excludes_a_half_written_record(jvm_reader, store_dir, store_truth, tmp_path):
    root = str(tmp_path / "torn")
    shutil.copytree(store_dir, root)
    snap = take_snapshot(locate_store(root))
    last = snap.files[-1]
    end = snap.end_offset - last.base_offset
    first = min(store_truth)
    size = store_truth[first][1].store_size
    assert end + size < last.size  # room for a torn record after the last one
    with open(snap.files[0].path, "rb") as f:
        record = bytearray(f.read(size))
    struct.pack_into(">q", record, L.REC_PHYOFFSET, snap.end_offset)
    with open(last.path, "r+b") as f:  # the writer got half of it down: header and part of the body
        f.seek(end)
        f.write(bytes(record[:L.REC_FIXED_V4 + 4]))
    py, jv = both(jvm_reader, root, columns=["commitlog_offset", "msg_id"], splitSize=SPLIT)
    assert len(jv) == len(store_truth) and jv == py
    assert max(r["commitlog_offset"] for r in jv) < snap.end_offset


def test_corrupt_record_is_a_clear_error_or_skipped(jvm_reader, store_dir, store_truth, tmp_path):
    from tests.support import storegen
    root, victim, path, base = storegen.corrupted_copy(store_dir, store_truth, tmp_path)  # a body byte
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError
    with pytest.raises((PySparkException, Py4JJavaError),
                       match=rf"corrupt commitlog record in {re.escape(path)} at file position "
                             rf"{victim - base} \(commitlog offset {victim}\).*onCorrupt=skip"):
        jvm_reader.read.format(JVM).option("verifyCrc", "true").load(root).select("commitlog_offset").collect()
    py, jv = both(jvm_reader, root, columns=["commitlog_offset", "body"], verifyCrc="true", onCorrupt="skip",
                  splitSize=SPLIT)
    assert jv == py and len(jv) == len(store_truth) - 1
    storegen.flip_byte(path, victim - base + L.REC_MAGIC)  # a broken magic: corrupt without a CRC check too
    with pytest.raises((PySparkException, Py4JJavaError), match=rf"at file position {victim - base} "):
        jvm_reader.read.format(JVM).load(root).select("commitlog_offset").collect()


def test_unknown_and_unsupported_options_are_errors(jvm_reader, store_dir, tmp_path):
    from pyspark.errors import PySparkException
    from py4j.protocol import Py4JJavaError
    errors = (PySparkException, Py4JJavaError)
    with pytest.raises(errors, match="unknown option 'topcis' for format rocketmq-jvm"):
        jvm_reader.read.format(JVM).option("topcis", "x").load(store_dir).count()
    with pytest.raises(errors, match="option decompress is not supported by format rocketmq-jvm"):
        jvm_reader.read.format(JVM).option("decompress", "true").load(store_dir).count()
    with pytest.raises(errors, match="(?i)option splitsize: 'lots' is not a size"):
        jvm_reader.read.format(JVM).option("splitSize", "lots").load(store_dir).count()
    with pytest.raises(errors, match="not a RocketMQ store"):
        jvm_reader.read.format(JVM).load(str(tmp_path)).count()
    with pytest.raises(errors, match="reads stores on the local disk"):
        jvm_reader.read.format(JVM).load("s3://bucket/store").count()


def test_live_store_yields_a_consistent_prefix(jvm_reader, tmp_path):
    """A writer appends while the JVM reader plans and reads: each read is a gapless prefix."""
    from tests.support import storegen
    root = str(tmp_path / "live")
    reads = []
    with storegen.live_store(root) as truth:
        for _ in range(3):
            reads.append(sorted(r[0] for r in jvm_reader.read.format(JVM).option("verifyCrc", "true")
                                .option("splitSize", SPLIT).load(root).select("commitlog_offset").collect()))
    for got in reads:
        assert got == sorted(o for o in truth if o <= got[-1])  # no gap, nothing torn, a prefix
    assert len(truth) > len(reads[0])


def _edge_store(root: str) -> int:
    """Two commitlog files of hand-made records: what the generated store does not hold
    (v2 magic, repeated and invalid property segments, odd DELAY values, IPv6 zero runs,
    RETRY_TOPIC/REAL_TOPIC), then a blank end-of-file marker. Returns the record count."""
    from mqcore._store_py import encode_record, write_blank
    from tests.test_kernels import RECORD_C
    v6 = lambda groups, port: struct.pack(">8Hi", *groups, port)  # noqa: E731
    v4 = struct.pack(">4Bi", 10, 1, 2, 3, 10911)
    cases = [  # (topic, properties, born host, store host)
        (b"Orders", b"A\x011\x02B\x012\x02A\x013", v4, v4),
        (b"Orders", b"\x02\x01x\x02noval\x01\x02KEYS\x01 a  b \x02DELAY\x01+7", v4, v4),
        (b"SCHEDULE_TOPIC_XXXX", b"DELAY\x01-3\x02REAL_TOPIC\x01Orders\x02UNIQ_KEY\x01AB", v4, v4),
        (b"%RETRY%g1", b"DELAY\x0112x\x02RETRY_TOPIC\x01Orders\x02TAGS\x01", v6([0x2001, 0xdb8, 0, 0, 1, 0, 0, 1], 7), v4),
        (b"%DLQ%g1", b"DELAY\x01999999999999\x02TAGS\x01t", v6([0] * 8, 1), v6([1, 0, 2, 0, 3, 0, 4, 0], 2)),
        (b"Payments", b"XDELAY\x011\x02DELAY", v6([0xfe80, 0, 0, 0, 0, 0, 0, 0xa], 3), v6([0, 0, 1, 0, 0, 0, 1, 1], 4)),
    ]
    os.makedirs(os.path.join(root, "commitlog"))
    file_size = 4096
    count = 0
    for f in range(2):
        base = f * file_size
        buf = bytearray(file_size)
        pos = 0
        for i, (topic, props, born, store) in enumerate(cases):
            flag = (L.SYSFLAG_BORNHOST_V6 if len(born) == 20 else 0) | (L.SYSFLAG_STOREHOST_V6 if len(store) == 20 else 0)
            pos += encode_record(buf, pos, topic, i % 3, 0, i, base + pos, flag, 1_700_000_000_000 + i, born,
                                 1_700_000_000_100 + i, store, i, 0, b"body %d" % i, props)
            count += 1
        rec = bytearray(RECORD_C)  # v2 magic: int16 topic length
        struct.pack_into(">q", rec, L.REC_PHYOFFSET, base + pos)
        buf[pos:pos + len(rec)] = rec
        pos += len(rec)
        count += 1
        if f == 0:
            write_blank(buf, pos, file_size - pos)
        with open(os.path.join(root, "commitlog", "%020d" % base), "wb") as out:
            out.write(bytes(buf))
    return count


@pytest.mark.parametrize("split", [0, 300])
def test_hand_made_edge_records_match(jvm_reader, tmp_path, split):
    root = str(tmp_path / "edge")
    count = _edge_store(root)
    py, jv = both(jvm_reader, root, splitSize=split)
    assert len(jv) == count and jv == py
    got = {r["commitlog_offset"]: r for r in jv}
    first = got[0]
    assert first["properties"] == {"B": "2", "A": "3"}
    second = [r for r in jv if r["keys"] == ["a", "b"]][0]
    assert second["delay_level"] == 7
    assert sorted({r["delay_level"] for r in jv}) == [-3, 0, 7, 100000000]
    assert {r["born_host"] for r in jv} >= {"[2001:db8::1:0:0:1]:7", "[::]:1", "[fe80::a]:3"}
    assert {r["store_host"] for r in jv} >= {"[1:0:2:0:3:0:4:0]:2", "[0:0:1::1:1]:4"}
    assert any(r["topic"] == "TopicTest" for r in jv)  # the v2 record
