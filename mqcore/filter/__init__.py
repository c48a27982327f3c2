"""Message filters the broker applies to pulls: RocketMQ's SQL92 property filter (``sql92``)."""
