"""Message volume and bytes per topic and tag over time.

    mqcore-analytics volume /data/store --bucket 1h --plot volume.png

Counts by *original* topic when ``--by-original`` is given, so retries and delayed
messages are charged to the topic they were sent to.
"""
from __future__ import annotations

import argparse
import datetime as dt
from typing import TYPE_CHECKING

from mqcore.spark.analytics.common import (
    add_common_arguments,
    add_range_arguments,
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
    zero_filled,
)

if TYPE_CHECKING:  # pyspark (and matplotlib) is imported where the job runs
    from matplotlib.figure import Figure
    from pyspark.sql import DataFrame, Row, SparkSession

NAME = "volume"
HELP = "messages and bytes per topic and tag per time bucket"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    add_range_arguments(p)
    p.add_argument("--bucket", default="1h", type=bucket, help="time bucket: 30s, 5m, 1h, 1d or a Spark interval (default 1h)")
    p.add_argument("--by-original", action="store_true", help="group by original_topic instead of topic")
    p.add_argument("--no-tags", action="store_true", help="per topic only")


def compute(df: DataFrame, bucket: str = "1h", by_original: bool = False, tags: bool = True) -> DataFrame:
    from pyspark.sql import functions as F
    topic = F.col("original_topic" if by_original else "topic").alias("topic")
    keys = [F.window("store_timestamp", interval(bucket)).start.alias("bucket_start"), topic]
    if tags:
        keys.append(F.coalesce(F.col("tags"), F.lit("")).alias("tags"))
    return (df.groupBy(*keys)
            .agg(F.count("*").alias("messages"), F.sum("store_size").alias("bytes"))
            .orderBy(*[k for k in ("bucket_start", "topic", "tags") if k in ("bucket_start", "topic") or tags]))


def plot(rows: list[Row], path: str | None, bucket: str = "1h", top: int = 8) -> Figure:
    """Messages per bucket for the busiest topics. Every bucket between the first and the
    last is drawn (0 where a topic had nothing), each topic with its own marker and line
    style. Returns the figure (tests read the data behind it)."""
    plt = pyplot()
    step = dt.timedelta(seconds=bucket_seconds(bucket))
    totals: dict[str, int] = {}
    series: dict[str, dict[dt.datetime, int]] = {}  # topic -> bucket start -> messages
    for r in rows:
        totals[r["topic"]] = totals.get(r["topic"], 0) + r["messages"]
        s = series.setdefault(r["topic"], {})
        s[r["bucket_start"]] = s.get(r["bucket_start"], 0) + r["messages"]
    fig: Figure  # pyplot() is a module: its calls are not typed
    fig, ax = plt.subplots(figsize=(10, 5))
    log = False
    if series:
        first = min(min(s) for s in series.values())
        last = max(max(s) for s in series.values())
        shown = sorted(totals, key=lambda t: (-totals[t], t))[:top]
        for i, topic in enumerate(shown):
            xs, ys = bucket_steps(zero_filled(series[topic], first, last, step), step)
            ax.step(xs, ys, where="post", label=f"{topic} ({totals[topic]:,})", **series_style(i))
        time_axis(ax, first, last, step)
        ax.legend(fontsize="small")
        log = counts_axis(ax, [max(series[t].values()) for t in shown])
    else:
        ax.set_ylim(bottom=0)
    ax.set_title(f"Messages per {bucket} bucket (top topics)")
    ax.set_ylabel("messages" + (" (log scale)" if log else ""))
    if path:
        save_plot(fig, path)
    return fig


def run(spark: SparkSession, args: argparse.Namespace) -> list[Row]:
    df = messages(spark, args.store, args.topics, args.start, args.end)
    result = compute(df, args.bucket, args.by_original, not args.no_tags)
    output = Output.from_args(args)
    rows = emit(result, output, "volume per topic" + ("" if args.no_tags else " and tag"))
    if output.plot:
        plot(rows, output.plot, args.bucket)
    return rows
