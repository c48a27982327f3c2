"""A push consumer's receive (``auto_renew``, no invisible duration): its messages stay
invisible while the client is alive, renewed by the endpoint as RocketMQ's proxy renews
them, and come back (delivery attempt + 1) once the client has terminated."""
from __future__ import annotations

from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.rawclient import RawClient, d, s
from tests.support.processes import BrokerProcess

GROUP = "GRenew"
TOPIC = "Renew5"


def _receive_auto_renew(c: RawClient, polling_ms: int):
    req = s.ReceiveMessageRequest(group=d.Resource(name=GROUP), batch_size=16, auto_renew=True,
                                  filter_expression=d.FilterExpression(type=d.TAG, expression="*"))
    req.message_queue.topic.name = TOPIC
    req.long_polling_timeout.FromMilliseconds(polling_ms)
    responses = list(c.call("ReceiveMessage", req, timeout=polling_ms / 1000 + 10))
    status = next(r.status for r in responses if r.HasField("status"))
    return status, [r.message for r in responses if r.HasField("message")]


def test_push_consumer_messages_are_renewed_while_it_lives(tmp_path):
    # a push consumer's receive is invisible for 1 s here (60 s by default), renewed until it ends
    with BrokerProcess(tmp_path / "store", conf={**TEST_CONF, "grpcDefaultInvisibleTimeMillis": 1000}) as b:
        addr = grpc_addr(b)
        with RawClient(addr, client_id="push-1") as busy, RawClient(addr, client_id="push-2") as other:
            for c in (busy, other):
                hb = s.HeartbeatRequest(group=d.Resource(name=GROUP), client_type=d.PUSH_CONSUMER)
                assert c.call("Heartbeat", hb).status.code == d.OK
            assert busy.send(TOPIC, b"slow work").status.code == d.OK
            status, got = _receive_auto_renew(busy, 1000)
            assert status.code == d.OK and [m.body for m in got] == [b"slow work"]
            # four invisible durations pass: renewed each time, it is not handed to the other client
            status, none = _receive_auto_renew(other, 4000)
            assert status.code == d.MESSAGE_NOT_FOUND, [m.body for m in none]

            # the busy client goes away without acking: the message comes back
            assert busy.call("NotifyClientTermination", s.NotifyClientTerminationRequest(
                group=d.Resource(name=GROUP))).status.code == d.OK
            status, again = _receive_auto_renew(other, 8000)
            assert [(m.body, m.system_properties.delivery_attempt) for m in again] == [(b"slow work", 2)]
            assert other.ack(TOPIC, GROUP, again[0]).status.code == d.OK
