"""The store's hot state: its classes on their kernels' C bases.

A one-in-flight put or pull starts cache-cold after a wake-up, and each Python attribute the
send pipeline's ``StorePlainSends`` or the pull's ``PullReader`` reads of the store's objects
is a dict lookup there. The store kernels offer a base per class holding those fields
(``MappedFileCore``, ``MappedFileQueueCore``, ``ConsumeQueueCore``, ``MessageWriterCore``,
``DispatcherCore``, ``IndexServiceCore``, ``IndexFileCore``): in the compiled kernels struct fields the C readers read typed, in the
twin ``__slots__`` of the same names. A store builds each of these classes on its own
kernels' base (``on_kernels``), so Python code reads and writes the same attribute names
either way, and a store built on the twin is never read as C structs (the C readers check
the base and otherwise take the attribute path).
"""
from __future__ import annotations

import functools
from typing import Any, TypeVar

T = TypeVar("T", bound=type)

#: the bases the store kernels offer, by the name of the class each is for (+ "Core")
CORES = ("MappedFileCore", "MappedFileQueueCore", "ConsumeQueueCore", "MessageWriterCore", "DispatcherCore",
         "IndexServiceCore", "IndexFileCore")


@functools.cache
def _on_core(cls: type, core: type) -> type:
    # the core first: its fields are data descriptors, found before anything of cls
    return type(cls.__name__, (core, cls), {"__slots__": (), "__module__": cls.__module__,
                                            "__qualname__": cls.__qualname__, "__doc__": cls.__doc__})


def on_kernels(cls: T, kernels: Any) -> T:
    """``cls`` on ``kernels``' base named ``<cls name>Core`` (``cls`` itself when the kernels
    have none, e.g. a test's stand-in)."""
    core = getattr(kernels, cls.__name__ + "Core", None)
    return cls if core is None else _on_core(cls, core)  # type: ignore[return-value]
