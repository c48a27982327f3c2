"""``mqadmin`` scenarios shared by the mqbroker run (tests/admin) and the Apache RocketMQ
run (tests/reference): the same commands must give the same answers from both brokers."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import threading
import time

from mqcore.admin import MQAdmin
from mqcore.admin.cli import main
from mqcore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer

FAST = dict(rebalance_interval_ms=1000, heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000,
            persist_consumer_offset_interval_ms=500)


@dataclasses.dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def json(self):
        assert self.rc == 0, self.err
        return json.loads(self.out)


@dataclasses.dataclass
class Target:
    """One cluster under test: name server, the broker's address and names."""
    namesrv: str
    broker_addr: str
    broker_name: str
    cluster: str = "DefaultCluster"

    def run(self, *argv: str) -> Result:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main([*argv, "-n", self.namesrv], out=out)
        return Result(rc, out.getvalue(), err.getvalue())

    def ok(self, *argv: str) -> Result:
        r = self.run(*argv)
        assert r.rc == 0, f"mqadmin {' '.join(argv)} failed: {r.err}"
        return r


def wait_for(pred, timeout: float = 30.0, step: float = 0.1) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def routed(t: Target, topic: str) -> bool:
    return t.run("topicRoute", "-t", topic).rc == 0


def create_topic(t: Target, topic: str, queues: int = 4) -> None:
    t.ok("updateTopic", "-c", t.cluster, "-t", topic, "-r", str(queues), "-w", str(queues))
    assert wait_for(lambda: routed(t, topic)), f"{topic} never routed"


# --- scenarios -------------------------------------------------------------------------------------
def topic_lifecycle(t: Target, topic: str) -> None:
    r = t.ok("updateTopic", "-b", t.broker_addr, "-t", topic, "-r", "3", "-w", "3")
    assert f"create topic to {t.broker_addr} success." in r.out
    assert wait_for(lambda: topic in t.ok("topicList", "--json").json)
    route = t.ok("topicRoute", "-t", topic, "--json").json
    assert [(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]] \
        == [(t.broker_name, 3, 3, 6)]
    table = t.ok("topicRoute", "-t", topic, "-l").out
    assert t.broker_name in table and "Total:" in table
    status = t.ok("topicStatus", "-t", topic, "--json").json
    assert [(s["queueId"], s["minOffset"], s["maxOffset"]) for s in status] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    clustered = t.ok("topicList", "-c", "--json").json
    assert {"cluster": t.cluster, "topic": topic, "consumerGroup": ""} in clustered
    r = t.ok("deleteTopic", "-c", t.cluster, "-t", topic)
    assert f"delete topic [{topic}] from cluster [{t.cluster}] success." in r.out
    assert wait_for(lambda: topic not in t.ok("topicList", "--json").json)
    # an ordered topic: the name servers keep its order configuration (and hand it out with the
    # route, on RocketMQ only when the name server's orderMessageEnable is on)
    r = t.ok("updateTopic", "-c", t.cluster, "-t", topic + "Ordered", "-r", "2", "-w", "2", "-o", "true")
    assert f"orderConf=[{t.broker_name}:2]" in r.out
    with MQAdmin(t.namesrv) as admin:
        assert admin.order_conf(topic + "Ordered") == f"{t.broker_name}:2"
        assert admin.order_conf(topic) is None
    t.ok("deleteTopic", "-c", t.cluster, "-t", topic + "Ordered")


def no_route(t: Target, topic: str) -> None:
    """A topic nobody created (with route-time auto-creation off on mqbroker)."""
    gone = t.run("topicRoute", "-t", topic)
    assert gone.rc == 1 and f"no route for topic '{topic}'" in gone.err and "Traceback" not in gone.err
    assert gone.err.count("\n") == 1


def messages(t: Target, topic: str) -> None:
    create_topic(t, topic, 2)
    sent = t.ok("sendMessage", "-t", topic, "-p", "hello admin", "-k", "order-17", "-c", "TagA", "--json").json
    assert sent["sendStatus"] == "SEND_OK" and sent["brokerName"] == t.broker_name
    pinned = t.ok("sendMessage", "-t", topic, "-p", "to queue 1", "-b", t.broker_name, "-i", "1", "--json").json
    assert pinned["queueId"] == 1
    # by key: the message with that key only (the index is a hash, the answer must not be)
    assert wait_for(lambda: len(t.ok("queryMsgByKey", "-t", topic, "-k", "order-17", "--json").json) == 1)
    by_key = t.ok("queryMsgByKey", "-t", topic, "-k", "order-17").out
    assert sent["msgId"] in by_key and "#Message ID" in by_key
    assert t.ok("queryMsgByKey", "-t", topic, "-k", "order-18", "--json").json == []
    # by offset message id, and by the client's message id within the topic
    m = t.ok("queryMsgById", "-i", sent["offsetMsgId"], "--json").json
    assert (m["topic"], m["tags"], m["keys"], m["body"]) == (topic, "TagA", "order-17", "hello admin")
    shown = t.ok("queryMsgById", "-i", sent["offsetMsgId"]).out
    assert "Keys:                [order-17]" in shown and f"OffsetID:            {sent['offsetMsgId']}" in shown
    assert t.ok("queryMsgById", "-i", sent["msgId"], "-t", topic, "--json").json["body"] == "hello admin"
    # by queue offset
    m = t.ok("queryMsgByOffset", "-t", topic, "-b", t.broker_name, "-i", "1", "-o",
             str(pinned["queueOffset"]), "--json").json
    assert m["body"] == "to queue 1" and m["queueId"] == 1
    missing = t.run("queryMsgByOffset", "-t", topic, "-b", t.broker_name, "-i", "1", "-o", "99")
    assert missing.rc == 1 and "no message at offset 99" in missing.err
    unknown = t.run("queryMsgByOffset", "-t", topic, "-b", "no-such-broker", "-i", "0", "-o", "0")
    assert unknown.rc == 1 and "unknown broker 'no-such-broker'" in unknown.err
    # consumeMessage reads without committing
    bodies = sorted(m["body"] for m in t.ok("consumeMessage", "-t", topic, "--json").json)
    assert bodies == ["hello admin", "to queue 1"]
    assert len(t.ok("consumeMessage", "-t", topic, "-c", "1", "--json").json) == 1


def groups_and_offsets(t: Target, topic: str, group: str, n: int = 20) -> None:
    create_topic(t, topic, 2)
    r = t.ok("updateSubGroup", "-b", t.broker_addr, "-g", group, "-r", "3")
    assert f"create subscription group to {t.broker_addr} success." in r.out and "retryMaxTimes=3" in r.out
    with Producer("admin-it-pg", namesrv_addr=t.namesrv) as p:
        for i in range(n):
            p.send(Message(topic, f"m{i}".encode()))
    before_consume = int(time.time() * 1000)
    got = []
    lock = threading.Lock()
    c = PushConsumer(group, namesrv_addr=t.namesrv, consume_from_where="first", **FAST)
    c.subscribe(topic, "*")

    def listener(msgs, ctx):
        with lock:
            got.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c.register_listener(listener)
    c.start()
    try:
        assert wait_for(lambda: len(got) >= n, 60)

        def progress():
            r = t.run("consumerProgress", "-g", group, "--json")
            return r.json if r.rc == 0 else None

        def caught_up():
            p = progress()
            return p is not None and [q["diff"] for q in p["queues"] if q["topic"] == topic] == [0, 0]

        assert wait_for(caught_up, 30)
        table = t.ok("consumerProgress", "-g", group).out
        assert "Diff Total: 0" in table and topic in table
        conn = t.ok("consumerConnection", "-g", group, "--json").json
        assert len(conn["connections"]) == 1 and conn["connections"][0]["language"] == "PYTHON"
        assert conn["subscriptions"][topic] == "*" and conn["messageModel"] == "CLUSTERING"
        listing = t.ok("consumerProgress", "--json").json
        assert any(g["group"] == group and g["count"] == 1 for g in listing)
        # online reset: the broker moves the offsets and tells the consumer
        reset = t.ok("resetOffsetByTime", "-g", group, "-t", topic, "-s", str(before_consume - 3_600_000), "--json")
        assert reset.json["consumersOnline"] is True
        assert sorted((q["queueId"], q["offset"]) for q in reset.json["queues"]) == [(0, 0), (1, 0)]
        # the running consumer acts on it: everything comes again, and it catches up again
        assert wait_for(lambda: len(got) >= 2 * n, 60), f"{len(got)} of {2 * n} after the reset"
        assert wait_for(caught_up, 30)
    finally:
        c.shutdown()
    # offline reset: with nobody online the committed offsets are rewritten directly
    assert wait_for(lambda: t.run("consumerConnection", "-g", group).rc == 1, 30)
    offline = t.ok("resetOffsetByTime", "-g", group, "-t", topic, "-s", "now", "--json").json
    assert offline["consumersOnline"] is False
    assert sum(q["offset"] for q in offline["queues"]) == n
    gone = t.run("consumerConnection", "-g", group)
    assert gone.rc == 1 and "not online" in gone.err.lower()
    stats = t.ok("consumerProgress", "-g", group, "--json").json
    assert sum(q["consumerOffset"] for q in stats["queues"] if q["topic"] == topic) == n
    r = t.ok("deleteSubGroup", "-b", t.broker_addr, "-g", group)
    assert f"delete subscription group [{group}] from broker [{t.broker_addr}] success." in r.out
    # for a whole cluster, the group's retry topic goes too (its dead-letter topic is asked
    # to go as well, existing or not, as RocketMQ's tool asks)
    assert f"%RETRY%{group}" in t.ok("topicList", "--json").json
    r = t.ok("deleteSubGroup", "-c", t.cluster, "-g", group, "--json")
    assert r.json["deletedTopics"] == [f"%RETRY%{group}", f"%DLQ%{group}"]
    assert wait_for(lambda: f"%RETRY%{group}" not in t.ok("topicList", "--json").json)


def broker_state(t: Target) -> None:
    seen: list = []

    def listed() -> bool:
        r = t.run("clusterList", "--json")
        seen[:] = [b for b in json.loads(r.out) if b["addr"] == t.broker_addr] if r.out else []
        if r.rc != 0:  # then the broker's row must say why, and stderr too
            assert seen and seen[0]["runtime"] is None and seen[0]["error"] and r.err, (r.out, r.err)
            return False
        return bool(seen) and "brokerVersionDesc" in seen[0]["runtime"]

    # a broker that just booted on a loaded machine may let one runtime request time out, and a
    # Java broker answers it with an error until its first stats sample (NoSuchElementException):
    # clusterList then exits 1 with {"error": ...} for it, so ask again
    assert wait_for(listed, timeout=60, step=1), seen
    mine = seen
    assert mine[0]["cluster"] == t.cluster and mine[0]["brokerName"] == t.broker_name
    assert mine[0]["runtime"]["brokerVersionDesc"].startswith("V4_9")
    table = t.ok("clusterList").out
    assert "#Cluster Name" in table and t.broker_addr in table
    status = t.ok("brokerStatus", "-b", t.broker_addr, "--json").json
    for key in ("putTps", "getTransferedTps", "commitLogMaxOffset", "earliestMessageTimeStamp", "commitLogDiskRatio"):
        assert key in status, key
    cfg = t.ok("getBrokerConfig", "-b", t.broker_addr, "--json").json
    assert cfg["brokerName"] == t.broker_name and cfg["brokerClusterName"] == t.cluster
    text = t.ok("getBrokerConfig", "-c", t.cluster).out
    assert f"============Master: {t.broker_addr}============" in text


def config_survives_restart(t: Target, conf_path, restart) -> None:
    """updateBrokerConfig is saved into the broker.conf the broker started with: after a
    restart of the broker process, getBrokerConfig shows the new value. ``restart`` restarts
    the broker from that same file (not rewritten by the test) and returns the new Target."""
    before = t.ok("getBrokerConfig", "-b", t.broker_addr, "--json").json
    assert before["fileReservedTime"] != "7" and before["maxTransferCountOnMessageInMemory"] != "17"
    t.ok("updateBrokerConfig", "-b", t.broker_addr, "-k", "fileReservedTime", "-v", "7")
    t.ok("updateBrokerConfig", "-b", t.broker_addr, "-k", "maxTransferCountOnMessageInMemory", "-v", "17")
    saved = read_conf(conf_path)
    assert saved["fileReservedTime"] == "7" and saved["maxTransferCountOnMessageInMemory"] == "17"
    t = restart()
    after = t.ok("getBrokerConfig", "-b", t.broker_addr, "--json").json
    assert after["fileReservedTime"] == "7" and after["maxTransferCountOnMessageInMemory"] == "17"


def read_conf(path) -> dict[str, str]:
    from mqcore.broker.conf import read_properties
    with open(path, encoding="utf-8") as f:
        return read_properties(f.read())
