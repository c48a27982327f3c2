"""Consumer lag per group and queue: committed offsets vs. consume-queue max offsets.

    mqcore-analytics lag /data/store --plot lag.png

``lag = max_offset - consumer_offset`` per (group, topic, queue), from
``config/consumerOffset.json`` and the consume queues. The backlog is then dated: the
unconsumed messages (queue offset >= committed offset) are counted per store-time
bucket, which is how far behind a group is *in time* -- the "lag over time" chart.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from mqcore.spark.analytics.common import (
    add_common_arguments,
    bucket,
    bucket_seconds,
    bucket_steps,
    counts_axis,
    emit,
    interval,
    messages,
    Output,
    pyplot,
    save_plot,
    series_style,
    time_axis,
    value_labels,
    zero_filled,
)

if TYPE_CHECKING:  # pyspark (and matplotlib) is imported where the job runs
    from matplotlib.figure import Figure
    from pyspark.sql import DataFrame, Row, SparkSession

NAME = "lag"
HELP = "consumer lag per group and queue, and the backlog by store time"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    p.add_argument("--groups", help="comma-separated consumer groups (default: all)")
    p.add_argument("--bucket", default="auto", type=backlog_bucket,
                   help="store-time bucket of the backlog (30s, 5m, 1h, ...; default auto: the smallest of "
                        f"{', '.join(AUTO_BUCKETS)} giving at most {AUTO_MAX_BUCKETS} buckets over the "
                        "unconsumed messages' store times)")


#: the buckets ``--bucket auto`` chooses from, and how many of them it may draw at most
AUTO_BUCKETS = ("1s", "10s", "1m", "5m", "15m", "1h", "6h", "1d", "1w")
AUTO_MAX_BUCKETS = 60


def backlog_bucket(text: str) -> str:
    """argparse type of lag's ``--bucket``: ``auto`` or a bucket (``common.bucket``)."""
    return "auto" if text.strip().lower() == "auto" else bucket(text)


def auto_bucket(span: dt.timedelta) -> str:
    """The smallest bucket that covers ``span`` in at most ``AUTO_MAX_BUCKETS`` buckets: two
    minutes of backlog are drawn in 10 s buckets, not as one hour-long flat line."""
    for b in AUTO_BUCKETS:
        if span.total_seconds() / bucket_seconds(b) <= AUTO_MAX_BUCKETS:
            return b
    return AUTO_BUCKETS[-1]


@dataclasses.dataclass
class Backlog:
    """Unconsumed messages per group and store-time bucket, the bucket used, and the first and
    last store time among them."""

    df: DataFrame
    bucket: str
    first: dt.datetime
    last: dt.datetime


def compute(spark: SparkSession, store: str,
            groups: str | None = None) -> tuple[DataFrame, DataFrame, DataFrame]:
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


def backlog(spark: SparkSession, store: str, units: DataFrame, offsets: DataFrame,
            bucket: str) -> Backlog | None:
    """Unconsumed messages per group and store-time bucket (joins units to the commitlog);
    ``bucket`` ``auto`` picks one from their store times (``auto_bucket``)."""
    from pyspark.sql import functions as F
    pending = (units.join(offsets, ["topic", "queue_id"])
               .where(F.col("queue_offset") >= F.col("offset"))
               .select("group", "topic", "commitlog_offset"))
    topics = [r[0] for r in pending.select("topic").distinct().collect()]
    if not topics:
        return None
    msgs = messages(spark, store, ",".join(topics)).select("commitlog_offset", "store_timestamp")
    dated = pending.join(msgs, "commitlog_offset").cache()
    span = dated.agg(F.min("store_timestamp"), F.max("store_timestamp")).first()
    assert span is not None  # an aggregate without groups has one row
    first, last = span
    if first is None:
        dated.unpersist()
        return None
    if bucket == "auto":
        bucket = auto_bucket(last - first)
    df = (dated.groupBy("group", F.window("store_timestamp", interval(bucket)).start.alias("bucket_start"))
          .agg(F.count("*").alias("unconsumed"))
          .orderBy("group", "bucket_start"))
    return Backlog(df, bucket, first, last)


def plot(lag_rows: list[Row], backlog_rows: list[Row], path: str | None, bucket: str = "1h",
         span: tuple[dt.datetime, dt.datetime] | None = None) -> Figure:
    """Left: lag per group/topic (bars). Right: unconsumed messages per store-time bucket,
    every bucket from the first to the last drawn (0 where none), one style per group.
    ``span`` (the first and last store time of those messages): when it is shorter than
    the chart's buckets, the title says so, as a bucket's flat line looks like a steady
    backlog over the whole bucket."""
    plt = pyplot()
    step = dt.timedelta(seconds=bucket_seconds(bucket))
    fig: Figure  # pyplot() is a module: its calls are not typed
    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
    per_group: dict[str, int] = {}
    for r in lag_rows:
        key = f"{r['group']} / {r['topic']}"
        per_group[key] = per_group.get(key, 0) + r["lag"]
    names = sorted(per_group, key=lambda n: (-per_group[n], n))[:15]
    values = [per_group[n] for n in names[::-1]]
    bars = a.barh(names[::-1], values)
    value_labels(a, bars, values)
    a_log = counts_axis(a, values, which="x")
    a.set_title("Lag (messages) per group / topic")
    a.set_xlabel("messages" + (" (log scale)" if a_log else ""))
    series: dict[str, dict[dt.datetime, int]] = {}  # group -> bucket start -> unconsumed
    for r in backlog_rows or []:
        s = series.setdefault(r["group"], {})
        s[r["bucket_start"]] = s.get(r["bucket_start"], 0) + r["unconsumed"]
    if series:
        first = min(min(s) for s in series.values())
        last = max(max(s) for s in series.values())
        for i, group in enumerate(sorted(series)):
            xs, ys = bucket_steps(zero_filled(series[group], first, last, step), step)
            b.step(xs, ys, where="post", label=group, **series_style(i))
        time_axis(b, first, last, step)
        b.legend(fontsize="small")
        b_log = counts_axis(b, [max(s.values()) for s in series.values()])
    else:
        b_log = False
        b.set_ylim(bottom=0)
    title = f"Unconsumed messages per {bucket} of store time"
    if span is not None and series:
        drawn = max(max(s) for s in series.values()) - min(min(s) for s in series.values()) + step
        if (span[1] - span[0]) * 4 < drawn:  # most of the drawn time holds no message at all
            title += f"\n(their store times span only {_duration(span[1] - span[0])}: a smaller --bucket shows more)"
    b.set_title(title)
    b.set_ylabel("messages" + (" (log scale)" if b_log else ""))
    if path:
        save_plot(fig, path)
    return fig


def _duration(d: dt.timedelta) -> str:
    s = d.total_seconds()
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def run(spark: SparkSession, args: argparse.Namespace) -> list[Row]:
    output = Output.from_args(args)
    lag, units, offsets = compute(spark, args.store, args.groups)
    rows = emit(lag, output, "consumer lag per group and queue")
    back = backlog(spark, args.store, units, offsets, args.bucket)
    back_rows = (emit(back.df, Output(show=output.show), f"unconsumed messages per {back.bucket} of store time")
                 if back else [])
    if output.plot:
        plot(rows, back_rows, output.plot, back.bucket if back else "1h",
             (back.first, back.last) if back else None)
    return rows
