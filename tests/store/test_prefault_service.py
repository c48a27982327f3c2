"""PrefaultService's idle wait: it sleeps by the writer's pace, not on a fixed short nap."""
from __future__ import annotations

import pytest

from mqcore._compat import default_kernels
from mqcore.store.message_store import MessageStore
from mqcore.store.prefault import IDLE_MAX_S, IDLE_MIN_S, PrefaultService
from tests.support.store import msg, small_config

WINDOW = 32 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path):
    with MessageStore(small_config(tmp_path / "store", prefault_window_bytes=0)) as s:
        yield s


def _warm(service: PrefaultService) -> None:
    for _ in range(100):
        if not service._step():
            return
    raise AssertionError("the window never got warm")


def test_idle_wait_follows_the_writers_rate(store):
    clock = Clock()
    service = PrefaultService(store.commitlog, default_kernels(), WINDOW, clock=clock)
    store.put_message(msg(body=b"x" * 100))  # the first file exists and is reserved
    _warm(service)
    assert service.idle_wait_s() == IDLE_MIN_S  # the first look has no rate yet
    clock.now += 1.0
    assert service.idle_wait_s() == IDLE_MAX_S  # nothing written: the longest sleep
    mf = store.commitlog.queue.last
    before = mf.wrote_position
    for _ in range(20):
        store.put_message(msg(body=b"x" * 100))
    wrote = mf.wrote_position - before
    clock.now += 0.01
    rate = wrote / 0.01
    ahead = service._warmed - mf.wrote_position
    assert ahead > 0
    want = min(IDLE_MAX_S, max(IDLE_MIN_S, ahead / 2 / rate))
    assert service.idle_wait_s() == pytest.approx(want)
    assert IDLE_MIN_S < want < IDLE_MAX_S  # this pace puts the wait between the bounds


def test_a_fast_writer_gets_the_shortest_wait(store):
    clock = Clock()
    service = PrefaultService(store.commitlog, default_kernels(), WINDOW, clock=clock)
    store.put_message(msg(body=b"x" * 100))
    _warm(service)
    service.idle_wait_s()
    for _ in range(50):
        store.put_message(msg(body=b"x" * 200))
    clock.now += 0.001  # about 12 KB in a millisecond: the window's rest is used up in under 5 ms
    assert service.idle_wait_s() == IDLE_MIN_S


def test_a_new_commitlog_file_wakes_the_service(store):
    service = PrefaultService(store.commitlog, default_kernels(), WINDOW, clock=Clock())  # not started
    store.commitlog.queue.on_file_ready = service.file_ready
    assert not service._wakeup.is_set()
    store.put_message(msg(body=b"x" * 100))  # creates the first file
    assert service._wakeup.is_set()
    service._wakeup.clear()
    store.put_message(msg(body=b"x" * 100))  # the same file: no wake-up
    assert not service._wakeup.is_set()
    while store.commitlog.queue.last.file_from_offset == 0:  # fill the 64 KiB file until it rolls
        store.put_message(msg(body=b"x" * 4000))
    assert service._wakeup.is_set()


def test_the_store_wires_its_prefault_service_to_the_commitlog(tmp_path):
    with MessageStore(small_config(tmp_path / "store", prefault_window_bytes=WINDOW)) as s:
        assert s.commitlog.queue.on_file_ready == s.prefault_service.file_ready
