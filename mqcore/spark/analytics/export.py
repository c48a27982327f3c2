"""Export a topic / time range of the commitlog to Parquet (bodies included).

    mqcore-analytics export /data/store --topics Orders --start 2024-05-01 --end 2024-05-02 \\
        --out /data/orders.parquet [--partition-by topic]

Worth it when the same data will be queried more than about twice: Parquet prunes
columns, which the Python data source cannot (spark-notes §4).
"""
from __future__ import annotations

import argparse

from mqcore.spark.analytics.common import add_range_arguments, messages

NAME = "export"
HELP = "write a topic/time range to Parquet"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", help="store root or its commitlog/ directory")
    p.add_argument("--out", required=True, help="output Parquet directory (replaced)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    add_range_arguments(p)
    p.add_argument("--partition-by", help="comma-separated columns to partition by (e.g. topic)")
    p.add_argument("--no-body", action="store_true", help="leave bodies out")
    p.add_argument("--decompress", action="store_true", help="inflate zlib-compressed bodies")
    p.add_argument("--compression", default="zstd", help="Parquet codec (default zstd)")


def export(spark, store: str, out: str, topics: str | None = None, start: str | None = None,
           end: str | None = None, partition_by: str | None = None, body: bool = True,
           decompress: bool = False, compression: str = "zstd") -> int:
    df = messages(spark, store, topics, start, end, include_body=body, decompress=str(decompress).lower())
    writer = df.write.mode("overwrite").option("compression", compression)
    if partition_by:
        writer = writer.partitionBy(*[c.strip() for c in partition_by.split(",")])
    writer.parquet(out)
    return spark.read.parquet(out).count()


def run(spark, args: argparse.Namespace):
    n = export(spark, args.store, args.out, args.topics, args.start, args.end, args.partition_by,
               not args.no_body, args.decompress, args.compression)
    print(f"exported {n:,} messages to {args.out}")
    return n
