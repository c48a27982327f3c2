"""Typed custom headers and small JSON bodies."""
from __future__ import annotations

import dataclasses

import pytest

from mqcore.errors import IllegalArgumentError, ProtocolError
from mqcore.remoting import headers as h
from mqcore.remoting.codes import RequestCode
from mqcore.remoting.command import create_request

from .test_codec_golden import FRAME_7_1, PROPS

V1_EXT = {
    "producerGroup": "pg", "topic": "TopicTest", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
    "queueId": "-1", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0", "properties": PROPS,
    "reconsumeTimes": "0", "unitMode": "false", "batch": "false", "bname": "broker-a",
    "AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "x",  # the C++ client always adds these
}


def test_send_header_v1_and_v2_parse_to_same_value() -> None:
    v1 = h.SendMessageRequestHeader.from_command(create_request(RequestCode.SEND_MESSAGE, V1_EXT))
    assert v1.queue_id == -1 and v1.born_timestamp == 1700000000000 and v1.broker_name == "broker-a"
    assert v1.unit_mode is False and v1.batch is False and v1.max_reconsume_times is None
    v2_ext = v1.to_ext_v2()
    assert list(v2_ext) == ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "n"]
    v2 = h.SendMessageRequestHeader.from_command(create_request(RequestCode.SEND_MESSAGE_V2, v2_ext))
    assert v2 == v1
    assert h.SendMessageRequestHeader.from_ext(v1.to_ext_v1()) == v1
    assert v1.to_ext(RequestCode.SEND_BATCH_MESSAGE) == v2_ext
    assert v1.to_ext(RequestCode.SEND_MESSAGE) == v1.to_ext_v1()


def test_send_header_v2_with_retry_fields() -> None:
    ext = dict(h.SendMessageRequestHeader.from_ext(V1_EXT).to_ext_v2(), l="16", j="3")
    header = h.SendMessageRequestHeader.from_ext_v2(ext)
    assert (header.max_reconsume_times, header.reconsume_times) == (16, 3)
    assert "l" in header.to_ext_v2()


def test_send_header_golden_ext_matches_frame() -> None:
    from mqcore.remoting.command import decode_frame

    cmd = decode_frame(FRAME_7_1[4:])
    header = h.SendMessageRequestHeader.from_command(cmd)
    assert header.to_ext_v2() == cmd.ext_fields
    assert list(header.to_ext_v2()) == list(cmd.ext_fields)


def test_send_header_older_client_without_broker_name() -> None:
    ext = {k: v for k, v in h.SendMessageRequestHeader.from_ext(V1_EXT).to_ext_v2().items() if k != "n"}
    assert h.SendMessageRequestHeader.from_ext(ext, RequestCode.SEND_MESSAGE_V2).broker_name is None


@pytest.mark.parametrize("missing", ["producerGroup", "topic", "defaultTopic", "queueId", "bornTimestamp", "flag"])
def test_send_header_missing_required(missing: str) -> None:
    ext = {k: v for k, v in V1_EXT.items() if k != missing}
    with pytest.raises(ProtocolError, match=missing):
        h.SendMessageRequestHeader.from_ext_v1(ext)


def test_send_header_v2_missing_required_by_code() -> None:
    with pytest.raises(ProtocolError, match="'a'"):
        h.SendMessageRequestHeader.from_command(create_request(RequestCode.SEND_MESSAGE_V2, {}))


@pytest.mark.parametrize("bad", ["x", "1.5", "", " ", "0x10", "1_000", "٣", "99999999999"])
def test_integer_parse_errors_are_clear(bad: str) -> None:
    ext = dict(V1_EXT, queueId=bad)
    with pytest.raises(ProtocolError, match="queueId"):
        h.SendMessageRequestHeader.from_ext_v1(ext)


def test_integer_forms_java_accepts() -> None:
    assert h.ViewMessageRequestHeader.from_ext({"offset": "+122"}).offset == 122
    assert h.ViewMessageRequestHeader.from_ext({"offset": " 7 "}).offset == 7
    assert h.ViewMessageRequestHeader.from_ext({"offset": str(2**63 - 1)}).offset == 2**63 - 1
    with pytest.raises(ProtocolError):
        h.ViewMessageRequestHeader.from_ext({"offset": str(2**63)})


def test_booleans_follow_parse_boolean() -> None:
    def parse(**ext: str) -> bool | None:
        return h.GetRouteInfoRequestHeader.from_ext(dict(ext, topic="t")).accept_standard_json_only

    assert parse(acceptStandardJsonOnly="TRUE") is True
    assert parse(acceptStandardJsonOnly="yes") is False
    assert parse() is None


def test_pull_header_round_trip() -> None:
    ext = {"consumerGroup": "cg", "topic": "t", "queueId": "1", "queueOffset": "10", "maxMsgNums": "32",
           "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "15000", "subVersion": "1700000000000",
           "subscription": "TagA || TagB", "expressionType": "TAG", "lo": "ignored"}
    header = h.PullMessageRequestHeader.from_ext(ext)
    assert header.sys_flag == 6 and header.suspend_timeout_millis == 15000 and header.subscription == "TagA || TagB"
    back = header.to_ext()
    assert back == {k: v for k, v in ext.items() if k != "lo"}
    resp = h.PullMessageResponseHeader(suggest_which_broker_id=0, next_begin_offset=11, min_offset=0, max_offset=20)
    assert h.PullMessageResponseHeader.from_ext(resp.to_ext()) == resp
    with pytest.raises(ProtocolError, match="maxOffset"):
        h.PullMessageResponseHeader.from_ext({"suggestWhichBrokerId": "0", "nextBeginOffset": "1", "minOffset": "0"})


REQUIRED_SAMPLES: list[tuple[type, dict[str, str]]] = [
    (h.ConsumerSendMsgBackRequestHeader, {"offset": "122", "group": "cg", "delayLevel": "0"}),
    (h.UpdateConsumerOffsetRequestHeader, {"consumerGroup": "cg", "topic": "t", "queueId": "0", "commitOffset": "-1"}),
    (h.QueryConsumerOffsetRequestHeader, {"consumerGroup": "cg", "topic": "t", "queueId": "0"}),
    (h.GetMaxOffsetRequestHeader, {"topic": "t", "queueId": "0"}),
    (h.GetMinOffsetRequestHeader, {"topic": "t", "queueId": "0"}),
    (h.GetEarliestMsgStoretimeRequestHeader, {"topic": "t", "queueId": "0"}),
    (h.SearchOffsetRequestHeader, {"topic": "t", "queueId": "0", "timestamp": "1700000000000"}),
    (h.QueryMessageRequestHeader, {"topic": "t", "key": "k1", "maxNum": "32", "beginTimestamp": "0",
                                   "endTimestamp": "9999999999999"}),
    (h.ViewMessageRequestHeader, {"offset": "122"}),
    (h.GetConsumerListByGroupRequestHeader, {"consumerGroup": "cg"}),
    (h.UnregisterClientRequestHeader, {"clientID": "1.2.3.4@1"}),
    (h.NotifyConsumerIdsChangedRequestHeader, {"consumerGroup": "cg"}),
    (h.EndTransactionRequestHeader, {"producerGroup": "pg", "tranStateTableOffset": "1", "commitLogOffset": "2",
                                     "commitOrRollback": "8", "msgId": "ABC"}),
    (h.CreateTopicRequestHeader, {"topic": "t", "defaultTopic": "TBW102", "readQueueNums": "8",
                                  "writeQueueNums": "8", "perm": "6", "topicFilterType": "SINGLE_TAG"}),
    (h.DeleteTopicRequestHeader, {"topic": "t"}),
    (h.GetRouteInfoRequestHeader, {"topic": "t"}),
    (h.RegisterBrokerRequestHeader, {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911",
                                     "clusterName": "DefaultCluster", "haServerAddr": "127.0.0.1:10912",
                                     "brokerId": "0"}),
    (h.UnregisterBrokerRequestHeader, {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911",
                                       "clusterName": "DefaultCluster", "brokerId": "0"}),
    (h.OffsetResponseHeader, {"offset": "5"}),
    (h.GetEarliestMsgStoretimeResponseHeader, {"timestamp": "5"}),
    (h.QueryMessageResponseHeader, {"indexLastUpdateTimestamp": "1", "indexLastUpdatePhyoffset": "2"}),
    (h.SendMessageResponseHeader, {"msgId": "X", "queueId": "1", "queueOffset": "1"}),
]


@pytest.mark.parametrize(("cls", "ext"), REQUIRED_SAMPLES, ids=[c.__name__ for c, _ in REQUIRED_SAMPLES])
def test_required_fields_and_round_trip(cls: type, ext: dict[str, str]) -> None:
    header = cls.from_ext(ext)
    again = cls.from_ext(header.to_ext())
    assert again == header
    for key, value in ext.items():
        assert header.to_ext()[key] == value.strip()
    for key in ext:
        with pytest.raises(ProtocolError, match=key):
            cls.from_ext({k: v for k, v in ext.items() if k != key})


def _sample(cls: type) -> dict[str, str]:
    return dict(next(ext for c, ext in REQUIRED_SAMPLES if c is cls))


def test_optional_defaults() -> None:
    reg = h.RegisterBrokerRequestHeader.from_ext(_sample(h.RegisterBrokerRequestHeader))
    assert reg.compressed is False and reg.body_crc32 == 0
    assert h.CreateTopicRequestHeader.from_ext(_sample(h.CreateTopicRequestHeader)).order is False
    query = h.QueryMessageRequestHeader.from_ext(dict(_sample(h.QueryMessageRequestHeader), _UNIQUE_KEY_QUERY="true"))
    assert query.unique_key_query is True
    sendback = h.ConsumerSendMsgBackRequestHeader.from_ext({"offset": "1", "group": "g", "delayLevel": "-1"})
    assert sendback.delay_level == -1 and sendback.unit_mode is False
    assert h.CheckTransactionStateRequestHeader.from_ext({}).msg_id is None


def test_to_ext_refuses_missing_required() -> None:
    header = h.ViewMessageRequestHeader(offset=1)
    header.offset = None  # type: ignore[assignment]
    with pytest.raises(IllegalArgumentError):
        header.to_ext()


def test_headers_accept_caller_built_values() -> None:
    header = h.UpdateConsumerOffsetRequestHeader.from_ext(
        {"consumerGroup": "cg", "topic": "t", "queueId": 2, "commitOffset": 10, "bname": None})
    assert (header.queue_id, header.commit_offset, header.broker_name) == (2, 10, None)


def test_all_headers_are_slotted_dataclasses() -> None:
    for name in h.__all__:
        cls = getattr(h, name)
        if isinstance(cls, type) and issubclass(cls, h.ExtHeader) and cls is not h.ExtHeader:
            assert dataclasses.is_dataclass(cls) and hasattr(cls, "__slots__"), name


# --- bodies -------------------------------------------------------------------------------------
def test_lock_batch_bodies() -> None:
    mqs = [h.MessageQueue("TopicTest", "broker-a", 0), h.MessageQueue("TopicTest", "broker-a", 1)]
    body = h.LockBatchRequestBody(consumer_group="cg1", client_id="c1", mq_set=mqs)
    raw = body.encode()
    assert raw == (b'{"clientId":"c1","consumerGroup":"cg1","mqSet":[{"brokerName":"broker-a","queueId":0,'
                   b'"topic":"TopicTest"},{"brokerName":"broker-a","queueId":1,"topic":"TopicTest"}]}')
    assert h.LockBatchRequestBody.decode(raw) == body
    unlock = h.UnlockBatchRequestBody.decode(raw)
    assert isinstance(unlock, h.UnlockBatchRequestBody) and unlock.mq_set == mqs
    five_x = h.LockBatchRequestBody.decode(raw[:-1] + b',"onlyThisBroker":true}')
    assert five_x.only_this_broker and b"onlyThisBroker" in five_x.encode()
    resp = h.LockBatchResponseBody(lock_ok_mq_set=mqs[:1])
    assert h.LockBatchResponseBody.decode(resp.encode()) == resp
    assert h.LockBatchResponseBody.decode(b"{}").lock_ok_mq_set == []
    assert {mqs[0]: 1}[h.MessageQueue("TopicTest", "broker-a", 0)] == 1


def test_consumer_list_body() -> None:
    body = h.GetConsumerListByGroupResponseBody(["a@1", "b@2"])
    assert body.encode() == b'{"consumerIdList":["a@1","b@2"]}'
    assert h.GetConsumerListByGroupResponseBody.decode(body.encode()) == body


@pytest.mark.parametrize(
    "raw",
    [b"[]", b"{", b'{"consumerGroup":"g"}', b'{"consumerGroup":"g","clientId":"c","mqSet":{}}',
     b'{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":"t","brokerName":"b","queueId":"x"}]}',
     b'{"consumerGroup":"g","clientId":"c","mqSet":[{"topic":"t","queueId":1}]}',
     b'{"consumerGroup":1,"clientId":"c"}'],
)
def test_lock_body_malformed(raw: bytes) -> None:
    with pytest.raises(ProtocolError):
        h.LockBatchRequestBody.decode(raw)
