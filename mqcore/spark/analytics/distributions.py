"""Message size and latency (store time - born time) distributions per topic.

    mqcore-analytics sizes /data/store --plot sizes.png

Latency here is producer clock to broker clock, so skew between the two machines
shows up as an offset (even a negative one); compare topics, not absolute values.
"""
from __future__ import annotations

import argparse

from mqcore.spark.analytics.common import (
    Output,
    add_common_arguments,
    add_range_arguments,
    emit,
    messages,
    pyplot,
    save_plot,
)

NAME = "sizes"
HELP = "message size and store-minus-born latency percentiles per topic"
PERCENTILES = (0.5, 0.9, 0.99)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    add_range_arguments(p)


def with_latency(df):
    from pyspark.sql import functions as F
    return df.withColumn("latency_ms", F.unix_millis("store_timestamp") - F.unix_millis("born_timestamp"))


def compute(df):
    from pyspark.sql import functions as F
    d = with_latency(df)
    aggs = [F.count("*").alias("messages")]
    for col, short in (("store_size", "size"), ("latency_ms", "latency_ms")):
        q = F.percentile_approx(col, list(PERCENTILES), 1000)
        aggs += [F.min(col).alias(f"{short}_min")]
        aggs += [q[i].alias(f"{short}_p{int(p * 100)}") for i, p in enumerate(PERCENTILES)]
        aggs += [F.max(col).alias(f"{short}_max")]
    return d.groupBy("topic").agg(*aggs).orderBy(F.desc("messages"))


def histogram(df, col: str, bins: int = 40) -> tuple[list[float], list[int]]:
    """(edges, counts) of ``col`` in ``bins`` equal-width bins, computed by Spark SQL."""
    from pyspark.sql import functions as F
    lo, hi = df.agg(F.min(col), F.max(col)).first()
    if lo is None:
        return [0.0, 1.0], [0]
    width = max((hi - lo) / bins, 1e-9)
    idx = F.least(F.floor((F.col(col) - F.lit(lo)) / F.lit(width)), F.lit(bins - 1)).cast("int")
    counts = [0] * bins
    for r in df.select(idx.alias("b")).groupBy("b").count().collect():
        counts[r["b"]] = r["count"]
    return [lo + i * width for i in range(bins + 1)], counts


def plot(df, path: str) -> None:
    plt = pyplot()
    d = with_latency(df).select("store_size", "latency_ms").cache()
    (s_edges, s_counts), (l_edges, l_counts) = histogram(d, "store_size"), histogram(d, "latency_ms")
    d.unpersist()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.5))
    a.stairs(s_counts, s_edges, fill=True)
    a.set_title("Message size (bytes, whole record)")
    a.set_yscale("log")
    b.stairs(l_counts, l_edges, fill=True)
    b.set_title("Store time - born time (ms)")
    b.set_yscale("log")
    save_plot(fig, path)


def run(spark, args: argparse.Namespace):
    df = messages(spark, args.store, args.topics, args.start, args.end)
    output = Output.from_args(args)
    rows = emit(compute(df), output, "size and latency per topic")
    if output.plot:
        plot(df, output.plot)
    return rows
