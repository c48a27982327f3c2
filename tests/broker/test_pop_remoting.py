"""RocketMQ 5's POP over remoting against a live mqbroker, spoken raw: a pop hands out messages
with the headers the 5.x client builds its receipt handles from; acks (single and batch) and
a change of invisible time work; an expired message comes back through the retry queue;
invisibility and acks survive a restart (the pop journal); malformed requests get the Java
broker's codes and store nothing."""
from __future__ import annotations

import base64
import json
import time

import pytest

from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from mqcore.remoting import RequestCode as RC
from tests.support.processes import BrokerProcess
from tests.support.protocol import decode, send

R = ResponseCode
CONF = {"flushConsumerOffsetInterval": "500"}


def pop(rc, b, topic, group="PG5", queue_id=-1, n=32, invisible_ms=60_000, poll_ms=0, order=False, **more):
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "maxMsgNums": str(n),
              "invisibleTime": str(invisible_ms), "pollTime": str(poll_ms), "bornTime": str(int(time.time() * 1000)),
              "initMode": "0", "expType": "TAG", "exp": "*", "order": "true" if order else "false", **more}
    return rc.invoke(b.broker_addr, create_request(RC.POP_MESSAGE, fields), poll_ms + 5000)


def handles(resp, broker_name):
    """What MQClientAPIImpl.processPopResponse builds: (message, its POP_CK extraInfo)."""
    ext = resp.ext_fields
    starts = {f"{t}@{q}": int(o) for t, q, o in (e.split(" ") for e in ext["startOffsetInfo"].split(";"))}
    out = []
    for m in decode(bytes(resp.body)):
        kind = "1" if m.topic.startswith("%RETRY%") else "0"
        out.append((m, " ".join(str(x) for x in (starts[f"{kind}@{m.queue_id}"], ext["popTime"], ext["invisibleTime"],
                                                 ext["reviveQid"], kind, broker_name, m.queue_id, m.queue_offset))))
    return out


def ack(rc, b, topic, m, extra, group="PG5"):
    return rc.invoke(b.broker_addr, create_request(RC.ACK_MESSAGE, {
        "consumerGroup": group, "topic": topic, "queueId": str(m.queue_id), "extraInfo": extra,
        "offset": str(m.queue_offset)}), 5000)


def change(rc, b, topic, m, extra, invisible_ms, group="PG5"):
    return rc.invoke(b.broker_addr, create_request(RC.CHANGE_MESSAGE_INVISIBLETIME, {
        "consumerGroup": group, "topic": topic, "queueId": str(m.queue_id), "extraInfo": extra,
        "offset": str(m.queue_offset), "invisibleTime": str(invisible_ms)}), 5000)


def commitlog_max(rc, b) -> str:
    body = bytes(rc.invoke(b.broker_addr, create_request(RC.GET_BROKER_RUNTIME_INFO), 5000).body)
    return json.loads(body)["table"]["commitLogMaxOffset"]


def test_pop_ack_change_and_revive(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=CONF) as b, SyncRemotingClient() as rc:
        for i in range(3):
            assert send(rc, b, "Pop5", f"m{i}".encode(), queue_id=i % 2).code == R.SUCCESS
        resp = pop(rc, b, "Pop5", invisible_ms=2000)
        assert resp.code == R.SUCCESS, resp.remark
        assert int(resp.ext_fields["reviveQid"]) == 0 and int(resp.ext_fields["invisibleTime"]) == 2000
        got = {m.body: (m, x) for m, x in handles(resp, "broker-a")}
        assert sorted(got) == [b"m0", b"m1", b"m2"]
        # invisible: a second pop finds nothing (and says so with POLLING_TIMEOUT)
        again = pop(rc, b, "Pop5")
        assert again.code == R.POLLING_TIMEOUT and again.ext_fields["restNum"] == "0"
        assert ack(rc, b, "Pop5", *got[b"m0"]).code == R.SUCCESS
        changed = change(rc, b, "Pop5", *got[b"m1"], 60_000)
        assert changed.code == R.SUCCESS and int(changed.ext_fields["invisibleTime"]) == 60_000
        # m2 was neither acked nor extended: it comes back from the retry queue, attempt 2
        resp = pop(rc, b, "Pop5", poll_ms=8000)
        assert resp.code == R.SUCCESS, resp.remark
        (m, extra), = handles(resp, "broker-a")
        assert (m.body, m.topic, m.reconsume_times, extra.split(" ")[4]) == (b"m2", "%RETRY%PG5_Pop5", 1, "1")
        assert ack(rc, b, "%RETRY%PG5_Pop5", m, extra).code == R.SUCCESS
        assert pop(rc, b, "Pop5", poll_ms=500).code == R.POLLING_TIMEOUT


def batch_ack(rc, b, topic, group, pairs):
    """BATCH_ACK_MESSAGE of (message, extraInfo) pairs of one queue and one pop."""
    so = int(pairs[0][1].split(" ")[0])
    bits = sum(1 << (m.queue_offset - so) for m, _ in pairs)
    body = {"brokerName": "broker-a", "acks": [{
        "c": group, "t": topic, "r": "0", "so": so, "q": pairs[0][0].queue_id, "rq": 0,
        "pt": int(pairs[0][1].split(" ")[1]), "it": int(pairs[0][1].split(" ")[2]),
        "b": base64.b64encode(bits.to_bytes((bits.bit_length() + 7) // 8, "little")).decode()}]}
    return rc.invoke(b.broker_addr, create_request(RC.BATCH_ACK_MESSAGE, body=json.dumps(body).encode()), 5000)


def test_invisibility_and_acks_survive_a_restart(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=CONF) as b:
        with SyncRemotingClient() as rc:
            for i in range(4):
                assert send(rc, b, "PopR", f"r{i}".encode()).code == R.SUCCESS
            resp = pop(rc, b, "PopR", queue_id=0, n=4, invisible_ms=10_000)
            got = {m.body: (m, x) for m, x in handles(resp, "broker-a")}
            assert sorted(got) == [b"r0", b"r1", b"r2", b"r3"]
            # acked above the committed offset (r0 is still in flight): one alone, one in a batch
            assert ack(rc, b, "PopR", *got[b"r1"]).code == R.SUCCESS
            assert batch_ack(rc, b, "PopR", "PG5", [got[b"r3"]]).code == R.SUCCESS
            t_pop = time.monotonic()
        b.restart()  # within the 10 s, or r0 is revived before it is acked below
        with SyncRemotingClient() as rc:
            # still invisible after the restart; r1 and r3 stay acked
            if time.monotonic() - t_pop < 8.0:
                assert pop(rc, b, "PopR").code == R.POLLING_TIMEOUT
            assert ack(rc, b, "PopR", *got[b"r0"]).code == R.SUCCESS
            # r2 comes back once its invisible time is over, and only it
            resp = pop(rc, b, "PopR", poll_ms=15_000)
            assert [m.body for m, _ in handles(resp, "broker-a")] == [b"r2"]
            assert pop(rc, b, "PopR", poll_ms=1000).code == R.POLLING_TIMEOUT


def test_batch_ack_and_notification(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=CONF) as b, SyncRemotingClient() as rc:
        assert rc.invoke(b.broker_addr, create_request(RC.NOTIFICATION, {
            "consumerGroup": "PGB", "topic": "TBW102", "queueId": "-1", "pollTime": "0",
            "bornTime": "0"}), 5000).ext_fields["hasMsg"] == "false"
        for i in range(4):
            assert send(rc, b, "PopB", f"b{i}".encode()).code == R.SUCCESS
        note = rc.invoke(b.broker_addr, create_request(RC.NOTIFICATION, {
            "consumerGroup": "PGB", "topic": "PopB", "queueId": "-1", "pollTime": "1000", "bornTime": "0"}), 5000)
        assert note.code == R.SUCCESS and note.ext_fields["hasMsg"] == "true"
        resp = pop(rc, b, "PopB", group="PGB", queue_id=0, invisible_ms=2000)
        ms = handles(resp, "broker-a")
        assert len(ms) == 4
        r = batch_ack(rc, b, "PopB", "PGB", ms)
        assert r.code == R.SUCCESS
        # all four acked: nothing comes back after their invisible time
        assert pop(rc, b, "PopB", group="PGB", poll_ms=3500).code == R.POLLING_TIMEOUT
        assert rc.invoke(b.broker_addr, create_request(RC.BATCH_ACK_MESSAGE, body=b'{"acks": []}'),
                         5000).code == R.NO_MESSAGE


POP_OK = {"consumerGroup": "PGX", "topic": "PopX", "queueId": "0", "maxMsgNums": "4", "invisibleTime": "30000",
          "pollTime": "0", "bornTime": "0", "initMode": "0"}
ACK_OK = {"consumerGroup": "PGX", "topic": "PopX", "queueId": "0", "extraInfo": "0 1 30000 0 0 broker-a 0 0",
          "offset": "0"}


#: (request code, header, the code Apache 5.3.3's broker answers: tests/reference/test_pop_bad_input_reference.py)
MALFORMED = [
    (RC.POP_MESSAGE, {**POP_OK, "maxMsgNums": "33"}, R.INVALID_PARAMETER),
    (RC.POP_MESSAGE, {**POP_OK, "queueId": "9"}, R.INVALID_PARAMETER),
    (RC.POP_MESSAGE, {**POP_OK, "topic": "NoSuchTopic"}, R.TOPIC_NOT_EXIST),
    (RC.POP_MESSAGE, {**POP_OK, "expType": "SQL92", "exp": "a >"}, R.SUBSCRIPTION_PARSE_FAILED),
    (RC.POP_MESSAGE, {**POP_OK, "pollTime": "1000", "bornTime": "1"}, R.POLLING_TIMEOUT),
    (RC.ACK_MESSAGE, {**ACK_OK, "extraInfo": "garbage"}, R.SYSTEM_ERROR),
    (RC.ACK_MESSAGE, {**ACK_OK, "queueId": "7"}, R.MESSAGE_ILLEGAL),
    (RC.ACK_MESSAGE, {**ACK_OK, "queueId": "-1"}, R.MESSAGE_ILLEGAL),
    (RC.ACK_MESSAGE, {**ACK_OK, "offset": "99"}, R.NO_MESSAGE),
    (RC.ACK_MESSAGE, {**ACK_OK, "topic": "NoSuchTopic"}, R.TOPIC_NOT_EXIST),
    (RC.ACK_MESSAGE, {**ACK_OK, "offset": "x"}, R.SYSTEM_ERROR),
    (RC.CHANGE_MESSAGE_INVISIBLETIME, {**ACK_OK, "invisibleTime": "1000", "offset": "1"}, R.NO_MESSAGE),
    (RC.CHANGE_MESSAGE_INVISIBLETIME, {**ACK_OK, "invisibleTime": "1000", "extraInfo": "1 2 3"}, R.SYSTEM_ERROR),
    (RC.BATCH_ACK_MESSAGE, None, R.NO_MESSAGE),
    # RocketMQ acks without looking the group up: a group that does not exist is acked for nothing
    (RC.ACK_MESSAGE, {**ACK_OK, "consumerGroup": "NoSuchGroupX"}, R.SUCCESS),
]
#: where mqbroker is stricter than Apache 5.3.3, which reads a POP header leniently (a missing or
#: non-numeric field as 0, a missing group as a NullPointerException): a clear refusal instead
STRICTER = [
    (RC.POP_MESSAGE, {k: v for k, v in POP_OK.items() if k != "invisibleTime"}, R.SYSTEM_ERROR),
    (RC.POP_MESSAGE, {**POP_OK, "maxMsgNums": "x"}, R.SYSTEM_ERROR),
    (RC.POP_MESSAGE, {k: v for k, v in POP_OK.items() if k != "consumerGroup"}, R.SYSTEM_ERROR),
    (RC.POP_MESSAGE, {**POP_OK, "invisibleTime": "-5"}, R.INVALID_PARAMETER),
]


@pytest.mark.parametrize("code,fields,want", MALFORMED + STRICTER)
def test_malformed_pop_requests_get_javas_codes_and_store_nothing(module_broker, code, fields, want):
    b, rc = module_broker
    before = commitlog_max(rc, b)
    if code == RC.BATCH_ACK_MESSAGE:
        r = rc.invoke(b.broker_addr, create_request(code, body=b""), 5000)
    else:
        r = rc.invoke(b.broker_addr, create_request(code, fields), 5000)
    assert r.code == want, (r.code, r.remark)
    assert commitlog_max(rc, b) == before  # no CK, no ACK, no retry copy
    assert b.proc.poll() is None


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("popx") / "store", conf=CONF) as b, SyncRemotingClient() as rc:
        r = rc.invoke(b.broker_addr, create_request(RC.UPDATE_AND_CREATE_TOPIC, {
            "topic": "PopX", "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
            "topicFilterType": "SINGLE_TAG"}), 5000)
        assert r.code == R.SUCCESS
        assert send(rc, b, "PopX", b"x").code == R.SUCCESS
        yield b, rc
