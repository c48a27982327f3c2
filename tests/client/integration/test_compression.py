"""Compressed bodies both ways with RocketMQ 5.x's Java client (rocketmq-client 5.3.3): an
``mqcore.client`` producer with ``compress_type`` LZ4 or ZSTD sends what a 5.x producer's
``setCompressType`` sends (sysFlag 0x101 / 0x201), and the Java consumer inflates it to the same
bytes; a Java 5.x producer's LZ4/ZSTD/ZLIB bodies reach an ``mqcore.client`` consumer whole.
The Java consumer is 5.x's ``DefaultLitePullConsumer``, which pulls with LITE_PULL_MESSAGE (361)."""
from __future__ import annotations

import hashlib

import pytest

from mqcore.client import LitePullConsumer, Message, Producer
from mqcore.format.compression import COMPRESSION_TYPES, compress_body, decompress_body
from tests.client.integration.conftest import FAST
from tests.support.processes import BrokerProcess
from tests.support.reference5 import run_java5_driver

pytestmark = pytest.mark.timeout(300)

BODY = bytes((ord("a") + (j * 7) % 26) for j in range(16 * 1024))


@pytest.mark.parametrize("kind, flag", [("ZLIB", 0x301), ("LZ4", 0x101), ("ZSTD", 0x201)])
def test_each_compression_type_round_trips_with_its_sys_flag(kind, flag):
    packed, sys_flag = compress_body(BODY, 5, kind)
    assert sys_flag == flag and len(packed) < len(BODY) // 4
    assert decompress_body(packed, sys_flag) == BODY


def test_an_unknown_compression_type_is_refused_by_the_producer():
    from mqcore.errors import ConfigError
    with pytest.raises(ConfigError, match="compress_type must be one of ZLIB, LZ4, ZSTD"):
        Producer("cpg", compress_type="SNAPPY")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("compression") / "store") as b:
        yield b


@pytest.mark.parametrize("kind", ["LZ4", "ZSTD"])
def test_a_java_5x_consumer_reads_mqcore_lz4_and_zstd_bodies(broker, kind, tmp_path):
    topic = f"Compressed{kind}"
    with Producer(f"cpg-{kind}", namesrv_addr=broker.namesrv_addr, compress_type=kind) as p:
        for _ in range(3):
            p.send(Message(topic, BODY))
    r = run_java5_driver("Compression5.java", [broker.namesrv_addr, topic, f"jcg-{kind}", "consume", "3"],
                         workdir=tmp_path, timeout_s=180)
    bodies = [line.split() for line in r.stdout.splitlines() if line.startswith("BODY ")]
    assert len(bodies) == 3, r.stdout[-3000:] + r.stderr[-3000:]
    want = hashlib.md5(BODY).hexdigest()
    for _, sys_flag, length, md5 in bodies:
        # the Java client clears the compressed bit once it inflated the body
        assert (int(sys_flag) & 0x700) >> 8 == COMPRESSION_TYPES[kind] and int(length) == len(BODY), bodies
        assert md5 == want


def test_mqcore_reads_a_java_5x_producers_compressed_bodies(broker, tmp_path):
    topic = "CompressedFromJava"
    sent = []
    for kind in ("LZ4", "ZSTD", "ZLIB"):
        r = run_java5_driver("Compression5.java", [broker.namesrv_addr, topic, f"jpg-{kind}", "produce", "1", kind],
                             workdir=tmp_path, timeout_s=180)
        lines = [line.split() for line in r.stdout.splitlines() if line.startswith("SENT ")]
        assert len(lines) == 1 and lines[0][3] == "SEND_OK", r.stdout[-3000:] + r.stderr[-3000:]
        sent.append(lines[0][2])
    got = []
    with LitePullConsumer("ccg-java", namesrv_addr=broker.namesrv_addr, consume_from_where="first", **FAST) as c:
        c.subscribe(topic)
        for _ in range(60):
            got += [hashlib.md5(m.body).hexdigest() for m in c.poll(1000)]
            if len(got) >= 3:
                break
    assert sorted(got) == sorted(sent)
