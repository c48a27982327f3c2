"""Traces written by mqcore.client (``enable_msg_trace=True``: a producer's Pub, a push
consumer's SubBefore/SubAfter) read by Apache's mqadmin ``queryMsgTraceById`` (rocketmq-tools
4.9.8) against mqbroker: it prints the rows ours prints."""
from __future__ import annotations

import contextlib
import io

import pytest

from mqcore.admin.cli import main as mqadmin_main
from mqcore.client import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from tests.support.processes import BrokerProcess
from tests.support.reference import mqadmin_batch
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)


def _ours(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        mqadmin_main(argv, out)
    return out.getvalue()


def test_apache_mqadmin_reads_our_producer_and_consumer_traces(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"autoCreateTopicEnable": "true"}) as b:
        with Producer("our-traced-pg", namesrv_addr=b.namesrv_addr, enable_msg_trace=True) as p:
            r = p.send(Message("OurTracedT", b"hello", tags="TagA", keys="k-1"))
        c = PushConsumer("our-traced-cg", namesrv_addr=b.namesrv_addr, enable_msg_trace=True,
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET")
        c.subscribe("OurTracedT", "*")
        c.register_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
        cmd = ["queryMsgTraceById", "-n", b.namesrv_addr, "-i", r.msg_id]
        with c:
            assert wait_for(lambda: "Pub " in _ours(cmd) and "our-traced-cg" in _ours(cmd), timeout=60), _ours(cmd)
        apache = mqadmin_batch([cmd], home=tmp_path)[0]
        assert "our-traced-pg" in apache and "success" in apache, apache
        assert "our-traced-cg" in apache, apache
        # the rows (not the client-host column widths) are the same in both tools' output
        rows = sorted(line.split() for line in apache.splitlines() if line.startswith(("Pub ", "Sub ")))
        assert rows == sorted(line.split() for line in _ours(cmd).splitlines()
                              if line.startswith(("Pub ", "Sub "))), apache
