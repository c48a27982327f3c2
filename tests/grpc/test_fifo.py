"""FIFO consumption for 5.x clients: in a FIFO group (``consumeMessageOrderly``, set with
``mqadmin updateSubGroup -o true``) a later message of a queue is held back while an earlier
one is in flight, handed out again in place when its invisible duration runs out (delivery
attempt + 1), and moved to the DLQ once the group's attempts are used up."""
from __future__ import annotations

import time

from mqcore.admin import MQAdmin
from tests.grpc.conftest import run_py5
from tests.grpc.helpers import pull_all
from tests.grpc.rawclient import RawClient, d, s

INVISIBLE_MS = 1500


def _fifo_group(b, group: str, retry_max_times: int = 16) -> None:
    with MQAdmin(b.namesrv_addr) as admin:
        admin.create_group(b.broker_addr, group, retry_max_times=retry_max_times, consume_message_orderly=True)


def _bodies(got):
    return [(m.body.decode(), m.system_properties.delivery_attempt) for m in got]


def _settings_fifo(c: RawClient, group: str) -> bool:
    """What the endpoint answers a consumer's opening settings (Telemetry) for ``group``."""
    settings = d.Settings(client_type=d.SIMPLE_CONSUMER, subscription=d.Subscription(group=d.Resource(name=group)))
    replies = c.stub.Telemetry(iter([s.TelemetryCommand(settings=settings)]), metadata=c.meta, timeout=10)
    first = next(iter(replies))
    assert first.status.code == d.OK
    return first.settings.subscription.fifo


def test_fifo_group_holds_back_later_messages(module_grpc_broker):
    b = module_grpc_broker
    _fifo_group(b, "GFifo", retry_max_times=1)  # 2 deliveries, then the DLQ
    with RawClient(b.grpc_addr) as c:
        assert _settings_fifo(c, "GFifo") is True and _settings_fifo(c, "GPlain") is False
        for i in range(5):  # one message group: one queue
            assert c.send("Fifo5", f"A{i}".encode(), message_group="gA").status.code == d.OK

        # a concurrent group takes the next message while the first is in flight: the FIFO one waits
        assert _bodies(c.receive("Fifo5", "GPlain", batch=1)[1]) == [("A0", 1)]
        assert _bodies(c.receive("Fifo5", "GPlain", batch=1)[1]) == [("A1", 1)]
        status, got = c.receive("Fifo5", "GFifo", batch=1, invisible_ms=INVISIBLE_MS)
        assert _bodies(got) == [("A0", 1)]
        assert c.receive("Fifo5", "GFifo", batch=1, polling_ms=300)[0].code == d.MESSAGE_NOT_FOUND
        assert c.ack("Fifo5", "GFifo", got[0]).status.code == d.OK

        # not acked: after its invisible duration the same message comes back, not the next one
        status, got = c.receive("Fifo5", "GFifo", batch=1, invisible_ms=INVISIBLE_MS)
        assert _bodies(got) == [("A1", 1)]
        t0 = time.monotonic()
        status, again = c.receive("Fifo5", "GFifo", batch=1, invisible_ms=INVISIBLE_MS, polling_ms=8000)
        assert _bodies(again) == [("A1", 2)]
        assert time.monotonic() - t0 >= INVISIBLE_MS / 1000 - 0.3  # held back until it expired
        assert c.ack("Fifo5", "GFifo", again[0]).status.code == d.OK

        # a batch: a later message acked while an earlier one expires is not handed out again
        status, got = c.receive("Fifo5", "GFifo", batch=2, invisible_ms=INVISIBLE_MS)
        assert _bodies(got) == [("A2", 1), ("A3", 1)]
        assert c.ack("Fifo5", "GFifo", got[1]).status.code == d.OK
        status, again = c.receive("Fifo5", "GFifo", batch=2, invisible_ms=INVISIBLE_MS, polling_ms=8000)
        assert _bodies(again) == [("A2", 2), ("A4", 1)]  # A3 was done: the batch goes on after it
        assert c.ack("Fifo5", "GFifo", again[1]).status.code == d.OK
        assert c.ack("Fifo5", "GFifo", again[0]).status.code == d.OK

        # retryMaxTimes 1: two deliveries, then the DLQ (and the queue moves on)
        assert c.send("Fifo5", b"A5", message_group="gA").status.code == d.OK
        assert c.send("Fifo5", b"A6", message_group="gA").status.code == d.OK
        status, got = c.receive("Fifo5", "GFifo", batch=1, invisible_ms=INVISIBLE_MS)
        assert _bodies(got) == [("A5", 1)]
        status, got = c.receive("Fifo5", "GFifo", batch=1, invisible_ms=INVISIBLE_MS, polling_ms=8000)
        assert _bodies(got) == [("A5", 2)]
        status, got = c.receive("Fifo5", "GFifo", batch=1, invisible_ms=INVISIBLE_MS, polling_ms=8000)
        assert _bodies(got) == [("A6", 1)]
        dlq = pull_all(b.namesrv_addr, "%DLQ%GFifo", 1)
        assert [(m.body, m.reconsume_times) for m in dlq] == [(b"A5", 2)]


def test_official_python_client_in_a_fifo_group(module_grpc_broker, py5_python):
    b = module_grpc_broker
    _fifo_group(b, "GFifoPy")
    results = run_py5(py5_python, b.grpc_addr, [
        *[{"op": "send", "topic": "FifoPy5", "body": f"f{i}", "group": "order-7"} for i in range(3)],
        {"op": "receive", "topic": "FifoPy5", "group": "GFifoPy", "want": 1, "invisible_s": 2},
        # not acked: what comes next is f0 again once it is visible, never f1 before it
        {"op": "receive", "topic": "FifoPy5", "group": "GFifoPy", "want": 1, "invisible_s": 2, "timeout_s": 10,
         "await_s": 1, "ack": True},
        {"op": "receive", "topic": "FifoPy5", "group": "GFifoPy", "want": 2, "invisible_s": 10, "ack": True},
    ])
    first, second, rest = (r["messages"] for r in results[3:])
    assert [(m["body"], m["attempt"]) for m in first] == [("f0", 1)]
    assert [(m["body"], m["attempt"]) for m in second] == [("f0", 2)]
    assert [m["body"] for m in rest] == ["f1", "f2"]
    assert {m["group"] for m in first + second + rest} == {"order-7"}


def test_a_group_that_stops_being_fifo_gets_expired_messages_back(module_grpc_broker):
    b = module_grpc_broker
    _fifo_group(b, "GWasFifo")
    with RawClient(b.grpc_addr) as c:
        assert c.send("WasFifo5", b"B0", message_group="gB").status.code == d.OK
        assert c.send("WasFifo5", b"B1", message_group="gB").status.code == d.OK
        assert _bodies(c.receive("WasFifo5", "GWasFifo", batch=1, invisible_ms=INVISIBLE_MS)[1]) == [("B0", 1)]
        with MQAdmin(b.namesrv_addr) as admin:
            admin.create_group(b.broker_addr, "GWasFifo")  # consumeMessageOrderly back to false
        # a concurrent group now: B1 at once, and B0 back through the retry queue once it expires
        assert _bodies(c.receive("WasFifo5", "GWasFifo", batch=1, invisible_ms=60_000)[1]) == [("B1", 1)]
        status, again = c.receive("WasFifo5", "GWasFifo", batch=1, invisible_ms=60_000, polling_ms=8000)
        assert _bodies(again) == [("B0", 2)]
