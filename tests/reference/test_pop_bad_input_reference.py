"""Malformed POP_MESSAGE / ACK_MESSAGE / CHANGE_MESSAGE_INVISIBLETIME / BATCH_ACK_MESSAGE
requests sent to Apache RocketMQ 5.3.3's broker and to mqbroker: the same response codes
(tests/broker/test_pop_remoting.py checks that mqbroker stores nothing for them)."""
from __future__ import annotations

import pytest

from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.broker.test_pop_remoting import MALFORMED, module_broker  # noqa: F401 (a fixture)
from tests.support.reference5 import Java5Broker, Java5Namesrv, mqadmin5
from tests.support.protocol import send
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def java5_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("popref")
    with Java5Namesrv(tmp / "ns") as ns, Java5Broker(tmp / "jb", ns.addr, broker_name="broker-a") as jb, \
            SyncRemotingClient() as rc:
        made = mqadmin5(["updateTopic", "-n", ns.addr, "-b", jb.broker_addr, "-t", "PopX", "-r", "2", "-w", "2"],
                        home=tmp)
        assert made.returncode == 0, made.stdout + made.stderr
        assert wait_for(lambda: "PopX" in mqadmin5(["topicList", "-n", ns.addr], home=tmp).stdout, timeout=60)
        jb.namesrv_addr = ns.addr
        assert send(rc, jb, "PopX", b"x").code == ResponseCode.SUCCESS
        yield jb, rc


@pytest.mark.parametrize("code,fields,want", MALFORMED)
def test_malformed_pop_requests_answer_as_apache_5(java5_broker, module_broker, code, fields, want):  # noqa: F811
    answers = []
    for b, rc in (java5_broker, module_broker):
        r = rc.invoke(b.broker_addr, create_request(code, fields) if fields is not None
                      else create_request(code, body=b""), 5000)
        answers.append(r.code)
    assert answers[0] == answers[1] == want, answers
