"""The client, admin and operations processors built without a broker.

Each processor is given only the managers it uses (a real store and real metadata
tables in a temp dir, an injected clock) and the broker's facts as callables, so its
answers are checked request by request. The only stand-in is the connection a request
arrived on: processors read nothing from it but its address.
"""
from __future__ import annotations

import asyncio
import json

import pytest

from mqcore.broker.clients import ClientManager, RebalanceLockManager
from mqcore.broker.config import BrokerConfig
from mqcore.broker.conf import effective_config_lines
from mqcore.broker.filtering import check_client_config
from mqcore.broker.groups import ConsumerOffsetManager, SubscriptionGroupManager
from mqcore.broker.processors.admin import AdminProcessor
from mqcore.broker.processors.clients import ClientProcessor
from mqcore.broker.processors.operations import OperationsProcessor
from mqcore.broker.topics import TopicConfigManager
from mqcore.clock import ManualClock
from mqcore.errors import ConfigError
from mqcore.jsonutil import loads_lenient
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, create_request
from mqcore.store.message_store import MessageStore
from tests.support.store import msg, small_config


class Peer:
    """The connection a request came on (processors read its address, and key tables by it)."""

    remote_addr = "127.0.0.1:50000"


@pytest.fixture
def managers(tmp_path):
    clock = ManualClock(1_700_000_000_000)
    cfg = BrokerConfig(broker_name="b1")
    store_cfg = small_config(tmp_path / "store")
    store = MessageStore(store_cfg, clock=clock)
    store.load()
    store.start()
    cdir = store_cfg.config_dir
    topics = TopicConfigManager(cfg, cdir, clock)
    topics.load()
    groups = SubscriptionGroupManager(cdir, clock, True)
    groups.load()
    offsets = ConsumerOffsetManager.in_dir(cdir)
    m = dict(store=store, topics=topics, groups=groups, offsets=offsets, clients=ClientManager(clock, 120_000))
    yield cfg, store_cfg, clock, m
    store.shutdown()


def _heartbeat(group: str) -> bytes:
    return json.dumps({"clientID": "c1", "producerDataSet": [], "consumerDataSet": [{
        "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "unitMode": False,
        "subscriptionDataSet": [{"topic": "Orders", "subString": "TagA || TagB", "subVersion": 1}]}]}).encode()


def test_client_processor_registers_consumers_and_keeps_their_offsets(managers):
    _cfg, _scfg, clock, m = managers
    registered = []

    async def register_now():
        registered.append(True)

    p = ClientProcessor(locks=RebalanceLockManager(clock), register_now=register_now, **m)
    peer = Peer()
    answer = asyncio.run(p.heartbeat(peer, create_request(RC.HEART_BEAT, body=_heartbeat("g1"))))
    assert answer.code == ResponseCode.SUCCESS
    # a clustering group gets its retry topic, registered before the answer
    assert m["topics"].get("%RETRY%g1") is not None and registered == [True]
    assert m["clients"].group("g1").subscriptions["Orders"].tags == frozenset({"TagA", "TagB"})
    answer = p.consumer_list(peer, create_request(RC.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "g1"}))
    assert loads_lenient(answer.body)["consumerIdList"] == ["c1"]

    update = {"consumerGroup": "g1", "topic": "Orders", "queueId": "2", "commitOffset": "7"}
    assert p.update_offset(peer, create_request(RC.UPDATE_CONSUMER_OFFSET, update)).code == ResponseCode.SUCCESS
    query = {"consumerGroup": "g1", "topic": "Orders", "queueId": "2"}
    assert p.query_offset(peer, create_request(RC.QUERY_CONSUMER_OFFSET, query)).ext_fields["offset"] == "7"

    m["store"].put_message(msg("Orders", qid=1))
    m["store"].put_message(msg("Orders", qid=1))
    answer = p.max_offset(peer, create_request(RC.GET_MAX_OFFSET, {"topic": "Orders", "queueId": "1"}))
    assert answer.ext_fields["offset"] == "2"


def test_admin_processor_answers_from_the_managers_and_the_brokers_facts(managers):
    cfg, _scfg, _clock, m = managers
    schedule = []
    p = AdminProcessor(broker_name=cfg.broker_name, schedule_register=lambda: schedule.append(1),
                       delay_offsets_json=lambda: b'{"offsetTable":{}}', holding_count=lambda: 3,
                       runtime_figures=lambda: {"putTps": "1.0 2.0 3.0", "runtime": "[ 0 days ]"}, **m)
    peer = Peer()
    create = {"topic": "Orders", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6",
              "topicFilterType": "SINGLE_TAG", "defaultTopic": "TBW102"}
    assert p.create_topic(peer, create_request(RC.UPDATE_AND_CREATE_TOPIC, create)).code == ResponseCode.SUCCESS
    # no whole-table registration scheduled: the broker registers the created topic alone
    # before answering (Broker._registered, tests/broker/test_topic_burst.py)
    assert m["topics"].get("Orders").write_queue_nums == 2 and schedule == []
    bad = dict(create, topic="bad topic!")
    assert p.create_topic(peer, create_request(RC.UPDATE_AND_CREATE_TOPIC, bad)).code == ResponseCode.SYSTEM_ERROR

    for _ in range(3):
        m["store"].put_message(msg("Orders", qid=1))
    stats = p.topic_stats(peer, create_request(RC.GET_TOPIC_STATS_INFO, {"topic": "Orders"})).body
    # Map<MessageQueue, TopicOffset> with object keys, as fastjson writes it
    assert b'{"brokerName":"b1","queueId":1,"topic":"Orders"}:{"lastUpdateTimestamp":' in stats
    assert b'"maxOffset":3,"minOffset":0}' in stats

    info = loads_lenient(p.runtime_info(peer, create_request(RC.GET_BROKER_RUNTIME_INFO)).body)["table"]
    assert info["pullHoldingCount"] == "3" and info["putTps"] == "1.0 2.0 3.0" and info["runtime"] == "[ 0 days ]"
    assert info["commitLogMaxOffset"] == str(m["store"].get_max_phy_offset())
    assert p.all_delay_offsets(peer, create_request(RC.GET_ALL_DELAY_OFFSET)).body == b'{"offsetTable":{}}'


def test_operations_processor_reads_the_current_config_and_the_bound_port(managers):
    cfg, store_cfg, _clock, m = managers
    updates = []

    def update_config(props):
        if "listenPort" in props:
            raise ConfigError("listenPort cannot change while the broker runs")
        updates.append(props)
        return list(props)

    unsaved = []
    p = OperationsProcessor(broker_name=cfg.broker_name, configs=lambda: (cfg, store_cfg), bound_port=lambda: 45678,
                            update_config=update_config, unsaved=lambda: unsaved[0] if unsaved else None, **m)
    peer = Peer()
    text = p.get_broker_config(peer, create_request(RC.GET_BROKER_CONFIG)).body.decode()
    assert "listenPort=45678" in text.splitlines()  # the port bound, not the configured 0 / 10911
    lines = text.splitlines()
    assert "brokerName=b1" in lines and len(lines) <= len(effective_config_lines(cfg, store_cfg))
    ok = create_request(RC.UPDATE_BROKER_CONFIG, body=b"longPollingEnable=false\n")
    answer = p.update_broker_config(peer, ok)
    assert answer.code == ResponseCode.SUCCESS and not answer.remark and updates == [{"longPollingEnable": "false"}]
    unsaved.append("no -c broker.conf")  # applied, but the broker could not save it: the answer says so
    assert p.update_broker_config(peer, ok).remark == "not saved: no -c broker.conf"
    refused = p.update_broker_config(peer, create_request(RC.UPDATE_BROKER_CONFIG, body=b"listenPort=1\n"))
    assert refused.code == ResponseCode.SYSTEM_ERROR and "listenPort" in refused.remark


def test_check_client_config_asks_whether_property_filtering_is_on():
    body = json.dumps({"group": "g1", "subscriptionData": {
        "topic": "Orders", "subString": "a > 5", "expressionType": "SQL92"}}).encode()
    request = create_request(RC.CHECK_CLIENT_CONFIG, body=body)
    assert check_client_config(lambda: False, Peer(), request).code == ResponseCode.SYSTEM_ERROR
    assert check_client_config(lambda: True, Peer(), request).code == ResponseCode.SUCCESS
    bad = create_request(RC.CHECK_CLIENT_CONFIG, body=body.replace(b"a > 5", b"a >"))
    assert check_client_config(lambda: True, Peer(), bad).code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
