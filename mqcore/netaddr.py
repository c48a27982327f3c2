"""``host:port`` text: the one parser and formatter of socket addresses, and the port check.

Leaf module (imports only ``mqcore.errors``). IPv6 hosts are written in brackets
(``[::1]:9876``), as RocketMQ's ``RemotingHelper`` prints them.
"""
from __future__ import annotations

import argparse
from typing import Any

from mqcore.errors import IllegalArgumentError

MAX_PORT = 65535


def parse_host_port(addr: str) -> tuple[str, int]:
    """Split ``host:port`` / ``[v6]:port`` into (host without brackets, port).

    Raises :class:`IllegalArgumentError` (a ``ValueError``) when malformed.
    """
    host, sep, port = addr.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > MAX_PORT:
        raise IllegalArgumentError(f"address {addr!r} is not host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def host_of(addr: str | None) -> str | None:
    """The host of ``host:port`` (``MessageExt.getBornHostString``): None for no address, the
    text itself when it is not ``host:port``."""
    if not addr:
        return None
    try:
        return parse_host_port(addr)[0]
    except IllegalArgumentError:
        return addr


def format_host_port(host: str, port: int) -> str:
    """The inverse of :func:`parse_host_port`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def format_sockaddr(sockaddr: Any) -> str:
    """``ip:port`` (IPv6 in brackets) from a socket address tuple; anything else as ``str``."""
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        return format_host_port(str(sockaddr[0]), sockaddr[1])
    return str(sockaddr)


def tcp_port(text: str) -> int:
    """argparse type: a TCP port, 0 meaning "pick a free one"."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (0-{MAX_PORT})")
    return port
