"""Raw remoting-protocol round trips against a real mqbroker process (no client library)."""
from __future__ import annotations

import json
import socket
import struct
import time

import pytest

from mqcore._compat import kernels
from mqcore.jsonutil import loads_lenient
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from mqcore.remoting.command import encode_frame
from mqcore.remoting.headers import SendMessageRequestHeader
from tests.support.processes import BrokerProcess
from tests.support.protocol import decode, pull, send
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("proto") / "store") as b:
        yield b


@pytest.fixture(scope="module")
def rc():
    with SyncRemotingClient() as c:
        yield c


def test_send_v1_v2_and_response_fields(rc, broker):
    r = send(rc, broker, "ProtoA", b"v2 body", TAGS="TagA", KEYS="k1", UNIQ_KEY="U-1", WAIT="true")
    assert r.code == ResponseCode.SUCCESS, r.remark
    ext = r.ext_fields
    assert ext["queueId"] == "0" and ext["queueOffset"] == "0" and len(ext["msgId"]) == 32
    assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
    r = send(rc, broker, "ProtoA", b"v1 body", code=RC.SEND_MESSAGE, TAGS="TagB")
    assert r.code == ResponseCode.SUCCESS and r.ext_fields["queueOffset"] == "1"
    got = pull(rc, broker, "ProtoA", 0, sub="*")
    assert got.code == ResponseCode.SUCCESS and got.remark == "FOUND"
    assert {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"} <= set(got.ext_fields)
    msgs = decode(got.body)
    assert [m.body for m in msgs] == [b"v2 body", b"v1 body"] and got.ext_fields["nextBeginOffset"] == "2"
    assert msgs[0].properties == {"TAGS": "TagA", "KEYS": "k1", "UNIQ_KEY": "U-1", "CLUSTER": "DefaultCluster"}
    assert msgs[0].offset_msg_id == ext["msgId"]
    # BORNHOST is the producer's socket address, the same for every send on this connection
    assert msgs[0].born_host.startswith("127.0.0.1:") and msgs[0].born_host == msgs[1].born_host


def test_batch_send(rc, broker):
    items = kernels.encode_batch_items([(0, b"b%d" % i, f"UNIQ_KEY\x01B{i}".encode()) for i in range(5)])
    h = SendMessageRequestHeader(producer_group="PG", topic="ProtoBatch", default_topic="TBW102",
                                 default_topic_queue_nums=4, queue_id=1, sys_flag=0, born_timestamp=0, flag=0,
                                 properties="WAIT\x01true", batch=True)
    r = rc.invoke(broker.broker_addr, create_request(RC.SEND_BATCH_MESSAGE, h.to_ext_v2(), items), 5000)
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert len(r.ext_fields["msgId"].split(",")) == 5 and r.ext_fields["queueOffset"] == "0"
    msgs = decode(pull(rc, broker, "ProtoBatch", 0, queue_id=1, sub="*").body)
    assert [m.queue_offset for m in msgs] == [0, 1, 2, 3, 4]
    assert [m.properties["UNIQ_KEY"] for m in msgs] == [f"B{i}" for i in range(5)]


def test_pull_statuses_and_tag_filter(rc, broker):
    for i, tag in enumerate(["a", "b", "a", "c"]):
        assert send(rc, broker, "ProtoPull", b"%d" % i, TAGS=tag).code == ResponseCode.SUCCESS
    r = pull(rc, broker, "ProtoPull", 0, sub="a || c")
    assert [m.body for m in decode(r.body)] == [b"0", b"2", b"3"]
    assert pull(rc, broker, "ProtoPull", 4, sub="*").code == ResponseCode.PULL_NOT_FOUND
    moved = pull(rc, broker, "ProtoPull", 99, sub="*")
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED and moved.ext_fields["nextBeginOffset"] == "4"
    none = pull(rc, broker, "ProtoPull", 3, sub="b")
    assert none.code == ResponseCode.PULL_RETRY_IMMEDIATELY and none.ext_fields["nextBeginOffset"] == "4"
    assert pull(rc, broker, "NoSuchTopic", 0, sub="*").code == ResponseCode.TOPIC_NOT_EXIST


def test_long_polling_wakes_on_arrival(rc, broker):
    send(rc, broker, "ProtoLong", b"first")
    import threading
    result = {}

    def parked():
        t0 = time.monotonic()
        result["resp"] = pull(rc, broker, "ProtoLong", 1, sys_flag=0x2, suspend_ms=15000, sub="*", timeout=30000)
        result["waited"] = time.monotonic() - t0

    def holding() -> int:
        info = rc.invoke(broker.broker_addr, create_request(RC.GET_BROKER_RUNTIME_INFO), 5000)
        return int(loads_lenient(info.body)["table"]["pullHoldingCount"])

    t = threading.Thread(target=parked)
    t.start()
    assert wait_for(lambda: holding() >= 1)  # parked in the hold service, not yet answered
    send(rc, broker, "ProtoLong", b"second")
    t.join(30)
    assert result["resp"].code == ResponseCode.SUCCESS
    assert [m.body for m in decode(result["resp"].body)] == [b"second"]
    assert result["waited"] < 5, "a parked pull answers as soon as a message lands"
    t0 = time.monotonic()
    r = pull(rc, broker, "ProtoLong", 2, sys_flag=0x2, suspend_ms=800, sub="*", timeout=30000)
    assert r.code == ResponseCode.PULL_NOT_FOUND and 0.7 < time.monotonic() - t0 < 5


def test_query_view_offsets_and_time(rc, broker):
    t_before = int(time.time() * 1000)
    r = send(rc, broker, "ProtoQ", b"findme", KEYS="order-77 other", UNIQ_KEY="UQ77")
    offset_msg_id = r.ext_fields["msgId"]
    q = rc.invoke(broker.broker_addr, create_request(RC.QUERY_MESSAGE, {
        "topic": "ProtoQ", "key": "order-77", "maxNum": "32", "beginTimestamp": "0",
        "endTimestamp": str(1 << 62)}), 5000)
    assert q.code == ResponseCode.SUCCESS and [m.body for m in decode(q.body)] == [b"findme"]
    miss = rc.invoke(broker.broker_addr, create_request(RC.QUERY_MESSAGE, {
        "topic": "ProtoQ", "key": "nope", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": str(1 << 62)}), 5000)
    assert miss.code == ResponseCode.QUERY_NOT_FOUND
    phy = int(offset_msg_id[-16:], 16)
    v = rc.invoke(broker.broker_addr, create_request(RC.VIEW_MESSAGE_BY_ID, {"offset": str(phy)}), 5000)
    assert v.code == ResponseCode.SUCCESS and decode(v.body)[0].body == b"findme"
    bad = rc.invoke(broker.broker_addr, create_request(RC.VIEW_MESSAGE_BY_ID, {"offset": str(1 << 40)}), 5000)
    assert bad.code == ResponseCode.SYSTEM_ERROR
    tq = {"topic": "ProtoQ", "queueId": "0"}
    assert rc.invoke(broker.broker_addr, create_request(RC.GET_MAX_OFFSET, tq), 5000).ext_fields["offset"] == "1"
    assert rc.invoke(broker.broker_addr, create_request(RC.GET_MIN_OFFSET, tq), 5000).ext_fields["offset"] == "0"
    e = rc.invoke(broker.broker_addr, create_request(RC.GET_EARLIEST_MSG_STORETIME, tq), 5000)
    assert t_before - 1000 <= int(e.ext_fields["timestamp"]) <= int(time.time() * 1000)
    s = rc.invoke(broker.broker_addr, create_request(RC.SEARCH_OFFSET_BY_TIMESTAMP, dict(tq, timestamp=str(t_before))),
                  5000)
    assert s.ext_fields["offset"] == "0"


def test_heartbeat_consumer_list_offsets_locks(rc, broker):
    hb = {"clientID": "127.0.0.1@test#1", "consumerDataSet": [{
        "consumeFromWhere": 0, "consumeType": 1, "groupName": "CG_HB", "messageModel": 1,  # ordinals (C++)
        "subscriptionDataSet": [{"classFilterMode": False, "codeSet": [0], "expressionType": "TAG",
                                 "subString": "TagA", "subVersion": 1, "tagsSet": ["TagA"], "topic": "ProtoHB"}],
        "unitMode": False}], "producerDataSet": [{"groupName": "PG_HB"}]}
    r = rc.invoke(broker.broker_addr, create_request(RC.HEART_BEAT, None, json.dumps(hb).encode()), 5000)
    assert r.code == ResponseCode.SUCCESS and r.version >= 409
    lst = rc.invoke(broker.broker_addr, create_request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "CG_HB"}), 5000)
    assert loads_lenient(lst.body) == {"consumerIdList": ["127.0.0.1@test#1"]}
    qo = {"consumerGroup": "CG_HB", "topic": "ProtoHB", "queueId": "0"}
    assert rc.invoke(broker.broker_addr, create_request(RC.QUERY_CONSUMER_OFFSET, qo), 5000).ext_fields["offset"] == "0"
    for off in ("7", "-1"):  # negative commits are ignored
        rc.invoke(broker.broker_addr, create_request(RC.UPDATE_CONSUMER_OFFSET, dict(qo, commitOffset=off)), 5000)
    assert rc.invoke(broker.broker_addr, create_request(RC.QUERY_CONSUMER_OFFSET, qo), 5000).ext_fields["offset"] == "7"
    mq = {"brokerName": "broker-a", "queueId": 0, "topic": "ProtoHB"}
    lock = {"clientId": "c1", "consumerGroup": "CG_HB", "mqSet": [mq]}
    r1 = rc.invoke(broker.broker_addr, create_request(RC.LOCK_BATCH_MQ, None, json.dumps(lock).encode()), 5000)
    assert loads_lenient(r1.body)["lockOKMQSet"] == [mq]
    r2 = rc.invoke(broker.broker_addr, create_request(RC.LOCK_BATCH_MQ, None,
                                                      json.dumps(dict(lock, clientId="c2")).encode()), 5000)
    assert loads_lenient(r2.body)["lockOKMQSet"] == []
    rc.invoke(broker.broker_addr, create_request(RC.UNLOCK_BATCH_MQ, None, json.dumps(lock).encode()), 5000)
    r3 = rc.invoke(broker.broker_addr, create_request(RC.LOCK_BATCH_MQ, None,
                                                      json.dumps(dict(lock, clientId="c2")).encode()), 5000)
    assert loads_lenient(r3.body)["lockOKMQSet"] == [mq]
    # heartbeat subscription filters pulls that carry no subscription of their own
    send(rc, broker, "ProtoHB", b"yes", TAGS="TagA")
    send(rc, broker, "ProtoHB", b"no", TAGS="TagB")
    got = pull(rc, broker, "ProtoHB", 0, group="CG_HB")
    assert [m.body for m in decode(got.body)] == [b"yes"]


def test_route_and_topic_admin(rc, broker):
    r = rc.invoke(broker.namesrv_addr, create_request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "AutoMade"}), 5000)
    assert r.code == ResponseCode.TOPIC_NOT_EXIST  # a lookup never creates a topic, as in RocketMQ
    assert send(rc, broker, "AutoMade").code == ResponseCode.SUCCESS  # a send does, and routes it at once
    r = rc.invoke(broker.namesrv_addr, create_request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "AutoMade"}), 5000)
    assert r.code == ResponseCode.SUCCESS
    route = loads_lenient(r.body)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": broker.broker_addr}
    assert route["queueDatas"][0]["writeQueueNums"] == 4
    c = rc.invoke(broker.broker_addr, create_request(RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": "Made8", "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6",
        "topicFilterType": "SINGLE_TAG"}), 5000)
    assert c.code == ResponseCode.SUCCESS
    deadline = time.time() + 5
    while time.time() < deadline:
        r = rc.invoke(broker.namesrv_addr, create_request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "Made8"}), 5000)
        if r.code == ResponseCode.SUCCESS and loads_lenient(r.body)["queueDatas"][0]["readQueueNums"] == 8:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the created topic did not reach the name server")
    info = loads_lenient(rc.invoke(broker.namesrv_addr, create_request(RC.GET_BROKER_CLUSTER_INFO), 5000).body)
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    lst = loads_lenient(rc.invoke(broker.namesrv_addr, create_request(RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER),
                                  5000).body)
    assert "Made8" in lst["topicList"]


def test_errors_are_answers_not_crashes(rc, broker):
    r = rc.invoke(broker.broker_addr, create_request(9999), 5000)
    assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and "9999" in r.remark
    r = send(rc, broker, "bad topic!", b"x")
    assert r.code == ResponseCode.SYSTEM_ERROR and "illegal characters" in r.remark  # as Apache 4.9 answers
    r = rc.invoke(broker.broker_addr, create_request(RC.SEND_MESSAGE_V2, {"b": "T"}, b"x"), 5000)
    assert r.code == ResponseCode.SYSTEM_ERROR  # missing required header fields
    r = rc.invoke(broker.broker_addr, create_request(RC.HEART_BEAT, None, b"{not json"), 5000)
    assert r.code == ResponseCode.SYSTEM_ERROR
    big = send(rc, broker, "ProtoBig", b"x" * (4 * 1024 * 1024 + 1))
    assert big.code == ResponseCode.MESSAGE_ILLEGAL
    assert send(rc, broker, "ProtoBig", b"fine").code == ResponseCode.SUCCESS


def test_oversized_frame_closes_only_that_connection(rc, broker):
    host, port = broker.broker_addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(struct.pack(">i", 64 * 1024 * 1024) + b"\x00" * 16)
        s.settimeout(5)
        assert s.recv(10) == b""  # closed by the broker
    assert send(rc, broker, "ProtoAfter", b"still serving").code == ResponseCode.SUCCESS
    with socket.create_connection((host, int(port)), timeout=5) as s:  # a well-formed frame on a raw socket
        s.sendall(encode_frame(create_request(RC.GET_MAX_OFFSET, {"topic": "ProtoAfter", "queueId": "0"}, opaque=5)))
        length = struct.unpack(">i", s.recv(4))[0]
        assert 0 < length < 4096


def test_topic_permissions_outside_what_mqadmin_allows_are_refused(rc, broker):
    """A 4.9 broker stores any perm (-1, 255 ...: measured against the Java broker);
    mqcore takes 2, 4, 6 and 7, as mqadmin documents and accepts, and stores nothing else."""
    def create(topic, perm):
        return rc.invoke(broker.broker_addr, create_request(RC.UPDATE_AND_CREATE_TOPIC, {
            "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "2", "writeQueueNums": "2", "perm": perm,
            "topicFilterType": "SINGLE_TAG"}), 5000)

    def stored():
        body = rc.invoke(broker.broker_addr, create_request(RC.GET_ALL_TOPIC_CONFIG), 5000).body
        return {t: c["perm"] for t, c in loads_lenient(body)["topicConfigTable"].items() if t.startswith("Perm")}

    for perm in ("-1", "0", "1", "3", "5", "8", "255"):
        r = create("PermBad" + perm.replace("-", "m"), perm)
        assert r.code == ResponseCode.SYSTEM_ERROR and f"perm {perm} is not a topic permission" in r.remark, r
    for perm in ("2", "4", "6", "7"):
        assert create("PermOk" + perm, perm).code == ResponseCode.SUCCESS
    assert create("PermOk6", "255").code == ResponseCode.SYSTEM_ERROR  # an update is checked too
    assert stored() == {"PermOk2": 2, "PermOk4": 4, "PermOk6": 6, "PermOk7": 7}
