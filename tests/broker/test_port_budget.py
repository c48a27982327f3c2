"""Every listening port of mqbroker and mqnamesrv under the same budget (issue 36): a cap on
open connections, a deadline for an idle connection or an unfinished request head, and one
bound on partial frames for the two remoting ports of a broker. Real processes on loopback;
each limit is set low through broker.conf (or mqnamesrv's flags) and reached from outside."""
from __future__ import annotations

import socket
import struct
import time

import pytest

from mqcore.remoting import RequestCode, create_request
from mqcore.remoting.command import RemotingCommand, decode_frame, encode_frame
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.waiting import closed_within, free_port, wait_for

pytestmark = pytest.mark.timeout(180)


def _addr(hostport: str) -> tuple[str, int]:
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


def _read_frame(sock: socket.socket) -> RemotingCommand:
    def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf
    return decode_frame(exactly(struct.unpack(">i", exactly(4))[0]))


def _ask(sock: socket.socket, code: int, body: bytes = b"") -> RemotingCommand:
    sock.sendall(encode_frame(create_request(code, {"topic": "TBW102", "queueId": "0"}, body)))
    return _read_frame(sock)


def _served_until_refused(addr: tuple[str, int], code: int, most: int) -> tuple[list[socket.socket], bool]:
    """Connections opened one by one, each asked ``code``, until one is closed instead of
    answered; returns the answered ones and whether a refusal came within ``most``."""
    served: list[socket.socket] = []
    for _ in range(most):
        s = socket.create_connection(addr, timeout=5)
        try:
            _ask(s, code)
        except (ConnectionError, OSError):
            s.close()
            return served, True
        served.append(s)
    return served, False


@pytest.mark.parametrize("port", ["broker", "namesrv"])
def test_server_max_connections_caps_the_broker_and_the_embedded_namesrv_port(tmp_path, port):
    """serverMaxConnections=4: the fifth connection to the port is closed at accept, with one log
    line naming the key; the four keep being served, and a place freed is taken again. The
    embedded name server's port had no cap (only the descriptor reserve)."""
    with BrokerProcess(tmp_path / "store", conf={"serverMaxConnections": 4}) as b:
        if port == "broker":
            addr, code, own = _addr(b.broker_addr), RequestCode.GET_MAX_OFFSET, 0
        else:  # the broker's own registration holds one of the name server's places
            addr, code, own = _addr(b.namesrv_addr), RequestCode.GET_BROKER_CLUSTER_INFO, 1
        served, refused = _served_until_refused(addr, code, 10)
        try:
            assert refused and len(served) == 4 - own, len(served)
            assert wait_for(lambda: "the cap (serverMaxConnections)" in b.output(), timeout=5), b.output()
            for s in served:
                assert _ask(s, code).code is not None  # still served
            served.pop().close()
            again = socket.create_connection(addr, timeout=5)
            served.append(again)
            assert wait_for(lambda: _try(again, code), timeout=10)
        finally:
            for s in served:
                s.close()


def _try(sock: socket.socket, code: int) -> bool:
    try:
        _ask(sock, code)
        return True
    except (ConnectionError, OSError):
        return False


def test_embedded_namesrv_port_closes_idle_connections_at_the_broker_setting(tmp_path):
    """serverChannelMaxIdleTimeSeconds applied to the broker's port only: the embedded name
    server's closed a silent connection after its own 120 s. Both now close it after 2 s."""
    with BrokerProcess(tmp_path / "store", conf={"serverChannelMaxIdleTimeSeconds": 2}) as b:
        for hostport in (b.broker_addr, b.namesrv_addr):
            s = socket.create_connection(_addr(hostport), timeout=5)
            try:
                after = closed_within(s, 20)  # it sends nothing
                assert after is not None and after < 8, (hostport, after)
            finally:
                s.close()


def test_broker_and_embedded_namesrv_ports_share_one_frame_budget(tmp_path):
    """serverFrameBudgetBytes bounds the partial large frames of both remoting ports together:
    with 3.5 MiB held by an unfinished frame on the broker's port, a 3 MiB frame to the name
    server's port waits (it was answered at once: each port had a budget of its own) and is
    answered as soon as the first frame completes."""
    big, other = 3584 << 10, 3 << 20
    with BrokerProcess(tmp_path / "store", conf={"serverFrameBudgetBytes": 4 << 20}) as b:
        holder = socket.create_connection(_addr(b.broker_addr), timeout=10)
        waiter = socket.create_connection(_addr(b.namesrv_addr), timeout=10)
        try:
            frame = encode_frame(create_request(RequestCode.GET_MAX_OFFSET, {"topic": "TBW102", "queueId": "0"},
                                                b"x" * big))
            holder.sendall(frame[:-(256 << 10)])  # all but the last 256 KiB
            time.sleep(0.5)  # the broker takes the frame's buffer from the budget as its bytes arrive
            waiter.sendall(encode_frame(create_request(RequestCode.GET_BROKER_CLUSTER_INFO, {}, b"y" * other)))
            waiter.settimeout(3)
            with pytest.raises(socket.timeout):
                waiter.recv(1)
            holder.sendall(frame[-(256 << 10):])
            waiter.settimeout(10)
            assert _read_frame(waiter).code == 0
            holder.settimeout(10)
            assert _read_frame(holder) is not None
        finally:
            holder.close()
            waiter.close()


def test_standalone_mqnamesrv_takes_the_same_limits(tmp_path):
    """mqnamesrv had none of these settings: --server-max-connections and
    --server-channel-max-idle-time-seconds bound its port as the broker's keys bound the broker's."""
    with NamesrvProcess(["--server-max-connections", "2", "--server-channel-max-idle-time-seconds", "2"]) as ns:
        addr = _addr(ns.addr)
        served, refused = _served_until_refused(addr, RequestCode.GET_BROKER_CLUSTER_INFO, 5)
        try:
            assert refused and len(served) == 2, len(served)
            # the two served connections, silent now, are closed after 2 s idle
            for s in served:
                after = closed_within(s, 20)
                assert after is not None and after < 10, after
        finally:
            for s in served:
                s.close()
        assert "the cap (serverMaxConnections)" in ns.output()


@pytest.mark.parametrize("which", ["metricsPort", "dashboardPort"])
def test_http_ports_cap_connections_and_close_unfinished_heads(tmp_path, which):
    """httpMaxConnections=3 and httpHeaderTimeoutSeconds=2 on the metrics port (which had no cap
    and a fixed 10 s) and the dashboard (whose cap and timeout were not configurable): a fourth
    connection is closed at once, the three sending half a request are closed after 2 s, and the
    port answers again."""
    port = free_port()
    with BrokerProcess(tmp_path / "store", conf={which: port, "httpMaxConnections": 3,
                                                 "httpHeaderTimeoutSeconds": 2}) as b:
        addr = ("127.0.0.1", port)
        half = []
        try:
            for _ in range(3):
                s = socket.create_connection(addr, timeout=5)
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no end of headers
                half.append(s)
            time.sleep(0.3)  # accepted
            fourth = socket.create_connection(addr, timeout=5)
            after = closed_within(fourth, 1.5)
            fourth.close()
            assert after is not None, "a fourth connection was served"
            for s in half:
                after = closed_within(s, 10)
                assert after is not None and after < 6, after
        finally:
            for s in half:
                s.close()
        with socket.create_connection(addr, timeout=5) as s:
            s.sendall(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            assert s.recv(64).startswith(b"HTTP/1.1 ")
        assert wait_for(lambda: "the cap (httpMaxConnections)" in b.output(), timeout=5), b.output()
