"""Store files both ways: the migration path between mqbroker and Apache RocketMQ.

A store written by one broker (several topics and queues, keys, a delivered and a still-waiting
delay message, retry traffic, committed consumer offsets) is stopped, copied, and opened by the
other broker, which must serve every message at the same queue offsets with the same ids, resume
every group from its committed offset, answer key queries, deliver the waiting delay message
exactly once and go on appending at the right offsets. The store the Java broker wrote must also
pass ``mqstore verify`` and be read completely by ``spark.read.format("rocketmq")``.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from mqcore.client import ConsumeConcurrentlyStatus, Message, Producer, PullConsumer, PushConsumer
from mqcore.jsonutil import loads_lenient
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.client.integration.conftest import FAST, JAVA_BUSY_LIMITS, SHORT_DELAYS
from tests.support.waiting import wait_for
from tests.client.integration.helpers import Sink, create_topic, pull_everything
from tests.spark.conftest import spark  # noqa: F401  (the shared SparkSession fixture)
from tests.support.processes import BrokerProcess
from tests.support.reference import JavaBroker, JavaNamesrv

pytestmark = pytest.mark.timeout(420)

#: one geometry for both brokers: file sizes and index shape must match for the files to be read
GEOMETRY = {
    "mappedFileSizeCommitLog": 16 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 300000 * 20,
    "maxHashSlotNum": 10000,
    "maxIndexNum": 40000,
    # level 18 waits 45 s: long enough to be still waiting when the writer has stopped
    "messageDelayLevel": SHORT_DELAYS.rsplit(" ", 1)[0] + " 45s",
}
JAVA_CONF = {**GEOMETRY, **JAVA_BUSY_LIMITS}
TOPICS = {"SwapA": 4, "SwapB": 2}
DELAY_TOPIC = "SwapDelay"
RETRY_GROUP = "swap-retry"
OFFSET_GROUP = "swap-offsets"
WAITING_DELAY_LEVEL = 18


@dataclass
class Truth:
    """What the writing broker served before it stopped."""
    queues: dict[tuple[str, int], list[tuple[int, str, bytes]]] = field(default_factory=dict)
    offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (group, topic, qid) -> offset
    keys: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (topic, key) -> msg ids


def served(ns: str, topics) -> dict[tuple[str, int], list[tuple[int, str, bytes]]]:
    """(topic, queue id) -> [(queue offset, msg id, body)] of every message, in queue order."""
    out: dict[tuple[str, int], list] = {}
    for topic in topics:
        for m in pull_everything(ns, topic):
            out.setdefault((topic, m.queue_id), []).append((m.queue_offset, m.msg_id, m.body))
    return {k: sorted(v) for k, v in out.items()}


def committed(ns: str, group: str, topic: str) -> dict[tuple[str, str, int], int]:
    with PullConsumer(group, namesrv_addr=ns) as pc:
        return {(group, topic, mq.queue_id): pc.fetch_consume_offset(mq)
                for mq in pc.fetch_subscribe_message_queues(topic)}


def schedule_caught_up(ns: str) -> bool:
    """Whether the broker's delay progress (GET_ALL_DELAY_OFFSET) has reached the end of every
    SCHEDULE_TOPIC_XXXX queue (queue id = level - 1): no delayed message is left to deliver."""
    with SyncRemotingClient() as rc:
        route = loads_lenient(rc.invoke(ns, create_request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": DELAY_TOPIC}),
                                        5000).body)
        addr = route["brokerDatas"][0]["brokerAddrs"]["0"]
        progress = loads_lenient(rc.invoke(addr, create_request(RC.GET_ALL_DELAY_OFFSET), 5000).body)
        done = {int(k): int(v) for k, v in progress.get("offsetTable", {}).items()}
        for qid in range(WAITING_DELAY_LEVEL):
            r = rc.invoke(addr, create_request(RC.GET_MAX_OFFSET, {"topic": "SCHEDULE_TOPIC_XXXX",
                                                                   "queueId": str(qid)}), 5000)
            end = int(r.ext_fields.get("offset", 0)) if r.code == ResponseCode.SUCCESS else 0
            if end > done.get(qid + 1, 0):
                return False
    return True


def key_hits(ns: str, topic: str, key: str) -> set[str]:
    with PullConsumer("swap-query", namesrv_addr=ns) as pc:
        return {m.msg_id for m in pc.query_message(topic, key)}


def write_traffic(ns: str, broker_addr: str) -> Truth:
    """The same traffic on either broker, through mqcore.client; returns what it then serves."""
    for topic, queues in TOPICS.items():
        create_topic(broker_addr, ns, topic, queues)
    with Producer("swap-pg", namesrv_addr=ns) as p:
        for i in range(60):
            p.send(Message("SwapA", f"a{i}" * (1 + i % 7), tags="TA" if i % 2 else "TB", keys=[f"ka{i}"]))
        for i in range(20):
            p.send(Message("SwapB", f"b{i}", keys=[f"kb{i}", "shared"]))
        p.send(Message(DELAY_TOPIC, "d-now", delay_level=1))
    assert wait_for(lambda: len(pull_everything(ns, DELAY_TOPIC)) == 1, timeout=30)

    # retry traffic: every fifth SwapB message fails once and comes back through %RETRY%
    seen: list[bytes] = []

    def fail_some_once(msgs, ctx):
        for m in msgs:
            seen.append(m.body)
            if m.reconsume_times == 0 and int(m.body[1:]) % 5 == 0:
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(RETRY_GROUP, namesrv_addr=ns, consume_from_where="first", consume_message_batch_max_size=1,
                     **FAST)
    c.subscribe("SwapB")
    c.register_listener(fail_some_once)
    with c:
        assert wait_for(lambda: len(seen) == 24, timeout=60), seen
        # every consumed message's offset taken (the shutdown below persists them); a fixed
        # 1.5 s sleep stood in for this wait
        assert wait_for(lambda: sum(c.committed_offsets("SwapB").values()) == 20
                        and sum(c.committed_offsets(f"%RETRY%{RETRY_GROUP}").values()) == 4, timeout=60)

    # a group that stopped part-way: queue q of SwapA committed at q + 3
    with PullConsumer(OFFSET_GROUP, namesrv_addr=ns) as pc:
        for mq in pc.fetch_subscribe_message_queues("SwapA"):
            pc.update_consume_offset(mq, mq.queue_id + 3)
        pc.commit()

    with Producer("swap-pg", namesrv_addr=ns) as p:
        p.send(Message(DELAY_TOPIC, "d-later", delay_level=WAITING_DELAY_LEVEL))

    t = Truth(queues=served(ns, [*TOPICS, DELAY_TOPIC, f"%RETRY%{RETRY_GROUP}"]))
    assert sum(len(v) for k, v in t.queues.items() if k[0] == f"%RETRY%{RETRY_GROUP}") == 4
    assert [b for (topic, _q), msgs in t.queues.items() if topic == DELAY_TOPIC for (_o, _i, b) in msgs] == [b"d-now"]
    t.offsets.update(committed(ns, OFFSET_GROUP, "SwapA"))
    t.offsets.update(committed(ns, RETRY_GROUP, "SwapB"))
    t.offsets.update(committed(ns, RETRY_GROUP, f"%RETRY%{RETRY_GROUP}"))
    assert t.offsets[(OFFSET_GROUP, "SwapA", 2)] == 5
    assert sum(v for (g, topic, _q), v in t.offsets.items() if topic == "SwapB") == 20
    for topic, key in (("SwapB", "shared"), ("SwapA", "ka7"), ("SwapB", "kb13")):
        t.keys[(topic, key)] = key_hits(ns, topic, key)
    assert len(t.keys[("SwapB", "shared")]) == 20 and len(t.keys[("SwapA", "ka7")]) == 1
    return t


def check_served_after_swap(ns: str, truth: Truth, writer_stopped_ms: int) -> None:
    """The reading broker serves what the writer served, resumes groups, answers keys, delivers the
    waiting delay message once (itself: after the writer stopped) and appends after the last offset."""
    after = served(ns, [*TOPICS, f"%RETRY%{RETRY_GROUP}"])
    assert after == {k: v for k, v in truth.queues.items() if k[0] != DELAY_TOPIC}
    for (group, topic, qid), offset in truth.offsets.items():
        assert committed(ns, group, topic)[(group, topic, qid)] == offset, (group, topic, qid)
    for (topic, key), ids in truth.keys.items():
        assert key_hits(ns, topic, key) == ids, (topic, key)

    # the waiting delay message arrives, and the delivered one is not delivered again
    assert wait_for(lambda: len(pull_everything(ns, DELAY_TOPIC)) >= 2, timeout=90)
    # and nothing more can be: every delay level's progress is at the end of its schedule queue
    assert wait_for(lambda: schedule_caught_up(ns), timeout=30)
    delayed = pull_everything(ns, DELAY_TOPIC)
    assert sorted(m.body for m in delayed) == [b"d-later", b"d-now"]
    assert next(m for m in delayed if m.body == b"d-later").store_timestamp > writer_stopped_ms

    # a group resumes from its committed offsets: only the rest of each queue is delivered
    sink = Sink()
    c = PushConsumer(OFFSET_GROUP, namesrv_addr=ns, consume_from_where="first", **FAST)
    c.subscribe("SwapA")
    c.register_listener(sink)
    expected = {(qid, off) for (topic, qid), msgs in truth.queues.items() if topic == "SwapA"
                for (off, _i, _b) in msgs if off >= qid + 3}
    ends = {(OFFSET_GROUP, "SwapA", qid): max(off for (off, _i, _b) in msgs) + 1
            for (topic, qid), msgs in truth.queues.items() if topic == "SwapA"}
    with c:
        assert wait_for(lambda: len(sink) >= len(expected), timeout=60)
        # nothing more can arrive once the group has committed the end of every queue it reads
        assert wait_for(lambda: committed(ns, OFFSET_GROUP, "SwapA") == ends, timeout=60)
    assert {(m.queue_id, m.queue_offset) for m in sink.msgs} == expected and len(sink) == len(expected)

    # new messages continue each queue where the old broker stopped
    with Producer("swap-pg2", namesrv_addr=ns) as p:
        results = [p.send(Message("SwapA", f"new{i}")) for i in range(8)]
    per_queue: dict[int, list[int]] = {}
    for r in results:
        per_queue.setdefault(r.message_queue.queue_id, []).append(r.queue_offset)
    for qid, offs in per_queue.items():
        old = len(truth.queues[("SwapA", qid)])
        assert offs == list(range(old, old + len(offs))), qid


def copy_store(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_mqbroker_store_opened_by_apache_rocketmq(tmp_path):
    with BrokerProcess(tmp_path / "mq-store", conf=GEOMETRY) as mq:
        truth = write_traffic(mq.namesrv_addr, mq.broker_addr)
    stopped = int(time.time() * 1000)
    store = copy_store(tmp_path / "mq-store", tmp_path / "for-java" / "store")
    with JavaNamesrv(tmp_path / "ns") as ns, JavaBroker(store, ns.addr, conf=JAVA_CONF) as jb:
        try:
            check_served_after_swap(ns.addr, truth, stopped)
        except AssertionError:
            print(jb.output()[-4000:])
            raise


def mqstore(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mqcore.tools.mqstore", *args], capture_output=True, text=True,
                          timeout=120)


def test_apache_rocketmq_store_opened_by_mqbroker(tmp_path, spark):  # noqa: F811
    with JavaNamesrv(tmp_path / "ns") as ns, JavaBroker(tmp_path / "java-store", ns.addr, conf=JAVA_CONF) as jb:
        truth = write_traffic(ns.addr, jb.addr)
    stopped = int(time.time() * 1000)
    store = copy_store(tmp_path / "java-store", tmp_path / "for-mq" / "store")

    v = mqstore("verify", str(store))
    assert v.returncode == 0, v.stdout + v.stderr
    records = int(re.search(r"(\d+) records", v.stdout).group(1))

    df = spark.read.format("rocketmq").load(str(store))
    rows = df.select("topic", "queue_id", "queue_offset", "msg_id", "body", "is_delayed").collect()
    assert len(rows) == records
    for (topic, qid), msgs in truth.queues.items():
        got = sorted((r.queue_offset, r.msg_id, bytes(r.body)) for r in rows
                     if r.topic == topic and r.queue_id == qid)
        assert got == msgs, (topic, qid)
    assert [bytes(r.body) for r in rows if r.is_delayed and bytes(r.body) == b"d-later"] == [b"d-later"]

    with BrokerProcess(store, conf=GEOMETRY) as mq:
        check_served_after_swap(mq.namesrv_addr, truth, stopped)


def read_checkpoint(store: Path) -> tuple[int, int, int]:
    """(physicMsgTimestamp, logicsMsgTimestamp, indexMsgTimestamp) of a store's checkpoint file."""
    import struct
    return struct.unpack_from(">qqq", (store / "checkpoint").read_bytes())


def test_crashed_mqbroker_store_keeps_its_key_index_on_apache_rocketmq(tmp_path):
    """A store copied after mqbroker was killed (the abort file is there): the Java broker's crash
    recovery keeps only index files that end by the checkpoint's indexMsgTimestamp and re-indexes
    from a recent commitlog file, so keys of older messages are answered only if mqbroker kept
    that timestamp the way RocketMQ does."""
    small = dict(GEOMETRY, mappedFileSizeCommitLog=128 * 1024, maxMessageSize=32 * 1024, maxIndexNum=60,
                 maxHashSlotNum=100)
    mq = BrokerProcess(tmp_path / "mq-store", conf=small).start()
    try:
        ns = mq.namesrv_addr
        create_topic(mq.broker_addr, ns, "CrashKeys", 4)
        with Producer("crash-pg", namesrv_addr=ns) as p:
            for i in range(300):
                p.send(Message("CrashKeys", f"c{i:04d}".encode() * 200, keys=[f"ck{i}"]))
        first = {m.keys[0]: m for m in pull_everything(ns, "CrashKeys")}
        # later traffic, so that crash recovery starts from a later commitlog file
        assert wait_for(lambda: time.time() * 1000 > max(m.store_timestamp for m in first.values()) + 4000, 10)
        with Producer("crash-pg", namesrv_addr=ns) as p:
            for i in range(20):
                p.send(Message("CrashKeys", b"late" * 300, keys=[f"late{i}"]))
        last_ts = max(m.store_timestamp for m in pull_everything(ns, "CrashKeys"))
        assert wait_for(lambda: read_checkpoint(tmp_path / "mq-store")[1] >= last_ts, timeout=30)
    finally:
        mq.kill9()
    assert (tmp_path / "mq-store" / "abort").exists()
    assert len(list((tmp_path / "mq-store" / "commitlog").iterdir())) >= 3
    index_ts = read_checkpoint(tmp_path / "mq-store")[2]
    indexed = [k for k, m in first.items() if m.store_timestamp < index_ts]
    assert len(indexed) >= 100, (len(indexed), index_ts)

    store = copy_store(tmp_path / "mq-store", tmp_path / "for-java" / "store")
    with JavaNamesrv(tmp_path / "ns") as jns, JavaBroker(store, jns.addr, conf={**small, **JAVA_BUSY_LIMITS}):
        assert len(pull_everything(jns.addr, "CrashKeys")) == 320
        with PullConsumer("crash-query", namesrv_addr=jns.addr) as pc:
            missing = [k for k in indexed if {m.msg_id for m in pc.query_message("CrashKeys", k)} != {first[k].msg_id}]
    assert not missing, f"{len(missing)} of {len(indexed)} keys lost, e.g. {missing[:5]}"


def test_crashed_apache_rocketmq_store_opened_by_mqbroker(tmp_path):
    """The Java broker killed (abort file left, config persisted only up to its last flush): mqbroker
    recovers the copied store, serves every message and key, and resumes the persisted offsets."""
    with JavaNamesrv(tmp_path / "ns") as jns:
        jb = JavaBroker(tmp_path / "java-store", jns.addr, conf=dict(JAVA_CONF, flushConsumerOffsetInterval=500))
        jb.start()
        try:
            create_topic(jb.addr, jns.addr, "CrashJava", 3)
            with Producer("crash-pg", namesrv_addr=jns.addr) as p:
                sent = [p.send(Message("CrashJava", f"j{i}", keys=[f"jk{i}"])) for i in range(150)]
            with PullConsumer("crash-cg", namesrv_addr=jns.addr) as pc:
                for mq in pc.fetch_subscribe_message_queues("CrashJava"):
                    pc.update_consume_offset(mq, 10 + mq.queue_id)
                pc.commit()
            before = served(jns.addr, ["CrashJava"])
            offsets = tmp_path / "java-store" / "config" / "consumerOffset.json"
            assert wait_for(lambda: offsets.exists() and "CrashJava@crash-cg" in offsets.read_text(), timeout=30)
        finally:
            jb.kill9()
    assert (tmp_path / "java-store" / "abort").exists()
    store = copy_store(tmp_path / "java-store", tmp_path / "for-mq" / "store")
    with BrokerProcess(store, conf=GEOMETRY) as mq:
        ns = mq.namesrv_addr
        assert served(ns, ["CrashJava"]) == before
        assert sum(len(v) for v in before.values()) == 150
        assert {(g, q): o for (g, _t, q), o in committed(ns, "crash-cg", "CrashJava").items()} == \
            {("crash-cg", q): 10 + q for q in range(3)}
        with PullConsumer("crash-query", namesrv_addr=ns) as pc:
            for i in (0, 77, 149):
                assert [m.msg_id for m in pc.query_message("CrashJava", f"jk{i}")] == [sent[i].msg_id]
        with Producer("crash-pg2", namesrv_addr=ns) as p:
            r = p.send(Message("CrashJava", "after"))
        assert r.queue_offset == len(before[("CrashJava", r.message_queue.queue_id)])
