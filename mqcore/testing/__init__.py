"""A real mqbroker for tests, with a clock the test moves: ``mqcore.testing``.

``TestBroker`` runs the broker that ``mqbroker`` runs (embedded name server, its own event loop
on a thread of the test process, a temp store, free loopback ports) with a ``VirtualClock``.
``advance(hours=2)`` moves the broker's time: delay levels, timers, the retry ladder to the
dead-letter queue, POP invisibility and transaction check-backs come due at once, while
clients keep their connections (liveness is measured on the wall clock) and everything else
runs as in production. The pytest plugin (``mqcore.testing.plugin``, registered as an entry
point, so installing mqcore is enough) gives it as the ``rocketmq_broker`` fixture::

    def test_a_delay_level_of_two_hours(rocketmq_broker):
        ...send with delay_time_level=18 to rocketmq_broker.namesrv_addr...
        rocketmq_broker.advance(hours=2)
        ...the consumer receives it within milliseconds...

Threads: the broker's loop thread and its services; ``advance`` and ``stop`` may be called
from any thread.
"""
from __future__ import annotations

import asyncio
import shutil
import time
import tempfile
import threading
from collections.abc import Callable
from types import TracebackType

from mqcore.broker.broker import Broker
from mqcore.broker.conf import build_configs
from mqcore.clock import VirtualClock
from mqcore.errors import ConfigError, IllegalStateError
from mqcore.remoting import eventloop

__all__ = ["TestBroker", "VirtualClock", "wait_for"]

#: what a test broker differs in from mqbroker's defaults: free ports, no dashboard or
#: metrics port, and a small commitlog file (a 1 GiB reservation per test is slow and wasteful)
TEST_DEFAULTS = {"listenPort": "0", "namesrvListenPort": "0", "listenHost": "127.0.0.1",
                 "brokerIP1": "127.0.0.1", "mappedFileSizeCommitLog": str(64 << 20)}
START_TIMEOUT_S = 60.0


def wait_for(condition: Callable[[], object], timeout: float = 10.0, step: float = 0.005) -> bool:
    """Poll ``condition`` (on the wall clock) until it is true or ``timeout`` seconds pass;
    whether it became true. What a test waits on after ``advance``: a delivery, a retry."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)
    return True


class TestBroker:
    """One mqbroker on a thread of this process, with a virtual clock.

    ``conf`` takes broker.conf keys (RocketMQ names, string values), e.g.
    ``{"messageDelayLevel": "1s 5s", "aclEnable": "true"}``; ``store_dir`` defaults to a temp
    directory removed at ``stop``. Use as a context manager or call ``start``/``stop``."""

    __test__ = False  # not a test class, whatever its name says to pytest

    def __init__(self, conf: dict[str, str] | None = None, *, store_dir: str | None = None) -> None:
        self.clock = VirtualClock()
        self._own_dir = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="mqcore-test-broker-")
        props = {**TEST_DEFAULTS, "storePathRootDir": self.store_dir, **(conf or {})}
        loaded = build_configs(props)
        if loaded.unknown_keys:
            raise ConfigError(f"unknown broker.conf key(s) {sorted(loaded.unknown_keys)}")
        self.broker = Broker(loaded.broker, loaded.store, clock=self.clock)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self) -> TestBroker:
        if self._thread is not None:
            raise IllegalStateError("this test broker was started already")
        self._thread = threading.Thread(target=self._run, name="mqcore-test-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            raise IllegalStateError(f"the test broker did not start within {START_TIMEOUT_S:.0f} s")
        if self._failure is not None:
            self._thread.join()
            self._cleanup()
            raise self._failure
        return self

    def _run(self) -> None:
        try:
            eventloop.run(self._serve())
        except BaseException as e:  # reported by start() (before ready) or kept for stop()
            self._failure = e
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        await self.broker.start()
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.broker.shutdown()

    def stop(self) -> None:
        """Shut the broker down (its store flushed, as at a clean stop) and delete a temp store."""
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None:
            return
        if loop is not None and stop is not None and thread.is_alive():
            loop.call_soon_threadsafe(stop.set)
        thread.join(START_TIMEOUT_S)
        self._thread = None
        self._cleanup()
        if self._failure is not None:  # the broker's loop died during the test: say so, with why
            failure, self._failure = self._failure, None
            raise IllegalStateError(f"the test broker stopped with an error: {failure!r}") from failure

    def _cleanup(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> TestBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- what a test uses ------------------------------------------------------------------------
    @property
    def namesrv_addr(self) -> str:
        """The embedded name server, for clients (``namesrv_addr=...``)."""
        return ";".join(self.broker.namesrv_addrs)

    @property
    def broker_addr(self) -> str:
        """The broker's own remoting address."""
        return self.broker.listen_addr

    def now_ms(self) -> int:
        """The broker's time (epoch milliseconds): the wall clock plus every ``advance``."""
        return self.clock()

    def waiting(self) -> int:
        """Messages the broker holds for a later time: parked at a delay level (retries
        included) or pending as timers. A test that advances the clock after a consumer's
        failure waits for its retry to be parked first (the send-back is asynchronous)."""
        b = self.broker
        parked = sum(b.schedule.pending().values())
        return parked + (b.timer.pending() if b.timer is not None else 0)

    def advance(self, seconds: float = 0, *, minutes: float = 0, hours: float = 0, days: float = 0) -> int:
        """Move the broker's time forward; what has come due is delivered within milliseconds
        (its services are woken). Returns the broker's new time in epoch milliseconds."""
        delta_ms = round((seconds + 60 * minutes + 3600 * hours + 86400 * days) * 1000)
        if delta_ms < 0:
            raise ValueError("time only moves forward")
        return self.clock.advance(delta_ms)

    def __repr__(self) -> str:
        state = "running" if self._thread is not None else "stopped"
        return f"TestBroker({self.namesrv_addr or '-'}, {state}, +{self.clock.offset_ms} ms)"
