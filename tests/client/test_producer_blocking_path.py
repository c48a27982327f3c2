"""``Producer.send`` runs on the caller's thread (mqcore.remoting.blocking), not on the
client's event loop; against the in-process fake cluster. Retries, timeouts and fault
tolerance of the sync path are covered by test_producer.py and the integration tests,
which now all go through this path."""
from __future__ import annotations

import threading
import time

import pytest

from mqcore.client import Message, Producer
from mqcore.errors import RemotingTimeoutError

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
