"""The store engine: RocketMQ 4.9 commitlog, consume queues, index files."""
