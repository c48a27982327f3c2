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
