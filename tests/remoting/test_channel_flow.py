"""The protocol-based channel on both event loops: inline answers without a task, flow
control that stops reading a peer that does not read its answers, large frames within
the server's budget, buffers released when the idle sweep closes a connection."""
from __future__ import annotations

import asyncio
import socket

import pytest

from mqcore.remoting import RemotingClient, RemotingServer, RequestCode, create_request, create_response
from mqcore.remoting.command import encode_frame

pytestmark = pytest.mark.timeout(60)

LOOPS = ["asyncio"]
try:
    import uvloop
    LOOPS.append("uvloop")
except ImportError:  # plain asyncio must work on its own; uvloop is optional
    uvloop = None


def run(kind: str, coro_fn):
    loop = uvloop.new_event_loop() if kind == "uvloop" else asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


async def wait_until(cond, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("kind", LOOPS)
def test_sync_processor_answers_inline_without_a_task(kind):
    async def main():
        server = RemotingServer(idle_timeout_s=None)
        seen_tasks = []

        def processor(channel, request):
            seen_tasks.append(channel.request_task_count)
            return create_response(request, remark=request.ext_fields["i"])

        server.register_processor(RequestCode.HEART_BEAT, processor)
        port = await server.start("127.0.0.1", 0)
        try:
            async with RemotingClient() as client:
                channel = await client.get_channel(f"127.0.0.1:{port}")
                futures = [channel.invoke_future(create_request(RequestCode.HEART_BEAT, {"i": str(i)}), 5000)
                           for i in range(200)]
                answers = await asyncio.gather(*futures)
            assert [a.remark for a in answers] == [str(i) for i in range(200)]
            assert seen_tasks == [0] * 200  # no task was made for any of them
        finally:
            await server.shutdown()

    run(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_peer_that_does_not_read_stops_being_read_and_is_served_once_it_reads(kind):
    answer_body = b"a" * (256 * 1024)
    high_water = 512 * 1024

    async def main():
        server = RemotingServer(idle_timeout_s=None, write_high_water=high_water)
        calls = [0]

        def processor(channel, request):
            calls[0] += 1
            return create_response(request, body=answer_body)

        server.register_processor(RequestCode.PULL_MESSAGE, processor)
        port = await server.start("127.0.0.1", 0)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            frames = b"".join(encode_frame(create_request(RequestCode.PULL_MESSAGE, {"q": "0"}, opaque=i))
                              for i in range(1, 401))  # 400 answers = 100 MiB if all were made
            await loop.sock_sendall(sock, frames)
            await wait_until(lambda: server.channels and server.channels[0].reading_paused)
            channel = server.channels[0]
            await asyncio.sleep(0.2)  # give a broken flow control the time to run away
            assert calls[0] < 40, calls[0]
            # what the server holds for this peer: at most the high-water mark, one answer over it
            assert channel.buffered_bytes < high_water + len(answer_body) + len(frames) + 64 * 1024
            # the peer reads: everything gets answered
            # count whole answer frames (4-byte length prefix each) until all 400 are in
            buffered = bytearray()
            answered = 0
            while answered < 400:
                chunk = await loop.sock_recv(sock, 1 << 20)
                assert chunk, f"connection closed after {answered} answers"
                buffered += chunk
                while len(buffered) >= 4:
                    size = int.from_bytes(buffered[:4], "big")
                    if len(buffered) < 4 + size:
                        break
                    del buffered[:4 + size]
                    answered += 1
            assert calls[0] == 400
        finally:
            sock.close()
            await server.shutdown()

    run(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_partial_large_frames_stay_in_budget_and_are_released_by_the_idle_sweep(kind):
    async def main():
        budget = 8 * 1024 * 1024
        server = RemotingServer(idle_timeout_s=0.5, frame_budget_bytes=budget)
        port = await server.start("127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        socks = []
        try:
            for _ in range(6):  # each starts a 4 MiB frame: 24 MiB offered, 8 MiB allowed
                s = socket.socket()
                s.connect(("127.0.0.1", port))
                s.setblocking(False)
                socks.append(s)
                length = 4 * 1024 * 1024
                await loop.sock_sendall(s, length.to_bytes(4, "big") + (16).to_bytes(4, "big") + b"\0" * 200_000)
            await wait_until(lambda: len(server.channels) == 6 and server.frame_budget.waiting >= 3)
            assert server.frame_budget.used_bytes <= budget
            paused = [ch for ch in server.channels if ch.reading_paused]
            assert len(paused) >= 3
            await wait_until(lambda: not server.channels)  # the idle sweep closed them all
            assert server.frame_budget.used_bytes == 0
            assert server.frame_budget.waiting == 0
        finally:
            for s in socks:
                s.close()
            await server.shutdown()

    run(kind, main)


@pytest.mark.parametrize("kind", LOOPS)
def test_a_connection_waiting_on_the_budget_is_closed_by_the_idle_sweep_even_with_a_request_in_flight(kind):
    """A request still in flight (a parked long poll, say) used to exempt a connection from
    the idle sweep while it waited for frame budget that other connections hold."""
    async def main():
        budget = 1024 * 1024
        server = RemotingServer(idle_timeout_s=0.5, frame_budget_bytes=budget)
        never = asyncio.Event()

        async def parked(channel, request):
            await never.wait()

        server.register_processor(RequestCode.PULL_MESSAGE, parked)
        port = await server.start("127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        socks = []
        try:
            frame_start = (2 * budget).to_bytes(4, "big") + (16).to_bytes(4, "big") + b"\0" * 100_000
            holder = socket.create_connection(("127.0.0.1", port))
            holder.setblocking(False)
            socks.append(holder)
            waiter = socket.create_connection(("127.0.0.1", port))
            waiter.setblocking(False)
            socks.append(waiter)
            await loop.sock_sendall(waiter, encode_frame(create_request(RequestCode.PULL_MESSAGE, {})))
            await wait_until(lambda: any(ch.inflight_count for ch in server.channels))
            await loop.sock_sendall(holder, frame_start)
            await wait_until(lambda: server.frame_budget.used_bytes > 0)
            await loop.sock_sendall(waiter, frame_start)
            await wait_until(lambda: server.frame_budget.waiting == 1)
            await wait_until(lambda: not server.channels)  # both closed by the sweep
            assert server.frame_budget.used_bytes == 0 and server.frame_budget.waiting == 0
        finally:
            never.set()
            for s in socks:
                s.close()
            await server.shutdown()

    run(kind, main)
