#!/usr/bin/env python3
"""spark-submit entry point of the analytics jobs (same arguments as ``mqcore-analytics``).

    spark-submit --master yarn --conf spark.sql.python.filterPushdown.enabled=true \
        scripts/mqcore_analytics.py lag /shared/rocketmq/store --out /shared/reports/lag

mqcore must be importable by the driver and every executor (installed in their Python,
e.g. a venv-pack archive passed with --archives); see mqcore/spark/README.md.
"""
import sys

from mqcore.spark.analytics.cli import main

if __name__ == "__main__":
    sys.exit(main())
