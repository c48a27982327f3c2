"""The official Java 5.x client (rocketmq-client-java 5.0.8 from Maven Central) against
mqbroker's gRPC endpoint: a producer (normal with tag/keys/property, FIFO, timed, and 60 more
normal messages) and a push consumer (QueryAssignment, then ReceiveMessage/AckMessage as the
client runs them) that must get each of the 64 messages exactly once. The push consumer checks
each body against its digest and drops a mismatch without a word, so a digest rendered
differently from the client's own loses messages (with a CRC32 digest: those whose hex starts
with 0, about 1 in 16)."""
from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from tests.grpc.conftest import DRIVERS, TEST_CONF, grpc_addr
from tests.support.processes import BrokerProcess

BULK = 60


def run_java5(endpoint: str, topic: str, group: str, home: Path, **props) -> tuple[subprocess.CompletedProcess, list]:
    """Java5Driver with -Dmq.<key>=<value> for each of ``props``; its RESULT lines."""
    lib = os.environ.get("MQCORE_GRPC_JAVA_CLIENT_LIB")
    if not lib:
        pytest.fail("MQCORE_GRPC_JAVA_CLIENT_LIB is not set: the Java 5.x client is fetched by "
                    "scripts/setup.d/20-grpc.sh (run the suite with scripts/test)")
    jars = ":".join(str(p) for p in sorted(Path(lib).glob("*.jar")))
    flags = [f"-Dmq.{k}={v}" for k, v in props.items()]
    proc = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", f"-Duser.home={home}", *flags, "-cp", jars,
                           str(DRIVERS / "Java5Driver.java"), endpoint, topic, group],
                          capture_output=True, text=True, timeout=240)
    return proc, [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]


def check_all_once(proc: subprocess.CompletedProcess, results: list, bulk: int) -> dict:
    """Every message sent was consumed exactly once; the deliveries by body."""
    assert proc.returncode == 0 and results and results[-1] == {"all_consumed": True}, \
        proc.stdout[-3000:] + proc.stderr[-3000:]
    sent = [r["message_id"] for r in results[:4 + bulk]]
    deliveries = results[4 + bulk:-1]
    twice = [i for i, n in Counter(r["id"] for r in deliveries).items() if n > 1]
    assert not twice, f"delivered more than once: {twice}"
    assert sorted(r["id"] for r in deliveries) == sorted(sent)
    return {r["body"]: r for r in deliveries}


def test_java_producer_and_push_consumer(grpc_broker, tmp_path):
    proc, results = run_java5(grpc_broker.grpc_addr, "Java5", "GJava", tmp_path, bulk=BULK, settleMs=2000)
    got = check_all_once(proc, results, BULK)
    assert sorted(b for b in got if b.startswith("bulk-")) == sorted(f"bulk-{i}" for i in range(BULK))
    normal = got["normal"]
    assert (normal["tag"], normal["keys"], normal["props"], normal["attempt"]) == \
        ("TagJ", ["jk1", "jk2"], {"lang": "java"}, 1)
    assert got["fifo-0"]["group"] == got["fifo-1"]["group"] == "jgroup"
    later = got["later"]
    assert later["delivery_ts"] > 0 and later["received_ms"] >= later["delivery_ts"]


def test_java_client_defaults_tls(grpc_broker, tmp_path):
    """The Java client's default is TLS: the endpoint's permissive port answers it with the
    broker's self-signed certificate (the client trusts any, as it does against a proxy)."""
    proc, results = run_java5(grpc_broker.grpc_addr, "Java5Tls", "GJavaTls", tmp_path, ssl="true", bulk=BULK,
                              settleMs=2000)
    check_all_once(proc, results, BULK)
    assert (Path(grpc_broker.store_dir) / "grpc-tls" / "cert.pem").is_file()


#: retry delays from level 3 on are what a 5.x push consumer backs off by: 2 s for its first retry here
SHORT_BACKOFF = {**TEST_CONF, "messageDelayLevel": "1s 1s 2s 3s 4s 5s"}


def check_nack_comes_back(deliveries: list, first_retry_ms: int) -> None:
    """"normal" was delivered twice: the first nacked, the second (attempt 2) after the backoff."""
    normal = [r for r in deliveries if r.get("body") == "normal"]
    assert [(r["attempt"], r.get("failed", False)) for r in normal] == [(1, True), (2, False)], normal
    waited = normal[1]["received_ms"] - normal[0]["received_ms"]
    assert first_retry_ms - 500 <= waited <= first_retry_ms + 10_000, waited


def test_java_push_consumer_nack_comes_back_after_backoff(tmp_path):
    """A 5.0.8 push consumer whose listener fails once: the client changes the message's
    invisible duration to its backoff, which ends the endpoint's auto renew; the message
    comes back with attempt 2 after the backoff (as on Apache 5.3.3), not after 3 h."""
    with BrokerProcess(tmp_path / "store", conf=SHORT_BACKOFF) as b:
        proc, results = run_java5(grpc_addr(b), "Java5Nack", "GJavaNack", tmp_path, failOnce="true", settleMs=1000)
    assert proc.returncode == 0 and results[-1] == {"all_consumed": True}, proc.stdout[-3000:] + proc.stderr[-3000:]
    check_nack_comes_back(results[4:-1], 2000)
