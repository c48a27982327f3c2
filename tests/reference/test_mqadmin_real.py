"""The real ``mqadmin`` (rocketmq-tools 4.9.8 ``MQAdminStartup``) against mqbroker prints the
same answers as against the Apache RocketMQ broker.

One scenario per broker: a topic with keyed messages, an online push consumer that has
consumed everything and an online producer; then one JVM runs every command (see
``mqadmin_batch``) and the printed answers are reduced to facts that must hold for both
brokers and be equal between them.
"""
from __future__ import annotations

import re
import threading
import time

import pytest

from mqcore.admin import MQAdmin
from mqcore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from mqcore.jsonutil import loads_lenient

from tests.admin.scenarios import FAST, wait_for
from tests.support.processes import BrokerProcess
from tests.support.reference import mqadmin_batch

pytestmark = pytest.mark.timeout(300)

TOPIC = "RealAdmin"
NEW_TOPIC = "RealAdminNew"
GROUP = "real-admin-cg"
NEW_GROUP = "real-admin-sub"
PRODUCER_GROUP = "real-admin-pg"
N = 12


@pytest.fixture(scope="module")
def mqbroker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("real-admin") / "store", broker_name="broker-mq") as b:
        yield b.namesrv_addr, b.broker_addr, "broker-mq"


def _scenario(namesrv: str, broker_addr: str, broker_name: str) -> tuple[dict, dict]:
    """Set the cluster up, run every mqadmin command once, return (outputs, what was sent)."""
    with MQAdmin(namesrv) as admin:
        admin.create_topic(broker_addr, TOPIC, read_queue_nums=4, write_queue_nums=4)
        assert wait_for(lambda: TOPIC in admin.topic_list())
    before = int(time.time() * 1000) - 60_000
    producer = Producer(PRODUCER_GROUP, namesrv_addr=namesrv, heartbeat_broker_interval_ms=1000).start()
    got, lock = [], threading.Lock()
    consumer = PushConsumer(GROUP, namesrv_addr=namesrv, consume_from_where="first", **FAST)
    consumer.subscribe(TOPIC, "*")

    def listener(msgs, ctx):
        with lock:
            got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer.register_listener(listener)
    try:
        sent = [producer.send(Message(TOPIC, f"body-{i}".encode(), tags="TagA", keys=f"key-{i}")) for i in range(N)]
        consumer.start()
        assert wait_for(lambda: len(got) >= N, 60)
        with MQAdmin(namesrv) as admin:
            # committed, not just without lag: a group that committed nothing yet has no lag either
            assert wait_for(lambda: (lambda st: st.diff_total == 0 and len(st.rows) == 4 and
                                     sum(r.consumer_offset for r in st.rows) == N)(admin.consume_stats(GROUP, TOPIC)),
                            30)
        probe = sent[3]
        n = ["-n", namesrv]
        commands = {
            "clusterList": ["clusterList", *n],
            "topicList": ["topicList", *n],
            "topicRoute": ["topicRoute", *n, "-t", TOPIC],
            "topicStatus": ["topicStatus", *n, "-t", TOPIC],
            "updateTopic": ["updateTopic", *n, "-c", "DefaultCluster", "-t", NEW_TOPIC, "-r", "2", "-w", "2"],
            "updateSubGroup": ["updateSubGroup", *n, "-b", broker_addr, "-g", NEW_GROUP, "-r", "5"],
            "consumerProgress": ["consumerProgress", *n, "-g", GROUP],
            "consumerConnection": ["consumerConnection", *n, "-g", GROUP],
            "producerConnection": ["producerConnection", *n, "-g", PRODUCER_GROUP, "-t", TOPIC],
            "queryMsgByKey": ["queryMsgByKey", *n, "-t", TOPIC, "-k", "key-3"],
            "queryMsgById": ["queryMsgById", *n, "-i", probe.offset_msg_id],
            "queryMsgByOffset": ["queryMsgByOffset", *n, "-t", TOPIC, "-b", broker_name, "-i",
                                 str(probe.message_queue.queue_id), "-o", str(probe.queue_offset)],
            "brokerStatus": ["brokerStatus", *n, "-b", broker_addr],
            "getBrokerConfig": ["getBrokerConfig", *n, "-b", broker_addr],
            "resetOffsetByTime": ["resetOffsetByTime", *n, "-g", GROUP, "-t", TOPIC, "-s", str(before)],
            "deleteTopic": ["deleteTopic", *n, "-c", "DefaultCluster", "-t", NEW_TOPIC],
        }
        outputs = dict(zip(commands, mqadmin_batch(list(commands.values())), strict=True))
    finally:
        consumer.shutdown()
        producer.shutdown()
    return outputs, {"probe": probe, "sent": sent}


def _facts(out: dict, sent: dict, broker_addr: str, broker_name: str) -> dict:
    """What each command printed, with this cluster's names replaced by placeholders."""
    def norm(text: str) -> str:
        return text.replace(broker_addr, "<ADDR>").replace(broker_name, "<BROKER>")

    for name, text in out.items():
        assert "Exception" not in text, f"{name} failed:\n{text}"
    probe = sent["probe"]
    f = {}
    rows = [line.split() for line in out["clusterList"].splitlines()[1:] if line.strip()]
    f["clusterList"] = [(r[0], norm(r[1]), r[2], norm(r[3]), r[4].startswith("V4_9")) for r in rows]
    f["topicList"] = TOPIC in out["topicList"].split()
    route = loads_lenient(out["topicRoute"])
    f["topicRoute"] = ([(norm(q["brokerName"]), q["readQueueNums"], q["writeQueueNums"], q["perm"])
                        for q in route["queueDatas"]],
                       [(b["cluster"], norm(b["brokerName"]), {int(k): norm(v) for k, v in b["brokerAddrs"].items()})
                        for b in route["brokerDatas"]])
    status = [line.split() for line in out["topicStatus"].splitlines()[1:] if line.strip()]
    f["topicStatus"] = ([(norm(r[0]), int(r[1]), int(r[2])) for r in status], sum(int(r[3]) for r in status))
    f["updateTopic"] = norm(out["updateTopic"].splitlines()[0])
    f["updateSubGroup"] = (norm(out["updateSubGroup"].splitlines()[0]), "retryMaxTimes=5" in out["updateSubGroup"])
    progress = [line.split() for line in out["consumerProgress"].splitlines()[1:]
                if line.startswith(TOPIC)]
    f["consumerProgress"] = ([(r[0], norm(r[1]), int(r[2]), int(r[3]) - int(r[4]), int(r[5])) for r in progress],
                             "Diff Total: 0" in out["consumerProgress"])
    cc = out["consumerConnection"]
    clients = [line.split() for line in cc.splitlines()[1:] if "@" in line.split(" ")[0]]
    f["consumerConnection"] = ([(r[2], r[3].startswith("V")) for r in clients],
                               re.search(rf"^{TOPIC}\s+\*$", cc, re.M) is not None,
                               "ConsumeType: CONSUME_PASSIVELY" in cc, "MessageModel: CLUSTERING" in cc,
                               "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET" in cc)
    producers = [line.split() for line in out["producerConnection"].splitlines() if line.startswith("0001")]
    f["producerConnection"] = [(r[0], r[3]) for r in producers]
    keyed = [line.split() for line in out["queryMsgByKey"].splitlines()[1:] if line.strip()]
    f["queryMsgByKey"] = [(r[0] == probe.msg_id, int(r[1]) == probe.message_queue.queue_id,
                           int(r[2]) == probe.queue_offset) for r in keyed]

    def shown(text: str) -> dict:
        fields = dict(re.findall(r"^([A-Za-z ]+):\s+(.*)$", text, re.M))
        return {"OffsetID": fields.get("OffsetID") == probe.offset_msg_id, "Topic": fields.get("Topic"),
                "Tags": fields.get("Tags"), "Keys": fields.get("Keys"),
                "Queue ID": fields.get("Queue ID") == str(probe.message_queue.queue_id),
                "Queue Offset": fields.get("Queue Offset") == str(probe.queue_offset),
                "CommitLog Offset": fields.get("CommitLog Offset") == str(probe.offset_msg_id and
                                                                           int(probe.offset_msg_id[-16:], 16)),
                "UNIQ_KEY": f"UNIQ_KEY={probe.msg_id}" in fields.get("Properties", ""),
                # the tool's message track: which groups consume the topic, and did this one
                "track": sorted(re.findall(r"consumerGroup=([^,]+), trackType=(\w+)", text))}

    f["queryMsgById"] = shown(out["queryMsgById"])
    f["queryMsgByOffset"] = shown(out["queryMsgByOffset"])
    kv = dict(re.findall(r"^(\w+)\s*: (.*)$", out["brokerStatus"], re.M))
    f["brokerStatus"] = (kv.get("brokerVersionDesc", "").startswith("V4_9"),
                         int(kv.get("commitLogMaxOffset", "0")) > 0,
                         float((kv.get("putTps") or "x").split()[0]) >= 0, "earliestMessageTimeStamp" in kv)
    props = dict(re.findall(r"^(\w+)\s+=  (.*)$", out["getBrokerConfig"], re.M))
    f["getBrokerConfig"] = (norm(props.get("brokerName", "")), props.get("brokerClusterName"),
                            norm(f"{props.get('brokerIP1')}:{props.get('listenPort')}"))
    reset = out["resetOffsetByTime"]
    reset_rows = [line.split() for line in reset.splitlines()[2:] if line.strip()]
    f["resetOffsetByTime"] = (reset.startswith(f"rollback consumer offset by specified group[{GROUP}]"),
                              sorted((norm(r[0]), int(r[1]), int(r[2])) for r in reset_rows))
    f["deleteTopic"] = out["deleteTopic"].split("\n")[:2]
    return f


def _expected(sent: dict) -> dict:
    """The facts that are right, whichever broker answers."""
    msg = {"OffsetID": True, "Topic": TOPIC, "Tags": "[TagA]", "Keys": "[key-3]", "Queue ID": True,
           "Queue Offset": True, "CommitLog Offset": True, "UNIQ_KEY": True,
           "track": [(GROUP, "CONSUMED")]}
    return {
        "clusterList": [("DefaultCluster", "<BROKER>", "0", "<ADDR>", True)],
        "topicList": True,
        "topicRoute": ([("<BROKER>", 4, 4, 6)], [("DefaultCluster", "<BROKER>", {0: "<ADDR>"})]),
        "topicStatus": ([("<BROKER>", q, 0) for q in range(4)], N),
        "updateTopic": "create topic to <ADDR> success.",
        "updateSubGroup": ("create subscription group to <ADDR> success.", True),
        "consumerProgress": ([(TOPIC, "<BROKER>", q, 0, 0) for q in range(4)], True),
        "consumerConnection": ([("PYTHON", True)], True, True, True, True),
        "producerConnection": [("0001", "PYTHON")],
        "queryMsgByKey": [(True, True, True)],
        "queryMsgById": msg,
        "queryMsgByOffset": msg,
        "brokerStatus": (True, True, True, True),
        "getBrokerConfig": ("<BROKER>", "DefaultCluster", "<ADDR>"),
        "resetOffsetByTime": (True, [("<BROKER>", q, 0) for q in range(4)]),
        "deleteTopic": [f"delete topic [{NEW_TOPIC}] from cluster [DefaultCluster] success.",
                        f"delete topic [{NEW_TOPIC}] from NameServer success."],
    }


def _check(namesrv, broker_addr, broker_name) -> dict:
    out, sent = _scenario(namesrv, broker_addr, broker_name)
    facts = _facts(out, sent, broker_addr, broker_name)
    expected = _expected(sent)
    for name in expected:
        assert facts[name] == expected[name], f"{name}:\n{out[name]}"
    # the updates and the deletion really happened
    with MQAdmin(namesrv) as admin:
        assert wait_for(lambda: NEW_TOPIC not in admin.topic_list(), 30)
        stats = admin.topic_stats(TOPIC)
        assert sum(r.max_offset for r in stats) == N
    return facts


def test_real_mqadmin_answers_the_same_from_mqbroker_and_apache_rocketmq(mqbroker, java_cluster):
    ns, broker = java_cluster
    java = _check(ns.addr, broker.addr, broker.broker_name)
    mine = _check(*mqbroker)
    assert mine == java
