"""What Apache RocketMQ 4.9 answers an abusive client: the table in tests/support/abuse.py
is checked here against the real Java broker, and tests/broker/test_hostile_names.py holds mqcore
to the same table."""
from __future__ import annotations

import pytest

from mqcore.remoting import SyncRemotingClient
from tests.support import abuse

pytestmark = pytest.mark.timeout(300)


def test_java_broker_answers_as_the_table_says(java_cluster):
    _ns, broker = java_cluster
    with SyncRemotingClient() as rc:
        results = abuse.run(rc, broker.addr)
    assert not abuse.mismatches(results), "\n".join(abuse.mismatches(results))
