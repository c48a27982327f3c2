"""Fixtures for client tests: a fake cluster (unit-test double) and a manual clock."""
from __future__ import annotations

import logging

import pytest

from mqcore.clock import ManualClock

from .fakebroker import FakeCluster


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def fake_cluster():
    with FakeCluster(brokers=1) as c:
        yield c


@pytest.fixture
def fake_cluster2():
    with FakeCluster(brokers=2) as c:
        yield c


@pytest.fixture(autouse=True)
def _quiet_remoting_logs(caplog):
    caplog.set_level(logging.WARNING, logger="mqcore.remoting")
    yield
