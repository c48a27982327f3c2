"""HTTP/2 streams on the gRPC port under the port's budget (issue 36): grpcMaxConcurrentStreams
caps the calls one connection has open (grpcio's SETTINGS_MAX_CONCURRENT_STREAMS: a client
library queues past it, a stream opened anyway is refused with RST_STREAM REFUSED_STREAM), and a
call that does not send its whole request message within httpHeaderTimeoutSeconds of its headers
is ended (DEADLINE_EXCEEDED) and its stream freed. A real mqbroker process, on loopback, through
the permissive TLS front (its relay) and straight to grpcio."""
from __future__ import annotations

import time

import grpc
import pytest

from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.h2raw import DATA, HEADERS, REFUSED_STREAM, RST_STREAM, NeverReading, frame, grpc_message
from tests.grpc.rawclient import RawClient, d, g, s
from tests.grpc.test_limits import rss_mib
from tests.support.processes import BrokerProcess

pytestmark = pytest.mark.timeout(180)
SERVICE = "/apache.rocketmq.v2.MessagingService/"
CAP = 16
#: streams one hostile connection opens past the cap
EXCESS = 4000
ROUTE = s.QueryRouteRequest(topic=d.Resource(name="StreamsTopic")).SerializeToString()


def _broker(tmp_path, mode: str, **conf) -> BrokerProcess:
    return BrokerProcess(tmp_path / "store", conf=dict(TEST_CONF, grpcServerTlsMode=mode, **conf))


def _refused(frames) -> set[int]:
    return {sid for kind, _, sid, payload in frames
            if kind == RST_STREAM and int.from_bytes(payload[:4], "big") == REFUSED_STREAM}


def _trailers(frames) -> dict[int, bytes]:
    """stream -> the header block of the trailers that ended it (HEADERS with END_STREAM). Read
    as bytes: grpcio's later trailers refer to the HPACK table, but a message unique to a call
    (the timeout's) is sent as a literal."""
    return {sid: payload for kind, flags, sid, payload in frames if kind == HEADERS and flags & 0x1}


def _answered(frames, sid: int) -> bool:
    return any(kind == DATA and stream == sid for kind, _, stream, _ in frames) and sid in _trailers(frames)


@pytest.mark.parametrize("mode", ["disabled", "permissive"])
def test_streams_past_the_cap_are_refused_while_another_connection_is_served(tmp_path, mode):
    # a long request deadline: the streams held open stay open for the whole test
    with _broker(tmp_path, mode, grpcMaxConcurrentStreams=CAP, httpHeaderTimeoutSeconds=120) as b:
        addr = grpc_addr(b)
        with RawClient(addr) as c:
            assert c.call("QueryRoute", s.QueryRouteRequest(topic=d.Resource(name="StreamsTopic"))) is not None
        before = rss_mib(b)
        with NeverReading(addr) as hostile:
            # each call's message announced as 16 bytes, 1 sent: a request that never ends
            partial = b"\x00\x00\x00\x00\x10\x0a"
            held = [hostile.open(SERVICE + "QueryRoute", [("x-mq-client-id", "hostile")], partial)
                    for _ in range(CAP)]
            over = [hostile.open(SERVICE + "QueryRoute", [("x-mq-client-id", "hostile")], partial)
                    for _ in range(EXCESS)]
            frames = hostile.frames(30, until=lambda fs: len(_refused(fs)) >= EXCESS)
            refused = _refused(frames)
            assert refused == set(over), f"{len(refused & set(over))} of the {EXCESS} streams past the cap of " \
                                         f"{CAP} refused, {len(refused & set(held))} of those within it"
            # another client is served meanwhile, its own streams not counted with the hostile one's
            t0 = time.monotonic()
            with RawClient(addr, "other@1") as c:
                for _ in range(CAP + 4):
                    c.call("QueryRoute", s.QueryRouteRequest(topic=d.Resource(name="StreamsTopic")), timeout=5)
            assert time.monotonic() - t0 < 5
            grown = rss_mib(b) - before
        assert grown < 20, f"{CAP + EXCESS} streams on one connection took the broker's RSS up {grown:.0f} MiB"
        assert b.proc.poll() is None


def test_a_client_library_queues_its_calls_past_the_cap(tmp_path):
    """grpcio's client reads the cap from SETTINGS: with every stream of its connection taken by
    long-polling receives, its next call waits (here until its deadline) while the same call on a
    second connection is answered at once."""
    with _broker(tmp_path, "disabled", grpcMaxConcurrentStreams=4) as b:
        addr = grpc_addr(b)
        with RawClient(addr) as setup:
            assert setup.send("StreamsPoll").status.code == d.OK  # the topic exists
            status, msgs = setup.receive("StreamsPoll", "GPoll", polling_ms=1000)  # and is empty for GPoll
            for m in msgs:
                setup.ack("StreamsPoll", "GPoll", m)
        # channels of one process share their connections unless each has a pool of its own
        own = [("grpc.use_local_subchannel_pool", 1)]
        with grpc.insecure_channel(addr, options=own) as busy_ch, grpc.insecure_channel(addr, options=own) as other_ch:
            busy, other = g.MessagingServiceStub(busy_ch), g.MessagingServiceStub(other_ch)
            meta = [("x-mq-client-id", "busy@1")]
            req = s.ReceiveMessageRequest(group=d.Resource(name="GPoll"), batch_size=1,
                                          filter_expression=d.FilterExpression(type=d.TAG, expression="*"))
            req.message_queue.topic.name = "StreamsPoll"
            req.invisible_duration.FromMilliseconds(30_000)
            req.long_polling_timeout.FromMilliseconds(20_000)
            route = s.QueryRouteRequest(topic=d.Resource(name="StreamsPoll"))
            polls = [busy.ReceiveMessage(req, metadata=meta, timeout=30) for _ in range(4)]
            try:
                time.sleep(1)  # the four receives are long-polling on the broker
                with pytest.raises(grpc.RpcError) as e:
                    busy.QueryRoute(route, metadata=meta, timeout=2)
                assert e.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
                other.QueryRoute(route, metadata=meta, timeout=2)
            finally:
                for p in polls:
                    p.cancel()


@pytest.mark.parametrize("mode", ["disabled", "permissive"])
def test_a_request_not_whole_within_the_timeout_is_ended_and_its_stream_freed(tmp_path, mode):
    with _broker(tmp_path, mode, grpcMaxConcurrentStreams=2, httpHeaderTimeoutSeconds=2) as b:
        addr = grpc_addr(b)
        with NeverReading(addr) as c:
            t0 = time.monotonic()
            # headers and nothing more; and a SendMessage whose bytes trickle in, one every 0.5 s
            silent = c.open(SERVICE + "ReceiveMessage", [("x-mq-client-id", "slow")])
            body = grpc_message(b"\x0a" * 200)
            slow = c.open(SERVICE + "SendMessage", [("x-mq-client-id", "slow")], body[:6])
            frames: list = []
            for i in range(6, 20):
                try:
                    c.sock.sendall(frame(DATA, 0, slow, body[i:i + 1]))
                except OSError:
                    break
                frames += c.frames(0.5)
                if slow in _trailers(frames):
                    break
            frames += c.frames(6, until=lambda fs: {silent, slow} <= set(_trailers(frames + fs)))
            ended = _trailers(frames)
            took = time.monotonic() - t0
            for sid, name in ((silent, b"ReceiveMessage"), (slow, b"SendMessage")):
                assert sid in ended, f"the {name.decode()} call not ended after {took:.1f} s: {frames}"
                assert b"the " + name + b" request was not complete within 2 s" in ended[sid], ended[sid]
            assert took < 5, f"the calls were ended after {took:.1f} s (httpHeaderTimeoutSeconds=2)"
            # their streams are free again: a whole request on the same connection is answered
            sid = c.call(SERVICE + "QueryRoute", ROUTE, [("x-mq-client-id", "slow")])
            after = c.frames(5, until=lambda fs: _answered(fs, sid) or sid in _refused(fs))
            assert sid not in _refused(after) and _answered(after, sid), after
        assert any("no whole request within" in line for line in b.lines), b.output()
