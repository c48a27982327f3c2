"""The official Java 5.x client (rocketmq-client-java 5.0.8 from Maven Central) against
mqbroker's gRPC endpoint: a producer (normal with tag/keys/property, FIFO, timed) and a push
consumer (QueryAssignment, then ReceiveMessage/AckMessage as the client runs them)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.grpc.conftest import DRIVERS


def test_java_producer_and_push_consumer(grpc_broker, tmp_path):
    lib = os.environ.get("MQCORE_GRPC_JAVA_CLIENT_LIB")
    if not lib:
        pytest.fail("MQCORE_GRPC_JAVA_CLIENT_LIB is not set: the Java 5.x client is fetched by "
                    "scripts/setup.d/20-grpc.sh (run the suite with scripts/test)")
    jars = ":".join(str(p) for p in sorted(Path(lib).glob("*.jar")))
    proc = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", f"-Duser.home={tmp_path}", "-cp", jars,
                           str(DRIVERS / "Java5Driver.java"), grpc_broker.grpc_addr, "Java5", "GJava"],
                          capture_output=True, text=True, timeout=240)
    results = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and results and results[-1] == {"all_consumed": True}, \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    sent = [r["message_id"] for r in results[:4]]
    got = {r["body"]: r for r in results[4:-1]}
    assert sorted(r["id"] for r in got.values()) == sorted(sent)
    normal = got["normal"]
    assert (normal["tag"], normal["keys"], normal["props"], normal["attempt"]) == \
        ("TagJ", ["jk1", "jk2"], {"lang": "java"}, 1)
    assert got["fifo-0"]["group"] == got["fifo-1"]["group"] == "jgroup"
    later = got["later"]
    assert later["delivery_ts"] > 0 and later["received_ms"] >= later["delivery_ts"]
