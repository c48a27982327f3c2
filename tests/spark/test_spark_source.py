"""End-to-end: the data sources through one shared local SparkSession."""
from __future__ import annotations

import datetime as dt
import os

import pytest

from mqcore.spark.decode import ARROW_SCHEMA
from tests.support import storegen
from tests.support.storegen import GEOMETRY, expected

pytestmark = pytest.mark.spark
if os.environ.get("CI"):  # CI installs pyspark (scripts/test): a missing one must fail, not skip
    import pyspark.sql.functions as F
else:
    F = pytest.importorskip("pyspark.sql.functions")

PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def plan_of(df) -> str:
    return df._sc._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "simple")


def as_expected(row) -> dict:
    r = row.asDict(recursive=True)
    for k in ("born_timestamp", "store_timestamp"):
        r[k] = int(r[k].replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
    r["body"] = bytes(r["body"]) if r["body"] is not None else None
    del r["commitlog_offset"]
    return r


def test_schema_is_what_spark_derives(spark, store_dir):
    from pyspark.sql.pandas.types import to_arrow_schema
    df = spark.read.format("rocketmq").load(store_dir)
    assert to_arrow_schema(df.schema, timezone="UTC") == ARROW_SCHEMA


def test_every_message_once_with_its_fields(spark, store_dir, store_truth):
    rows = spark.read.format("rocketmq").load(store_dir).collect()
    assert len(rows) == len(store_truth)
    got = {r["commitlog_offset"]: r for r in rows}
    assert set(got) == set(store_truth)
    for off, (kind, m) in store_truth.items():
        assert as_expected(got[off]) == expected(kind, m), off


@pytest.mark.parametrize("pushdown", ["true", "false"])
def test_filters_with_and_without_pushdown(spark, store_dir, store_truth, pushdown):
    times = sorted(m.store_timestamp for _, m in store_truth.values())
    lo = dt.datetime.fromtimestamp(times[300] / 1000, dt.timezone.utc)
    hi = dt.datetime.fromtimestamp(times[900] / 1000, dt.timezone.utc)
    spark.conf.set(PUSHDOWN, pushdown)
    try:
        df = (spark.read.format("rocketmq").load(store_dir)
              .where("topic IN ('Orders', 'Payments')")
              .where((F.col("store_timestamp") >= lo) & (F.col("store_timestamp") < hi))
              .select("commitlog_offset", "tags"))
        plan = plan_of(df)
        got = {r["commitlog_offset"]: r["tags"] for r in df.collect()}
    finally:
        spark.conf.set(PUSHDOWN, "true")
    want = {o: m.tags for o, (_, m) in store_truth.items()
            if m.topic in ("Orders", "Payments") and times[300] <= m.store_timestamp < times[900]}
    assert got == want
    filter_line = next((line for line in plan.splitlines() if "Filter" in line), "")
    assert ("Orders" in filter_line) == (pushdown == "false")  # pushed filters leave Spark's Filter


def test_options_projection_and_splits(spark, store_dir, store_truth):
    df = (spark.read.format("rocketmq").option("topics", "Logs").option("includeBody", "false")
          .option("decompress", "true").load(store_dir))
    rows = df.select("commitlog_offset", "body", "is_compressed").collect()
    assert {r[0] for r in rows} == {o for o, (_, m) in store_truth.items() if m.topic == "Logs"}
    assert all(r[1] is None for r in rows) and any(r[2] for r in rows)
    fp = "bit_xor(xxhash64(commitlog_offset, topic, body, array_sort(map_entries(properties))))"
    whole = spark.read.format("rocketmq").load(store_dir).selectExpr(fp, "count(*)").first()
    split_df = spark.read.format("rocketmq").option("splitSize", "12k").load(store_dir)
    split = split_df.selectExpr(fp, "count(*)").first()
    assert tuple(whole) == tuple(split) and whole[1] == len(store_truth)
    assert split_df.rdd.getNumPartitions() > 12  # ~7 files of 32 KiB, cut in three
    pruned = spark.read.format("rocketmq").option("columns", "commitlog_offset,topic,body,properties").load(store_dir)
    assert pruned.columns == ["topic", "commitlog_offset", "body", "properties"]
    assert tuple(pruned.selectExpr(fp, "count(*)").first()) == tuple(whole)


def test_other_store_files(spark, store_dir, store_truth):
    per_queue = {}
    for _, m in store_truth.values():
        per_queue[(m.topic, m.queue_id)] = per_queue.get((m.topic, m.queue_id), 0) + 1
    cq = spark.read.format("rocketmq.consumequeue").load(store_dir)
    got = {(r[0], r[1]): (r[2], r[3]) for r in
           cq.groupBy("topic", "queue_id").agg(F.max("queue_offset"), F.count("*")).collect()}
    assert {k: v[1] for k, v in got.items()} == per_queue
    assert all(v[0] + 1 == v[1] for v in got.values())
    joined = cq.join(spark.read.format("rocketmq").load(store_dir), "commitlog_offset").count()
    assert joined == len(store_truth)
    offs = spark.read.format("rocketmq.consumeroffsets").load(store_dir).collect()
    assert ("Orders", "cg1", 1, 20) in [tuple(r) for r in offs]
    assert spark.read.format("rocketmq.topics").load(store_dir).count() == 2
    assert [tuple(r) for r in spark.read.format("rocketmq.delayoffsets").load(store_dir).collect()] == [(1, 0), (2, 4)]
    files = spark.read.format("rocketmq.files").load(store_dir).collect()
    assert sum(r["records"] for r in files) == len(store_truth) and not any(r["corrupt_records"] for r in files)
    assert [r["base_offset"] for r in files] == sorted(r["base_offset"] for r in files)
    idx = spark.read.format("rocketmq.index").option("indexSlots", GEOMETRY["slots"]) \
        .option("indexEntries", GEOMETRY["entries"]).load(store_dir)
    assert idx.selectExpr("count(distinct commitlog_offset)").first()[0] == sum(
        1 for _, m in store_truth.values() if m.keys or "UNIQ_KEY" in m.properties)


def test_clear_errors(spark, tmp_path):
    from pyspark.errors import AnalysisException, PySparkException
    with pytest.raises((AnalysisException, PySparkException), match="not a RocketMQ store"):
        spark.read.format("rocketmq").load(str(tmp_path)).count()
    with pytest.raises((AnalysisException, PySparkException), match="unknown option"):
        spark.read.format("rocketmq").option("topcis", "x").load(str(tmp_path)).count()


def test_live_store_yields_a_consistent_prefix(spark, tmp_path):
    root = str(tmp_path / "live")
    counts = []
    with storegen.live_store(root) as truth:
        for _ in range(2):
            got = sorted(r[0] for r in spark.read.format("rocketmq").option("verifyCrc", "true").load(root)
                         .select("commitlog_offset").collect())
            counts.append(len(got))
    assert got == sorted(o for o in truth if o <= got[-1])  # no gap, nothing torn, a prefix
    assert len(truth) > counts[0]
