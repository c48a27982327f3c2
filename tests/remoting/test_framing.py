"""FrameReceiver: frames split out of a receive buffer, however the bytes are chunked,
equal what the one-frame decoder gives; large frames are charged to the budget and
released; the budget makes a connection wait instead of growing."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore.errors import FrameTooLargeError, ProtocolError
from mqcore.remoting import RequestCode, create_request
from mqcore.remoting.codes import SerializeType
from mqcore.remoting.command import decode_frame, encode_frame
from mqcore.remoting.framing import MMAP_FRAME_BYTES, RECV_WAIT, FrameBudget, FrameReceiver

RING = 1024  # small ring, so that hypothesis' frames cross it both ways


def feed(receiver: FrameReceiver, data: bytes, chunks: list[int]) -> list:
    """Push ``data`` through the receiver in chunks (as the transport would), collecting frames."""
    out, pos, i = [], 0, 0
    while pos < len(data):
        buf = receiver.get_buffer()
        n = min(len(buf), len(data) - pos, chunks[i % len(chunks)] if chunks else len(data))
        n = max(n, 1)
        buf[:n] = data[pos:pos + n]
        receiver.received(n)
        pos += n
        i += 1
        while True:
            cmd = receiver.next_frame()
            if cmd is None:
                break
            assert cmd is not RECV_WAIT
            out.append(cmd)
    return out


commands = st.builds(
    lambda code, ext, body, binary: create_request(
        code, ext, body, opaque=7, serialize_type=SerializeType.ROCKETMQ if binary else SerializeType.JSON),
    st.integers(0, 400),
    st.dictionaries(st.text("abcxyz", min_size=1, max_size=8), st.text(max_size=30), max_size=5),
    st.one_of(st.binary(max_size=64), st.integers(0, 3000).map(lambda n: bytes(range(256)) * (n // 256) + b"x" * (n % 256))),
    st.booleans(),
)


@pytest.mark.parametrize("keep_large_buffer", [False, True], ids=["fresh", "kept"])
@settings(max_examples=150, deadline=None)
@given(st.lists(commands, min_size=1, max_size=12), st.lists(st.integers(1, 2500), min_size=1, max_size=8))
def test_frames_split_from_any_chunking_equal_the_single_frame_decoder(keep_large_buffer, cmds, chunks):
    frames = [encode_frame(c) for c in cmds]
    budget = FrameBudget(1 << 30)
    receiver = FrameReceiver(1 << 20, budget, ring_bytes=RING, keep_large_buffer=keep_large_buffer)
    got = feed(receiver, b"".join(frames), chunks)
    assert got == [decode_frame(f[4:]) for f in frames]
    assert receiver.buffered_bytes == 0
    assert budget.used_bytes == 0  # every large frame's buffer was given back


def test_large_frame_is_charged_to_the_budget_until_complete_and_on_release():
    big = encode_frame(create_request(RequestCode.SEND_MESSAGE, {"a": "b"}, b"z" * (MMAP_FRAME_BYTES + 10)))
    budget = FrameBudget(64 << 20)
    r = FrameReceiver(16 << 20, budget, ring_bytes=RING)
    assert feed(r, big[:5000], [700]) == []
    assert budget.used_bytes == len(big) and r.large_buffer_bytes == len(big)
    [cmd] = feed(r, big[5000:], [1 << 20])
    assert bytes(cmd.body) == b"z" * (MMAP_FRAME_BYTES + 10)
    assert budget.used_bytes == 0
    feed(r, big[:3000], [3000])  # a second one, abandoned half-way (connection closed)
    assert budget.used_bytes == len(big)
    r.release()
    r.release()  # idempotent
    assert budget.used_bytes == 0 and r.buffered_bytes == 0


def test_spent_budget_makes_the_next_large_frame_wait_and_wakes_it_on_release():
    big = encode_frame(create_request(RequestCode.SEND_MESSAGE, None, b"q" * 5000))
    budget = FrameBudget(len(big) + 100)  # room for one
    a, b = FrameReceiver(1 << 20, budget, ring_bytes=RING), FrameReceiver(1 << 20, budget, ring_bytes=RING)
    feed(a, big[:2000], [2000])
    buf = b.get_buffer()
    buf[:RING] = big[:RING]
    b.received(RING)
    assert b.next_frame() is RECV_WAIT  # b holds only its ring, nothing more
    woken = []
    budget.wait(id(b), lambda: woken.append(True))
    assert b.buffered_bytes == RING and budget.used_bytes == len(big)
    a.release()
    assert woken == [True] and budget.waiting == 0
    assert b.next_frame() is None  # now it got its buffer
    assert budget.used_bytes == len(big)


def test_first_large_frame_always_fits_even_above_the_budget():
    big = encode_frame(create_request(RequestCode.SEND_MESSAGE, None, b"q" * 5000))
    budget = FrameBudget(10)
    r = FrameReceiver(1 << 20, budget, ring_bytes=RING)
    [cmd] = feed(r, big, [4096])
    assert len(cmd.body) == 5000


@pytest.mark.parametrize("prefix, error", [
    ((17 << 20).to_bytes(4, "big"), FrameTooLargeError),
    ((3).to_bytes(4, "big"), ProtocolError),
    ((8).to_bytes(4, "big") + (0x05000004).to_bytes(4, "big"), ProtocolError),  # serialize type 5
])
def test_malformed_prefixes_raise(prefix, error):
    r = FrameReceiver(16 << 20, FrameBudget(), ring_bytes=RING)
    with pytest.raises(error):
        feed(r, prefix + b"\0" * 8, [64])


def test_the_ring_grows_with_need_and_is_given_back_when_empty():
    """No ring before the first byte, a small one for a small frame, doubled when a read
    fills it or a frame needs more (up to ring_bytes), and none again after ``trim``."""
    r = FrameReceiver(1 << 20, FrameBudget(), ring_bytes=64 * 1024, initial_bytes=4096)
    assert r.ring_bytes == 0
    small = encode_frame(create_request(RequestCode.HEART_BEAT, None, b"h" * 100))
    assert len(feed(r, small, [len(small)])) == 1
    assert r.ring_bytes == 4096
    assert r.trim() == 4096 and r.ring_bytes == 0
    mid = encode_frame(create_request(RequestCode.SEND_MESSAGE, None, b"m" * 20_000))  # > 4 KiB, < 64 KiB
    [cmd] = feed(r, mid, [1000])
    assert len(cmd.body) == 20_000 and r.ring_bytes == 32 * 1024
    assert r.trim() == 32 * 1024
    burst = b"".join([small] * 400)  # reads that fill all the room offered
    assert len(feed(r, burst, [1 << 20])) == 400
    assert r.ring_bytes == 64 * 1024  # doubled up to the maximum, never past it
    feed(r, small[:10], [10])
    assert r.trim() == 0  # a partial frame keeps its ring
    r.release()
    assert r.ring_bytes == 0 and r.buffered_bytes == 0


def test_a_kept_large_buffer_serves_the_next_large_frames_and_goes_on_trim():
    """A client's receiver keeps the last large frame's buffer for the next one: each frame,
    smaller or larger than the one before, still decodes to its own bytes."""
    sizes = [MMAP_FRAME_BYTES + 10, 5000, 3000, MMAP_FRAME_BYTES + 5000, 2000]
    frames = [encode_frame(create_request(RequestCode.PULL_MESSAGE, {"n": str(i)}, bytes([65 + i]) * n))
              for i, n in enumerate(sizes)]
    budget = FrameBudget(64 << 20)
    r = FrameReceiver(16 << 20, budget, ring_bytes=RING, keep_large_buffer=True)
    got = feed(r, b"".join(frames), [700, 1 << 20, 333])
    assert [bytes(c.body) for c in got] == [bytes([65 + i]) * n for i, n in enumerate(sizes)]
    assert budget.used_bytes == 0  # the kept buffer is not charged: no frame is under way
    # the largest one so far, with headroom for a next answer a few bytes longer
    assert r._kept is not None and len(frames[3]) + len(frames[3]) // 16 <= len(r._kept) <= len(frames[3]) + 200_000
    assert r.trim() >= len(frames[3]) and r._kept is None
    r.release()
    no_keep = FrameReceiver(16 << 20, budget, ring_bytes=RING)
    feed(no_keep, frames[0], [1 << 20])
    assert no_keep._kept is None


def test_kept_buffers_are_capped_per_budget_and_counted_until_freed():
    """Kept buffers are not charged to the budget (they would hold budget a waiting connection
    needs), so what all receivers of a budget keep is capped by ``keep_max_bytes``: past it a
    finished buffer is freed, and trim or release gives the count back."""
    frame = encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, {"n": "1"}, b"x" * (MMAP_FRAME_BYTES + 10)))
    budget = FrameBudget(64 << 20, keep_max_bytes=3 * len(frame) // 2)
    a, b = (FrameReceiver(16 << 20, budget, ring_bytes=RING, keep_large_buffer=True) for _ in range(2))
    feed(a, frame, [1 << 20])
    assert a._kept is not None and budget.kept_bytes == len(a._kept)
    feed(b, frame, [1 << 20])
    assert b._kept is None  # over the cap: freed as a receiver without keeping would
    feed(a, frame, [1 << 20])  # the kept one serves the next frame and is kept again
    assert a._kept is not None and budget.kept_bytes == len(a._kept) and budget.used_bytes == 0
    a.release()
    assert budget.kept_bytes == 0
    feed(b, frame, [1 << 20])
    assert b._kept is not None and b.trim() >= len(frame) and budget.kept_bytes == 0
    b.release()


def test_a_kept_buffer_has_room_for_a_next_answer_a_few_bytes_longer():
    """A consumer's next pull answer is often a few bytes longer than the one before (its header's
    offsets gain digits): it is received into the kept buffer, not into a fresh one."""
    frames = [encode_frame(create_request(RequestCode.PULL_MESSAGE, {"nextBeginOffset": "9" * (i + 1)},
                                          bytes([65 + i]) * (MMAP_FRAME_BYTES + 100)))
              for i in range(4)]
    r = FrameReceiver(16 << 20, FrameBudget(64 << 20), ring_bytes=RING, keep_large_buffer=True)
    got = feed(r, frames[0], [1 << 20])
    kept = r._kept
    assert kept is not None
    for i, frame in enumerate(frames[1:], 1):
        assert len(frame) > len(frames[i - 1])
        got += feed(r, frame, [5000, 1 << 20])
        assert r._kept is kept  # the same buffer each time
    assert [bytes(c.body) for c in got] == [bytes([65 + i]) * (MMAP_FRAME_BYTES + 100) for i in range(4)]
    r.release()
