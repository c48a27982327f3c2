"""Live loopback tests of RemotingServer / RemotingClient / SyncRemotingClient."""
from __future__ import annotations

import asyncio
import concurrent.futures
import struct
import threading
import time

import pytest

from mqcore.errors import (
    BrokerError,
    ClosedError,
    RemotingConnectError,
    RemotingError,
    RemotingTimeoutError,
)
from mqcore.remoting.channel import Channel
from mqcore.remoting.client import RemotingClient, SyncRemotingClient
from mqcore.remoting.codes import RequestCode, ResponseCode, SerializeType
from mqcore.remoting.command import (
    RemotingCommand,
    create_request,
    create_response,
    encode_frame,
)
from tests.support.waiting import free_port

from ._util import read_frame, run, serving, wait_until

pytestmark = pytest.mark.timeout(60)

ECHO = 1000
SLOW = 1001
FAIL = 1002
ASK_CLIENT = 1003
CLOSE_ME = 1004


def echo(channel: Channel, request: RemotingCommand) -> RemotingCommand:
    return create_response(request, ResponseCode.SUCCESS, "echo", dict(request.ext_fields), request.body)


async def _connect_raw(addr: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = addr.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


def test_request_response_both_serializations() -> None:
    async def main() -> None:
        async with serving() as (server, addr):
            server.register_processor(ECHO, echo)
            async with RemotingClient() as client:
                for st in (SerializeType.JSON, SerializeType.ROCKETMQ):
                    req = create_request(ECHO, {"k": "v", "n": 5}, b"payload", serialize_type=st)
                    resp = await client.invoke(addr, req, 2000)
                    assert resp.is_response and resp.code == ResponseCode.SUCCESS
                    assert resp.opaque == req.opaque and resp.serialize_type == st
                    assert resp.ext_fields == {"k": "v", "n": "5"} and resp.body == b"payload"
                    assert resp.remark == "echo"

    run(main())


def test_async_processor_memoryview_body_and_executor() -> None:
    backing = bytearray(b"....pulled-records....")

    async def pull(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(0)
        return create_response(request, body=memoryview(backing)[4:18])

    def blocking(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        assert threading.current_thread() is not threading.main_thread()
        time.sleep(0.05)
        return create_response(request, remark=threading.current_thread().name)

    async def main() -> None:
        with concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="proc") as pool:
            async with serving() as (server, addr):
                server.register_processor(RequestCode.PULL_MESSAGE, pull)
                server.register_processor(RequestCode.SEND_MESSAGE, blocking, executor=pool)
                async with RemotingClient() as client:
                    resp = await client.invoke(addr, create_request(RequestCode.PULL_MESSAGE), 2000)
                    assert resp.body == b"pulled-records"
                    resp = await client.invoke(addr, create_request(RequestCode.SEND_MESSAGE), 2000)
                    assert resp.remark.startswith("proc")

    run(main())


def test_oneway_gets_no_response_even_for_unknown_code() -> None:
    seen: list[int] = []

    def record(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        seen.append(request.opaque)
        return create_response(request)

    async def main() -> None:
        async with serving() as (server, addr):
            server.register_processor(RequestCode.UPDATE_CONSUMER_OFFSET, record)
            server.register_processor(ECHO, echo)
            reader, writer = await _connect_raw(addr)
            try:
                writer.write(encode_frame(create_request(RequestCode.UPDATE_CONSUMER_OFFSET, opaque=11, oneway=True)))
                writer.write(encode_frame(create_request(4242, opaque=12, oneway=True)))  # unknown + oneway
                await wait_until(lambda: seen == [11])  # the unknown one, behind it, is handled in order
                writer.write(encode_frame(create_request(ECHO, opaque=13)))
                resp = await asyncio.wait_for(read_frame(reader), 5)
                assert resp.opaque == 13  # the oneway requests produced nothing before it
                assert seen == [11]
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(reader.readexactly(1), 0.2)
            finally:
                writer.close()

    run(main())


def test_unknown_code_and_processor_errors() -> None:
    def fail(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        raise ValueError("disk on fire")

    async def broker_error(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        raise BrokerError(ResponseCode.TOPIC_NOT_EXIST, "No topic route info in name server for the topic: t")

    def bad_return(channel: Channel, request: RemotingCommand) -> object:
        return "not a command"

    async def main() -> None:
        async with serving() as (server, addr):
            server.register_processor(FAIL, fail)
            server.register_processor(FAIL + 100, broker_error)
            server.register_processor(FAIL + 200, bad_return)
            async with RemotingClient() as client:
                resp = await client.invoke(addr, create_request(777), 2000)
                assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
                assert resp.remark == " request type 777 not supported"
                resp = await client.invoke(addr, create_request(FAIL, serialize_type=SerializeType.ROCKETMQ), 2000)
                assert resp.code == ResponseCode.SYSTEM_ERROR == 1
                assert "disk on fire" in resp.remark and resp.serialize_type == SerializeType.ROCKETMQ
                resp = await client.invoke(addr, create_request(FAIL + 100), 2000)
                assert resp.code == ResponseCode.TOPIC_NOT_EXIST and resp.remark.startswith("No topic route")
                resp = await client.invoke(addr, create_request(FAIL + 200), 2000)
                assert resp.code == ResponseCode.SYSTEM_ERROR
                # the connection survived all of that
                assert len(server.channels) == 1

    run(main())


def test_missing_header_field_answers_system_error() -> None:
    from mqcore.remoting.headers import PullMessageRequestHeader

    def pull(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        PullMessageRequestHeader.from_command(request)
        return create_response(request)

    async def main() -> None:
        async with serving() as (server, addr):
            server.register_processor(RequestCode.PULL_MESSAGE, pull)
            async with RemotingClient() as client:
                resp = await client.invoke(addr, create_request(RequestCode.PULL_MESSAGE, {"topic": "t"}), 2000)
                assert resp.code == ResponseCode.SYSTEM_ERROR and "consumerGroup" in resp.remark

    run(main())


def test_default_processor() -> None:
    async def main() -> None:
        async with serving() as (server, addr):
            server.register_default_processor(lambda ch, req: create_response(req, remark=f"default {req.code}"))
            async with RemotingClient() as client:
                resp = await client.invoke(addr, create_request(55), 2000)
                assert resp.code == ResponseCode.SUCCESS and resp.remark == "default 55"

    run(main())


def test_slow_request_does_not_block_fast_ones_on_same_connection() -> None:
    release = None
    entered = None

    async def slow(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        entered.set()
        await release.wait()
        return create_response(request, remark="slow")

    async def main() -> None:
        nonlocal release, entered
        release, entered = asyncio.Event(), asyncio.Event()
        async with serving() as (server, addr):
            server.register_processor(SLOW, slow)
            server.register_processor(ECHO, echo)
            async with RemotingClient() as client:
                slow_task = asyncio.ensure_future(client.invoke(addr, create_request(SLOW), 5000))
                await asyncio.wait_for(entered.wait(), 5)  # the server holds the slow request
                started = time.monotonic()
                fast = await asyncio.gather(*(client.invoke(addr, create_request(ECHO), 2000) for _ in range(20)))
                assert time.monotonic() - started < 5.0  # generous: the real proof is slow_task still pending
                assert all(r.remark == "echo" for r in fast) and not slow_task.done()
                assert len(server.channels) == 1  # all on one pooled connection
                release.set()
                assert (await slow_task).remark == "slow"

    run(main())


def test_oversize_frame_closes_only_that_connection() -> None:
    closed: list[Channel] = []

    async def main() -> None:
        async with serving(max_frame_bytes=1024) as (server, addr):
            server.register_processor(ECHO, echo)
            server.add_close_listener(closed.append)
            async with RemotingClient() as client:
                assert (await client.invoke(addr, create_request(ECHO), 2000)).code == 0
                reader, writer = await _connect_raw(addr)
                try:
                    writer.write(struct.pack(">II", 2048, 100) + b"x" * 64)
                    assert await asyncio.wait_for(reader.read(), 5) == b""  # server closed it
                finally:
                    writer.close()
                assert len(closed) == 1
                # the pooled client connection and new connections still work
                assert (await client.invoke(addr, create_request(ECHO, body=b"y" * 900), 2000)).body == b"y" * 900
                async with RemotingClient() as other:
                    assert (await other.invoke(addr, create_request(ECHO), 2000)).code == 0
                # a response larger than the client's limit closes the client's side
                async with RemotingClient(max_frame_bytes=512) as small:
                    with pytest.raises(RemotingError):
                        await small.invoke(addr, create_request(ECHO, body=b"z" * 600), 2000)

    run(main())


def test_server_invokes_client_and_sends_oneway() -> None:
    notified = None

    async def ask_client(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        await channel.send_request_oneway(
            create_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "cg1"}))
        answer = await channel.invoke(create_request(RequestCode.GET_CONSUMER_RUNNING_INFO, {"k": "1"}), 2000)
        return create_response(request, answer.code, answer.remark, body=answer.body)

    async def main() -> None:
        nonlocal notified
        notified = asyncio.get_running_loop().create_future()
        async with serving() as (server, addr):
            server.register_processor(ASK_CLIENT, ask_client)
            async with RemotingClient() as client:
                def on_notify(channel: Channel, request: RemotingCommand) -> RemotingCommand:
                    assert request.is_oneway
                    notified.set_result(request.ext_fields["consumerGroup"])
                    return create_response(request)  # ignored: oneway

                async def on_running_info(channel: Channel, request: RemotingCommand) -> RemotingCommand:
                    body = b'{"k":' + request.ext_fields["k"].encode() + b"}"
                    return create_response(request, remark="client-info", body=body)

                client.register_processor(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
                client.register_processor(RequestCode.GET_CONSUMER_RUNNING_INFO, on_running_info)
                resp = await client.invoke(addr, create_request(ASK_CLIENT), 5000)
                assert resp.code == 0 and resp.remark == "client-info" and resp.body == b'{"k":1}'
                assert await asyncio.wait_for(notified, 2) == "cg1"
                # unknown server->client code is answered by the client with code 3
                (channel,) = server.channels
                answer = await channel.invoke(create_request(RequestCode.CONSUME_MESSAGE_DIRECTLY), 2000)
                assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED

    run(main())


def test_client_timeout_and_recovery() -> None:
    async def never(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(30)
        return create_response(request)

    async def main() -> None:
        async with serving() as (server, addr):
            server.register_processor(SLOW, never)
            server.register_processor(ECHO, echo)
            async with RemotingClient() as client:
                started = time.monotonic()
                with pytest.raises(RemotingTimeoutError):
                    await client.invoke(addr, create_request(SLOW), 200)
                assert time.monotonic() - started < 4.0
                assert (await client.invoke(addr, create_request(ECHO), 2000)).code == 0

    run(main())


def test_connect_failure() -> None:
    async def main() -> None:
        async with RemotingClient(connect_timeout_ms=2000) as client:
            with pytest.raises(RemotingConnectError):
                await client.invoke(f"127.0.0.1:{free_port()}", create_request(ECHO), 2000)

    run(main())


def test_closed_connection_fails_pending_invokes() -> None:
    async def close_me(channel: Channel, request: RemotingCommand) -> None:
        await asyncio.sleep(0.1)
        channel.close("test closes it")
        return None

    async def main() -> None:
        async with serving() as (server, addr):
            server.register_processor(CLOSE_ME, close_me)
            server.register_processor(ECHO, echo)
            async with RemotingClient() as client:
                closed: list[str] = []
                client.add_close_listener(lambda a, ch: closed.append(a))
                started = time.monotonic()
                with pytest.raises(RemotingError) as info:
                    await client.invoke(addr, create_request(CLOSE_ME), 10000)
                assert not isinstance(info.value, RemotingTimeoutError)
                assert time.monotonic() - started < 3.0
                await wait_until(lambda: closed)
                assert closed == [addr]
                # next invoke reconnects transparently
                assert (await client.invoke(addr, create_request(ECHO), 2000)).code == 0

    run(main())


def test_close_listener_and_idle_timeout() -> None:
    async def main() -> None:
        events: list[str] = []
        async with serving(idle_timeout_s=0.3) as (server, addr):
            server.add_connect_listener(lambda ch: events.append("open"))

            async def on_close(ch: Channel) -> None:
                events.append("close")

            server.add_close_listener(on_close)
            server.register_processor(ECHO, echo)
            async with RemotingClient() as client:
                assert (await client.invoke(addr, create_request(ECHO), 2000)).code == 0
                channel = await client.get_channel(addr)
                await asyncio.wait_for(channel.wait_closed(), 5)  # server closed the idle connection
                await wait_until(lambda: len(events) >= 2 and not server.channels)  # its listener is async
                assert events == ["open", "close"] and server.channels == []

    run(main())


def test_idle_timeout_spares_connections_with_requests_in_flight() -> None:
    async def slow(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(1.0)
        return create_response(request, remark="done")

    async def main() -> None:
        async with serving(idle_timeout_s=0.2) as (server, addr):
            server.register_processor(SLOW, slow)
            async with RemotingClient() as client:
                assert (await client.invoke(addr, create_request(SLOW), 5000)).remark == "done"

    run(main())


def test_inflight_limit_answers_system_busy() -> None:
    release = None

    async def slow(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        # held until the third request was refused (a fixed sleep let the first finish before
        # the third arrived on a loaded machine)
        await release.wait()
        return create_response(request)

    async def main() -> None:
        nonlocal release
        release = asyncio.Event()
        async with serving(max_inflight_per_connection=2) as (server, addr):
            server.register_processor(SLOW, slow)
            async with RemotingClient() as client:
                calls = [asyncio.ensure_future(client.invoke(addr, create_request(SLOW), 5000)) for _ in range(3)]
                await asyncio.wait(calls, return_when=asyncio.FIRST_COMPLETED, timeout=5)
                release.set()
                results = await asyncio.gather(*calls)
                codes = sorted(r.code for r in results)
                assert codes == [ResponseCode.SUCCESS, ResponseCode.SUCCESS, ResponseCode.SYSTEM_BUSY]
                busy = next(r for r in results if r.code == ResponseCode.SYSTEM_BUSY)
                assert busy.remark.startswith("[OVERLOAD]")

    run(main())


def test_shutdown_cancels_long_polls_and_fails_client() -> None:
    cancelled = []
    arrived = []

    async def long_poll(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        arrived.append(request.opaque)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(request.opaque)
            raise
        return create_response(request)

    async def main() -> None:
        async with RemotingClient() as client:
            async with serving() as (server, addr):
                server.register_processor(RequestCode.PULL_MESSAGE, long_poll)
                pending = asyncio.ensure_future(client.invoke(addr, create_request(RequestCode.PULL_MESSAGE), 20000))
                await wait_until(lambda: arrived)  # parked in the processor, not still on its way
                started = time.monotonic()
                await server.shutdown(grace_s=0.1)
                assert time.monotonic() - started < 3.0
                with pytest.raises(RemotingError):
                    await asyncio.wait_for(pending, 5)
                assert len(cancelled) == 1
            with pytest.raises(ClosedError):
                await server.start("127.0.0.1", 0)

    run(main())


def test_sync_client() -> None:
    async def slow(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        await asyncio.sleep(2)
        return create_response(request)

    async def main() -> None:
        async with serving() as (server, addr):
            server.register_processor(ECHO, echo)
            server.register_processor(SLOW, slow)
            loop = asyncio.get_running_loop()

            def blocking_part() -> None:
                with SyncRemotingClient() as client:
                    with concurrent.futures.ThreadPoolExecutor(4) as pool:
                        futures = [pool.submit(client.invoke, addr, create_request(ECHO, {"i": i}), 2000)
                                   for i in range(8)]
                        assert sorted(int(f.result().ext_fields["i"]) for f in futures) == list(range(8))
                    with pytest.raises(RemotingTimeoutError):
                        client.invoke(addr, create_request(SLOW), 200)
                    client.invoke_oneway(addr, create_request(ECHO), 2000)
                    with pytest.raises(RemotingConnectError):
                        client.invoke(f"127.0.0.1:{free_port()}", create_request(ECHO), 2000)
                with pytest.raises(ClosedError):
                    client.invoke(addr, create_request(ECHO), 2000)

            await loop.run_in_executor(None, blocking_part)

    run(main())
