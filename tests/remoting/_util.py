"""Helpers shared by the remoting tests (no pytest-asyncio here: each test runs its
own loop through :func:`run`, bounded by a timeout so nothing can hang)."""
from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from mqcore.remoting.command import RemotingCommand, decode_frame
from mqcore.remoting.server import RemotingServer

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 20.0) -> T:
    """Run ``coro`` on a fresh loop, failing (not hanging) after ``timeout_s``."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


@contextlib.asynccontextmanager
async def serving(**kwargs: Any) -> AsyncIterator[tuple[RemotingServer, str]]:
    """A started loopback server on a random port; always shut down on exit."""
    server = RemotingServer(**kwargs)
    port = await server.start("127.0.0.1", 0)
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        await server.shutdown(grace_s=0)


async def read_frame(reader: asyncio.StreamReader) -> RemotingCommand:
    """Read one length-prefixed frame from a raw connection and decode it."""
    (length,) = struct.unpack(">I", await reader.readexactly(4))
    return decode_frame(await reader.readexactly(length))



async def wait_until(cond, timeout_s: float = 10.0) -> None:
    """Poll ``cond`` on the running loop until it holds; AssertionError after ``timeout_s``
    (a wait on a condition where a fixed sleep would race a loaded machine)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"condition not reached within {timeout_s} s")
        await asyncio.sleep(0.01)
