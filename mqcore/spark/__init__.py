"""Spark (and plain-Python) readers over RocketMQ store directories, and analytics jobs.

Spark-free parts: ``files`` (discovery, snapshot), ``options``, ``plan`` (splits),
``decode`` (Arrow batches), ``configs`` (config JSON). The data sources live in
``source`` and import pyspark.
"""
