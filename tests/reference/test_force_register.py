"""A Java 4.9.7 broker with ``forceRegister=false`` stays registered on mqnamesrv.

Such a broker registers once at start, then every ``registerNameServerPeriod`` only asks
QUERY_DATA_VERSION whether the name server's copy of its topic table is current; it registers
again only when told it changed, and the question itself refreshes its liveness. A name server
that refuses the question (code 3) never hears from it again and drops it after the expiry.
Bounded: the name server's expiry is shortened to 20 s (``--broker-expiry-ms``), swept every
second, and the broker asks every 10 s (its shortest period); the test watches for 45 s.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from mqcore.admin import MQAdmin

from tests.support.processes import NamesrvProcess
from tests.support.reference import JavaBroker

pytestmark = pytest.mark.timeout(400)

EXPIRY_MS = 20_000
WATCH_S = 45


def test_java_broker_without_force_register_stays_past_the_expiry(tmp_path):
    ns = NamesrvProcess()
    ns.argv += ["--broker-expiry-ms", str(EXPIRY_MS), "--scan-interval-ms", "1000", "--log-level", "DEBUG"]
    with ns:
        conf = {"forceRegister": "false", "registerNameServerPeriod": "10000"}
        with JavaBroker(tmp_path / "store", ns.addr, conf=conf) as broker, MQAdmin(ns.addr) as admin:
            assert "broker-java" in admin.cluster_info().broker_addr_table
            started = time.monotonic()
            while time.monotonic() - started < WATCH_S:
                info = admin.cluster_info()
                assert "broker-java" in info.broker_addr_table, \
                    f"dropped after {time.monotonic() - started:.0f} s:\n{ns.output()[-3000:]}"
                assert admin.topic_route("TBW102").broker_datas  # its routes stay too
                time.sleep(1)
            assert info.broker_addr_table["broker-java"].master_addr == broker.addr
    logs = "".join(p.read_text() for p in Path(ns.log_dir).glob("*.log"))
    assert "registered" in logs and "silent for" not in logs
