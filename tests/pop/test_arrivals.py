"""Arrivals: how a parked pop (gRPC ReceiveMessage, remoting POP_MESSAGE) learns that a message landed."""
from __future__ import annotations

import asyncio
import threading
import time

from mqcore.pop.arrivals import Arrivals


def test_grpc_receive_sees_an_arrival_between_its_look_and_its_park():
    async def scenario():
        arrivals = Arrivals(asyncio.get_running_loop())
        since = arrivals.generation(["T", "%RETRY%g_T"])
        t = threading.Thread(target=arrivals.notify, args=("T", 0, 1))  # nobody parked: no wake scheduled
        t.start()
        t.join()
        await asyncio.wait_for(arrivals.wait(["T", "%RETRY%g_T"], 30, since), 5)
        # with an up-to-date generation and no arrival it still waits out its time
        since = arrivals.generation(["T"])
        t0 = time.monotonic()
        await arrivals.wait(["T"], 0.2, since)
        assert time.monotonic() - t0 >= 0.15
    asyncio.run(scenario())


def test_the_store_listener_is_installed_at_the_first_receive_only():
    """A broker that never serves a pop adds no Python call to its SEND path."""
    async def scenario():
        installed = []
        arrivals = Arrivals(asyncio.get_running_loop(), install=installed.append)
        assert installed == []
        since = arrivals.generation(["T"])
        assert installed == [arrivals.notify]
        arrivals.notify("T", 0, 1)  # an arrival after the look: the wait returns at once
        await asyncio.wait_for(arrivals.wait(["T"], 30, since), 5)
        arrivals.generation(["T"])
        assert len(installed) == 1
    asyncio.run(scenario())
