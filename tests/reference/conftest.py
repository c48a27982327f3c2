"""Fixtures for the reference suite: a real Apache RocketMQ name server and broker (Java), shared
by a module, on free loopback ports with a temp store; stopped by PID at the end."""
from __future__ import annotations

import pytest

from tests.support.reference import JavaBroker, JavaNamesrv


@pytest.fixture(scope="module")
def java_cluster(tmp_path_factory):
    """(namesrv, broker) of Apache RocketMQ, with the SQL92 property filter on as users enable it."""
    work = tmp_path_factory.mktemp("rmq")
    with JavaNamesrv(work) as ns:
        with JavaBroker(work / "store", ns.addr, conf={"enablePropertyFilter": "true"}) as broker:
            yield ns, broker
