"""The official Go 5.x client (github.com/apache/rocketmq-clients/golang/v5 5.1.3, built by
scripts/setup.d/25-go5.sh) against mqbroker's gRPC endpoint: a producer and a push consumer
that gets every message once; and a push consumer whose listener fails once: the client
changes the message's invisible duration to its backoff, the endpoint stops renewing it, and
it comes back (attempt 2) after the backoff, as on Apache 5.3.3."""
from __future__ import annotations

import json
import os
import subprocess
from collections import Counter

import pytest

from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.test_java_client import SHORT_BACKOFF, check_nack_comes_back
from tests.support.processes import BrokerProcess


def run_go5(endpoint: str, topic: str, group: str, count: int, fail_once: str = "") -> list[dict]:
    driver = os.environ.get("MQCORE_GO5_DRIVER")
    if not driver:
        pytest.fail("MQCORE_GO5_DRIVER is not set: the Go 5.x client driver is built by scripts/setup.d/25-go5.sh "
                    "(run the suite with scripts/test)")
    proc = subprocess.run([driver, endpoint, topic, group, str(count), *([fail_once] if fail_once else [])],
                          capture_output=True, text=True, timeout=180, env=dict(os.environ, HOME=os.environ.get("TMPDIR", "/tmp")))
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results and results[-1] == {"all_consumed": True}, \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    return results


def test_go_producer_and_push_consumer(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=TEST_CONF) as b:
        results = run_go5(grpc_addr(b), "Go5", "GGo5", 20)
    sent = [r["message_id"] for r in results[:20]]
    deliveries = results[20:-1]
    assert not [i for i, n in Counter(r["id"] for r in deliveries).items() if n > 1]
    assert sorted(r["id"] for r in deliveries) == sorted(sent)
    assert {r["attempt"] for r in deliveries} == {1}


def test_go_push_consumer_nack_comes_back_after_backoff(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=SHORT_BACKOFF) as b:
        results = run_go5(grpc_addr(b), "Go5Nack", "GGo5Nack", 3, fail_once="go-1")
    deliveries = [{**r, "body": "normal" if r["body"] == "go-1" else r["body"]} for r in results[3:-1]]
    check_nack_comes_back(deliveries, 2000)
