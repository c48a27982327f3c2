"""Auto-registration hook: PySpark registers ``DefaultSource`` of every importable
top-level ``pyspark_*`` module, so with mqcore installed in the workers' Python
``spark.read.format("rocketmq")`` works without ``spark.dataSource.register``.

Only one source per module is picked up; the store's other files
(``rocketmq.consumequeue``, ``rocketmq.index``, the config tables) need
``mqcore.spark.source.register(spark)``.
"""
from mqcore.spark.source import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
