"""The Node.js 5.x driver's client start-up is bounded: the official client waits for the
endpoint's first settings answer on the telemetry stream with no limit of its own, and a CI
run once hung there until the whole test timed out. Against an endpoint that routes but never
answers settings, the driver must fail fast, naming the step and the start-up."""
from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest

from mqcore.grpc.protocol import load_protocol
from tests.grpc.conftest import run_node5

d, s, g = load_protocol()


class SilentSettings(g.MessagingServiceServicer):
    """Answers QueryRoute with one queue on itself; reads the telemetry stream, never answers."""

    def __init__(self, port_box: list[int]):
        self.port_box = port_box
        self.telemetry_commands = 0

    async def QueryRoute(self, request, context):
        broker = d.Broker(name="silent", id=0, endpoints=d.Endpoints(
            scheme=d.IPv4, addresses=[d.Address(host="127.0.0.1", port=self.port_box[0])]))
        queue = d.MessageQueue(topic=request.topic, id=0, permission=d.READ_WRITE, broker=broker,
                               accept_message_types=[d.NORMAL])
        return s.QueryRouteResponse(status=d.Status(code=d.OK, message="OK"), message_queues=[queue])

    async def Telemetry(self, request_iterator, context):
        async for _command in request_iterator:
            self.telemetry_commands += 1
        return
        yield  # an (empty) async generator: the stream stays open and silent


class SilentEndpoint:
    """A grpc.aio server on its own loop thread, stopped on exit."""

    def __init__(self):
        self.port_box = [0]
        self.servicer = SilentSettings(self.port_box)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="silent-grpc", daemon=True)
        self.server = None

    async def _start(self) -> None:
        self.server = grpc.aio.server()
        g.add_MessagingServiceServicer_to_server(self.servicer, self.server)
        self.port_box[0] = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()

    def __enter__(self) -> "SilentEndpoint":
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(30)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(grace=0), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


def test_a_start_up_that_never_gets_settings_fails_fast_and_names_itself(node5_dir, monkeypatch):
    monkeypatch.setenv("MQCORE_NODE_DRIVER_STARTUP_MS", "3000")
    with SilentEndpoint() as endpoint:
        t0 = time.monotonic()
        with pytest.raises(AssertionError) as info:
            run_node5(node5_dir, f"127.0.0.1:{endpoint.port_box[0]}",
                      [{"op": "send", "topic": "Silent", "body": "never sent"}])
        elapsed = time.monotonic() - t0
        assert endpoint.servicer.telemetry_commands >= 1  # the client did ask for its settings
    message = str(info.value)
    assert "StartupTimeout" in message and "step 0: the producer's start-up" in message, message
    # well before the whole-run watchdog (105 s here); the slack is for node's start on a busy box
    assert elapsed < 60, elapsed
