"""Real ``mqbroker`` processes for client integration tests (loopback, free ports)."""
from __future__ import annotations

import pytest

from tests.support.processes import BrokerProcess, NamesrvProcess

#: retry delay levels 3, 4, 5... become 1 s, 2 s, 3 s...: growing but short
SHORT_DELAYS = "1s 1s 1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s"

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

