"""Transactions over gRPC with the official Python 5.x client (rocketmq-python-client, its own
venv): commit delivered, rollback never, and the two transactions the producer never ended are
resolved by orphaned-transaction recovery (RecoverOrphanedTransactionCommand on the Telemetry
stream, answered by the client's checker with EndTransaction from SOURCE_SERVER_CHECK). The
broker checks back every second (transactionCheckInterval) after one second
(transactionTimeOut)."""
from __future__ import annotations

import json
import os
import subprocess
import tempfile

from tests.grpc.conftest import DRIVERS, TEST_CONF, _results, grpc_addr
from tests.support.processes import BrokerProcess

TX_CONF = {**TEST_CONF, "transactionCheckInterval": "1000", "transactionTimeOut": "1000"}


def test_python_5x_transactional_producer_with_a_checker(tmp_path, py5_python):
    with BrokerProcess(tmp_path / "store", conf=TX_CONF) as b:
        home = os.path.join(tempfile.gettempdir(), "mqcore-grpc-client-home")
        os.makedirs(home, exist_ok=True)
        proc = subprocess.run([py5_python, str(DRIVERS / "py5_tx_driver.py"), grpc_addr(b), "Tx5"],
                              capture_output=True, text=True, timeout=150, env=dict(os.environ, HOME=home))
        (result,) = _results(proc, "the Python 5.x transactional producer")
    assert result["received"] == ["commit", "unknown-commit"], json.dumps(result)
    assert result["asked"] == ["unknown-commit", "unknown-rollback"], json.dumps(result)
    assert result["types"] == [4]  # TRANSACTION, as the proxy shows a committed message
    assert all(result["transaction_ids"].values())


def test_raw_transaction_flow_and_refusals(tmp_path):
    """Over raw gRPC: a half message is invisible until EndTransaction commits it; ends naming
    another topic (another producer group) are refused; rejectTransactionMessage refuses sends."""
    from tests.grpc.rawclient import RawClient, d, s

    with BrokerProcess(tmp_path / "store", conf=TEST_CONF) as b, RawClient(grpc_addr(b)) as raw:
        sent = raw.send("TxRaw5", body=b"half", message_type=d.TRANSACTION)
        assert sent.status.code == d.OK and len(sent.entries[0].transaction_id) == 32
        assert raw.receive("TxRaw5", "GTx")[1] == []  # invisible
        tx_id, msg_id = sent.entries[0].transaction_id, sent.entries[0].message_id

        def end(topic, resolution):
            return raw.call("EndTransaction", s.EndTransactionRequest(
                topic=d.Resource(name=topic), message_id=msg_id, transaction_id=tx_id, resolution=resolution,
                source=d.SOURCE_CLIENT)).status

        wrong = end("OtherTopic5", d.COMMIT)
        assert wrong.code == d.INVALID_TRANSACTION_ID and "producer group" in wrong.message
        assert end("TxRaw5", d.COMMIT).code == d.OK
        status, got = raw.receive("TxRaw5", "GTx")
        assert status.code == d.OK and [m.body for m in got] == [b"half"]
        assert got[0].system_properties.message_type == d.TRANSACTION
        route = raw.call("QueryRoute", s.QueryRouteRequest(topic=d.Resource(name="TxRaw5")))
        assert d.TRANSACTION in route.message_queues[0].accept_message_types
    with BrokerProcess(tmp_path / "store2", conf={**TEST_CONF, "rejectTransactionMessage": "true"}) as b, \
            RawClient(grpc_addr(b)) as raw:
        refused = raw.send("TxRaw5", body=b"half", message_type=d.TRANSACTION)
        assert refused.status.code == d.FORBIDDEN and "rejectTransactionMessage" in refused.status.message
