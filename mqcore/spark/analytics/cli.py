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
from typing import Sequence

from mqcore.spark.analytics import distributions, export, lag, lookup, retries, volume
from mqcore.spark.analytics.common import build_session, spark_progress
from mqcore.errors import StoreError
from mqcore.spark.files import NotAStoreError, list_commitlog, locate_store, take_snapshot

JOBS = (volume, lag, retries, lookup, distributions, export)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqcore-analytics", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = p.add_subparsers(dest="job", required=True, metavar="JOB")
    for job in JOBS:
        sp = sub.add_parser(job.NAME, help=job.HELP, description=job.__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        job.add_arguments(sp)
        sp.set_defaults(run=job.run)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:  # a wrong path is a one-line answer, before the JVM starts (planning reads it on the driver)
        dirs = locate_store(args.store)
        if not list_commitlog(dirs):
            take_snapshot(dirs)  # cheap without files: says so if the consume queues index messages
    except (NotAStoreError, StoreError) as e:
        print(f"mqcore-analytics: {e}", file=sys.stderr)
        return 2
    spark = build_session(args.master, f"mqcore-analytics {args.job}")
    try:
        with spark_progress(spark):
            args.run(spark, args)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
