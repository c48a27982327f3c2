"""CallbackThread: the producer's send-callback runner (one thread, submission order)."""
from __future__ import annotations

import logging
import threading

import pytest

from mqcore.client.loop import CallbackThread

pytestmark = pytest.mark.timeout(30)


def test_runs_in_submission_order_on_its_own_thread_and_survives_a_raising_callback(caplog):
    runner = CallbackThread("cb-test")
    seen: list[tuple[int, str]] = []

    def record(i: int) -> None:
        seen.append((i, threading.current_thread().name))

    def boom() -> None:
        raise RuntimeError("user bug")
    try:
        with caplog.at_level(logging.ERROR, logger="mqcore.client.loop"):
            for i in range(500):
                runner.submit(record, i)
                if i == 100:
                    runner.submit(boom)
    finally:
        runner.shutdown(5)  # runs everything queued first
    assert [i for i, _ in seen] == list(range(500))
    assert {name for _, name in seen} == {"cb-test"}
    assert "raised" in caplog.text and "user bug" in caplog.text


def test_shutdown_is_idempotent_and_later_callbacks_are_dropped(caplog):
    runner = CallbackThread("cb-test")
    runner.shutdown(5)
    runner.shutdown(5)
    ran: list[int] = []
    with caplog.at_level(logging.WARNING, logger="mqcore.client.loop"):
        runner.submit(ran.append, 1)
    assert ran == [] and "dropped" in caplog.text


def test_shutdown_from_a_callback_does_not_deadlock():
    runner = CallbackThread("cb-test")
    done = threading.Event()

    def stop_from_inside() -> None:
        runner.shutdown(5)
        done.set()
    runner.submit(stop_from_inside)
    assert done.wait(5)
