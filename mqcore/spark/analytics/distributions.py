"""Message size and latency (store time - born time) distributions per topic.

    mqcore-analytics sizes /data/store --plot sizes.png

Latency here is producer clock to broker clock, so skew between the two machines
shows up as an offset (even a negative one); compare topics, not absolute values.

Delayed messages (a delay level, or delivered after one) and retried messages (retry and
dead-letter topics, or reconsumed) are stored long after they were born, on purpose: their
"latency" is the delay. The table's latency percentiles are over normal messages only (the
``delayed`` and ``retried`` columns count the others), and the chart draws the three kinds
as separate series.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mqcore.spark.analytics.common import (
    Output,
    add_common_arguments,
    add_range_arguments,
    counts_axis,
    emit,
    messages,
    pyplot,
    save_plot,
    series_style,
)

if TYPE_CHECKING:  # pyspark (and matplotlib) is imported where the job runs
    from matplotlib.figure import Figure
    from pyspark.sql import DataFrame, Row, SparkSession

NAME = "sizes"
HELP = "message size and store-minus-born latency percentiles per topic"
PERCENTILES = (0.5, 0.9, 0.99)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    add_range_arguments(p)


KINDS = ("normal", "delayed", "retried")


def with_latency(df: DataFrame) -> DataFrame:
    """Adds ``latency_ms`` and ``kind`` (normal, delayed, retried)."""
    from pyspark.sql import functions as F
    retried = F.col("is_retry") | F.col("is_dlq") | (F.col("reconsume_times") > 0)
    delayed = (F.col("is_delayed") | (F.col("delay_level") > 0)
               | F.col("properties")["REAL_TOPIC"].isNotNull())  # delivered by the delay service
    kind = F.when(retried, F.lit("retried")).when(delayed, F.lit("delayed")).otherwise(F.lit("normal"))
    return (df.withColumn("latency_ms", F.unix_millis("store_timestamp") - F.unix_millis("born_timestamp"))
            .withColumn("kind", kind))


def compute(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F
    d = with_latency(df)
    normal_latency = F.when(F.col("kind") == "normal", F.col("latency_ms"))
    aggs = [F.count("*").alias("messages"),
            F.sum((F.col("kind") == "delayed").cast("int")).alias("delayed"),
            F.sum((F.col("kind") == "retried").cast("int")).alias("retried")]
    for col, short in ((F.col("store_size"), "size"), (normal_latency, "latency_ms")):
        q = F.percentile_approx(col, list(PERCENTILES), 1000)
        aggs += [F.min(col).alias(f"{short}_min")]
        aggs += [q[i].alias(f"{short}_p{int(p * 100)}") for i, p in enumerate(PERCENTILES)]
        aggs += [F.max(col).alias(f"{short}_max")]
    return d.groupBy("topic").agg(*aggs).orderBy(F.desc("messages"))


def histogram(df: DataFrame, col: str, bins: int = 40,
              by: str | None = None) -> tuple[list[float], dict[str | None, list[int]]]:
    """(edges, {group: counts}) of ``col`` in ``bins`` equal-width bins shared by every
    group of ``by`` (one group, None, without it), computed by Spark SQL."""
    from pyspark.sql import functions as F
    extremes = df.agg(F.min(col), F.max(col)).first()
    assert extremes is not None  # an aggregate without groups has one row
    lo, hi = extremes
    if lo is None:
        return [0.0, 1.0], {}
    width = max((hi - lo) / bins, 1e-9)
    idx = F.least(F.floor((F.col(col) - F.lit(lo)) / F.lit(width)), F.lit(bins - 1)).cast("int")
    key = F.col(by) if by else F.lit(None)
    counts: dict[str | None, list[int]] = {}  # group (None without ``by``) -> count per bin
    for r in df.select(key.alias("g"), idx.alias("b")).groupBy("g", "b").count().collect():
        counts.setdefault(r["g"], [0] * bins)[r["b"]] = r["count"]
    return [lo + i * width for i in range(bins + 1)], counts


def plot(df: DataFrame, path: str | None) -> Figure:
    """Left: record sizes. Right: store - born time, one series per kind (normal,
    delayed, retried) over the same bins. Both count axes start at 0: linear when the bins
    are of one size, symmetric-log when a small bin would vanish (``counts_axis``).
    Returns the figure."""
    plt = pyplot()
    d = with_latency(df).select("store_size", "latency_ms", "kind").cache()
    s_edges, s_counts = histogram(d, "store_size")
    l_edges, l_counts = histogram(d, "latency_ms", by="kind")
    d.unpersist()
    return draw(s_edges, s_counts, l_edges, l_counts, path)


def draw(s_edges: list[float], s_counts: dict[str | None, list[int]], l_edges: list[float],
         l_counts: dict[str | None, list[int]], path: str | None) -> Figure:
    """The two panels of ``plot`` from their histograms (``histogram``'s results)."""
    plt = pyplot()
    fig: Figure  # pyplot() is a module: its calls are not typed
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    if s_counts:
        a.stairs(s_counts[None], s_edges, fill=True, label="all messages")
    a.set_title("Message size (whole record)")
    a.set_xlabel("bytes")
    # counts from 0: a log axis autoscaled to 5e4..7e4 drew a bin of 49 k a tenth of one of 70 k
    a_log = counts_axis(a, [c for counts in s_counts.values() for c in counts])
    a.set_ylabel("messages" + (" (log scale)" if a_log else ""))
    fills = {"normal": True, "delayed": False, "retried": False}
    for i, kind in enumerate(k for k in KINDS if k in l_counts):
        style = series_style(i)
        b.stairs(l_counts[kind], l_edges, fill=fills[kind], alpha=0.5 if fills[kind] else 1.0,
                 linestyle=style["linestyle"], linewidth=1.5, label=f"{kind} ({sum(l_counts[kind]):,})")
    b.set_title("Store time - born time")
    b.set_xlabel("milliseconds")
    b_log = counts_axis(b, [c for counts in l_counts.values() for c in counts])
    b.set_ylabel("messages" + (" (log scale)" if b_log else ""))
    if l_counts:
        b.legend(fontsize="small")
    if path:
        save_plot(fig, path)
    return fig


def run(spark: SparkSession, args: argparse.Namespace) -> list[Row]:
    df = messages(spark, args.store, args.topics, args.start, args.end)
    output = Output.from_args(args)
    rows = emit(compute(df), output, "size and latency per topic")
    if output.plot:
        plot(df, output.plot)
    return rows
