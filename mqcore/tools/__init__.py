"""Operator tools: the ``mqstore`` command (dump, verify, stats, import).

Why a separate package: these run against store directories from a shell, often while a
broker is serving them, so everything except ``import`` reads files read-only without
the store lock (``storefiles``), and never goes through ``MessageStore``.
"""
