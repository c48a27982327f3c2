"""``Producer.send`` runs on the caller's thread (mqcore.remoting.blocking), not on the
client's event loop; against the in-process fake cluster. Retries, timeouts and fault
tolerance of the sync path are covered by test_producer.py and the integration tests,
which now all go through this path."""
from __future__ import annotations

import threading
import time

import pytest

from mqcore.client import Message, Producer
from mqcore.errors import BrokerError, RemotingTimeoutError

pytestmark = pytest.mark.timeout(60)


def _stall_loop(p: Producer) -> threading.Event:
    """Block the producer's event-loop thread until the returned event is set."""
    release, stalled = threading.Event(), threading.Event()

    def hold() -> None:
        stalled.set()
        release.wait(30)
    p.instance.loop_thread.call_soon(hold)
    assert stalled.wait(5)
    return release


def test_sync_sends_do_not_need_the_event_loop(fake_cluster):
    fake_cluster.create_topic("T")
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        assert p.send(Message("T", b"first")).ok  # the route lookup goes through the loop once
        release = _stall_loop(p)
        try:
            results = [p.send(Message("T", b"m%d" % i), timeout_ms=2000) for i in range(20)]
            assert all(r.ok for r in results)
            # while the loop is stalled, a send that needs it (async) cannot complete
            future = p.send_async(Message("T", b"async"))
            time.sleep(0.2)
            assert not future.done()
        finally:
            release.set()
        assert future.result(5).ok
    bodies = sorted(m.body for m in fake_cluster.messages("T"))
    assert bodies == sorted([b"first", b"async"] + [b"m%d" % i for i in range(20)])


def test_sync_send_uses_the_blocking_socket_and_keeps_one_per_thread(fake_cluster):
    fake_cluster.create_topic("T")
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        addr = fake_cluster.brokers[0].addr
        for i in range(10):
            p.send(Message("T", b"x"))
        assert p.instance.remoting.blocking.idle_count(addr) == 1
        errors: list[BaseException] = []

        def sender() -> None:
            try:
                for _ in range(20):
                    assert p.send(Message("T", b"y")).ok
            except BaseException as e:
                errors.append(e)
        threads = [threading.Thread(target=sender) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors
    assert len(fake_cluster.messages("T")) == 70


def test_a_stalled_route_lookup_still_obeys_the_send_timeout(fake_cluster):
    """A topic seen for the first time needs the loop (route lookup); a stuck loop makes
    that send fail within its timeout plus the loop guard, never hang."""
    fake_cluster.create_topic("Fresh")
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        release = _stall_loop(p)
        try:
            started = time.monotonic()
            with pytest.raises(RemotingTimeoutError):
                p.send(Message("Fresh", b"x"), timeout_ms=200)
            assert time.monotonic() - started < 8
        finally:
            release.set()
        assert p.send(Message("Fresh", b"x")).ok


def _frames_sent(monkeypatch) -> list[bytes]:
    """Every request frame the blocking sockets write, opaque blanked (it is per connection)."""
    import re

    from mqcore.remoting.blocking import BlockingConnection
    sent: list[bytes] = []
    real = BlockingConnection._send

    real_exchange = BlockingConnection._exchange_frame

    def record(self, prefix, body, deadline):
        frame = bytes(prefix) + bytes(body)
        sent.append(re.sub(rb'"opaque":\d+', b'"opaque":0', frame))
        return real(self, prefix, body, deadline)

    def record_exchange(self, frame, *args):  # the frame the exchange kernel writes in one call
        if not self._receiver.buffered_bytes:
            sent.append(re.sub(rb'"opaque":\d+', b'"opaque":0', bytes(frame)))
        return real_exchange(self, frame, *args)
    real_template = BlockingConnection.send_template

    def record_template(self, template, code, born, flag, properties, body, *args):
        # the frame the template kernel writes in the same call (template.send writes it the same way)
        frame = template.frame(0, born, flag, properties, body)
        if frame is not None and not self._receiver.buffered_bytes:
            sent.append(frame)
        return real_template(self, template, code, born, flag, properties, body, *args)
    monkeypatch.setattr(BlockingConnection, "_exchange_frame", record_exchange)
    monkeypatch.setattr(BlockingConnection, "_send", record)
    monkeypatch.setattr(BlockingConnection, "send_template", record_template)
    return sent


@pytest.mark.parametrize("tags,keys", [(None, None), ("created", ["o-1", "o 2"]), ('q"uo\\te', None),
                                       ("caf\u00e9", ["\u8ba2\u5355"]), ("ctl\x1a", None)])
def test_the_one_step_frame_is_the_generic_frame_byte_for_byte(fake_cluster, clock, monkeypatch, tags, keys):
    """The send written by the encode_request_frame kernel is byte for byte what the generic
    header/RemotingCommand encoder writes (the kernel forced to decline); a message the
    kernel declines (non-ASCII, \\x1a) goes the generic way, with the same result."""
    from mqcore.message import Prop
    from mqcore.remoting.bodies import MessageQueue
    from mqcore.remoting.blocking import BlockingConnection
    fake_cluster.create_topic("T")
    sent = _frames_sent(monkeypatch)
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr, clock=clock) as p:
        queue = p.fetch_publish_message_queues("T")[0]
        assert isinstance(queue, MessageQueue)
        api = p.instance.api
        results = []
        for fast in (True, False):
            if not fast:
                monkeypatch.setattr(BlockingConnection, "call", lambda *args: None)
            msg = Message("T", b"body\x00\x01", tags=tags, keys=keys)
            msg.properties[Prop.UNIQ_KEY] = "7F0000010001ABCDEF0000000000000001"
            results.append(p.send(msg, queue=queue))
    fast_frame, generic_frame = sent[-2], sent[-1]
    assert fast_frame == generic_frame
    assert b'"code":310' in fast_frame and b'"b":"T"' in fast_frame
    a, b = results
    assert (a.status, a.msg_id, a.message_queue, a.region_id, a.trace_on) == \
        (b.status, b.msg_id, b.message_queue, b.region_id, b.trace_on)
    assert b.queue_offset == a.queue_offset + 1


@pytest.mark.parametrize("tags,keys", [(None, None), ("created", ["o-1", "o 2"]), ('q"uo\\te', None),
                                       ("caf\u00e9", ["\u8ba2\u5355"]), ("ctl\x1a", None)])
def test_the_plain_send_template_writes_the_generic_frame_byte_for_byte(fake_cluster, clock, monkeypatch, tags,
                                                                       keys):
    """Producer.send's plain path (the queue's SendTemplate: frame, exchange and SendResult in
    one kernel call) writes byte for byte what the generic header/RemotingCommand encoder
    writes for the same message on the same queue (the template forced to decline); a
    message it declines (non-ASCII, \\x1a) goes the generic way; the results agree."""
    from mqcore.client.message import SendResult
    from mqcore.message import Prop
    from mqcore.remoting.blocking import BlockingPool
    fake_cluster.create_topic("T")
    sent = _frames_sent(monkeypatch)
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr, clock=clock) as p:
        assert p.send(Message("T", b"first")).ok  # checks the topic, caches its route
        results = []
        for fast in (True, False):
            if not fast:
                monkeypatch.setattr(BlockingPool, "send_template", lambda *args: None)
            msg = Message("T", b"body\x00\x01", tags=tags, keys=keys)
            msg.properties[Prop.UNIQ_KEY] = "7F0000010001ABCDEF0000000000000001"
            results.append(p.send(msg))
        queues = p.fetch_publish_message_queues("T")
    fast_frame, generic_frame = sent[-2], sent[-1]
    a, b = results
    assert type(a) is SendResult and a.ok and b.ok
    # round-robin moved on a queue: compare the frames with the queue id (and only it) aligned
    qa, qb = a.message_queue.queue_id, b.message_queue.queue_id
    assert fast_frame.replace(b'"e":"%d"' % qa, b'"e":"Q"') == generic_frame.replace(b'"e":"%d"' % qb, b'"e":"Q"')
    assert b'"code":310' in fast_frame and b'"opaque":0' in fast_frame
    assert (a.status, a.msg_id, a.region_id, a.trace_on) == (b.status, b.msg_id, b.region_id, b.trace_on)
    assert a.message_queue.topic == "T" and a.message_queue in queues


def test_the_fast_path_is_taken_for_a_plain_send_and_skipped_when_requests_are_finalized(fake_cluster, monkeypatch):
    from mqcore.remoting.blocking import BlockingPool
    fake_cluster.create_topic("T")
    calls = {"invoke": 0, "frame": 0}
    real_invoke, real_frame, real_template = BlockingPool.invoke, BlockingPool.call, BlockingPool.send_template

    def invoke(self, *args, **kwargs):
        calls["invoke"] += 1
        return real_invoke(self, *args, **kwargs)

    def invoke_frame(self, *args, **kwargs):
        answer = real_frame(self, *args, **kwargs)
        calls["frame"] += answer is not None
        return answer

    def send_template(self, *args, **kwargs):
        answer = real_template(self, *args, **kwargs)
        calls["frame"] += answer is not None
        return answer
    monkeypatch.setattr(BlockingPool, "invoke", invoke)
    monkeypatch.setattr(BlockingPool, "call", invoke_frame)
    monkeypatch.setattr(BlockingPool, "send_template", send_template)
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        assert all(p.send(Message("T", b"x")).ok for _ in range(5))
        assert calls == {"invoke": 0, "frame": 5}
        seen = []
        p.instance.remoting.blocking.finalize = lambda addr, cmd: seen.append(cmd.code)  # e.g. request signing
        assert p.send(Message("T", b"y")).ok
        assert calls == {"invoke": 1, "frame": 5} and seen == [310]


def test_the_plain_path_retries_as_the_general_one(fake_cluster, monkeypatch):
    """A send on the plain path (topic checked and routed by an earlier send) whose attempts
    fail is retried by the general loop with the same accounting: three attempts, then the
    last error with its note; a timeout counts the first attempt too."""
    from mqcore.client.producer_impl import ProducerImpl
    fake_cluster.create_topic("T")
    b = fake_cluster.brokers[0]
    plain = {"n": 0}
    real = ProducerImpl.send_plain_blocking

    def counting(self, msg, timeout_ms):
        plain["n"] += 1
        return real(self, msg, timeout_ms)
    monkeypatch.setattr(ProducerImpl, "send_plain_blocking", counting)
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        assert p.send(Message("T", b"x")).ok  # the first send checks the topic and finds its route
        plain["n"] = 0
        b.fail_next_sends = 3
        with pytest.raises(BrokerError) as info:
            p.send(Message("T", b"x"))
        assert info.value.retriable and "3 attempt(s)" in "".join(info.value.__notes__)
        assert plain["n"] == 1
        b.fail_next_sends = 2
        assert p.send(Message("T", b"y")).ok  # third attempt succeeds
    assert len(b.sent) == 1 + 3 + 3


def test_latency_fault_tolerance_sees_every_plain_send_and_failure(fake_cluster2, monkeypatch):
    """With send_latency_fault_enable the plain path records each send's latency (and a
    failed first attempt as a failure) exactly once, as the general path does, and the
    failing broker is then avoided."""
    from mqcore.client.latency import MQFaultStrategy
    fake_cluster2.create_topic("T", queues=4)  # 8 queues in all
    seen: list[tuple[str, bool]] = []
    real = MQFaultStrategy.update_fault_item

    def spy(self, broker_name, latency, isolation):
        seen.append((broker_name, isolation))
        return real(self, broker_name, latency, isolation)
    monkeypatch.setattr(MQFaultStrategy, "update_fault_item", spy)
    with Producer("pg", namesrv_addr=fake_cluster2.namesrv_addr, send_latency_fault_enable=True) as p:
        assert p.send(Message("T", b"first")).ok
        seen.clear()
        results = [p.send(Message("T", b"x")) for _ in range(6)]
        assert all(r.ok for r in results)
        assert [b for b, _ in seen] == [r.message_queue.broker_name for r in results]
        assert not any(iso for _, iso in seen)
        seen.clear()
        broker = fake_cluster2.brokers[0]
        broker.fail_next_sends = 100
        name = broker.name
        results = [p.send(Message("T", b"y")) for _ in range(8)]  # round-robin reaches each of the 8 queues
        assert all(r.ok and r.message_queue.broker_name != name for r in results)
        failed = [b for b, iso in seen if iso]
        assert failed == [name]  # banned after its first failure: not chosen again


def test_ctrl_c_during_a_plain_send_interrupts_it_and_the_producer_goes_on(fake_cluster):
    """A signal handler's exception (Ctrl-C: KeyboardInterrupt) ends a plain send blocked in
    the kernel's wait; the socket it used is closed (a late answer is never read as the next
    send's) and the next send works."""
    import signal

    class Interrupted(Exception):
        pass

    def handler(*_args):
        raise Interrupted
    fake_cluster.create_topic("T")
    b = fake_cluster.brokers[0]
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr, send_msg_timeout_ms=20_000) as p:
        assert p.send(Message("T", b"first")).ok  # the next one takes the plain path
        previous = signal.signal(signal.SIGALRM, handler)
        b.send_delay_s = 3.0
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            t0 = time.monotonic()
            with pytest.raises(Interrupted):
                p.send(Message("T", b"slow"))
            assert time.monotonic() - t0 < 2.5
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
            b.send_delay_s = 0.0
        assert p.send(Message("T", b"after")).ok


def test_a_plain_send_obeys_the_send_timeout(fake_cluster):
    """The plain path's first attempt waits at most send_msg_timeout_ms, and its timeout uses
    up the budget: SendTimeoutError, no retry goes out."""
    from mqcore.errors import SendTimeoutError
    fake_cluster.create_topic("T")
    b = fake_cluster.brokers[0]
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr, send_msg_timeout_ms=300) as p:
        assert p.send(Message("T", b"first")).ok  # the next one takes the plain path
        sent_before = len(b.sent)
        b.send_delay_s = 3.0
        t0 = time.monotonic()
        with pytest.raises(SendTimeoutError):
            p.send(Message("T", b"x"))
        assert time.monotonic() - t0 < 2.5
        b.send_delay_s = 0.0
    assert len(b.sent) - sent_before <= 1


def test_a_plain_send_replaces_a_hot_socket_the_peer_closed_while_idle(fake_cluster):
    """The pool's one-call take of the hot socket checks a socket idle for IDLE_CHECK_S or more
    as ``_take`` does: one the peer closed is closed here and replaced, the send goes through."""
    import socket
    fake_cluster.create_topic("T")
    with Producer("pg", namesrv_addr=fake_cluster.namesrv_addr) as p:
        assert p.send(Message("T", b"first")).ok
        pool = p.instance.remoting.blocking
        addr = fake_cluster.brokers[0].addr
        old = pool._hot[addr]
        old._sock.shutdown(socket.SHUT_RDWR)  # reads as a peer close (poll: readable, hung up)
        old.idle_since = 0.0  # idle long enough to be checked
        assert p.send(Message("T", b"second")).ok
        assert old.closed and pool._hot[addr] is not old
    assert sorted(m.body for m in fake_cluster.messages("T")) == [b"first", b"second"]
