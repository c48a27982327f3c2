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
