"""``namespace`` as the official Java client 4.9.8 has it (``setNamespace``), on mqbroker: what
mqcore.client sends under a namespace a Java consumer with the same namespace receives, and
the reverse; both name the broker's topics and groups alike (``ns%topic``, ``ns%group``,
``%RETRY%ns%group``) and show the user the names without it."""
from __future__ import annotations

import threading

import pytest

from mqcore.admin import MQAdmin
from mqcore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from tests.support.processes import BrokerProcess
from tests.support.reference import run_java_driver
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

NS = "nsA"
N = 5


def test_namespaced_clients_of_both_languages_share_topics_and_groups(tmp_path):
    with BrokerProcess(tmp_path / "store") as b:
        with MQAdmin(b.namesrv_addr) as admin:
            for t in ("NsToJava", "NsFromJava"):
                admin.create_topic(b.broker_addr, f"{NS}%{t}", read_queue_nums=2, write_queue_nums=2)
            assert wait_for(lambda: f"{NS}%NsFromJava" in admin.topic_list())

        # ours -> Java
        with Producer("ns-pg", namesrv_addr=b.namesrv_addr, namespace=NS) as p:
            results = [p.send(Message("NsToJava", f"ours-{i}".encode())) for i in range(N)]
        assert {r.message_queue.topic for r in results} == {"NsToJava"}  # the user's name
        java = run_java_driver("NamespaceScenario.java", [b.namesrv_addr, NS, "NsToJava", "ns-java-cg", "consume",
                                                          str(N)], workdir=tmp_path, timeout_s=180)
        assert "DONE" in java.stdout, java.stdout + java.stderr
        got = sorted(line.split(" ", 1)[1] for line in java.stdout.splitlines() if line.startswith("GOT "))
        assert got == sorted(f"NsToJava ours-{i}" for i in range(N))

        # Java -> ours, with one failure so the retry topic is used
        java = run_java_driver("NamespaceScenario.java", [b.namesrv_addr, NS, "NsFromJava", "ns-java-pg", "produce",
                                                          str(N)], workdir=tmp_path, timeout_s=180)
        assert java.stdout.count("SENT NsFromJava") == N, java.stdout + java.stderr
        seen, lock, failed = [], threading.Lock(), []

        def listener(msgs, ctx):
            with lock:
                for m in msgs:
                    seen.append((m.topic, m.body.decode(), m.reconsume_times))
                if not failed:
                    failed.append(msgs[0].body)
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

        c = PushConsumer("ns-cg", namesrv_addr=b.namesrv_addr, namespace=NS, consume_from_where="first")
        c.subscribe("NsFromJava")
        c.register_listener(listener)
        with c:
            assert wait_for(lambda: len({s[1] for s in seen}) == N and any(s[2] == 1 for s in seen), 60), seen
            with MQAdmin(b.namesrv_addr) as admin:
                assert admin.consumer_connection(f"{NS}%ns-cg").connections  # the broker knows the wrapped group
                assert f"%RETRY%{NS}%ns-cg" in admin.topic_list()
        assert {s[0] for s in seen} == {"NsFromJava"}
        assert sorted({s[1] for s in seen}) == sorted(f"java-{i}" for i in range(N))
