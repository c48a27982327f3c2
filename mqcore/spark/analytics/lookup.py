"""Find messages by key, message id or offset message id across the whole store.

    mqcore-analytics lookup /data/store --key order-42 [--topic Orders]

With ``--topic`` and an index directory the index answers first (plain Python, no
scan); ``--scan`` (or no topic) scans every commitlog record with Spark and matches
``KEYS`` words, ``msg_id`` (UNIQ_KEY) and ``offset_msg_id`` -- slower, but it also finds
messages whose index entries were never written or were cleaned up.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mqcore.spark.analytics.common import Output, add_common_arguments, emit, messages

if TYPE_CHECKING:  # pyspark is imported where the job runs
    from pyspark.sql import DataFrame, Row, SparkSession
    from pyspark.sql.types import StructType

NAME = "lookup"
HELP = "find messages by key / msg id across the store (index or full scan)"
COLUMNS = ("commitlog_offset", "store_timestamp", "topic", "queue_id", "queue_offset", "tags", "keys", "msg_id",
           "offset_msg_id", "original_topic", "reconsume_times", "store_size")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    p.add_argument("--key", required=True, help="a KEYS word, a msg id (UNIQ_KEY) or an offset msg id")
    p.add_argument("--topic", help="restrict to one topic (enables the index path)")
    p.add_argument("--scan", action="store_true", help="always scan the commitlog, even with --topic")
    p.add_argument("--index-slots", type=int, help="index maxHashSlotNum when not the default")
    p.add_argument("--index-entries", type=int, help="index maxIndexNum when not the default")


def scan(df: DataFrame, key: str) -> DataFrame:
    from pyspark.sql import functions as F
    hit = F.array_contains("keys", key) | (F.col("msg_id") == key) | (F.col("offset_msg_id") == key)
    return df.where(hit).select(*COLUMNS).orderBy("commitlog_offset")


def via_index(spark: SparkSession, store: str, topic: str, key: str, slots: int | None,
              entries: int | None) -> DataFrame:
    from mqcore.spark.files import locate_store
    from mqcore.spark.index import lookup_key
    if not (slots and entries):  # both or neither: one count alone is not a geometry
        slots = entries = None
    table = lookup_key(locate_store(store), topic, key, include_body=False, slots=slots, entries=entries)
    return spark.createDataFrame(table.select(list(COLUMNS)).to_pylist(), schema=_schema(spark, store))


def _schema(spark: SparkSession, store: str) -> StructType:
    return spark.read.format("rocketmq").load(store).select(*COLUMNS).schema


def run(spark: SparkSession, args: argparse.Namespace) -> list[Row]:
    output = Output.from_args(args)
    if args.topic and not args.scan:
        result = via_index(spark, args.store, args.topic, args.key, args.index_slots, args.index_entries)
        title = f"index lookup of {args.topic}#{args.key}"
    else:
        result = scan(messages(spark, args.store, args.topic), args.key)
        title = f"scan for {args.key!r}"
    return emit(result, output, title)
