"""TLS on the 5.x endpoint's port: permissive (the default: TLS and plaintext on one port, as
the proxy's default mode), enforcing, disabled; the self-signed certificate made at first start
and kept; a configured certificate; and bytes that are neither, which close only their own
connection. The Java client with its defaults (TLS) is in test_java_client.py."""
from __future__ import annotations

import socket
from pathlib import Path

import grpc
import pytest

from mqcore.grpc.tls import load_or_make_certificate, looks_like_tls, make_self_signed
from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.rawclient import RawClient, d, s
from tests.support.processes import BrokerProcess


def _cert(b: BrokerProcess) -> bytes:
    return (Path(b.store_dir) / "grpc-tls" / "cert.pem").read_bytes()


def _sends(addr: str, root_cert: bytes | None = None) -> bool:
    """One SendMessage over plaintext (``root_cert`` None) or TLS: True when it went through,
    False when the connection could not be made in that protocol."""
    with RawClient(addr, root_cert=root_cert) as c:
        try:
            return c.call("SendMessage", _one("Tls5"), timeout=5).status.code == d.OK
        except grpc.RpcError as e:
            assert e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED), e
            return False


def _one(topic: str):
    m = d.Message(topic=d.Resource(name=topic), body=b"x")
    m.system_properties.message_id = "01TLS000000000000000000000000000001"
    return s.SendMessageRequest(messages=[m])


def test_permissive_port_serves_tls_and_plaintext_and_keeps_its_certificate(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=TEST_CONF) as b:
        addr = grpc_addr(b)
        cert = _cert(b)
        assert _sends(addr) and _sends(addr, cert)
        # neither TLS nor HTTP/2, too short to decide, or a client that goes away: only that
        # connection ends; the port keeps serving both
        host, port = addr.rsplit(":", 1)
        for junk in (b"\x00\x01\x02\x03\x04\x05garbage", b"PR", b"\x16\x03"):
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(junk)
        assert _sends(addr) and _sends(addr, cert)
        b.restart()
        addr = grpc_addr(b)
        assert _cert(b) == cert  # made once, kept across restarts
        assert _sends(addr, cert)


@pytest.mark.parametrize("mode, plain, tls", [("enforcing", False, True), ("disabled", True, False)])
def test_enforcing_and_disabled(tmp_path, mode, plain, tls):
    cert, key = make_self_signed()
    (tmp_path / "c.pem").write_bytes(cert)
    (tmp_path / "k.pem").write_bytes(key)
    conf = dict(TEST_CONF, grpcServerTlsMode=mode, grpcServerTlsCert=tmp_path / "c.pem",
                grpcServerTlsKey=tmp_path / "k.pem")
    with BrokerProcess(tmp_path / "store", conf=conf) as b:
        addr = grpc_addr(b)
        assert (_sends(addr), _sends(addr, cert)) == (plain, tls)
        assert not (Path(b.store_dir) / "grpc-tls").exists()  # the configured pair, not a self-signed one


def test_sniffing_and_certificate_files(tmp_path):
    assert looks_like_tls(b"\x16\x03\x01\x02\x00")  # a ClientHello record
    assert not looks_like_tls(b"PRI * HTTP/2.0")  # an HTTP/2 client preface
    cert, key = load_or_make_certificate(None, None, str(tmp_path))
    assert cert.startswith(b"-----BEGIN CERTIFICATE") and b"PRIVATE KEY" in key
    assert (tmp_path / "grpc-tls" / "key.pem").stat().st_mode & 0o077 == 0
    assert load_or_make_certificate(None, None, str(tmp_path)) == (cert, key)


def test_relay_passes_bytes_both_ways_and_names_the_client():
    """The permissive front on its own, with real sockets: a plaintext and a TLS-looking
    client each reach their listener, bytes go both ways (a large reply included, which
    exercises the relay's flow control), and the listener's view of the caller maps back to
    the client's own address."""
    import asyncio

    from mqcore.grpc.tls import PermissiveFront

    async def scenario():
        seen = {}
        holder = {}

        def listener(kind):
            async def serve(reader, writer):
                head = await reader.readexactly(5)
                # what the endpoint asks while the call is under way: who is this caller?
                seen[kind] = holder["front"].client_of(writer.get_extra_info("peername")[1])
                writer.write(kind.encode() + head + b"z" * (4 << 20))
                await writer.drain()
                writer.close()
            return serve

        plain = await asyncio.start_server(listener("plain"), "127.0.0.1", 0)
        secure = await asyncio.start_server(listener("tls"), "127.0.0.1", 0)
        front = PermissiveFront(plain.sockets[0].getsockname()[1], secure.sockets[0].getsockname()[1])
        holder["front"] = front
        port = await front.start("127.0.0.1", 0)
        try:
            for kind, head in (("plain", b"PRI * HTTP/2.0"), ("tls", b"\x16\x03\x01\x00\xc8")):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.write(head)
                got = await asyncio.wait_for(reader.read(-1), 20)
                assert got[:len(kind) + 5] == kind.encode() + head[:5] and len(got) == len(kind) + 5 + (4 << 20)
                mine = writer.get_extra_info("sockname")
                assert seen[kind] == mine[:2]
                writer.close()
        finally:
            await front.close()
            plain.close()
            secure.close()

    asyncio.run(scenario())
