"""The dashboard against a hostile page and hostile peers (mqcore.dashboard.guard): a request for
another site's host name (DNS rebinding) is refused, no response can be framed, half-open
connections are closed at their header deadline and held under a cap, odd parameters are 400s
with no traceback, and the create form refuses the topics the admin request refuses.

In process, on a ``DashboardServer`` over a real store (tests/dashboard/test_queries.py's
``src``); the broker-process case (2,000 half-open connections while sends go on) is the last."""
from __future__ import annotations

import asyncio
import http.client
import logging
import resource
import socket
import time

import pytest

from mqcore.dashboard import guard
from mqcore.dashboard.server import DashboardServer
from mqcore.message import SYSTEM_TOPICS
from tests.dashboard.test_queries import src  # noqa: F401 - the fixture
from tests.support.processes import BrokerProcess
from tests.support.waiting import free_port, wait_for


def _serve(src, coro_fn, **kwargs):
    """Runs ``coro_fn(server)`` with a started DashboardServer on 127.0.0.1."""
    async def main():
        server = DashboardServer(src, "127.0.0.1", 0, clock=lambda: 1_700_000_000_000, **kwargs)
        await server.start()
        try:
            return await coro_fn(server)
        finally:
            await server.shutdown()
    return asyncio.run(main())


async def _get(port: int, path: str, host: str | None = None, method: str = "GET", body: bytes = b"",
               headers: dict | None = None) -> tuple[int, dict, bytes]:
    """One HTTP/1.1 request on a fresh connection: (status, headers, body)."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    hdrs = {"Host": host if host is not None else f"127.0.0.1:{port}", "Connection": "close",
            "Content-Length": str(len(body)), **(headers or {})}
    w.write(f"{method} {path} HTTP/1.1\r\n".encode() + b"".join(f"{k}: {v}\r\n".encode() for k, v in hdrs.items())
            + b"\r\n" + body)
    await w.drain()
    raw = await asyncio.wait_for(r.read(), 10)
    w.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    got = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return status, got, rest


def test_a_rebound_host_name_is_refused_and_known_names_are_served(src):
    async def run(server):
        port = server.port
        assert (await _get(port, "/topics"))[0] == 200
        assert (await _get(port, "/topics", host=f"localhost:{port}"))[0] == 200
        assert (await _get(port, "/topics", host=f"[::1]:{port}"))[0] == 200
        assert (await _get(port, "/topics", host=f"dash.example.org:{port}"))[0] == 200  # named by the operator
        status, _, body = await _get(port, "/topics", host=f"attacker.example:{port}")
        assert status == 421 and b"dashboardAllowedHosts" in body
        # the rebinding page's form post: refused before the Origin check could pass it
        status, _, _ = await _get(port, "/topics/T/delete", host=f"attacker.example:{port}", method="POST",
                                  headers={"Origin": f"http://attacker.example:{port}"})
        assert status == 421
        assert (await _get(port, "/topics", host=""))[0] in (400, 421)
    _serve(src, run, allowed_hosts=["dash.example.org"])


def test_every_response_forbids_framing(src):
    async def run(server):
        for path in ("/groups", "/topics", "/static/app.css", "/topics/none", "/messages/notanumber", "/nowhere"):
            status, headers, _ = await _get(server.port, path)
            assert headers.get("x-frame-options") == "DENY", (path, status, headers)
            assert "frame-ancestors 'none'" in headers.get("content-security-policy", ""), path
    _serve(src, run)


def test_odd_parameters_are_400_without_a_traceback(src, caplog):
    caplog.set_level(logging.ERROR)

    async def run(server):
        port = server.port
        origin = {"Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/x-www-form-urlencoded"}
        cases = [
            ("GET", "/messages?topic=T&begin=99999999999999999999", b""),
            ("GET", "/messages?topic=T&end=9999999999999999", b""),
            ("GET", "/messages?topic=T&begin=-5", b""),
            ("GET", "/messages?topic=T&begin=10000-01-01T00:00", b""),
            ("GET", "/static/" + "a" * 5000, b""),
            ("POST", "/groups/G/reset", b"topic=T&time=99999999999999999999999"),
        ]
        for method, path, body in cases:
            status, _, text = await _get(port, path, method=method, body=body, headers=origin)
            assert status == 400, (path[:60], status, text[:300])
    _serve(src, run)
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


@pytest.mark.parametrize("name", sorted(SYSTEM_TOPICS) + ["rmq_sys_wheel_timer", "c1_REPLY_TOPIC"])
def test_the_create_form_refuses_system_topics(src, name):
    before = {n: src.topics.get(n) for n in src.topics.table.names()}

    async def run(server):
        port = server.port
        status, _, text = await _get(port, "/topics", method="POST",
                                     body=f"name={name}&read_queues=4&write_queues=4&read_perm=1&write_perm=1".encode(),
                                     headers={"Origin": f"http://127.0.0.1:{port}",
                                              "Content-Type": "application/x-www-form-urlencoded"})
        assert status == 400 and b"conflict with system topic" in text, (status, text[:300])
    _serve(src, run)
    # nothing made or redefined (the broker's own system topics exist from the start)
    assert {n: src.topics.get(n) for n in src.topics.table.names()} == before


def test_half_open_connections_are_closed_at_the_deadline_and_capped(src):
    async def run(server):
        port = server.port
        stalled = []
        for _ in range(8):  # the cap: 8 connections that send half a request and stop
            r, w = await asyncio.open_connection("127.0.0.1", port)
            w.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            stalled.append((r, w))
        assert await _wait(lambda: server.budget.open_connections == 8)
        # one more is closed at accept: it reads end-of-file at once
        r, w = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(r.read(), 5) == b""
        assert server.budget.refused >= 1
        # the header deadline closes the stalled ones; then pages are served again
        t0 = time.monotonic()
        for r, _ in stalled:
            assert await asyncio.wait_for(r.read(), 10) == b""
        assert time.monotonic() - t0 < 5
        assert (await _get(port, "/topics"))[0] == 200
        # a slow body: the request as a whole has its deadline
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(f"POST /topics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://127.0.0.1:{port}\r\n"
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\nname=".encode())
        reply = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
        assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
        w.close()
        for _, w in stalled:
            w.close()
    _serve(src, run, max_connections=8, header_timeout_s=1.0, request_timeout_s=1.5)


async def _wait(pred, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        await asyncio.sleep(0.02)
    return pred()


def test_host_allow_list_for_every_address():
    every = guard.HostAllowList("0.0.0.0")
    assert every.allows("127.0.0.1:8080") and every.allows("localhost") and every.allows(socket.gethostname())
    assert not every.allows("attacker.example:8080")
    one = guard.HostAllowList("10.1.2.3", ["ops.example"])
    assert one.allows("10.1.2.3:80") and one.allows("OPS.example:8080")
    assert not one.allows("127.0.0.1:80") and not one.allows(None)


@pytest.mark.timeout(240)
def test_two_thousand_half_open_connections_do_not_stop_sends(tmp_path):
    """A real broker process: 2,000 connections that never finish their headers on the dashboard
    port; sends on the remoting port keep succeeding, the page answers once they are closed."""
    from mqcore.client import Message, Producer
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    port = free_port()
    socks = []
    with BrokerProcess(tmp_path / "store", conf={"dashboardPort": port}) as b, \
            Producer("guard-pg", namesrv_addr=b.namesrv_addr) as producer:
        try:
            refused = 0
            for _ in range(2000):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                socks.append(s)
                try:
                    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                except (ConnectionResetError, BrokenPipeError):
                    refused += 1  # over the cap: closed at accept
            assert refused < 2000 - guard.MAX_CONNECTIONS + 1
            for i in range(50):
                assert producer.send(Message("GuardTopic", b"m%d" % i)).status.name == "SEND_OK"
            # every stalled connection is closed by the broker (cap or header deadline)
            deadline = time.monotonic() + guard.HEADER_TIMEOUT_S + 60
            for s in socks:
                s.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    assert s.recv(1) == b""
                except ConnectionResetError:
                    pass  # closed with our unread bytes in its buffer: a reset, closed all the same
        finally:
            for s in socks:
                s.close()
        assert wait_for(lambda: _page_ok(port), timeout=30)
        assert producer.send(Message("GuardTopic", b"after")).status.name == "SEND_OK"


def _page_ok(port: int) -> bool:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/")
        return c.getresponse().status == 200
    except OSError:
        return False


def test_malformed_http_writes_one_short_line_not_a_traceback_per_request(tmp_path):
    """aiohttp logged every request it could not parse (a header over 8190 bytes, a bad
    Content-Length, bytes that are not HTTP) with a traceback, and the guarded connections lost
    the runner's access_log=None, so every request also wrote an access line: 10^5 fuzzed
    requests wrote thousands of tracebacks. Now: 400s, and one short rate-limited line."""
    port = free_port()
    with BrokerProcess(tmp_path / "store", conf={"dashboardPort": port}) as b:
        bad = [f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Big: {'y' * 9000}\r\n\r\n".encode(),
               f"POST /topics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: abc\r\n\r\n".encode(),
               f"GET /topics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".encode()]
        lines_at = len(b.lines)
        for _ in range(20):
            for raw in bad:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    s.sendall(raw)
                    assert s.recv(12)[9:] == b"400"  # HTTP/1.0 or 1.1: the parser gave up
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(f"GET /topics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
            assert s.recv(12) == b"HTTP/1.1 200"
        assert wait_for(lambda: any("refused a malformed HTTP request" in ln for ln in list(b.lines)[lines_at:]),
                        timeout=5), b.output()
        grown = list(b.lines)[lines_at:]
        assert not any("Traceback" in ln or "aiohttp.access" in ln for ln in grown), "\n".join(grown[-20:])
        assert len(grown) <= 3, "\n".join(grown)
