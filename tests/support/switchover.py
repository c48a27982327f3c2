"""Traffic across a broker switch-over: a producer thread that keeps sending and counts what
was acknowledged and what failed (with the times of the first failure and of the first
success after it), and a clustering push consumer that records every body it gets.

    with SwitchTraffic(ns_addr, topic, group) as t:
        assert caught_up(admin, master, slave, topic, group)  # the new broker follows the old
        t.mark_switch()
        ...                      # old master read-only, caught_up(exact=True), stop it, promote
        assert t.wait_acked(t.acked_count() + 500)
        t.stop_sending()
        assert t.wait_consumed_all()
        t.refused_window_s(), t.duplicates(), t.report()
"""
from __future__ import annotations

import threading
import time
from collections import Counter

from mqcore.admin import MQAdmin
from mqcore.client import Message, Producer, PushConsumer
from mqcore.errors import MQError
from mqcore.remoting import RequestCode, SyncRemotingClient, create_request
from tests.support.waiting import wait_for

#: clients that notice a new route within a second (the defaults are 30 s)
FAST_CLIENT = dict(poll_name_server_interval_ms=1000, heartbeat_broker_interval_ms=1000)
FAST_CONSUMER = dict(FAST_CLIENT, rebalance_interval_ms=1000, persist_consumer_offset_interval_ms=500,
                     pull_time_delay_ms_when_exception=200)


class SwitchTraffic:
    """Sends ``sw-<i>`` every ``pause_s`` until stopped or ``max_messages`` were acknowledged;
    consumes the topic in ``group`` from the start. ``fast_clients``: poll the name server
    every second (else RocketMQ's 30 s). ``app_retry``: a send the client gave up on with a
    retriable error is sent again after a back-off (0.1 s doubling to 2 s), as an application
    riding through a switch would: then every message is acknowledged, in order."""

    def __init__(self, namesrv_addr: str, topic: str, group: str, *, max_messages: int = 6000,
                 pause_s: float = 0.005, fast_clients: bool = True, app_retry: bool = False):
        self.namesrv_addr, self.topic, self.group = namesrv_addr, topic, group
        self.max_messages = max_messages
        self.pause_s = pause_s
        self.app_retry = app_retry
        self.acked: list[bytes] = []
        self.failed = 0
        self.errors: Counter[str] = Counter()
        #: (first failure, first success after it) on time.monotonic(), per outage
        self.outages: list[list[float | None]] = []
        self.consumed: Counter[bytes] = Counter()
        self.switch_at: float | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send_loop, name="switch-producer", daemon=True)
        self.producer = Producer("switch-pg", namesrv_addr=namesrv_addr, retry_times_when_send_failed=2,
                                 send_msg_timeout_ms=3000, **(FAST_CLIENT if fast_clients else {}))
        self.consumer = PushConsumer(group, namesrv_addr=namesrv_addr, consume_from_where="first",
                                     **(FAST_CONSUMER if fast_clients else {}))
        self.consumer.subscribe(topic)
        self.consumer.register_listener(self._on_messages)

    def _on_messages(self, msgs, ctx) -> None:
        with self._lock:
            self.consumed.update(bytes(m.body) for m in msgs)

    def _send_loop(self) -> None:
        i, delay = 0, 0.1
        while not self._stop.is_set() and len(self.acked) < self.max_messages:
            body = f"sw-{i}".encode()
            try:
                ok = self.producer.send(Message(self.topic, body, keys=[f"k{i}"])).ok
                why = "" if ok else "not SEND_OK"
                retriable = False
            except MQError as e:
                ok, why, retriable = False, type(e).__name__, e.retriable
            if ok or not (self.app_retry and retriable):
                i += 1  # else the same message again (the application's retry, docs/migration.md)
            now = time.monotonic()
            with self._lock:
                if ok:
                    self.acked.append(body)
                    if self.outages and self.outages[-1][1] is None:
                        self.outages[-1][1] = now
                else:
                    self.failed += 1
                    self.errors[why] += 1
                    if not self.outages or self.outages[-1][1] is not None:
                        self.outages.append([now, None])
            if ok:
                delay = 0.1
                self._stop.wait(self.pause_s)
            elif self.app_retry:
                self._stop.wait(delay)  # the back-off of docs/migration.md's send_through_a_switch
                delay = min(delay * 2, 2.0)
            else:
                self._stop.wait(0.02)  # the client retried already: no need to hammer a broker that is down

    # --- the test's side ------------------------------------------------------------------------
    def start(self) -> "SwitchTraffic":
        self.producer.start()
        self.consumer.start()
        self._thread.start()
        return self

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_acked(self, n: int, timeout: float = 120) -> bool:
        return wait_for(lambda: self.acked_count() >= n or not self._thread.is_alive(), timeout=timeout) \
            and self.acked_count() >= n

    def stop_sending(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def missing(self) -> set[bytes]:
        with self._lock:
            return set(self.acked) - set(self.consumed)

    def wait_consumed_all(self, timeout: float = 120) -> bool:
        return wait_for(lambda: not self.missing(), timeout=timeout, step=0.2)

    def duplicates(self) -> int:
        with self._lock:
            return sum(c - 1 for c in self.consumed.values() if c > 1)

    def mark_switch(self) -> None:
        """The switch starts now (the old master is made read-only next)."""
        self.switch_at = time.monotonic()

    def failed_since_switch(self) -> bool:
        with self._lock:
            return bool(self.outages) and self.switch_at is not None and self.outages[-1][0] >= self.switch_at

    def refused_window_s(self) -> float:
        """The longest time from a failed send to the next acknowledged one."""
        with self._lock:
            return self._window()

    def _window(self) -> float:
        spans = [(end if end is not None else time.monotonic()) - begin for begin, end in self.outages]
        return max(spans, default=0.0)

    def report(self) -> str:
        with self._lock:
            return (f"acked={len(self.acked)} failed={self.failed} errors={dict(self.errors)} "
                    f"outages={len(self.outages)} refused_window_s={self._window():.2f} "
                    f"consumed_distinct={len(self.consumed)} duplicates="
                    f"{sum(c - 1 for c in self.consumed.values() if c > 1)}")

    def close(self) -> None:
        """Stop sending; shut the clients down (the consumer commits its offsets)."""
        if self._closed:
            return
        self._closed = True
        self.stop_sending()
        for client in (self.consumer, self.producer):
            try:
                client.shutdown()
            except MQError:
                pass

    def __enter__(self) -> "SwitchTraffic":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _max_offset(admin: MQAdmin, addr: str) -> int:
    try:
        return int(admin.broker_runtime_stats(addr)["commitLogMaxOffset"])
    except (MQError, KeyError, ValueError):
        return -1


def _body(addr: str, code: int) -> bytes:
    try:
        with SyncRemotingClient() as rc:
            return bytes(rc.invoke(addr, create_request(code), 5000).body or b"")
    except MQError:
        return b""


def caught_up(admin: MQAdmin, master: str, slave: str, topic: str, group: str, *, exact: bool = False,
              traffic: SwitchTraffic | None = None, timeout: float = 120) -> bool:
    """The slave holds the master's commitlog up to the master's end as read now (``exact``: the
    two ends are equal, once ``traffic`` saw its sends refused: the master is read-only) and its
    metadata sync copied the topic, the group and the group's offsets."""
    if exact and traffic is not None and not wait_for(traffic.failed_since_switch, timeout=timeout):
        return False
    if exact:
        replicated = wait_for(lambda: _max_offset(admin, slave) == _max_offset(admin, master) > 0, timeout=timeout)
    else:
        end = _max_offset(admin, master)
        replicated = wait_for(lambda: _max_offset(admin, slave) >= end > 0, timeout=timeout)

    def synced() -> bool:
        return (topic.encode() in _body(slave, RequestCode.GET_ALL_TOPIC_CONFIG)
                and f'"{group}"'.encode() in _body(slave, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
                and f"{topic}@{group}".encode() in _body(slave, RequestCode.GET_ALL_CONSUMER_OFFSET))
    return replicated and wait_for(synced, timeout=timeout, step=0.5)


#: the broker.conf keys that make a broker the master again (the new master's restart)
MASTER = {"brokerId": 0, "brokerRole": "ASYNC_MASTER"}


def switch_over(admin: MQAdmin, traffic: SwitchTraffic, old, old_addr: str, new, new_addr: str, topic: str,
                group: str) -> int:
    """The runbook's steps 3-5 (docs/migration.md) with traffic running: the old master made
    read-only (``brokerPermission=4``), the new broker waited for until it holds every byte and
    the group's offsets, the old master stopped, the new one restarted as the master. ``old`` /
    ``new``: process handles with ``stop()`` / ``conf`` and ``restart()``. Returns how many sends
    were acknowledged before the switch."""
    traffic.mark_switch()
    admin.update_broker_config(old_addr, {"brokerPermission": "4"})
    assert caught_up(admin, old_addr, new_addr, topic, group, exact=True, traffic=traffic), traffic.report()
    acked = traffic.acked_count()
    began = time.monotonic()
    old.stop()
    new.conf.update(MASTER)
    new.restart()
    print(f"SWITCHOVER old master stopped and new one started in {time.monotonic() - began:.2f} s")
    return acked


def switch_report(t: SwitchTraffic) -> str:
    return f"SWITCHOVER {t.report()}"
