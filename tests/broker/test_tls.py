"""TLS on the broker's 4.x remoting port and the embedded name server's, with real clients.

The official Java 4.9.8 client turns TLS on with ``-Dtls.enable=true`` (for the name server
and the broker alike; its test mode trusts the broker's self-signed certificate); mqcore's
client with ``use_tls=True``. The Go 4.x client has no TLS: a permissive port serves it in
plaintext, an enforcing one refuses it.
"""
from __future__ import annotations

import os
import socket
import ssl
import struct
import subprocess
import time

import pytest

from mqcore.admin.api import MQAdmin
from mqcore.client import Message, Producer, PushConsumer
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.reference import run_java_driver
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)


def _java(broker: BrokerProcess, topic: str, tls: bool, tmp_path) -> str:
    flags = ["-Dtls.enable=true"] if tls else []
    out = run_java_driver("TlsClient.java", [broker.namesrv_addr, topic, "20"], jvm_args=flags, workdir=tmp_path,
                          timeout_s=240)
    return out.stdout + out.stderr


def _tls_handshake_works(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    try:
        with socket.create_connection((host, int(port)), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname=host) as tls:
            return tls.version() is not None
    except (ssl.SSLError, OSError):
        return False


def _plaintext_answered(addr: str) -> bool:
    """A 4.x frame (HEART_BEAT-sized JSON header) gets an answer rather than a close."""
    host, port = addr.rsplit(":", 1)
    header = b'{"code":34,"flag":0,"language":"JAVA","opaque":1,"serializeTypeCurrentRPC":"JSON","version":399}'
    frame = struct.pack(">II", 4 + len(header), len(header)) + header
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(frame)
        try:
            return len(s.recv(4)) == 4
        except OSError:
            return False


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_the_java_client_sends_and_consumes_over_tls(tmp_path, mode):
    with BrokerProcess(tmp_path / "store", conf={"tls.server.mode": mode}) as broker:
        out = _java(broker, f"Tls{mode}", True, tmp_path)
        assert "SENT 20" in out and "RECEIVED 20" in out, out[-3000:]
        for addr in (broker.broker_addr, broker.namesrv_addr):
            assert _tls_handshake_works(addr)
            assert _plaintext_answered(addr) is (mode == "permissive")
        if mode == "permissive":  # the same port serves a plaintext client too
            out = _java(broker, "TlsPlain", False, tmp_path)
            assert "SENT 20" in out and "RECEIVED 20" in out, out[-3000:]
        assert "Traceback" not in broker.output(), broker.output()[-3000:]


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_the_mqcore_client_sends_over_tls(tmp_path, mode):
    with BrokerProcess(tmp_path / "store", conf={"tls.server.mode": mode}) as broker:
        with Producer("tls-producer", namesrv_addr=broker.namesrv_addr, use_tls=True) as producer:
            results = [producer.send(Message("TlsPy", b"body-%d" % i)) for i in range(20)]
        assert all(r.status.name == "SEND_OK" for r in results)
        with MQAdmin(broker.namesrv_addr, use_tls=True) as admin:
            assert sum(o.max_offset for o in admin.topic_stats("TlsPy")) == 20
        got: list[bytes] = []
        consumer = PushConsumer("tls-consumers", namesrv_addr=broker.namesrv_addr, consume_from_where="first",
                                use_tls=True)
        consumer.subscribe("TlsPy", "*")
        consumer.register_listener(lambda messages, context: got.extend(m.body for m in messages))
        with consumer:
            assert wait_for(lambda: len(got) >= 20, 60), len(got)
        assert sorted(got) == sorted(b"body-%d" % i for i in range(20))
        assert "Traceback" not in broker.output(), broker.output()[-3000:]


def test_disabled_mode_refuses_tls(tmp_path):
    with BrokerProcess(tmp_path / "store") as broker:
        assert not _tls_handshake_works(broker.broker_addr)
        assert _plaintext_answered(broker.broker_addr)


def _go(broker: BrokerProcess, topic: str) -> str:
    driver = os.environ.get("MQCORE_GO4TLS_DRIVER")
    if not driver:
        pytest.fail("MQCORE_GO4TLS_DRIVER is not set: run scripts/setup.d/66-go4tls-client.sh (Go and the module proxy)")
    out = subprocess.run([driver, "send", broker.namesrv_addr, topic, "10"], capture_output=True, text=True,
                         timeout=120)
    return out.stdout + out.stderr


@pytest.mark.parametrize("mode", ["permissive", "enforcing"])
def test_the_go_client_in_plaintext_is_served_when_permissive_and_refused_when_enforcing(tmp_path, mode):
    """The Go 4.x client (v2.1.2, its latest release) has no TLS option: plaintext only."""
    with BrokerProcess(tmp_path / "store", conf={"tls.server.mode": mode}) as broker:
        out = _go(broker, f"Go{mode}")
        if mode == "permissive":
            assert "RESULT send OK sent=10 received=10" in out, out[-3000:]
        else:
            assert "RESULT send FAIL" in out, out[-3000:]
            assert "closing a plaintext connection" in broker.output()
        assert "Traceback" not in broker.output(), broker.output()[-3000:]


def test_a_standalone_name_server_in_enforcing_mode_with_a_tls_broker(tmp_path):
    (tmp_path / "tls.properties").write_text("tls.server.mode=enforcing\n")
    with NamesrvProcess(["--tls-config-file", str(tmp_path / "tls.properties"),
                         "--tls-dir", str(tmp_path / "ns")]) as ns:
        assert _tls_handshake_works(ns.addr) and not _plaintext_answered(ns.addr)
        conf = {"tls.server.mode": "permissive", "tls.enable": "true"}  # registers over TLS
        with BrokerProcess(tmp_path / "store", namesrv=ns.addr, conf=conf) as broker:
            with Producer("tls-producer", namesrv_addr=ns.addr, use_tls=True) as producer:
                assert producer.send(Message("TlsNs", b"x")).status.name == "SEND_OK"
            assert "Traceback" not in broker.output(), broker.output()[-3000:]
        assert (tmp_path / "ns" / "grpc-tls" / "cert.pem").is_file()


def test_a_stalled_tls_handshake_is_closed_by_the_broker(tmp_path):
    conf = {"tls.server.mode": "enforcing", "tlsHandshakeTimeoutSeconds": "1"}
    with BrokerProcess(tmp_path / "store", conf=conf) as broker:
        host, port = broker.broker_addr.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=15) as s:
            s.sendall(b"\x16\x03\x01")  # a TLS record header, then nothing
            t0 = time.monotonic()
            try:
                assert s.recv(100) == b""
            except ConnectionResetError:
                pass
            assert time.monotonic() - t0 < 10  # the handshake deadline, not the idle timeout
        assert _tls_handshake_works(broker.broker_addr)  # and the port still serves
