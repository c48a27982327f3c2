"""pytest plugin: a real mqbroker as a fixture, with virtual time (``mqcore.testing``).

Registered through the ``pytest11`` entry point, so a project with mqcore installed has the
fixtures without a conftest.py:

``rocketmq_broker``
    a fresh ``TestBroker`` per test (its own temp store, free ports), stopped after it;
    ``rocketmq_broker.namesrv_addr`` is what clients connect to, ``rocketmq_broker.advance(...)``
    moves its time.
``rocketmq_session_broker``
    one ``TestBroker`` for the whole session (faster; tests share its topics and its clock).

A test that needs broker settings marks itself: ``@pytest.mark.rocketmq_conf(messageDelayLevel="1s 2s")``
(broker.conf keys, given to the per-test fixture).
"""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from mqcore.testing import TestBroker


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "rocketmq_conf(**keys): broker.conf keys for the rocketmq_broker fixture")


@pytest.fixture
def rocketmq_broker(request: pytest.FixtureRequest) -> Iterator[TestBroker]:
    """A real mqbroker for this test, with a clock the test advances."""
    conf: dict[str, str] = {}
    for mark in reversed(list(request.node.iter_markers("rocketmq_conf"))):
        conf.update({k: str(v) for k, v in mark.kwargs.items()})
    with TestBroker(conf) as broker:
        yield broker


@pytest.fixture(scope="session")
def rocketmq_session_broker() -> Iterator[TestBroker]:
    """One real mqbroker shared by the session's tests (and its clock)."""
    with TestBroker() as broker:
        yield broker
