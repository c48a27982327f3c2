"""Traces written by mqcore.client (``enable_msg_trace=True``) read by Apache's mqadmin
``queryMsgTraceById`` (rocketmq-tools 4.9.8) against mqbroker: it prints what ours prints."""
from __future__ import annotations

import contextlib
import io

import pytest

from mqcore.admin.cli import main as mqadmin_main
from mqcore.client import Message, Producer
from tests.support.processes import BrokerProcess
from tests.support.reference import mqadmin_batch
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)


def _ours(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        mqadmin_main(argv, out)
    return out.getvalue()


def test_apache_mqadmin_reads_our_pub_traces(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"autoCreateTopicEnable": "true"}) as b:
        with Producer("our-traced-pg", namesrv_addr=b.namesrv_addr, enable_msg_trace=True) as p:
            r = p.send(Message("OurTracedT", b"hello", tags="TagA", keys="k-1"))
        cmd = ["queryMsgTraceById", "-n", b.namesrv_addr, "-i", r.msg_id]
        assert wait_for(lambda: "Pub " in _ours(cmd), timeout=60), _ours(cmd)
        apache = mqadmin_batch([cmd], home=tmp_path)[0]
        assert "our-traced-pg" in apache and "success" in apache, apache
        rows = [line.split() for line in apache.splitlines() if line.startswith("Pub ")]
        assert rows == [line.split() for line in _ours(cmd).splitlines() if line.startswith("Pub ")], apache
