"""END_TRANSACTION with malformed headers, against a live mqbroker: a clear refusal, nothing
written, and the broker serves on. (Well-formed but wrong ends are compared with the Java broker
in tests/reference/test_transactions_reference.py.)"""
from __future__ import annotations

import pytest

from mqcore.remoting import RequestCode, ResponseCode, SyncRemotingClient, create_request
from tests.support.processes import BrokerProcess

GOOD = {"producerGroup": "pg", "tranStateTableOffset": "0", "commitLogOffset": "0", "commitOrRollback": "8",
        "msgId": "m", "fromTransactionCheck": "false"}


@pytest.mark.parametrize("fields", [
    {**GOOD, "commitLogOffset": "not-a-number"},
    {**GOOD, "tranStateTableOffset": "9" * 40},
    {k: v for k, v in GOOD.items() if k != "producerGroup"},
    {**GOOD, "commitOrRollback": "eight"},
    {**GOOD, "commitLogOffset": "-1"},
    {**GOOD, "commitLogOffset": str(1 << 62)},
])
def test_malformed_end_transaction_is_refused_and_harmless(tmp_path, fields):
    with BrokerProcess(tmp_path / "store") as b, SyncRemotingClient() as rc:
        r = rc.invoke(b.broker_addr, create_request(RequestCode.END_TRANSACTION, fields), 5000)
        assert r.code == ResponseCode.SYSTEM_ERROR and r.remark, r
        max_phy = rc.invoke(b.broker_addr, create_request(RequestCode.GET_BROKER_RUNTIME_INFO), 5000)
        assert b'"commitLogMaxOffset":"0"' in bytes(max_phy.body)  # nothing was written
        # oneway garbage gets no answer and does not disturb the connection
        rc.invoke_oneway(b.broker_addr, create_request(RequestCode.END_TRANSACTION, fields, oneway=True))
        assert rc.invoke(b.broker_addr, create_request(RequestCode.GET_BROKER_RUNTIME_INFO), 5000).code == 0
        assert b.proc.poll() is None
