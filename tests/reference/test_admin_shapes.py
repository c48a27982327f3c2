"""Apache's ``DefaultMQAdminExt`` (rocketmq-tools 4.9.8) gets the same shapes from mqbroker as
from the Java 4.9.7 broker: cluster info, runtime stats, consume stats, topics by cluster, who
consumes a topic, consume time spans, expired consume-queue cleanup, broker stats windows,
broker-wide consume stats, consume-queue queries, consumer running info and direct consumption
(forwarded to a Java push consumer and to an mqcore.client one), group offset cloning, the name
server's config, wipe/add write permission.

drivers/AdminShapes.java does the same sends and calls against each and prints every answer as
fastjson writes it; the test compares keys and value types recursively, and the values whose
meaning does not depend on timing (counts, offsets, codes).
"""
from __future__ import annotations

import threading
import time

import pytest

from mqcore.admin import MQAdmin
from mqcore.client import ConsumeConcurrentlyStatus, PushConsumer
from mqcore.jsonutil import loads_lenient

from tests.admin.scenarios import FAST, wait_for
from tests.support.processes import BrokerProcess
from tests.support.reference import JavaBroker, JavaNamesrv, run_java_driver

pytestmark = pytest.mark.timeout(600)

TOPIC = "ShapeTopic"
GROUP = "shape-group"


def _run(namesrv: str, broker_addr: str, broker_name: str, consumer: str) -> dict:
    p = run_java_driver("AdminShapes.java", [namesrv, broker_addr, broker_name, "DefaultCluster", TOPIC, GROUP,
                                             consumer], timeout_s=300)
    assert "@@ done" in p.stdout, p.stdout[-4000:] + p.stderr[-4000:]
    out = {}
    for line in p.stdout.splitlines():
        if line.startswith("@@ ") and not line.startswith(("@@ done", "@@ note")):
            _, name, rest = line.split(" ", 2)
            out[name] = ("ERROR", rest) if rest.startswith("ERROR ") else loads_lenient(rest)
    return out


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    work = tmp_path_factory.mktemp("shapes-java")
    with JavaNamesrv(work) as ns, JavaBroker(work / "store", ns.addr) as b:
        yield _run(ns.addr, b.addr, "broker-java", "java")


@pytest.fixture(scope="module")
def mq_java_consumer(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("shapes-mq") / "store", broker_name="broker-mq") as b:
        yield _run(b.namesrv_addr, b.broker_addr, "broker-mq", "java")


@pytest.fixture(scope="module")
def mq_py_consumer(tmp_path_factory):
    """mqbroker with an mqcore.client push consumer answering the forwarded 307/309."""
    with BrokerProcess(tmp_path_factory.mktemp("shapes-mqpy") / "store", broker_name="broker-mq") as b:
        with MQAdmin(b.namesrv_addr) as admin:
            admin.create_topic(b.broker_addr, TOPIC, read_queue_nums=2, write_queue_nums=2)
            assert wait_for(lambda: TOPIC in admin.topic_list())
        consumed, lock = [], threading.Lock()

        def listener(msgs, ctx):
            with lock:
                consumed.extend(msgs)
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = PushConsumer(GROUP, namesrv_addr=b.namesrv_addr, consume_from_where="first",
                         **FAST)
        c.subscribe(TOPIC, "*")
        c.register_listener(listener)
        c.start()
        # as the Java consumer in the driver's JVM, it owns its retry queue before the calls
        assert wait_for(lambda: any(mq.topic.startswith("%RETRY%") for mq in c._impl.rebalance.process_queue_table), 30)
        try:
            out = _run(b.namesrv_addr, b.broker_addr, "broker-mq", "external")
        finally:
            c.shutdown()
        out["_consumed"] = len(consumed)
        yield out


BROKER_NAMES = {"broker-java", "broker-mq"}


def shape(v):
    """Keys and value kinds, recursively; lists by their first element, object-keyed maps by
    their first entry (their keys are MessageQueue objects); a broker's name as a key is a
    placeholder."""
    if isinstance(v, dict):
        if v and all(isinstance(k, tuple) for k in v):
            k0 = sorted(v)[0]
            return {"<mq>": (shape(dict(k0)), shape(v[k0]))}
        return {"<broker>" if k in BROKER_NAMES else str(k): shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [shape(v[0])] if v else []
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    return type(v).__name__


def _error_code(v) -> str:
    assert isinstance(v, tuple) and v[0] == "ERROR", v
    text = v[1]
    return text.split("CODE: ")[1].split()[0] if "CODE: " in text else text.split()[1]


SAME_SHAPE = ["examineBrokerClusterInfo", "examineConsumeStats", "fetchTopicsByCLuster", "queryTopicConsumeByWho",
              "queryConsumeTimeSpan", "cleanExpiredConsumerQueueByAddr", "viewBrokerStatsData",
              "viewBrokerStatsDataGroup", "queryConsumeQueue", "consumeMessageDirectly", "cloneGroupOffset",
              "updateNameServerConfig", "wipeWritePermOfBroker", "routeAfterWipe", "addWritePermOfBroker",
              "routeAfterAdd"]
SAME_ERROR = ["viewBrokerStatsDataMissing", "queryConsumeQueueMissing", "getConsumerRunningInfoOffline"]


@pytest.mark.parametrize("name", SAME_SHAPE)
def test_same_shape_as_the_java_broker(java, mq_java_consumer, mq_py_consumer, name):
    for mq in (mq_java_consumer, mq_py_consumer):
        assert shape(mq[name]) == shape(java[name]), name


@pytest.mark.parametrize("name", SAME_ERROR)
def test_same_refusal_as_the_java_broker(java, mq_java_consumer, mq_py_consumer, name):
    assert _error_code(mq_java_consumer[name]) == _error_code(java[name])
    assert _error_code(mq_py_consumer[name]) == _error_code(java[name])


def _runtime_keys(table: dict) -> set[str]:
    return {k.split("_/")[0] for k in table}  # commitLogDiskRatio_<path>: the path differs


def test_runtime_stats_have_the_java_keys_and_values(java, mq_java_consumer):
    j, m = java["fetchBrokerRuntimeStats"]["table"], mq_java_consumer["fetchBrokerRuntimeStats"]["table"]
    assert len(j) >= 48
    assert _runtime_keys(j) - _runtime_keys(m) == set()
    for key in ("msgPutTotalTodayNow", "msgGetTotalTodayNow", "putMessageTimesTotal", "putMessageSizeTotal",
                "commitLogMaxOffset", "commitLogMinOffset", "putMessageAverageSize", "msgPutTotalTodayMorning",
                "putMessageFailedTimes", "sendThreadPoolQueueCapacity", "remainTransientStoreBufferNumbs",
                "dispatchBehindBytes", "sendThreadPoolQueueSize"):
        assert m[key] == j[key], key
    assert m["msgPutTotalTodayNow"] == "8"
    assert int(m["bootTimestamp"]) <= int(time.time() * 1000)
    for key in ("putTps", "getTotalTps", "getFoundTps", "getMissTps", "getTransferedTps"):
        assert all(float(x) >= 0 for x in m[key].split()), key
    assert max(float(x) for x in m["getFoundTps"].split()) > 0  # the consumer's pulls found messages
    assert float(m["putLatency99"]) >= 0 and "ms]:" in m["putMessageDistributeTime"]


def test_values_that_must_agree(java, mq_java_consumer, mq_py_consumer):
    for mq in (mq_java_consumer, mq_py_consumer):
        assert mq["queryTopicConsumeByWho"] == java["queryTopicConsumeByWho"] == {"groupList": [GROUP]}
        # the topic's queues (whether the retry queue has a committed offset yet is the consumer's timing)
        offsets = lambda out: sorted((dict(k)["topic"], dict(k)["queueId"], v["brokerOffset"], v["consumerOffset"])
                                     for k, v in out["examineConsumeStats"]["offsetTable"].items()
                                     if dict(k)["topic"] == TOPIC)
        assert offsets(mq) == offsets(java)
        assert mq["viewBrokerStatsData"]["statsMinute"]["sum"] == java["viewBrokerStatsData"]["statsMinute"]["sum"] == 8
        assert mq["viewBrokerStatsDataGroup"]["statsMinute"]["sum"] == 8
        # which message went to queue 0 depends on the producer's queue choice: sizes and tags agree
        cq = lambda out: [(q["physicSize"], q["tagsCode"]) for q in out["queryConsumeQueue"]["queueData"]]
        assert cq(mq) == cq(java) and len(cq(mq)) == 4
        phys = [q["physicOffset"] for q in mq["queryConsumeQueue"]["queueData"]]
        assert phys == sorted(set(phys))
        assert mq["consumeMessageDirectly"]["consumeResult"] == "CR_SUCCESS"
        assert mq["cleanExpiredConsumerQueueByAddr"] is True
        # the clone took the source group's offsets: nothing left to consume for it either
        assert [s["delayTime"] for s in mq["cloneGroupOffset"]] == [0, 0]
        assert mq["updateNameServerConfig"] == "true"
        topics = mq["fetchTopicsByCLuster"]["topicList"]
        assert TOPIC in topics and mq["wipeWritePermOfBroker"] == mq["addWritePermOfBroker"] == len(topics)
        assert [q["perm"] for q in mq["routeAfterWipe"]] == [4] and [q["perm"] for q in mq["routeAfterAdd"]] == [6]
        stats = mq["fetchConsumeStatsInBroker"]
        mine = [d[GROUP] for d in stats["consumeStatsList"] if GROUP in d][0]
        assert stats["totalDiff"] == 0 and sum(len(s["offsetTable"]) for s in mine) >= 2
    assert java["wipeWritePermOfBroker"] == len(java["fetchTopicsByCLuster"]["topicList"])


def test_consumer_running_info_from_both_clients(java, mq_java_consumer, mq_py_consumer):
    ref = java["getConsumerRunningInfo"]
    for mq in (mq_java_consumer, mq_py_consumer):
        info = mq["getConsumerRunningInfo"]
        assert set(info) == set(ref)
        assert shape(info["mqTable"]) == shape(ref["mqTable"])
        assert shape(info["subscriptionSet"]) == shape(ref["subscriptionSet"])
        assert {t for t in info["statusTable"]} == {t for t in ref["statusTable"]}
        assert shape(info["statusTable"][TOPIC]) == shape(ref["statusTable"][TOPIC])
        assert info["statusTable"][TOPIC]["consumeOKTPS"] > 0 and info["statusTable"][TOPIC]["pullTPS"] > 0
        assert sorted((dict(k)["queueId"], v["commitOffset"]) for k, v in info["mqTable"].items()
                      if dict(k)["topic"] == TOPIC) == [(0, 4), (1, 4)]
        props = info["properties"]
        for key in ("PROP_CLIENT_VERSION", "PROP_CONSUME_TYPE", "PROP_CONSUMEORDERLY", "PROP_NAMESERVER_ADDR",
                    "PROP_THREADPOOL_CORE_SIZE", "PROP_CONSUMER_START_TIMESTAMP", "consumerGroup", "messageModel",
                    "consumeFromWhere", "consumeThreadMin"):
            assert key in props, key
        assert props["consumerGroup"] == GROUP and props["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
        assert not any("secret" in k.lower() for k in props)
    assert mq_py_consumer["_consumed"] >= 8
