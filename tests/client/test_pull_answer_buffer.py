"""Pull answers read straight from a connection's receive buffer (``Channel.invoke_decoded``,
``decode_pull_answer``) give the messages the generic path gives (the answer decoded into a
command with a ``bytes`` body, then the same decoder), with the compiled kernel and its twin,
however the answers are split over reads, whether they fit in the ring or arrive in the
large-frame buffer; and no message handed out changes when the buffer is reused for the next
answers."""
from __future__ import annotations

import asyncio
import functools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import _store, _store_py
from mqcore._compat import kernels
from mqcore.client.api import decode_pull_answer
from mqcore.client.message import PullStatus
from mqcore.errors import BrokerError, MessageDecodeError, RemotingTimeoutError
from mqcore.message import pack_host, properties_to_bytes
from mqcore.remoting import RequestCode, ResponseCode, create_request
from mqcore.remoting.channel import Channel
from mqcore.remoting.codes import FLAG_RESPONSE
from mqcore.remoting.command import RemotingCommand, decode_frame, encode_frame
from mqcore.remoting.framing import DEFAULT_RING_BYTES

SLOTS = _store_py.MESSAGE_SLOTS


def record(i: int, j: int, size: int) -> tuple[bytes, bytes]:
    """One stored record and its body: every body differs from every other (answer, message)."""
    head = f"{i}:{j}:".encode()
    body = (head + bytes((i * 7 + j + k) % 251 for k in range(256)) * (size // 256 + 1))[:max(size, len(head))]
    props = properties_to_bytes({"TAGS": f"t{j % 3}", "UNIQ_KEY": f"K{i}-{j}"})
    buf = bytearray(kernels.record_size(len(body), 5, len(props), 0))
    kernels.encode_record(buf, 0, b"Topic", j % 4, 0, 100 * i + j, 10_000 * i + 1000 * j, 0, 1_700_000_000_000 + j,
                          pack_host("10.0.0.2", 5555), 1_700_000_000_001 + j, pack_host("127.0.0.1", 10911),
                          j % 2, 0, body, props)
    return bytes(buf), body


def pull_answer(opaque: int, records: list[bytes], code: int = ResponseCode.SUCCESS) -> bytes:
    return encode_frame(RemotingCommand(
        code=code, opaque=opaque, flag=FLAG_RESPONSE, remark="FOUND",
        ext_fields={"suggestWhichBrokerId": "0", "nextBeginOffset": str(opaque + 1000), "minOffset": "0",
                    "maxOffset": str(opaque + 2000)},
        body=b"".join(records)))


def fields(msgs) -> list[tuple]:
    """Every slot and the parsed properties of each message."""
    return [tuple(getattr(m, s) for s in SLOTS) + (m.properties,) for m in msgs]


class Transport:
    """What a Channel needs of its transport, for frames fed by hand (as the loop would)."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def get_extra_info(self, name, default=None):
        return ("127.0.0.1", 10911) if name in ("peername", "sockname") else default

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def write(self, data) -> None:
        self.written.append(bytes(data))

    def writelines(self, data) -> None:
        self.written.append(b"".join(bytes(d) for d in data))

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


class Sink:
    def __init__(self) -> None:
        self.requests: list[RemotingCommand] = []

    def submit(self, channel, request) -> None:
        self.requests.append(request)


def feed(channel: Channel, data: bytes, chunks: list[int]) -> None:
    pos, i = 0, 0
    while pos < len(data):
        buf = channel.get_buffer(-1)
        n = max(1, min(len(buf), len(data) - pos, chunks[i % len(chunks)]))
        buf[:n] = data[pos:pos + n]
        channel.buffer_updated(n)
        pos += n
        i += 1


def exchange(answers: list[tuple[int, int]], chunks: list[int], kernel) -> tuple[list, list, list]:
    """Send one PULL (with the answer decoder) and one HEART_BEAT (generic) per answer, feed the
    broker's answers (and a request of the broker's) in ``chunks``, and return the messages
    decoded from the buffer, those of the generic path, and the bodies stored."""
    async def main():
        sink = Sink()
        channel = Channel(sink, keep_large_buffer=True)
        channel.connection_made(Transport())
        decode = functools.partial(decode_pull_answer, "127.0.0.1:10911", "broker-a", kernels=kernel)
        frames, pulls, beats, stored = [], [], [], []
        for i, (n, size) in enumerate(answers):
            pull = create_request(RequestCode.PULL_MESSAGE, {"i": str(i)})
            pulls.append(channel.invoke_future(pull, 60_000, decode))
            beat = create_request(RequestCode.HEART_BEAT, {"i": str(i)})
            beats.append(channel.invoke_future(beat, 60_000))
            records = [record(i, j, size) for j in range(n)]
            stored.append([body for _, body in records])
            frames.append(pull_answer(pull.opaque, [r for r, _ in records]))
            frames.append(encode_frame(RemotingCommand(code=0, opaque=beat.opaque, flag=FLAG_RESPONSE,
                                                       body=b"beat" * i)))
            frames.append(encode_frame(create_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"i": str(i)},
                                                      opaque=9000 + i)))
        feed(channel, b"".join(frames), chunks)
        from_buffer = [f.result() for f in pulls]
        assert [b.result().body for b in beats] == [b"beat" * i for i in range(len(answers))]
        assert [r.ext_fields["i"] for r in sink.requests] == [str(i) for i in range(len(answers))]
        generic = []
        for frame in frames[0::3]:
            cmd = decode_frame(frame[4:])
            generic.append(decode_pull_answer("127.0.0.1:10911", "broker-a", cmd, cmd.body, 0, len(cmd.body),
                                              kernels=_store_py))
        assert not channel._answer_decoders and not channel._pending
        return from_buffer, generic, stored

    return asyncio.run(main())


answers_strategy = st.lists(st.tuples(st.integers(0, 140), st.sampled_from([0, 1, 100, 1024, 3000])),
                            min_size=1, max_size=5)


@pytest.mark.parametrize("kernel", [_store, _store_py], ids=["compiled", "twin"])
@settings(max_examples=25, deadline=None)
@given(answers=answers_strategy, chunks=st.lists(st.integers(1, 300_000), min_size=1, max_size=6))
def test_answers_read_from_the_buffer_equal_the_generic_path(kernel, answers, chunks):
    from_buffer, generic, stored = exchange(answers, chunks, kernel)
    for (status, header, msgs), (g_status, g_header, g_msgs), bodies in zip(from_buffer, generic, stored):
        assert status is g_status is PullStatus.FOUND and header == g_header
        assert fields(msgs) == fields(g_msgs)
        assert [m.body for m in msgs] == bodies  # still: the buffer was reused for every later frame
        assert all(type(m.body) is bytes for m in msgs)


@pytest.mark.parametrize("kernel", [_store, _store_py], ids=["compiled", "twin"])
def test_large_answers_one_after_the_other_in_one_reused_buffer_keep_their_bodies(kernel):
    """Answers larger than the ring arrive in the connection's kept large-frame buffer, each
    written over the one before: the messages of the first are unchanged after the last."""
    sizes = [(150, 1024), (151, 1024), (149, 1024), (300, 3000)]
    assert 150 * 1024 > DEFAULT_RING_BYTES
    from_buffer, generic, stored = exchange(sizes, [700, 1 << 20, 65_536, 3], kernel)
    for (_, _, msgs), (_, _, g_msgs), bodies in zip(from_buffer, generic, stored):
        assert [m.body for m in msgs] == bodies
        assert fields(msgs) == fields(g_msgs)


def test_a_decoder_error_fails_that_request_only_and_keeps_no_view_of_the_buffer():
    """A broker error code and malformed records fail the request's future (the connection
    stays up and serves the next answer); the error's frames hold no view of the buffer."""
    async def main():
        channel = Channel(Sink(), keep_large_buffer=True)
        channel.connection_made(Transport())
        decode = functools.partial(decode_pull_answer, "127.0.0.1:10911", "broker-a")
        pulls = [create_request(RequestCode.PULL_MESSAGE, {}) for _ in range(3)]
        futures = [channel.invoke_future(pull, 60_000, decode) for pull in pulls]
        good, _ = record(0, 0, 1024)
        corrupt = bytearray(good * 200)
        corrupt[4:8] = b"\x00\x00\x00\x01"  # a magic code no record has
        frames = [pull_answer(pulls[0].opaque, [good], code=ResponseCode.SYSTEM_ERROR),
                  pull_answer(pulls[1].opaque, [bytes(corrupt)]),
                  pull_answer(pulls[2].opaque, [good] * 200)]
        feed(channel, b"".join(frames), [1 << 20])
        assert isinstance(futures[0].exception(), BrokerError)
        error = futures[1].exception()
        assert isinstance(error, MessageDecodeError)
        tb = error.__traceback__
        while tb is not None:
            assert not any(isinstance(v, memoryview) for v in tb.tb_frame.f_locals.values())
            tb = tb.tb_next
        status, _, msgs = futures[2].result()
        assert status is PullStatus.FOUND and len(msgs) == 200 and channel.is_active

    asyncio.run(main())


def test_an_answer_after_its_request_timed_out_is_dropped():
    async def main():
        channel = Channel(Sink())
        channel.connection_made(Transport())
        decode = functools.partial(decode_pull_answer, "127.0.0.1:10911", "broker-a")
        pull = create_request(RequestCode.PULL_MESSAGE, {})
        late = channel.invoke_future(pull, 1, decode)
        with pytest.raises(RemotingTimeoutError):
            await late
        assert not channel._answer_decoders
        good, _ = record(0, 0, 10)
        feed(channel, pull_answer(pull.opaque, [good]), [1 << 20])
        assert channel.is_active and not channel._pending

    asyncio.run(main())
