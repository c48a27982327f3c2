"""Java's ``hashCode`` where RocketMQ's format and protocol depend on it.

A consume-queue unit's tagsCode and an index entry's key hash are ``String.hashCode``
of the tag and of ``topic#key``; ``SelectMessageQueueByHash`` picks a queue by the
argument's ``hashCode``; fastjson writes a ``HashMap`` in the order its bucket hashes
give. This module is the pure-Python home of those hashes; the kernels carry a
compiled ``java_hash`` for the dispatch loop, checked against this one by the tests.
"""
from __future__ import annotations

import codecs
from typing import Any

# the codec every hash here (and the kernels' ``java_hash``) encodes with, looked up now: a first
# lookup imports its module, which takes a file descriptor, and a broker with every descriptor
# in use must still hash a message's keys (it answered "Too many open files" instead)
codecs.lookup("utf-16-be")

__all__ = ["string_hash", "hash_code", "continue_hash", "to_int32", "fields_hash"]


def to_int32(v: int) -> int:
    """The low 32 bits of ``v`` as a signed Java int."""
    v &= 0xFFFFFFFF
    return v - 0x100000000 if v & 0x80000000 else v


def continue_hash(h: int, units: bytes) -> int:
    """Continue an (unsigned 32-bit) ``String.hashCode`` state over UTF-16-BE code units."""
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h


def string_hash(text: str) -> int:
    """``String.hashCode()``: ``31*h + c`` over UTF-16 code units, as a signed int32
    (lone surrogates count as Java sees them)."""
    return to_int32(continue_hash(0, text.encode("utf-16-be", "surrogatepass")))


def hash_code(arg: Any) -> int:
    """``arg.hashCode()`` as Java computes it for String, Integer/Long and Boolean
    (``bytes`` count as the UTF-8 string they spell). Raises ``TypeError`` otherwise."""
    if isinstance(arg, bool):
        return 1231 if arg else 1237
    if isinstance(arg, int):
        if -(1 << 31) <= arg < (1 << 31):
            return arg  # Integer.hashCode
        return to_int32(arg ^ ((arg & 0xFFFFFFFFFFFFFFFF) >> 32))  # Long.hashCode
    if isinstance(arg, str):
        return string_hash(arg)
    if isinstance(arg, (bytes, bytearray)):
        return string_hash(bytes(arg).decode("utf-8", "replace"))
    raise TypeError(f"no Java hashCode for {type(arg).__name__}")


def fields_hash(*parts: int) -> int:
    """A generated ``hashCode`` over fields' hashes (``result = 31 * result + h`` from 1, as
    ``Objects.hash`` and Eclipse's generated ones compute it; ``MessageQueue``'s among them)."""
    h = 1
    for part in parts:
        h = to_int32(31 * h + part)
    return h
