"""Message filters the broker applies to pulls: RocketMQ's SQL92 property filter."""
from mqcore.filter.sql92 import Sql92Filter, compile_sql92

__all__ = ["Sql92Filter", "compile_sql92"]
