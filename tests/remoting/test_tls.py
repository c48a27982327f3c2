"""TLS on a remoting port: the three modes, the first-byte sniff, stalled connections."""
from __future__ import annotations

import asyncio
import socket
import ssl

import pytest

from mqcore.errors import RemotingConnectError, RemotingError
from mqcore.remoting.channel import Channel
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.codes import ResponseCode
from mqcore.remoting.command import RemotingCommand, create_request, create_response
from mqcore.remoting.tls import (TlsMode, TlsServerConfig, client_context, make_self_signed,
                                 server_context)

from ._util import run, serving

pytestmark = pytest.mark.timeout(60)

ECHO = 1000


def echo(channel: Channel, request: RemotingCommand) -> RemotingCommand:
    return create_response(request, ResponseCode.SUCCESS, "tls" if channel.transport.get_extra_info("sslcontext")
                           else "plain", dict(request.ext_fields), request.body)


@pytest.fixture(scope="module")
def pair() -> tuple[bytes, bytes]:
    return make_self_signed()


def _tls(pair, mode: TlsMode, handshake_timeout_s: float = 10.0) -> TlsServerConfig:
    return TlsServerConfig(mode, server_context(*pair), handshake_timeout_s=handshake_timeout_s)


async def _ask(client: RemotingClient, addr: str) -> str:
    resp = await client.invoke(addr, create_request(ECHO, {"k": "v"}, b"body" * 1000), 3000)
    assert resp.code == ResponseCode.SUCCESS and resp.body == b"body" * 1000
    return resp.remark


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_permissive_serves_tls_and_plaintext_on_one_port(pair, loop_kind, monkeypatch) -> None:
    monkeypatch.setenv("MQCORE_EVENT_LOOP", loop_kind)
    from mqcore.remoting import eventloop

    async def main() -> None:
        async with serving(tls=_tls(pair, TlsMode.PERMISSIVE)) as (server, addr):
            server.register_processor(ECHO, echo)
            async with RemotingClient(tls=client_context()) as tls_client, RemotingClient() as plain:
                assert [await _ask(tls_client, addr) for _ in range(3)] == ["tls"] * 3
                assert [await _ask(plain, addr) for _ in range(3)] == ["plain"] * 3

    eventloop.run(asyncio.wait_for(main(), 20))


def test_enforcing_closes_plaintext_and_serves_tls(pair) -> None:
    async def main() -> None:
        async with serving(tls=_tls(pair, TlsMode.ENFORCING)) as (server, addr):
            server.register_processor(ECHO, echo)
            async with RemotingClient(tls=client_context()) as tls_client, RemotingClient() as plain:
                assert await _ask(tls_client, addr) == "tls"
                with pytest.raises(RemotingError):
                    await _ask(plain, addr)

    run(main())


def test_disabled_mode_serves_plaintext_only(pair) -> None:
    async def main() -> None:
        async with serving(tls=TlsServerConfig(TlsMode.DISABLED)) as (server, addr):
            server.register_processor(ECHO, echo)
            async with RemotingClient() as plain:
                assert await _ask(plain, addr) == "plain"
            async with RemotingClient(tls=client_context(), connect_timeout_ms=2000) as tls_client:
                with pytest.raises((RemotingConnectError, RemotingError)):
                    await _ask(tls_client, addr)

    run(main())


def test_a_stalled_handshake_and_a_silent_connection_are_closed(pair, monkeypatch) -> None:
    from mqcore.remoting import server as server_module
    monkeypatch.setattr(server_module, "SNIFF_TIMEOUT_S", 0.5)

    def closed(sock: socket.socket) -> bool:
        sock.settimeout(5)
        try:
            return sock.recv(100) == b""
        except ConnectionResetError:
            return True

    async def main() -> None:
        async with serving(tls=_tls(pair, TlsMode.PERMISSIVE, handshake_timeout_s=0.5)) as (server, addr):
            host, port = addr.rsplit(":", 1)
            stalled = socket.create_connection((host, int(port)))
            stalled.sendall(b"\x16\x03\x01")  # a TLS record header, then nothing
            silent = socket.create_connection((host, int(port)))
            loop = asyncio.get_running_loop()
            assert await loop.run_in_executor(None, closed, stalled)
            assert await loop.run_in_executor(None, closed, silent)
            stalled.close()
            silent.close()
            assert not server.channels

    run(main())


def test_client_certificates_when_the_server_requires_them(pair, tmp_path) -> None:
    from mqcore.remoting.tls import ClientAuth
    cert, key = pair
    (tmp_path / "ca.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    ctx = server_context(cert, key, client_auth=ClientAuth.REQUIRE, trust_cert_path=str(tmp_path / "ca.pem"))

    async def main() -> None:
        async with serving(tls=TlsServerConfig(TlsMode.ENFORCING, ctx)) as (server, addr):
            server.register_processor(ECHO, echo)
            with_cert = client_context(trust_cert_path=str(tmp_path / "ca.pem"), cert_path=str(tmp_path / "ca.pem"),
                                       key_path=str(tmp_path / "key.pem"))
            async with RemotingClient(tls=with_cert) as ok, RemotingClient(tls=client_context()) as anonymous:
                assert await _ask(ok, addr) == "tls"
                with pytest.raises((RemotingConnectError, RemotingError, ssl.SSLError)):
                    await _ask(anonymous, addr)

    run(main())
