"""The receive ring on the C connection core (``ReceiverCore``, mqcore/_receiver_core.pxi, read by
``ChannelCore`` in mqcore/_send_core.pxi) keeps exactly the state the Python FrameReceiver and
Channel keep.

A broker's C-based channel (``CoreChannel``: its receiver a FrameReceiver on ``ReceiverCore``)
and the Python Channel with the same frames processor (the twin: a FrameReceiver with its fields
in its instance dict, ``SendPipeline``/``PullPipeline.__call__``) are fed the same bytes in the
same random receive splits - plain sends and pulls the cores take, sends the general path
takes, frames larger than the ring, partial frames, and a frame too large to accept - and after
every receive buffer the ring's fields, the room offered and the channels' receive bookkeeping
must be equal; at the end both answered the same requests. The channels get their bytes from
the test (a transport that records what is written) so that the splits are the test's, not
the kernel's.
"""
from __future__ import annotations

import asyncio
import collections
import struct

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mqcore.remoting import RequestCode, create_request
from mqcore.remoting.command import decode_frame, encode_frame
from mqcore.remoting.framing import DEFAULT_RING_BYTES, FrameBudget, FrameReceiver, receiver_class
from tests.support.store import msg, small_config
from tests.support.waiting import wait_for

from mqcore import _pipeline  # the compiled kernel: a missing build fails here, never skips

TOPIC = "RingT"
GROUP = "RingG"


class RecordingTransport:
    """What a Channel calls on its transport; keeps the bytes written (views copied at once:
    a pull answer's bodies are views of the mapped commitlog)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closed = False

    def write(self, data) -> None:
        self.data += data

    def writelines(self, buffers) -> None:
        for b in buffers:
            self.data += b

    def get_extra_info(self, key, default=None):
        return {"peername": ("127.0.0.1", 5555), "sockname": ("127.0.0.1", 10911)}.get(key, default)

    def set_write_buffer_limits(self, high, low) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def answers(self) -> list[tuple[int, int]]:
        """(opaque, code) of every answer frame written."""
        out, pos = [], 0
        while pos + 4 <= len(self.data):
            length = struct.unpack_from(">i", self.data, pos)[0]
            cmd = decode_frame(bytes(self.data[pos + 4:pos + 4 + length]))
            out.append((cmd.opaque, cmd.code))
            pos += 4 + length
        assert pos == len(self.data)
        return out


def _send(opaque: int, body: bytes, queue: int = 0) -> bytes:
    ext = {"a": "PG", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(queue), "f": "0", "g": "1700000000123",
           "h": "0", "i": f"UNIQ_KEY\x01U{opaque}\x02TAGS\x01t", "j": "0", "k": "false", "m": "false"}
    return encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, ext, body, opaque=opaque))


def _pull(opaque: int) -> bytes:
    ext = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "queueOffset": "0", "maxMsgNums": "4",
           "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0",
           "subscription": "*", "expressionType": "TAG"}
    return encode_frame(create_request(RequestCode.PULL_MESSAGE, ext, opaque=opaque))


def _general(opaque: int) -> bytes:
    """A send the cores leave to the general path (a delay level: the delay stage)."""
    ext = {"a": "PG", "b": TOPIC, "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1700000000123",
           "h": "0", "i": "DELAY\x012\x02TAGS\x01d", "j": "0", "k": "false", "m": "false"}
    return encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, ext, b"g%d" % opaque, opaque=opaque))


#: frame kind -> its bytes for an opaque; "large" is received into a buffer of its own
KINDS = {
    "send": lambda o: _send(o, b"s" * 100),
    "send 1 KiB": lambda o: _send(o, b"k" * 1024, queue=1),
    "pull": _pull,
    "general": _general,
    "large": lambda o: _send(o, b"L" * (DEFAULT_RING_BYTES + 5000), queue=2),
}
#: a length prefix above any frame limit: both channels close
TOO_LARGE = struct.pack(">ii", 0x7FFFFFF0, 0x0000_0010)


@pytest.fixture(scope="module")
def broker_loop(tmp_path_factory):
    """A broker (real store in a temp dir) on its own event loop, for the whole module, with
    the compiled pipeline kernels (whose connection core is under test) in either mode: under
    MQCORE_PURE_PYTHON=1 its store runs the twin store kernels."""
    from mqcore import _compat
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.metadata import TopicConfig
    from mqcore.remoting.eventloop import new_event_loop

    loop = new_event_loop()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_compat, "pipeline_kernels", _pipeline)  # read when the broker builds its parts
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="ring"),
                        small_config(tmp_path_factory.mktemp("ring"), commitlog_file_size_bytes=1 << 20),
                        clock=lambda: 1_700_000_000_000)
        loop.run_until_complete(broker.start())
    broker.topics.update(TopicConfig(TOPIC, 4, 4))
    # a message in queue 0 before any pull: both channels' pulls find messages, whichever
    # channel's sends were stored first
    broker.store.put_message(msg(TOPIC, body=b"first", qid=0))
    assert wait_for(lambda: broker.store.get_max_offset_in_queue(TOPIC, 0) >= 1, timeout=10)
    try:
        yield broker, loop
    finally:
        loop.run_until_complete(broker.shutdown())
        loop.close()


def _ring_state(channel) -> tuple:
    r = channel._receiver
    return (r._start, r._end, r._offered, bool(r._grow), len(r._ring), r._big_filled, r._big_view is None,
            r.buffered_bytes, r.large_buffer_bytes, channel._rx_bytes, channel._partial_since is None,
            channel._partial_rx if channel._partial_since is not None else None, channel._closed,
            channel.reading_paused)


def _channels(broker):
    """(the broker's C-based channel, the Python Channel with the same frames processor), each
    on a recording transport and with a frame budget of its own."""
    from mqcore.remoting.channel import Channel

    server = broker.server
    made = []
    for cls in (server._channel_class, Channel):
        channel = cls(server._table, max_frame_bytes=server.max_frame_bytes, budget=FrameBudget(64 << 20),
                      frames=server._frames)
        transport = RecordingTransport()
        channel.connection_made(transport)
        made.append((channel, transport))
    return made


async def _feed_both(broker, data: bytes, chunks: list[int], expected: int) -> None:
    (core, core_t), (twin, twin_t) = _channels(broker)
    assert type(core).__name__ == "CoreChannel" and type(core._receiver).__mro__[1] is _pipeline.ReceiverCore
    assert type(twin._receiver) is FrameReceiver
    loop = asyncio.get_running_loop()
    pos, i = 0, 0
    try:
        while pos < len(data) and not core._closed:
            room = core.get_buffer(65536)
            twin_room = twin.get_buffer(65536)
            assert len(room) == len(twin_room)
            n = max(1, min(len(room), len(data) - pos, chunks[i % len(chunks)]))
            room[:n] = data[pos:pos + n]
            twin_room[:n] = data[pos:pos + n]
            del room, twin_room  # a ring is replaced, never resized, but hold no view past the call
            core.buffer_updated(n)
            twin.buffer_updated(n)
            pos, i = pos + n, i + 1
            assert _ring_state(core) == _ring_state(twin), f"after {i} receive buffers ({pos} bytes)"
            # the core read the time itself (CLOCK_MONOTONIC, the clock of this loop's time())
            assert abs(core.last_activity - loop.time()) < 1.0
        # the general path's requests may run as tasks: wait for them (a closed channel drops
        # their answers, both alike; an open one answers every request)
        deadline = loop.time() + 20

        def done(channel, transport):
            return not channel.request_task_count and (channel._closed or len(transport.answers()) >= expected)
        while not (done(core, core_t) and done(twin, twin_t)):
            assert loop.time() < deadline, "the general path did not answer"
            await asyncio.sleep(0.005)
        assert collections.Counter(core_t.answers()) == collections.Counter(twin_t.answers())
        if not core._closed:
            assert len(core_t.answers()) == expected
        assert core._closed == twin._closed == core_t.closed == twin_t.closed
        # both trim and release alike
        assert core.trim_buffers() == twin.trim_buffers()
        assert _ring_state(core) == _ring_state(twin)
    finally:
        core.close()
        twin.close()
    assert _ring_state(core) == _ring_state(twin)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kinds=st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=10),
       chunks=st.lists(st.one_of(st.integers(1, 40), st.integers(1, 5000), st.integers(4000, 300_000)),
                       min_size=1, max_size=8),
       too_large=st.booleans())
def test_the_c_ring_keeps_the_python_rings_state_over_any_receive_splits(broker_loop, kinds, chunks, too_large):
    broker, loop = broker_loop
    frames = [KINDS[k](opaque) for opaque, k in enumerate(kinds, start=1)]
    data = b"".join(frames) + (TOO_LARGE if too_large else b"")
    event(f"kinds {sorted(set(kinds))}")
    loop.run_until_complete(asyncio.wait_for(_feed_both(broker, data, chunks, len(frames)), 60))


def test_one_whole_frame_per_buffer_is_the_c_cores_usual_case(broker_loop):
    """One plain send per receive buffer (a client with one request in flight): the core takes
    it whole, the ring is offered whole again, and the Python FrameReceiver's methods are not
    called (each one is made to fail)."""
    broker, loop = broker_loop

    async def scenario():
        (core, transport), _ = _channels(broker)
        receiver = core._receiver
        core.get_buffer(65536)  # the first call makes the ring (FrameReceiver.get_buffer)
        core._receiver.__dict__.update({
            name: _refuse(name) for name in ("get_buffer", "received", "complete_frames", "consumed", "next_frame")})
        try:
            for opaque in range(1, 21):
                frame = _send(opaque, b"u" * 100)
                room = core.get_buffer(65536)
                assert len(room) == len(receiver._ring) and receiver._offered == len(room)
                room[:len(frame)] = frame
                del room
                core.buffer_updated(len(frame))
                assert (receiver._start, receiver._end, core._partial_since) == (0, 0, None)
            assert [code for _, code in transport.answers()] == [0] * 20
        finally:
            core.close()

    loop.run_until_complete(scenario())


def _refuse(name):
    def refused(*args, **kwargs):
        raise AssertionError(f"FrameReceiver.{name} called on the usual path")
    return refused


def test_receiver_class_puts_the_ring_fields_on_the_c_base():
    cls = receiver_class(_pipeline.ChannelCore._receiver_core)
    assert cls is receiver_class(_pipeline.ReceiverCore)  # one class per base
    assert receiver_class(None) is FrameReceiver
    r = cls(1 << 20, FrameBudget())
    assert "_start" not in r.__dict__ and "_ring" not in r.__dict__ and "_budget" in r.__dict__
    with pytest.raises(TypeError):
        r._ring = b"not a bytearray"


def test_a_loop_with_its_own_clock_is_asked_for_the_time(broker_loop):
    """The core reads CLOCK_MONOTONIC itself only for loops whose time() is that clock (asyncio's,
    uvloop's); any other loop's time() is called, as the Python Channel does."""
    from mqcore.remoting.eventloop import time_is_monotonic

    broker, _ = broker_loop

    class ShiftedLoop(asyncio.SelectorEventLoop):
        def time(self) -> float:
            return super().time() + 1e6

    import uvloop

    for plain in (asyncio.SelectorEventLoop(), uvloop.new_event_loop()):
        assert time_is_monotonic(plain)
        plain.close()
    shifted = ShiftedLoop()
    assert not time_is_monotonic(shifted)

    async def scenario():
        (core, _t), _ = _channels(broker)
        try:
            frame = _send(1, b"c")
            core.get_buffer(65536)[:len(frame)] = frame
            core.buffer_updated(len(frame))
            assert abs(core.last_activity - shifted.time()) < 5.0
        finally:
            core.close()

    try:
        shifted.run_until_complete(scenario())
    finally:
        shifted.close()
