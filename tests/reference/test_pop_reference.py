"""RocketMQ 5's pop consumption over remoting, the same scenario against mqbroker and against
Apache RocketMQ 5.3.3's broker, with the official 5.x remoting client (MQClientAPIImpl from
rocketmq-client 5.3.3, the API the 5.x proxy pops with): pop, pop again (nothing: invisible),
ack, batch ack, change invisible time, the changed message back from the retry queue as a
second delivery, ack, nothing more. Both brokers must answer the same."""
from __future__ import annotations

import json

from tests.support.processes import BrokerProcess
from tests.support.protocol import create_topic
from tests.support.reference5 import Java5Broker, Java5Namesrv, mqadmin5, run_java5_driver
from tests.support.waiting import wait_for


def _scenario(namesrv: str, broker_addr: str, broker_name: str, topic: str, tmp_path) -> list[dict]:
    proc = run_java5_driver("PopScenario.java", [namesrv, broker_addr, broker_name, topic, "GPopRef"],
                            timeout_s=240, workdir=tmp_path)
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results and "error" not in results[-1], proc.stdout[-3000:] + proc.stderr[-3000:]
    return results


def test_pop_over_remoting_matches_apache_5(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"flushConsumerOffsetInterval": "500"}) as b:
        create_topic(b, "PopRef")
        ours = _scenario(b.namesrv_addr, b.broker_addr, "broker-a", "PopRef", tmp_path)
    with Java5Namesrv(tmp_path / "ns") as ns, Java5Broker(tmp_path / "jb", ns.addr) as jb:
        made = mqadmin5(["updateTopic", "-n", ns.addr, "-c", "DefaultCluster", "-t", "PopRef"], home=tmp_path)
        assert made.returncode == 0, made.stdout + made.stderr
        assert wait_for(lambda: "PopRef" in mqadmin5(["topicList", "-n", ns.addr], home=tmp_path).stdout, timeout=120)
        theirs = _scenario(ns.addr, jb.broker_addr, jb.broker_name, "PopRef", tmp_path)
    assert ours == theirs
    pop, again = ours[0], ours[1]
    assert [m["body"] for m in pop["messages"]] == ["p-0", "p-1", "p-2", "p-3"]
    assert again["status"] == "POLLING_NOT_FOUND"
    revived = next(r for r in ours if r["step"] == "revived")
    assert [(m["body"], m["reconsume"], m["ck_type"]) for m in revived["messages"]] == [("p-0", 1, "1")]
