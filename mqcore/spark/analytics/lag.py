"""Consumer lag per group and queue: committed offsets vs. consume-queue max offsets.

    mqcore-analytics lag /data/store --plot lag.png

``lag = max_offset - consumer_offset`` per (group, topic, queue), from
``config/consumerOffset.json`` and the consume queues. The backlog is then dated: the
unconsumed messages (queue offset >= committed offset) are counted per store-time
bucket, which is how far behind a group is *in time* -- the "lag over time" chart.
"""
from __future__ import annotations

import argparse

from mqcore.spark.analytics.common import Output, add_common_arguments, emit, interval, messages, pyplot, save_plot

NAME = "lag"
HELP = "consumer lag per group and queue, and the backlog by store time"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    p.add_argument("--groups", help="comma-separated consumer groups (default: all)")
    p.add_argument("--bucket", default="1h", help="store-time bucket of the backlog chart (default 1h)")


def compute(spark, store: str, groups: str | None = None):
    """(lag per group/topic/queue, the consume-queue units, committed offsets)."""
    from pyspark.sql import functions as F
    offsets = spark.read.format("rocketmq.consumeroffsets").load(store)
    if groups:
        offsets = offsets.where(F.col("group").isin([g.strip() for g in groups.split(",")]))
    units = spark.read.format("rocketmq.consumequeue").load(store)
    maxes = units.groupBy("topic", "queue_id").agg((F.max("queue_offset") + 1).alias("max_offset"),
                                                   F.min("queue_offset").alias("min_offset"))
    lag = (offsets.join(maxes, ["topic", "queue_id"], "left")
           .select("group", "topic", "queue_id", F.col("offset").alias("consumer_offset"),
                   F.coalesce("min_offset", F.lit(0)).alias("min_offset"),
                   F.coalesce("max_offset", F.lit(0)).alias("max_offset"))
           .withColumn("lag", F.greatest(F.lit(0), F.col("max_offset") - F.col("consumer_offset")))
           .orderBy(F.desc("lag"), "group", "topic", "queue_id"))
    return lag, units, offsets


def backlog(spark, store: str, units, offsets, bucket: str):
    """Unconsumed messages per group and store-time bucket (joins units to the commitlog)."""
    from pyspark.sql import functions as F
    pending = (units.join(offsets, ["topic", "queue_id"])
               .where(F.col("queue_offset") >= F.col("offset"))
               .select("group", "topic", "commitlog_offset"))
    topics = [r[0] for r in pending.select("topic").distinct().collect()]
    if not topics:
        return None
    msgs = messages(spark, store, ",".join(topics)).select("commitlog_offset", "store_timestamp")
    return (pending.join(msgs, "commitlog_offset")
            .groupBy("group", F.window("store_timestamp", interval(bucket)).start.alias("bucket_start"))
            .agg(F.count("*").alias("unconsumed"))
            .orderBy("group", "bucket_start"))


def plot(lag_rows, backlog_rows, path: str) -> None:
    plt = pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
    per_group: dict[str, int] = {}
    for r in lag_rows:
        key = f"{r['group']} / {r['topic']}"
        per_group[key] = per_group.get(key, 0) + r["lag"]
    names = sorted(per_group, key=per_group.get, reverse=True)[:15]
    a.barh(names[::-1], [per_group[n] for n in names[::-1]])
    a.set_title("Lag (messages) per group / topic")
    series: dict[str, list] = {}
    for r in backlog_rows or []:
        series.setdefault(r["group"], []).append((r["bucket_start"], r["unconsumed"]))
    for group, pts in series.items():
        pts.sort()
        b.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", label=group)
    b.set_title("Unconsumed messages by store time")
    b.set_xlabel("store time (UTC)")
    if series:
        b.legend(fontsize="small")
    fig.autofmt_xdate()
    save_plot(fig, path)


def run(spark, args: argparse.Namespace):
    output = Output.from_args(args)
    lag, units, offsets = compute(spark, args.store, args.groups)
    rows = emit(lag, output, "consumer lag per group and queue")
    back = backlog(spark, args.store, units, offsets, args.bucket)
    back_rows = emit(back, Output(show=output.show), "unconsumed messages by store time") if back else []
    if output.plot:
        plot(rows, back_rows, output.plot)
    return rows
