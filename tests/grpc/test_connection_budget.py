"""The gRPC port under the budget every port has (issue 36): grpcMaxConnections caps open
connections (grpcio's connection quota; the permissive front's own count), and
httpHeaderTimeoutSeconds closes a connection that does not finish its handshake (grpcio's
default was 120 s). A real mqbroker process; raw sockets speaking the start of HTTP/2."""
from __future__ import annotations

import socket
import time

import psutil
import pytest

from tests.grpc.conftest import grpc_addr
from tests.support.processes import BrokerProcess
from tests.support.waiting import closed_within, wait_for

pytestmark = pytest.mark.timeout(180)

#: the client connection preface and an empty SETTINGS frame
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _broker(tmp_path, mode: str, **conf) -> BrokerProcess:
    return BrokerProcess(tmp_path / "store", conf={"grpcServerEnable": "true", "grpcServerPort": "0",
                                                   "grpcServerTlsMode": mode, **conf})


def _addr(b: BrokerProcess) -> tuple[str, int]:
    host, port = grpc_addr(b).rsplit(":", 1)
    return host, int(port)


def _answered(sock: socket.socket) -> bool:
    """The server's first frame came (its SETTINGS), rather than a close."""
    sock.settimeout(5)
    try:
        return len(sock.recv(9)) > 0
    except OSError:
        return False


@pytest.mark.parametrize("mode", ["disabled", "permissive"])
def test_grpc_port_caps_connections_and_closes_silent_ones(tmp_path, mode):
    with _broker(tmp_path, mode, grpcMaxConnections=3, httpHeaderTimeoutSeconds=2) as b:
        addr = _addr(b)
        held = []
        try:
            for _ in range(3):
                s = socket.create_connection(addr, timeout=5)
                s.sendall(PREFACE)
                assert _answered(s)
                held.append(s)
            over = socket.create_connection(addr, timeout=5)
            over.sendall(PREFACE)
            assert closed_within(over, 3) is not None, "a fourth connection was served"
            over.close()
        finally:
            for s in held:
                s.close()
        # the places come back once the three are closed (the front's relays too)
        def served() -> bool:
            with socket.create_connection(addr, timeout=5) as s:
                s.sendall(PREFACE)
                return _answered(s)
        assert wait_for(served, timeout=10)
        with socket.create_connection(addr, timeout=5) as silent:
            after = closed_within(silent, 30)  # sends nothing: no preface, no handshake
            assert after is not None and after < 8, after


def test_permissive_front_gives_back_the_descriptors_of_finished_connections(tmp_path):
    """The permissive front's relay half-closed both sides when a client ended and never closed
    them: each finished gRPC connection kept two descriptors in the broker for good."""
    with _broker(tmp_path, "permissive") as b:
        addr = _addr(b)
        proc = psutil.Process(b.proc.pid)
        with socket.create_connection(addr, timeout=5) as s:  # the first relay: lazily made objects
            s.sendall(PREFACE)
            assert _answered(s)
        time.sleep(0.5)
        base = proc.num_fds()
        for _ in range(40):
            with socket.create_connection(addr, timeout=5) as s:
                s.sendall(PREFACE)
                assert _answered(s)
                s.shutdown(socket.SHUT_WR)  # an orderly end, as a client's close is
                closed_within(s, 5)
        assert wait_for(lambda: proc.num_fds() <= base + 4, timeout=15), (base, proc.num_fds())
