"""Bad gRPC input gets the Status codes RocketMQ's proxy answers with (or a gRPC error for
bytes that are no request at all) and the broker keeps serving."""
from __future__ import annotations

import grpc
import pytest

from tests.grpc.rawclient import RawClient, d, s


@pytest.fixture
def raw(module_grpc_broker):
    with RawClient(module_grpc_broker.grpc_addr) as c:
        yield c


def test_bad_sends_get_proxy_codes(raw, grpc_broker):
    assert raw.send("Good5").status.code == d.OK
    cases = [
        (raw.send("bad topic!"), d.ILLEGAL_TOPIC),
        (raw.send("Good5", body=b""), d.MESSAGE_BODY_EMPTY),
        (raw.send("Good5", message_id=""), d.ILLEGAL_MESSAGE_ID),
        (raw.send("Good5", tag="a|b"), d.ILLEGAL_MESSAGE_TAG),
        (raw.send("Good5", message_type=d.TRANSACTION, message_group="g"), d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (raw.send("Good5", message_group="g" * 65), d.ILLEGAL_MESSAGE_GROUP),
        (raw.call("SendMessage", s.SendMessageRequest()), d.BAD_REQUEST),
    ]
    reserved = d.Message(topic=d.Resource(name="Good5"), body=b"x", user_properties={"UNIQ_KEY": "forged"})
    reserved.system_properties.message_id = "01FORGED"
    cases.append((raw.call("SendMessage", s.SendMessageRequest(messages=[reserved])), d.ILLEGAL_MESSAGE_PROPERTY_KEY))
    assert [r.status.code for r, _ in cases] == [code for _, code in cases], [r.status for r, _ in cases]
    assert all(r.status.message for r, _ in cases)
    # nothing of that was stored: one good message only
    status, got = raw.receive("Good5", "GBad")
    assert status.code == d.OK and len(got) == 1


def test_sends_to_the_brokers_own_topics_are_refused_as_on_remoting(raw, module_grpc_broker):
    """The remoting send path refuses these (NO_PERMISSION, as Apache 4.9); gRPC must not be a way round."""
    from mqcore.message import NOT_ALLOWED_SEND_TOPICS
    from mqcore.remoting import RequestCode, SyncRemotingClient, create_request
    for topic in sorted(NOT_ALLOWED_SEND_TOPICS):
        r = raw.send(topic)
        assert (r.status.code, r.status.message) == (d.FORBIDDEN, f"Sending message to topic[{topic}] is forbidden.")
    with SyncRemotingClient() as rc:  # nothing reached the delay topic (a copy loop starts from there)
        ends = [rc.invoke(module_grpc_broker.broker_addr, create_request(
            RequestCode.GET_MAX_OFFSET, {"topic": "SCHEDULE_TOPIC_XXXX", "queueId": str(q)}), 5000)
            for q in range(18)]
    assert all(int(e.ext_fields.get("offset", "0")) == 0 for e in ends), [e.ext_fields for e in ends]
    assert raw.send("Allowed5").status.code == d.OK


def test_unknown_topic_wrong_namespace_and_bad_receives(raw):
    assert raw.send("Known5").status.code == d.OK
    assert raw.receive("Unknown5", "G")[0].code == d.TOPIC_NOT_FOUND
    # the proxy wraps names with the namespace: another namespace names another (absent) topic
    assert raw.receive("Known5", "G", namespace="other-ns")[0].code == d.TOPIC_NOT_FOUND
    assert raw.receive("Known5", "bad group!")[0].code == d.ILLEGAL_CONSUMER_GROUP
    assert raw.receive("Known5", "G", invisible_ms=10)[0].code == d.ILLEGAL_INVISIBLE_TIME
    assert raw.receive("Known5", "G", batch=0)[0].code == d.BAD_REQUEST
    assert raw.receive("Known5", "G", polling_ms=3_600_000)[0].code == d.ILLEGAL_POLLING_TIME
    qa = raw.call("QueryAssignment", s.QueryAssignmentRequest(topic=d.Resource(name="Unknown5"),
                                                              group=d.Resource(name="G")))
    assert qa.status.code == d.TOPIC_NOT_FOUND
    anonymous = RawClient.__new__(RawClient)
    anonymous.channel, anonymous.stub, anonymous.meta = raw.channel, raw.stub, []
    assert anonymous.receive("Known5", "G")[0].code == d.CLIENT_ID_REQUIRED
    assert anonymous.call("Heartbeat", s.HeartbeatRequest(client_type=d.PRODUCER)).status.code == d.CLIENT_ID_REQUIRED


def test_bad_handles_transactions_and_unimplemented(raw):
    raw.send("Handles5")
    status, got = raw.receive("Handles5", "GH")
    assert status.code == d.OK and got
    forged = d.Message()
    forged.CopyFrom(got[0])
    for bad in ("", "garbage", "1 N 0 0 0 0 0 1", "1 X 0 0 0 0 0 1 b", "1 N 0 -1 0 0 0 1 b"):
        forged.system_properties.receipt_handle = bad
        ack = raw.ack("Handles5", "GH", forged)
        assert ack.status.code == d.INVALID_RECEIPT_HANDLE and ack.entries[0].status.code == d.INVALID_RECEIPT_HANDLE
        assert raw.change_invisible("Handles5", "GH", forged, 5000).status.code == d.INVALID_RECEIPT_HANDLE
    assert raw.ack("Handles5", "GH", got[0]).status.code == d.OK
    for tx_id in ("", "garbage", "0" * 32, "F" * 32):  # no id, not an id, ids naming no half message
        end = raw.call("EndTransaction", s.EndTransactionRequest(topic=d.Resource(name="Handles5"), message_id="x",
                                                                 transaction_id=tx_id, resolution=d.COMMIT))
        assert end.status.code == d.INVALID_TRANSACTION_ID and "transaction" in end.status.message, end.status
    with pytest.raises(grpc.RpcError) as e:
        list(raw.call("PullMessage", s.PullMessageRequest()))
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_garbage_bytes_are_refused_and_the_broker_serves_on(raw, module_grpc_broker):
    garbage = raw.channel.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage",
                                      request_serializer=lambda b: b, response_deserializer=lambda b: b)
    for payload in (b"\xff" * 64, b"\x0a\xff\xff\xff\xff\x0f", bytes(range(256)) * 40):
        with pytest.raises(grpc.RpcError) as e:
            garbage(payload, metadata=raw.meta, timeout=10)
        assert e.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT,
                                  grpc.StatusCode.UNKNOWN), e.value
    assert module_grpc_broker.proc.poll() is None
    assert raw.send("After5").status.code == d.OK
