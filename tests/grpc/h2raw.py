"""A bare HTTP/2 connection that speaks just enough gRPC to open calls and then never read:
what a consumer that stops reading (or a client that means harm) looks like to the broker.

grpcio's own client cannot do that: its transport keeps reading the socket and buffering
the answers (up to its flow-control window, megabytes per call) whether the application
reads them or not. This one sends the connection preface, answers the server's SETTINGS
once, opens calls (HEADERS + one DATA frame each) and then leaves the socket unread, so the
server's writes stop at the peer's 64 KiB flow-control window and the kernel's buffers.

    with NeverReading("127.0.0.1:8081") as c:
        c.call("/apache.rocketmq.v2.MessagingService/ReceiveMessage", request_bytes, [("x-mq-client-id", "c1")])
"""
from __future__ import annotations

import socket
import struct
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, GOAWAY = 0, 1, 3, 4, 7
#: RST_STREAM error codes (RFC 9113 7)
CANCEL, REFUSED_STREAM = 0x8, 0x7
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1


def _int(value: int, prefix_bits: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 5.1)."""
    top = (1 << prefix_bits) - 1
    if value < top:
        return bytes([first | value])
    out = bytearray([first | top])
    value -= top
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def _literal(name: str, value: str) -> bytes:
    """A literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + _int(len(n), 7) + n + _int(len(v), 7) + v


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def grpc_message(body: bytes) -> bytes:
    return b"\x00" + struct.pack(">I", len(body)) + body


class NeverReading:
    def __init__(self, addr: str, timeout_s: float = 10) -> None:
        host, port = addr.rsplit(":", 1)
        self.authority = addr
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        # a small receive buffer: what the kernel takes in for us stays small too
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        self._ack_settings(timeout_s)
        self.next_stream = 1

    def _ack_settings(self, timeout_s: float) -> None:
        """Read until the server's SETTINGS frame and acknowledge it; after that, nothing is read."""
        buf = b""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            while len(buf) >= 9:
                length = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + length:
                    break
                kind, flags = buf[3], buf[4]
                buf = buf[9 + length:]
                if kind == SETTINGS and not flags & ACK:
                    self.sock.sendall(frame(SETTINGS, ACK, 0))
                    return
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection before its SETTINGS")
            buf += chunk
        raise TimeoutError("no SETTINGS from the server")

    def call(self, path: str, body: bytes, metadata: list[tuple[str, str]] = ()) -> int:
        """Open a unary-request call; returns its stream id."""
        return self.open(path, metadata, grpc_message(body), end=True)

    def open(self, path: str, metadata: list[tuple[str, str]] = (), data: bytes = b"", end: bool = False) -> int:
        """Open a call with its headers and ``data`` (a part of a message, or none), left open
        unless ``end``: a request that is never completed. Returns its stream id."""
        sid, self.next_stream = self.next_stream, self.next_stream + 2
        block = b"".join(_literal(k, v) for k, v in [
            (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", self.authority),
            ("content-type", "application/grpc"), ("te", "trailers"), *metadata])
        out = frame(HEADERS, END_HEADERS, sid, block)
        if data or end:
            out += frame(DATA, END_STREAM if end else 0, sid, data)
        self.sock.sendall(out)
        return sid

    def frames(self, seconds: float, until=None) -> list[tuple[int, int, int, bytes]]:
        """Read the frames that come within ``seconds`` (kind, flags, stream, payload), or until
        ``until(frames)`` holds; for a connection read only after its calls were opened."""
        out: list[tuple[int, int, int, bytes]] = []
        buf = b""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (until and until(out)):
            self.sock.settimeout(max(0.05, min(0.5, deadline - time.monotonic())))
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 9:
                length = int.from_bytes(buf[:3], "big")
                if len(buf) < 9 + length:
                    break
                out.append((buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + length]))
                buf = buf[9 + length:]
        return out

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "NeverReading":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
