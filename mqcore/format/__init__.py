"""The RocketMQ 4.9 byte format: layouts, property strings, batch items, and read-only file access.

Lowest layer of mqcore: it imports only ``mqcore.errors``, so
the kernels, the store, the tools, Spark and the client can all build on it.
"""
