"""``mqcore-analytics``: offline analytics jobs over a RocketMQ store directory.

    mqcore-analytics volume  /data/store --bucket 1h --plot volume.png
    mqcore-analytics lag     /data/store --plot lag.png
    mqcore-analytics retries /data/store
    mqcore-analytics lookup  /data/store --key order-42
    mqcore-analytics sizes   /data/store --topics Orders --plot sizes.png
    mqcore-analytics export  /data/store --topics Orders --out /data/orders.parquet

On a cluster (the store on shared storage, mqcore installed in the executors' Python):

    spark-submit --master yarn scripts/mqcore_analytics.py volume /shared/store --out hdfs:///r/volume
"""
from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Sequence

from mqcore.spark.analytics import distributions, export, lag, lookup, retries, volume
from mqcore.spark.analytics.common import ON_CORRUPT_CONF, build_session, pyplot, spark_progress
from mqcore.errors import StoreError
from mqcore.spark.damage import READ_PAST, DamageReport, survey
from mqcore.spark.files import NotAStoreError, locate_store, take_snapshot

#: exit statuses: a path that is not a store; a damaged store read without --read-past-damage
EXIT_USAGE, EXIT_DAMAGED = 2, 3
READ_PAST_CLI = ("pass --read-past-damage to run the job on the records that are there, with this report as a "
                 "warning; `mqstore verify STORE` lists every problem")

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

JOBS = (volume, lag, retries, lookup, distributions, export)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqcore-analytics", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="job", required=True, metavar="JOB")
    for job in JOBS:
        sp = sub.add_parser(job.NAME, help=job.HELP, description=job.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        job.add_arguments(sp)
        sp.add_argument("--read-past-damage", action="store_true",
                        help="run on a damaged store (a missing commitlog file, a torn or corrupt record, consume "
                             "queues pointing past the log): read the records that are there and report the rest "
                             f"on stderr; without it such a store is refused (exit status {EXIT_DAMAGED})")
        sp.set_defaults(run=job.run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    damage = preflight(args)
    if isinstance(damage, int):
        return damage
    spark = build_session(args.master, f"mqcore-analytics {args.job}")
    try:
        run_job(spark, args, damage)
    finally:
        spark.stop()
    return 0


def preflight(args: argparse.Namespace) -> DamageReport | int:
    """Before the JVM starts: the store's damage report, or the exit status when the job must
    not run (a path that is not a store: one line; a damaged store without --read-past-damage:
    what is damaged, where, how many messages, and the option)."""
    if getattr(args, "plot", None):
        try:
            pyplot()  # matplotlib missing is said now, not after the whole Spark job ran
        except SystemExit as e:
            print(f"mqcore-analytics: {e}", file=sys.stderr)
            return EXIT_USAGE
    try:  # planning reads the store on the driver, so this is where a wrong path is found
        dirs = locate_store(args.store)
        # the whole store is walked once here (a header hop per record): damage is named up
        # front, before Spark runs, and not found by one task in the middle of the job
        damage = survey(dirs, take_snapshot(dirs), walk=True)
    except (NotAStoreError, StoreError) as e:
        print(f"mqcore-analytics: {e}", file=sys.stderr)
        return EXIT_USAGE
    if damage and not args.read_past_damage:
        print("mqcore-analytics: " + str(damage.error()).replace(READ_PAST, READ_PAST_CLI), file=sys.stderr)
        return EXIT_DAMAGED
    if damage:
        report_damage(damage)
    return damage


def run_job(spark: SparkSession, args: argparse.Namespace, damage: DamageReport) -> object:
    """Run the job on ``spark``; with --read-past-damage the reads skip the damage and its
    report is repeated after the results (they lack what the damaged ranges held)."""
    if args.read_past_damage:
        spark.conf.set(ON_CORRUPT_CONF, "skip")
    try:
        with spark_progress(spark):
            result = args.run(spark, args)
    finally:
        spark.conf.unset(ON_CORRUPT_CONF)
    if damage:
        report_damage(damage)
    return result


def report_damage(damage: DamageReport) -> None:
    print("mqcore-analytics: WARNING: --read-past-damage: the results leave out what these ranges held", file=sys.stderr)
    for line in damage.lines():
        print(f"mqcore-analytics: WARNING: {line}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
