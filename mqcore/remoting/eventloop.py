"""The event loop mqcore runs on: uvloop when it is installed, asyncio's otherwise.

uvloop halves the cost of a loopback round trip (see bench/bench_floor.py); everything
in mqcore also runs on the standard loop. ``MQCORE_EVENT_LOOP=asyncio`` (or ``uvloop``)
forces the choice, e.g. to compare the two or to rule uvloop out when debugging.
"""
from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

from mqcore.errors import ConfigError

__all__ = ["new_event_loop", "run", "loop_kind", "time_is_monotonic"]

T = TypeVar("T")
_ENV = "MQCORE_EVENT_LOOP"


def loop_kind() -> str:
    """``"uvloop"`` or ``"asyncio"``: what :func:`new_event_loop` will build."""
    wanted = os.environ.get(_ENV, "").strip().lower()
    if wanted not in ("", "asyncio", "uvloop"):
        raise ConfigError(f"{_ENV}={wanted!r}: expected 'asyncio' or 'uvloop'")
    if wanted == "asyncio":
        return "asyncio"
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if wanted == "uvloop":
            raise ConfigError(f"{_ENV}=uvloop but uvloop is not installed (pip install uvloop)") from None
        return "asyncio"
    return "uvloop"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop of the kind :func:`loop_kind` names."""
    if loop_kind() == "uvloop":
        import uvloop
        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    return asyncio.new_event_loop()


def run(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a loop from :func:`new_event_loop`."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(coro)


def time_is_monotonic(loop: asyncio.AbstractEventLoop) -> bool:
    """``loop.time()`` is CLOCK_MONOTONIC in seconds: asyncio's own loops (``time.monotonic()``)
    and uvloop's (libuv's monotonic clock in milliseconds, read once per loop iteration). A
    C connection core then reads that clock itself; any other loop (a subclass with its own
    ``time``) is asked."""
    time_fn: object = type(loop).time
    if time_fn is asyncio.BaseEventLoop.time:
        return True
    try:
        import uvloop
    except ImportError:
        return False
    return time_fn is uvloop.Loop.time
