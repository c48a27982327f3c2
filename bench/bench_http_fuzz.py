"""Malformed HTTP requests against the dashboard and the metrics port, next to valid ones.

One mqbroker process (dashboard and metrics on, ACL off: the dashboard's widest surface);
per port, first a baseline of valid GETs, then malformed requests: bad request lines, bad
methods, huge and many headers, bad or missing Host, odd query parameters (overflowing
times, bad escapes, NUL bytes, 10,000-character values), odd paths, truncated bodies, bad
Content-Length and chunking, and random bytes; ``--inflight`` connections at once, one
request each. Reports per phase: requests per second, answers by status (``closed``: the
port closed without one), whether the broker is alive, the tracebacks and lines the phase
added to broker.log and to the process output, and the broker's VmRSS before and after.

    python bench/bench_http_fuzz.py               # 10^5 malformed requests per port
    python bench/bench_http_fuzz.py --n 5000      # quicker

Prints one JSON line per phase and a summary line (with the 1-minute load average).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.processes import BrokerProcess  # noqa: E402
from tests.support.waiting import free_port  # noqa: E402

PATHS = {
    "dashboard": ["/", "/topics", "/topics/FuzzTopic", "/groups", "/groups/G1", "/groups/G1/running", "/clients",
                  "/producers", "/messages", "/messages/0", "/messages/export", "/traces", "/send", "/api/rates",
                  "/static/app.css", "/topics/FuzzTopic/delete", "/groups/G1/reset", "/messages/resend"],
    "metrics": ["/metrics", "/", "/metrics/", "/x"],
}
PARAMS = ["begin", "end", "offset", "topic", "group", "queue", "key", "msgId", "limit", "time", "name", "q"]
ODD_VALUES = ["1e999", "-1", "99999999999999999999999999", "abc", "%zz", "%00", "%ff%fe", "", "0x10",
              "NaN", "-9223372036854775809", "../../etc/passwd", "<script>", "SCHEDULE_TOPIC_XXXX", "%25",
              "\u00e9", "x" * 10_000]
METHODS = ["GET", "POST", "HEAD", "PUT", "DELETE", "TRACE", "CONNECT", "OPTIONS", "PATCH", "get", "G ET",
           "BREW", "X" * 300, "", "GET\x00"]


def vm_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def valid(port_kind: str, hostport: str, i: int) -> tuple[bytes, bool]:
    path = "/api/rates" if port_kind == "dashboard" and i % 2 else ("/topics" if port_kind == "dashboard" else "/metrics")
    return f"GET {path} HTTP/1.1\r\nHost: {hostport}\r\nConnection: close\r\n\r\n".encode(), False


def malformed(rng: random.Random, port_kind: str, hostport: str) -> tuple[bytes, bool]:
    """One hostile request, and whether it ends unfinished (the sender half-closes at once)."""
    path = rng.choice(PATHS[port_kind])
    host = hostport
    kind = rng.randrange(9)
    headers = [f"Host: {host}", "Connection: close"]
    method, version, body, truncated = "GET", "HTTP/1.1", b"", False
    if kind == 0:  # bad request line
        line = rng.choice([f"GET {path}", f"GET {path} HTTP/9.9", f"{path} HTTP/1.1", "GET  HTTP/1.1",
                           f"GET {path} HTTP/1.1 extra", f"GET {'/' + 'a' * 9000} HTTP/1.1", "\x00\x01\x02",
                           f"GET {path}\x7f HTTP/1.1", f"GET http://evil.example{path} HTTP/1.1", "GET * HTTP/1.1"])
        return (line + "\r\n" + "\r\n".join(headers) + "\r\n\r\n").encode("utf-8", "surrogateescape"), False
    if kind == 1:
        method = rng.choice(METHODS)
    elif kind == 2:  # huge or many headers
        if rng.random() < 0.5:
            headers.append("X-Big: " + "y" * rng.choice([9000, 20_000, 70_000]))
        else:
            headers += [f"X-H{j}: {j}" for j in range(rng.choice([120, 500, 2000]))]
    elif kind == 3:  # bad or missing Host
        headers[0] = rng.choice(["Host: evil.example", "Host: ", "Host: 127.0.0.1.evil.example", "Host: [::1",
                                 "Host: " + "h" * 5000, f"Host: {host}\r\nHost: evil.example", "X-No-Host: 1"])
    elif kind == 4:  # odd query parameters
        q = "&".join(f"{rng.choice(PARAMS)}={rng.choice(ODD_VALUES)}" for _ in range(rng.randrange(1, 6)))
        path = path + "?" + q + rng.choice(["", "&&&", "&=", "&a", "#frag", "?x=?"])
    elif kind == 5:  # truncated bodies
        method = "POST"
        headers.append("Content-Type: application/x-www-form-urlencoded")
        headers.append(f"Content-Length: {rng.choice([100, 10_000, 1 << 20])}")
        body = b"name=FuzzTopic&x=" + bytes(rng.randrange(32, 127) for _ in range(rng.randrange(0, 60)))
        truncated = True
    elif kind == 6:  # bad Content-Length and chunking
        method = rng.choice(["POST", "GET"])
        headers.append(rng.choice(["Content-Length: -1", "Content-Length: abc", "Content-Length: 99999999999999999999",
                                   "Content-Length: 5\r\nContent-Length: 6", "Transfer-Encoding: chunked",
                                   "Transfer-Encoding: gzip, chunked", "Transfer-Encoding: chunked\r\nContent-Length: 3"]))
        body = rng.choice([b"zz\r\nhello\r\n0\r\n\r\n", b"5\r\nhel", b"ffffffffffffffff\r\nx\r\n", b"hello"])
        truncated = rng.random() < 0.5
    elif kind == 7:  # random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400))), True
    else:  # a request cut anywhere in its head
        full = f"GET {path} HTTP/1.1\r\n" + "\r\n".join(headers) + "\r\n\r\n"
        return full[:rng.randrange(1, len(full))].encode(), True
    head = f"{method} {path} {version}\r\n" + "\r\n".join(headers) + "\r\n\r\n"
    return head.encode("utf-8", "surrogateescape") + body, truncated


async def one(port: int, raw: bytes, truncated: bool, codes: Counter) -> None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        codes[f"connect {type(e).__name__}"] += 1
        return
    try:
        writer.write(raw)
        if truncated:
            writer.write_eof()
        await writer.drain()
        first = await asyncio.wait_for(reader.read(16), 15)
        codes[first[9:12].decode("latin-1") if first.startswith(b"HTTP/1.") else "closed"] += 1
    except (OSError, asyncio.TimeoutError) as e:
        codes["closed" if isinstance(e, ConnectionError) else type(e).__name__] += 1
    finally:
        writer.transport.abort()


async def run(port: int, requests: list[tuple[bytes, bool]], inflight: int) -> tuple[float, Counter]:
    codes: Counter = Counter()
    it = iter(requests)

    async def worker() -> None:
        for raw, truncated in it:
            await one(port, raw, truncated, codes)

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return time.monotonic() - t0, codes


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000, help="malformed requests per port")
    ap.add_argument("--baseline", type=int, default=2_000, help="valid requests per port before them")
    ap.add_argument("--inflight", type=int, default=32)
    args = ap.parse_args()
    rng = random.Random(36)
    ports = {"dashboard": free_port(), "metrics": free_port()}
    with tempfile.TemporaryDirectory() as tmp:
        conf = {"dashboardPort": ports["dashboard"], "metricsPort": ports["metrics"]}
        with BrokerProcess(os.path.join(tmp, "store"), conf=conf) as b:
            log_path = os.path.join(b.log_dir, "broker.log")
            out = []
            for kind, port in ports.items():
                hostport = f"127.0.0.1:{port}"
                phases = (("valid", [valid(kind, hostport, i) for i in range(args.baseline)]),
                          ("malformed", [malformed(rng, kind, hostport) for _ in range(args.n)]))
                for phase, requests in phases:
                    log_at = os.path.getsize(log_path) if os.path.exists(log_path) else 0
                    lines_at = len(b.lines)
                    rss0 = vm_rss_mib(b.proc.pid)
                    secs, codes = asyncio.run(run(port, requests, args.inflight))
                    rss1 = vm_rss_mib(b.proc.pid)
                    grown = open(log_path, errors="replace").read()[log_at:] if os.path.exists(log_path) else ""
                    output = "\n".join(list(b.lines)[lines_at:])
                    row = {"port": kind, "phase": phase, "requests": len(requests), "secs": round(secs, 2),
                           "requests_per_s": round(len(requests) / secs), "codes": dict(codes.most_common()),
                           "alive": b.proc.poll() is None,
                           "tracebacks": grown.count("Traceback") + output.count("Traceback"),
                           "log_lines": len(grown.splitlines()), "log_bytes": len(grown),
                           "output_lines": len(output.splitlines()),
                           "log_sample": sorted({ln.split(" - ", 1)[-1][:90] for ln in grown.splitlines()})[:6],
                           "vmrss_before_mib": round(rss0, 1), "vmrss_after_mib": round(rss1, 1),
                           "load_1m": os.getloadavg()[0]}
                    out.append(row)
                    print(json.dumps(row), flush=True)
            bad = [r for r in out if r["phase"] == "malformed"]
            print(json.dumps({"summary": True, "crashes": sum(not r["alive"] for r in out),
                              "tracebacks": sum(r["tracebacks"] for r in bad),
                              "status_500": sum(r["codes"].get("500", 0) for r in bad),
                              "log_lines": {r["port"]: r["log_lines"] for r in bad},
                              "vmrss_mib": [out[0]["vmrss_before_mib"], out[-1]["vmrss_after_mib"]],
                              "load_1m": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
