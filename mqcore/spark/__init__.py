"""Spark (and plain-Python) readers over RocketMQ store directories, and analytics jobs.

Spark-free: ``files`` (discovery, snapshot, per-file health), ``options``, ``plan``
(splits and pruning), ``decode`` (Arrow batches via the Cython column kernel, also
``read_store``/``read_table`` for plain Python), ``index`` (index entries, key lookups),
``configs`` (config JSON), ``stream`` (streaming reads by consume queue). Spark: ``source`` (``rocketmq``, ``register(spark)``),
``aux_sources`` (consume queues, index, files, config tables), ``analytics`` (jobs and the
``mqcore-analytics`` command). See README.md next to this file.
"""
