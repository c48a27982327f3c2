"""mqcore: a RocketMQ-compatible broker, client library and Spark store reader."""
__version__ = "0.1.0"
