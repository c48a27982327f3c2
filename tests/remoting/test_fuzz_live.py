"""Throw random and mutated frames at a live server; it must keep serving."""
from __future__ import annotations

import asyncio
import logging
import random
import struct
import time

import pytest

from mqcore.remoting.channel import Channel
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.codes import RequestCode, ResponseCode, SerializeType
from mqcore.remoting.command import (
    RemotingCommand,
    create_request,
    create_response,
    decode_frame,
    encode_frame,
)

from ._util import run, serving, wait_until
from .test_codec_golden import FRAME_7_1, FRAME_7_2, FRAME_7_3

pytestmark = pytest.mark.timeout(60)

FRAMES_TOTAL = 300
MAX_FRAMES_PER_CONNECTION = 10
TIME_BUDGET_S = 10.0


def _valid_frames(rng: random.Random) -> list[bytes]:
    frames = [FRAME_7_1, FRAME_7_2, FRAME_7_3]
    for code in (RequestCode.HEART_BEAT, RequestCode.PULL_MESSAGE, 999, RequestCode.UPDATE_CONSUMER_OFFSET):
        for st in SerializeType:
            ext = {"consumerGroup": "cg", "topic": "t", "queueId": str(rng.randint(-2, 9))}
            frames.append(encode_frame(create_request(code, ext, rng.randbytes(rng.randint(0, 64)),
                                                      opaque=rng.randint(0, 1000), oneway=rng.random() < 0.3,
                                                      serialize_type=st)))
    return frames


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    data = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        if not data:
            break
        pos = rng.randrange(len(data))
        op = rng.choice(("flip", "set", "truncate", "insert", "delete", "length"))
        if op == "flip":
            data[pos] ^= 1 << rng.randrange(8)
        elif op == "set":
            data[pos] = rng.randrange(256)
        elif op == "truncate":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == "delete":
            del data[pos : pos + rng.randint(1, 16)]
        elif len(data) >= 8:  # rewrite the length or header word with a plausible-but-wrong value
            field = rng.choice((0, 4))
            data[field : field + 4] = struct.pack(">I", rng.choice((0, 1, 3, 4, 7, len(data), len(data) + 50,
                                                                   0xFFFFFF, 0x01FFFFFF, 0xFFFFFFFF)))
    return bytes(data)


def _fuzz_frame(rng: random.Random, valid: list[bytes]) -> bytes:
    kind = rng.random()
    if kind < 0.15:
        return rng.randbytes(rng.randint(0, 80))  # pure noise
    if kind < 0.25:  # well-framed garbage header
        header = rng.randbytes(rng.randint(0, 60))
        word = (rng.choice((0, 1, 2, 255)) << 24) | len(header)
        body = rng.randbytes(rng.randint(0, 20))
        return struct.pack(">II", 4 + len(header) + len(body), word) + header + body
    if kind < 0.35:
        return rng.choice(valid)  # valid frames mixed in
    return _mutate(rng, rng.choice(valid))


async def _collect_responses(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> list[RemotingCommand]:
    """Read what the server answers (until it closes, or 0.1 s of quiet, then
    half-close and read the rest). Everything it wrote must be well-formed frames."""
    data = bytearray()
    while True:
        try:
            chunk = await asyncio.wait_for(reader.read(65536), 0.1)
        except asyncio.TimeoutError:
            writer.write_eof()
            data += await asyncio.wait_for(reader.read(), 5)
            break
        if not chunk:
            break
        data += chunk
    out = []
    pos = 0
    while pos + 4 <= len(data):
        (length,) = struct.unpack_from(">I", data, pos)
        if pos + 4 + length > len(data):
            break  # connection closed mid-frame: allowed
        out.append(decode_frame(bytes(data[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    return out


def test_fuzz_live_server(caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(20231114)
    valid = _valid_frames(rng)

    def heartbeat(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return create_response(request, body=request.body)

    def pull(channel: Channel, request: RemotingCommand) -> RemotingCommand:
        queue_id = int(request.ext_fields.get("queueId", "0"))  # may raise on garbage: SYSTEM_ERROR
        return create_response(request, ResponseCode.PULL_NOT_FOUND, ext_fields={"nextBeginOffset": queue_id})

    async def main() -> None:
        async with serving(max_frame_bytes=64 * 1024) as (server, addr):
            server.register_processor(RequestCode.HEART_BEAT, heartbeat)
            server.register_processor(RequestCode.PULL_MESSAGE, pull)
            host, port = addr.rsplit(":", 1)
            started = time.monotonic()
            sent = responses = pings = 0
            while sent < FRAMES_TOTAL and time.monotonic() - started < TIME_BUDGET_S:
                reader, writer = await asyncio.open_connection(host, int(port))
                try:
                    # a correct request first: the server answers it on every fresh connection
                    writer.write(encode_frame(create_request(RequestCode.HEART_BEAT, body=b"ping", opaque=sent)))
                    (length,) = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), 5))
                    answer = decode_frame(await asyncio.wait_for(reader.readexactly(length), 5))
                    assert answer.opaque == sent and answer.body == b"ping"
                    pings += 1
                    for _ in range(rng.randint(1, MAX_FRAMES_PER_CONNECTION)):
                        writer.write(_fuzz_frame(rng, valid))
                        sent += 1
                    await writer.drain()
                    responses += len(await _collect_responses(reader, writer))
                except ConnectionError:
                    pass  # the server may close on us mid-write; only its survival matters
                finally:
                    writer.close()
            print(f"fuzz: {sent} frames on {pings} connections, {responses} answers to fuzz frames")
            assert sent >= FRAMES_TOTAL and pings >= FRAMES_TOTAL // MAX_FRAMES_PER_CONNECTION
            # the server is still healthy
            async with RemotingClient() as client:
                req = create_request(RequestCode.HEART_BEAT, body=b"still alive")
                resp = await client.invoke(addr, req, 2000)
                assert resp.code == ResponseCode.SUCCESS and resp.body == b"still alive"
            # the fuzzed connections the server closed are dropped; whatever is left still works
            await wait_until(lambda: all(ch.is_active for ch in server.channels))

    with caplog.at_level(logging.WARNING, logger="mqcore.remoting"):
        run(main(), timeout_s=30)
    unexpected = [r for r in caplog.records if r.name == "mqcore.remoting.channel" and r.levelno >= logging.ERROR]
    assert not unexpected, [r.getMessage() for r in unexpected]
