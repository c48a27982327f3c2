"""Export a topic / time range of the commitlog to Parquet, JSON lines or CSV (bodies included).

    mqcore-analytics export /data/store --topics Orders --start 2024-05-01 --end 2024-05-02 \\
        --out /data/orders.parquet [--partition-by topic]

Worth it when the same data will be queried more than about twice: Parquet prunes
columns, which the Python data source cannot (spark-notes §4).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mqcore.spark.analytics.common import add_range_arguments, csv_columns, messages

if TYPE_CHECKING:  # pyspark is imported where the job runs
    from pyspark.sql import SparkSession

NAME = "export"
HELP = "write a topic/time range to Parquet (or --format json|csv)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", help="store root or its commitlog/ directory")
    p.add_argument("--out", required=True, help="output directory (replaced)")
    p.add_argument("--format", choices=FORMATS, default="parquet",
                   help="parquet (default); json (one object per line, bodies in base64); csv (a header line, "
                        "bodies in base64, keys and properties as JSON text)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    add_range_arguments(p)
    p.add_argument("--partition-by", help="comma-separated columns to partition by (e.g. topic)")
    p.add_argument("--no-body", action="store_true", help="leave bodies out")
    p.add_argument("--decompress", action="store_true", help="inflate zlib-compressed bodies")
    p.add_argument("--compression", default="zstd", help="Parquet codec (default zstd)")


FORMATS = ("parquet", "json", "csv")


def export(spark: SparkSession, store: str, out: str, topics: str | None = None, start: str | None = None,
           end: str | None = None, partition_by: str | None = None, body: bool = True,
           decompress: bool = False, compression: str = "zstd", fmt: str = "parquet") -> int:
    df = messages(spark, store, topics, start, end, include_body=body, decompress=str(decompress).lower())
    if fmt == "csv":
        from pyspark.sql import functions as F
        # CSV holds flat text only: bodies as base64 (as JSON writes them), nested columns as JSON
        df = csv_columns(df.withColumn("body", F.base64("body")))
    if fmt != "parquet" and compression == "zstd":
        compression = "none"  # Parquet's default codec; text formats are written plain unless asked
    writer = df.write.mode("overwrite").format(fmt).option("compression", compression)
    if fmt == "csv":
        writer = writer.option("header", "true")
    if partition_by:
        writer = writer.partitionBy(*[c.strip() for c in partition_by.split(",")])
    writer.save(out)
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("multiLine", "true")
    return reader.load(out).count()


def run(spark: SparkSession, args: argparse.Namespace) -> int:
    n = export(spark, args.store, args.out, args.topics, args.start, args.end, args.partition_by,
               not args.no_body, args.decompress, args.compression, args.format)
    print(f"exported {n:,} messages to {args.out} ({args.format})")
    return n
