"""Real ``mqbroker`` processes for client integration tests (loopback, free ports)."""
from __future__ import annotations

import time

import pytest

from tests.support.processes import BrokerProcess, NamesrvProcess

#: retry delay levels 3, 4, 5... become 1 s, 2 s, 3 s...: growing but short
SHORT_DELAYS = "1s 1s 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s"

#: client settings that make periodic work fast enough for tests
FAST = dict(rebalance_interval_ms=1000, heartbeat_broker_interval_ms=1000, poll_name_server_interval_ms=1000,
            persist_consumer_offset_interval_ms=500, pull_time_delay_ms_when_exception=200)


@pytest.fixture
def broker(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"messageDelayLevel": SHORT_DELAYS}) as b:
        yield b


@pytest.fixture
def two_brokers(tmp_path):
    with NamesrvProcess() as ns, \
            BrokerProcess(tmp_path / "a", namesrv=ns.addr, broker_name="broker-a") as a, \
            BrokerProcess(tmp_path / "b", namesrv=ns.addr, broker_name="broker-b") as b:
        yield ns, a, b


def wait_for(pred, timeout: float = 30.0, step: float = 0.05) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())
