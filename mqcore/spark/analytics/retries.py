"""Retry and dead-letter report per consumer group and original topic.

    mqcore-analytics retries /data/store --dlq-messages 20

Retried messages live in ``%RETRY%<group>`` (and wait in ``SCHEDULE_TOPIC_XXXX`` with
``REAL_TOPIC=%RETRY%<group>`` while delayed); dead letters in ``%DLQ%<group>``. Both carry
the topic they were first sent to in ``RETRY_TOPIC`` (the ``original_topic`` column).
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mqcore.spark.analytics.common import Output, add_common_arguments, add_range_arguments, emit, messages

if TYPE_CHECKING:  # pyspark is imported where the job runs
    from pyspark.sql import DataFrame, Row, SparkSession

NAME = "retries"
HELP = "retry and DLQ counts per group and original topic, plus the latest dead letters"


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    add_range_arguments(p)
    p.add_argument("--dlq-messages", type=int, default=20, help="latest dead letters to list (default 20)")


def compute(df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(summary per group/original topic, dead letters newest first)."""
    from pyspark.sql import functions as F
    real = F.col("properties")["REAL_TOPIC"]
    # which retry/DLQ topic a record belongs to: its own, or the one it is delayed for
    home = F.when(F.col("is_delayed") & (real.startswith("%RETRY%") | real.startswith("%DLQ%")), real) \
        .otherwise(F.col("topic"))
    kind = (F.when(home.startswith("%DLQ%"), F.lit("dlq"))
            .when(F.col("is_delayed"), F.lit("retry (delayed)"))
            .otherwise(F.lit("retry")))
    rd = (df.withColumn("home", home)
          .where(F.col("home").startswith("%RETRY%") | F.col("home").startswith("%DLQ%"))
          .withColumn("group", F.regexp_replace("home", "^%(RETRY|DLQ)%", ""))
          .withColumn("kind", kind))
    summary = (rd.groupBy("group", "original_topic", "kind")
               .agg(F.count("*").alias("messages"), F.max("reconsume_times").alias("max_reconsume"),
                    F.round(F.avg("reconsume_times"), 2).alias("avg_reconsume"),
                    F.min("store_timestamp").alias("first"), F.max("store_timestamp").alias("last"))
               .orderBy("group", "original_topic", "kind"))
    dead = (rd.where(F.col("kind") == "dlq")
            .select("store_timestamp", "group", "original_topic", "msg_id",
                    F.coalesce(F.col("properties")["ORIGIN_MESSAGE_ID"], F.lit("")).alias("origin_msg_id"),
                    F.array_join("keys", " ").alias("keys"), "reconsume_times", "commitlog_offset")
            .orderBy(F.desc("store_timestamp")))
    return summary, dead


def run(spark: SparkSession, args: argparse.Namespace) -> list[Row]:
    df = messages(spark, args.store, None, args.start, args.end)
    if args.topics:
        from pyspark.sql import functions as F
        df = df.where(F.col("original_topic").isin([t.strip() for t in args.topics.split(",")]))
    summary, dead = compute(df)
    output = Output.from_args(args)
    rows = emit(summary, output, "retries and dead letters per group and original topic")
    if args.dlq_messages:
        emit(dead.limit(args.dlq_messages), Output(show=args.dlq_messages), "latest dead letters")
    return rows
