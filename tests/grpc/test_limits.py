"""What a 5.x client cannot make the broker do (issue 36, findings 5-7): hold a huge request
in memory before its signature is checked, hold without bound the messages of receive
streams whose consumers do not read, or write a traceback per malformed request."""
from __future__ import annotations

import os
import re
import time

import grpc
import pytest

from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.h2raw import NeverReading
from tests.grpc.rawclient import RawClient, d, s
from tests.support import acl
from tests.support.processes import BrokerProcess
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(300)
SERVICE = "/apache.rocketmq.v2.MessagingService/"


def rss_mib(b: BrokerProcess) -> float:
    with open(f"/proc/{b.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def raw_method(channel: grpc.Channel, name: str, streaming: bool = False):
    kind = channel.unary_stream if streaming else channel.unary_unary
    return kind(SERVICE + name, request_serializer=lambda b: b, response_deserializer=lambda b: b)


# --- finding 5: the size limit and the signature come before the parse ----------------------------
@pytest.fixture
def acl_broker(tmp_path):
    yml = tmp_path / "plain_acl.yml"
    yml.write_text(acl.PLAIN_ACL_YML)
    conf = dict(TEST_CONF, aclEnable="true", plainAclFile=str(yml), brokerAccessKey=acl.ADMIN[0],
                brokerSecretKey=acl.ADMIN[1])
    with BrokerProcess(tmp_path / "store", conf=conf) as b:
        b.grpc_addr = grpc_addr(b)
        yield b


def test_oversized_unsigned_sends_are_refused_before_they_are_parsed(acl_broker):
    b = acl_broker
    big = s.SendMessageRequest(messages=[d.Message(topic=d.Resource(name="TopicBoth"), body=b"x" * (120 << 20))])
    big.messages[0].system_properties.message_id = "01BIG"
    payload = big.SerializeToString()
    channel = grpc.insecure_channel(b.grpc_addr, options=[("grpc.max_send_message_length", 256 << 20)])
    send = raw_method(channel, "SendMessage")
    meta = [("x-mq-client-id", "big-client")]
    assert s.SendMessageResponse.FromString(send(b"\x0a\x00", metadata=meta, timeout=20)).status.code == \
        d.UNAUTHORIZED  # warm: the connection and the broker's first call
    before = rss_mib(b)
    for _ in range(6):
        with pytest.raises(grpc.RpcError) as e:
            send(payload, metadata=meta, timeout=60)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
    grown = rss_mib(b) - before
    assert grown < 10, f"six refused 120 MiB requests grew the broker's RSS by {grown:.0f} MiB"
    # unsigned and under the limit: refused by the signature check, bytes that do not even
    # parse included (never parsed: the answer is the ACL's, not a parse error)
    for body in (s.SendMessageRequest(messages=big.messages[:0]).SerializeToString(), b"\xff" * 1000):
        r = s.SendMessageResponse.FromString(send(body, metadata=meta, timeout=20))
        assert r.status.code == d.UNAUTHORIZED and r.status.message == "No accessKey is configured", r.status
    channel.close()
    assert b.proc.poll() is None


def test_a_request_over_the_limit_is_refused_without_acl(grpc_broker):
    """maxMessageSize (4 MiB) + 1 MiB: one largest message with its headers passes, more does not."""
    with RawClient(grpc_broker.grpc_addr) as c:
        c.channel.close()
        c.channel = grpc.insecure_channel(grpc_broker.grpc_addr, options=[("grpc.max_send_message_length", 64 << 20)])
        c.stub = __import__("tests.grpc.rawclient", fromlist=["g"]).g.MessagingServiceStub(c.channel)
        assert c.send("Big5", body=b"y" * (4 << 20)).status.code == d.OK
        assert c.send("Big5", body=b"y" * ((4 << 20) + 1)).status.code == d.MESSAGE_BODY_TOO_LARGE
        with pytest.raises(grpc.RpcError) as e:
            c.send("Big5", body=b"y" * (6 << 20))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert c.send("Big5").status.code == d.OK  # the connection serves on


# --- finding 6: consumers that do not read ---------------------------------------------------------
STREAMS, CONNECTIONS = 1000, 10
MESSAGES, BODY = 1200, 128 * 1024
STALLED_INVISIBLE_MS = 30_000


def _receive_request(topic: str, group: str, invisible_ms: int, polling_ms: int) -> bytes:
    req = s.ReceiveMessageRequest(group=d.Resource(name=group), batch_size=32,
                                  filter_expression=d.FilterExpression(type=d.TAG, expression="*"))
    req.message_queue.topic.name = topic
    req.message_queue.id = -1
    req.invisible_duration.FromMilliseconds(invisible_ms)
    req.long_polling_timeout.FromMilliseconds(polling_ms)
    return req.SerializeToString()


def test_never_reading_receivers_hold_bounded_memory_and_lose_nothing(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=TEST_CONF) as b:
        addr = grpc_addr(b)
        sent = set()
        with RawClient(addr) as c:
            for i in range(MESSAGES):
                r = c.send("Stalled5", body=os.urandom(16) + b"z" * (BODY - 16), message_id=f"01STALL{i:027d}")
                assert r.status.code == d.OK, r.status
                sent.add(r.entries[0].message_id)
        before = rss_mib(b)
        # invisible for 30 s: what comes back sooner was given back by the broker
        request = _receive_request("Stalled5", "GStalled", STALLED_INVISIBLE_MS, 20_000)
        conns = [NeverReading(addr) for _ in range(CONNECTIONS)]
        peak = before
        try:
            for n in range(STREAMS):
                conns[n % CONNECTIONS].call(SERVICE + "ReceiveMessage", request,
                                            [("x-mq-client-id", f"never-reads-{n % CONNECTIONS}")])
            # long enough for every stream to pop what it may and for the stalled writes to be given up
            end = time.monotonic() + 15
            while time.monotonic() < end:
                peak = max(peak, rss_mib(b))
                time.sleep(0.25)
        finally:
            for conn in conns:
                conn.close()
        assert peak < 200, f"{STREAMS} never-reading receive streams took the broker's RSS to {peak:.0f} MiB " \
                           f"(from {before:.0f})"
        # every message, none lost. Those the stalled streams popped and never wrote come back at
        # once; the few grpc took for a stream (its 64 KiB window, its buffers) count as delivered,
        # as to any consumer that went away, and come back when their invisible duration ends
        closed = time.monotonic()
        got: set[str] = set()
        early = 0
        with RawClient(addr, "reader@1") as c:
            while len(got) < len(sent) and time.monotonic() < closed + STALLED_INVISIBLE_MS / 1000 + 40:
                status, msgs = c.receive("Stalled5", "GStalled", batch=32, invisible_ms=60_000, polling_ms=2000)
                assert status.code in (d.OK, d.MESSAGE_NOT_FOUND), status
                for m in msgs:
                    got.add(m.system_properties.message_id)
                    assert c.ack("Stalled5", "GStalled", m).status.code == d.OK
                if time.monotonic() < closed + STALLED_INVISIBLE_MS / 1000 - 5:
                    early = len(got)
        assert got == sent, f"{len(sent - got)} of {len(sent)} messages not delivered after the stalled streams"
        assert early >= 0.8 * len(sent), f"only {early} of {len(sent)} came back before the stalled streams' " \
                                         "invisible duration ended"
        assert b.proc.poll() is None


# --- finding 7: malformed requests -----------------------------------------------------------------
def test_malformed_requests_leave_a_few_short_log_lines(grpc_broker):
    b = grpc_broker
    log_path = os.path.join(b.log_dir, "broker.log")
    assert wait_for(lambda: os.path.exists(log_path), timeout=10, step=0.2), "no broker.log"
    log_before = os.path.getsize(log_path)
    out_before = len(b.lines)
    channel = grpc.insecure_channel(b.grpc_addr)
    meta = [("x-mq-client-id", "fuzz@1")]
    bad = [b"\xff" * 64, b"\x0a\xff\xff\xff\xff\x0f", bytes(range(256)) * 8, b"\x12\x05abc"]
    codes = set()
    n = 0
    for name in ("SendMessage", "QueryRoute", "AckMessage", "Heartbeat", "ReceiveMessage"):
        call = raw_method(channel, name, streaming=name == "ReceiveMessage")
        for i in range(400):
            try:
                result = call(bad[i % len(bad)], metadata=meta, timeout=10)
                if name == "ReceiveMessage":
                    list(result)
            except grpc.RpcError as e:
                codes.add(e.code())
            n += 1
    assert codes == {grpc.StatusCode.INVALID_ARGUMENT}, codes
    channel.close()
    with RawClient(b.grpc_addr) as c:  # serves on
        assert c.send("AfterFuzz5").status.code == d.OK
    grown = open(log_path, errors="replace").read()[log_before:] if os.path.getsize(log_path) > log_before else ""
    output = "\n".join(list(b.lines)[out_before:])
    assert "Traceback" not in grown and "Traceback" not in output, (grown + output)[:3000]
    lines = [line for line in grown.splitlines() if re.search("malformed", line)]
    assert 1 <= len(lines) <= 10, f"{n} malformed requests wrote {len(lines)} lines:\n" + "\n".join(lines[:20])
    assert len(grown) < 5000, f"{n} malformed requests wrote {len(grown)} bytes to broker.log"
    assert all(len(line) < 300 for line in lines), lines
