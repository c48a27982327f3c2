"""The broker: a single-node RocketMQ 4.x broker over mqcore's store."""
