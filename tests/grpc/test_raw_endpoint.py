"""RPCs no official client of the tests exercises on its own: forwarding to the DLQ, the
offset RPCs, and a receive parked by long polling that wakes when a message arrives."""
from __future__ import annotations

import threading
import time

from tests.grpc.helpers import pull_all
from tests.grpc.rawclient import RawClient, d, s


def test_forward_to_dlq_and_offsets(module_grpc_broker):
    b = module_grpc_broker
    with RawClient(b.grpc_addr) as c:
        assert c.send("Fwd5", b"bad", message_id="01FWD00000000000000000000000000001", tag="t").status.code == d.OK
        assert c.send("Fwd5", b"good", message_id="01FWD00000000000000000000000000002").status.code == d.OK
        status, got = c.receive("Fwd5", "GF", invisible_ms=60_000)
        assert status.code == d.OK and len(got) == 2
        bad = next(m for m in got if m.body == b"bad")
        req = s.ForwardMessageToDeadLetterQueueRequest(
            group=d.Resource(name="GF"), topic=d.Resource(name="Fwd5"),
            receipt_handle=bad.system_properties.receipt_handle, message_id=bad.system_properties.message_id,
            delivery_attempt=1, max_delivery_attempts=16)
        assert c.call("ForwardMessageToDeadLetterQueue", req).status.code == d.OK
        good = next(m for m in got if m.body == b"good")
        assert c.ack("Fwd5", "GF", good).status.code == d.OK
        # forwarded = done: nothing comes back, and the copy is in the group's DLQ
        assert c.receive("Fwd5", "GF", polling_ms=1500)[0].code == d.MESSAGE_NOT_FOUND
        dlq = pull_all(b.namesrv_addr, "%DLQ%GF", 1)
        assert [(m.body, m.tags, m.get_property("UNIQ_KEY")) for m in dlq] == \
            [(b"bad", "t", "01FWD00000000000000000000000000001")]

        # offsets: what the acks committed, the queue's bounds, and an explicit update
        mq = d.MessageQueue(topic=d.Resource(name="Fwd5"), id=good.system_properties.queue_id)
        committed = c.call("GetOffset", s.GetOffsetRequest(group=d.Resource(name="GF"), message_queue=mq))
        end = c.call("QueryOffset", s.QueryOffsetRequest(message_queue=mq, query_offset_policy=d.END))
        begin = c.call("QueryOffset", s.QueryOffsetRequest(message_queue=mq, query_offset_policy=d.BEGINNING))
        assert committed.status.code == end.status.code == begin.status.code == d.OK
        assert committed.offset == end.offset >= 1 and begin.offset == 0
        assert c.call("UpdateOffset", s.UpdateOffsetRequest(group=d.Resource(name="GF"), message_queue=mq,
                                                            offset=0)).status.code == d.OK
        status, again = c.receive("Fwd5", "GF", polling_ms=1500)
        assert status.code == d.OK and good.system_properties.message_id in \
            {m.system_properties.message_id for m in again}  # rewound: handed out again
        absent = c.call("GetOffset", s.GetOffsetRequest(group=d.Resource(name="GNone"), message_queue=mq))
        assert absent.status.code == d.OFFSET_NOT_FOUND


def test_long_polling_wakes_on_arrival(module_grpc_broker):
    with RawClient(module_grpc_broker.grpc_addr) as c:
        assert c.send("Poll5", b"first").status.code == d.OK  # the topic exists
        assert c.receive("Poll5", "GP")[0].code == d.OK
        result = {}

        def receive():
            t0 = time.monotonic()
            result["status"], result["got"] = c.receive("Poll5", "GP", polling_ms=20_000)
            result["waited"] = time.monotonic() - t0

        t = threading.Thread(target=receive)
        t.start()
        time.sleep(1.0)  # let the receive park (it would wait 20 s for nothing)
        assert "status" not in result
        assert c.send("Poll5", b"second").status.code == d.OK
        t.join(30)
        assert result["status"].code == d.OK and [m.body for m in result["got"]] == [b"second"]
        # still parked after 1 s (checked above), then woken by the arrival well before its 20 s;
        # no lower bound on "waited": the thread's own clock may start late on a loaded box
        assert result["waited"] < 10, result["waited"]
