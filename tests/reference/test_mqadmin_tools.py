"""mqcore's mqadmin and Apache's (rocketmq-tools 4.9.8) print the same for consumerStatus,
queryMsgById -g -d (direct consumption), getNamesrvConfig, updateNamesrvConfig, wipeWritePerm,
addWritePerm, brokerConsumeStats, cloneGroupOffset and statsAll, on the same cluster state: an mqcore.client
push consumer that has consumed everything, connected to mqbroker and to the Java 4.9.7 broker
(which forwards Apache's consumerStatus to it, so mqcore.client answers a Java broker too).
"""
from __future__ import annotations

import io
import re
import threading

import pytest

from mqcore.admin import MQAdmin
from mqcore.admin.cli import main as mqadmin_main
from mqcore.errors import MQError
from mqcore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer

from tests.admin.scenarios import FAST, wait_for
from tests.support.processes import BrokerProcess
from tests.support.reference import JavaBroker, JavaNamesrv, mqadmin_batch

pytestmark = pytest.mark.timeout(600)

TOPIC = "ToolsTopic"
GROUP = "tools-cg"
CLONE = "tools-cg-clone"
N = 6


def _ours(argv: list[str]) -> str:
    out = io.StringIO()
    assert mqadmin_main(argv, out) == 0, argv
    return out.getvalue()


def _committed(admin: MQAdmin) -> int:
    try:
        stats = admin.consume_stats(GROUP, TOPIC)
    except MQError:  # a broker that has no offsets of the group yet may refuse the question
        return -1
    return sum(r.consumer_offset for r in stats.rows) if stats.diff_total == 0 else -1


def _scenario(namesrv: str, broker_addr: str, broker_name: str, tmp_path) -> dict:
    with MQAdmin(namesrv) as admin:
        admin.create_topic(broker_addr, TOPIC, read_queue_nums=2, write_queue_nums=2)
        assert wait_for(lambda: TOPIC in admin.topic_list())
    got, lock = [], threading.Lock()

    def listener(msgs, ctx):
        with lock:
            got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(GROUP, namesrv_addr=namesrv, consume_from_where="first", **FAST)
    consumer.subscribe(TOPIC, "*")
    consumer.register_listener(listener)
    producer = Producer("tools-pg", namesrv_addr=namesrv).start()
    try:
        sent = [producer.send(Message(TOPIC, f"tools-{i}".encode(), tags="TagA")) for i in range(N)]
        consumer.start()
        assert wait_for(lambda: len(got) >= N, 60)
        with MQAdmin(namesrv) as admin:
            # every offset committed, not just no lag: a group with no committed offset yet has an
            # empty table, whose diff is 0 too (and Apache's tools then see nothing to show or clone)
            assert wait_for(lambda: _committed(admin) == N, 30)
            client_id = admin.consumer_connection(GROUP).connections[0].client_id
        n = ["-n", namesrv]
        commands = {
            "consumerStatus": ["consumerStatus", *n, "-g", GROUP, "-i", client_id],
            "direct": ["queryMsgById", *n, "-i", sent[0].offset_msg_id, "-g", GROUP, "-d", client_id],
            "updateNamesrvConfig": ["updateNamesrvConfig", *n, "-k", "orderMessageEnable", "-v", "true"],
            "getNamesrvConfig": ["getNamesrvConfig", *n],
            "wipeWritePerm": ["wipeWritePerm", *n, "-b", broker_name],
            "addWritePerm": ["addWritePerm", *n, "-b", broker_name],
            "brokerConsumeStats": ["brokerConsumeStats", *n, "-b", broker_addr],
            "cloneGroupOffset": ["cloneGroupOffset", *n, "-s", GROUP, "-d", CLONE, "-t", TOPIC, "-o", "true"],
            "statsAll": ["statsAll", *n, "-t", TOPIC],
        }
        apache = dict(zip(commands, mqadmin_batch(list(commands.values()), home=tmp_path), strict=True))
        ours = {name: _ours(argv) for name, argv in commands.items()}
    finally:
        consumer.shutdown()
        producer.shutdown()
    return {"apache": apache, "ours": ours, "client_id": client_id}


@pytest.fixture(scope="module")
def on_java(tmp_path_factory):
    work = tmp_path_factory.mktemp("tools-java")
    with JavaNamesrv(work) as ns, JavaBroker(work / "store", ns.addr) as b:
        yield _scenario(ns.addr, b.addr, "broker-java", work)


@pytest.fixture(scope="module")
def on_mq(tmp_path_factory):
    work = tmp_path_factory.mktemp("tools-mq")
    with BrokerProcess(work / "store", broker_name="broker-mq") as b:
        yield _scenario(b.namesrv_addr, b.broker_addr, "broker-mq", work)


def _status_facts(text: str) -> dict:
    assert "command failed" not in text and "\tat " not in text, text
    sections = re.findall(r"^#Consumer [^#]+#$", text, re.M)
    subs = re.findall(r"^\d{3} Topic: (\S+)\s+ClassFilter: (\w+)\s+SubExpression: (.*)$", text, re.M)
    offsets = text.split("#Consumer Offset#")[1].split("#Consumer MQ Detail#")[0]
    rows = sorted((r[0], int(r[2]), int(r[3])) for r in (line.split() for line in offsets.splitlines()[2:])
                  if len(r) == 4 and r[0] == TOPIC)
    rt = text.split("#Consumer RT&TPS#")[1]
    rt_topics = sorted(line.split()[0] for line in rt.splitlines()[2:] if line.strip())
    props = dict(re.findall(r"^(PROP_\w+|consumerGroup|messageModel)\s*: (.*)$", text, re.M))
    return {"sections": sections, "subs": sorted(subs), "offsets": rows, "rt_topics": rt_topics,
            "props": sorted(props), "group": props.get("consumerGroup"), "model": props.get("messageModel"),
            "detail": "ProcessQueueInfo [commitOffset=" in text}


@pytest.mark.parametrize("tool", ["apache", "ours"])
def test_consumer_status_of_an_mqcore_client(on_java, on_mq, tool):
    ref = _status_facts(on_java["apache"]["consumerStatus"])
    assert ref["offsets"] == [(TOPIC, 0, 3), (TOPIC, 1, 3)] and ref["group"] == GROUP
    assert _status_facts(on_java[tool]["consumerStatus"]) == ref
    assert _status_facts(on_mq[tool]["consumerStatus"]) == ref


@pytest.mark.parametrize("tool", ["apache", "ours"])
def test_direct_consumption_by_an_mqcore_client(on_java, on_mq, tool):
    for run in (on_java, on_mq):
        text = run[tool]["direct"]
        assert re.search(r"ConsumeMessageDirectlyResult \[order=false, autoCommit=true, consumeResult=CR_SUCCESS",
                         text), text


def test_write_perm_and_namesrv_config(on_java, on_mq):
    for run in (on_java, on_mq):
        for name in ("wipeWritePerm", "addWritePerm"):
            lines = [re.sub(r"name server\[[^]]+\]", "name server[NS]", re.sub(r"broker\[[^]]+\]", "broker[B]", line))
                     for line in run["apache"][name].splitlines() if "perm of broker" in line]
            ours = [re.sub(r"name server\[[^]]+\]", "name server[NS]", re.sub(r"broker\[[^]]+\]", "broker[B]", line))
                    for line in run["ours"][name].splitlines() if "perm of broker" in line]
            assert len(lines) == 1 and re.fullmatch(r"\w+ write perm of broker\[B\] in name server\[NS\] OK, \d+",
                                                    lines[0]), lines
            assert ours[0].rsplit(", ", 1)[0] == lines[0].rsplit(", ", 1)[0]
        for tool in ("apache", "ours"):
            assert run[tool]["updateNamesrvConfig"].startswith("update name server config success!")
            cfg = run[tool]["getNamesrvConfig"]
            assert re.search(r"^============127\.0\.0\.1:\d+============$", cfg, re.M), cfg
            assert re.search(r"^orderMessageEnable\s+=  true$", cfg, re.M), cfg  # what updateNamesrvConfig set
            assert re.search(r"^listenPort\s+=  \d+$", cfg, re.M), cfg


def _consume_rows(text: str) -> tuple[list, str]:
    rows = sorted((r[0], r[1], int(r[3]), int(r[4]), int(r[5]), int(r[6])) for r in
                  (line.split() for line in text.splitlines()[1:]) if len(r) >= 7 and r[0] == TOPIC)
    total = re.search(r"Diff Total: (\d+)", text).group(1)
    return rows, total


def test_broker_consume_stats(on_java, on_mq):
    ref = _consume_rows(on_java["apache"]["brokerConsumeStats"])
    assert ref == ([(TOPIC, GROUP, 0, 3, 3, 0), (TOPIC, GROUP, 1, 3, 3, 0)], "0")
    assert _consume_rows(on_java["ours"]["brokerConsumeStats"]) == ref
    assert _consume_rows(on_mq["apache"]["brokerConsumeStats"]) == ref
    assert _consume_rows(on_mq["ours"]["brokerConsumeStats"]) == ref


def test_clone_group_offset(on_java, on_mq):
    for run in (on_java, on_mq):
        for tool in ("apache", "ours"):
            assert f"clone group offset success. srcGroup[{GROUP}], destGroup=[{CLONE}], topic[{TOPIC}]" \
                in run[tool]["cloneGroupOffset"]


def test_stats_all(on_java, on_mq):
    header = on_java["apache"]["statsAll"].splitlines()[0].split()
    assert header == ["#Topic", "#Consumer", "Group", "#Accumulation", "#InTPS", "#OutTPS", "#InMsg24Hour",
                      "#OutMsg24Hour"]
    for run in (on_java, on_mq):
        for tool in ("apache", "ours"):
            lines = run[tool]["statsAll"].splitlines()
            assert lines[0].split() == header
            rows = [line.split() for line in lines[1:] if line.strip()]
            # the group and its clone, whose cloned offsets name it a consumer of the topic
            assert sorted((r[0], r[1], r[2]) for r in rows) == [(TOPIC, GROUP, "0"), (TOPIC, CLONE, "0")], \
                run[tool]["statsAll"]
            mine = [r for r in rows if r[1] == GROUP][0]
            in_day, out_day = int(mine[5]), int(mine[6])
            assert in_day in (0, N) and out_day in (0, N)  # 0 until the broker's first 10 s sample
