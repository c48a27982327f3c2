"""Waiting on conditions instead of sleeping, and free loopback ports."""
from __future__ import annotations

import socket
import time


def wait_for(pred, timeout: float = 30.0, step: float = 0.05) -> bool:
    """Poll ``pred`` until it is true or ``timeout`` seconds pass; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())


def free_port() -> int:
    """A loopback port nothing listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settled(read, timeout: float = 10.0, step: float = 0.05, same: int = 4, slack: float = 0):
    """Poll ``read`` until it returns the same value (within ``slack``) ``same`` times in a row
    (a process has finished reacting: its RSS or descriptor count stops moving) or ``timeout``
    passes; the last value read. For quantities with no event to wait on."""
    deadline = time.monotonic() + timeout
    last, streak = read(), 1
    while streak < same and time.monotonic() < deadline:
        time.sleep(step)
        value = read()
        streak = streak + 1 if abs(value - last) <= slack else 1
        last = value
    return last


def closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the peer closed ``sock`` (EOF or reset), None if it stayed open that long
    (what it sends meanwhile is read and dropped)."""
    t0 = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - t0 < seconds:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - t0
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
    return None
