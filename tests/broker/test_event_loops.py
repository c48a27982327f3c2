"""The broker serves on either event loop: uvloop when installed, asyncio's when forced."""
from __future__ import annotations

import threading

import pytest

from mqcore.remoting import ResponseCode, SyncRemotingClient
from mqcore.remoting.eventloop import loop_kind
from tests.broker.test_protocol import decode, pull, send
from tests.support.processes import BrokerProcess

pytestmark = pytest.mark.timeout(120)

KINDS = ["asyncio"] + (["uvloop"] if loop_kind() == "uvloop" else [])


@pytest.mark.parametrize("kind", KINDS)
def test_send_pull_and_long_poll_on_each_event_loop(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("MQCORE_EVENT_LOOP", kind)
    with BrokerProcess(tmp_path / "store") as b, SyncRemotingClient() as rc:
        assert f"event loop {kind}" in b.output()
        for i in range(40):
            assert send(rc, b, "Loops", f"m{i}".encode() * 2000).code == ResponseCode.SUCCESS
        got = pull(rc, b, "Loops", 0, sub="*")  # 32 records of 4 KB: a multi-view, zero-copy answer
        assert got.code == ResponseCode.SUCCESS
        assert [m.body for m in decode(got.body)] == [f"m{i}".encode() * 2000 for i in range(32)]
        # a parked pull (long polling) is answered when a message lands
        result = {}
        waiter = threading.Thread(target=lambda: result.update(
            r=pull(rc, b, "Loops", 40, sys_flag=0x2, suspend_ms=20_000, sub="*", timeout=30_000)))
        waiter.start()
        with SyncRemotingClient() as rc2:
            assert send(rc2, b, "Loops", b"late").code == ResponseCode.SUCCESS
        waiter.join(30)
        assert result["r"].code == ResponseCode.SUCCESS
        assert [m.body for m in decode(result["r"].body)] == [b"late"]
