"""A project's tests of code that uses RocketMQ, with the ``rocketmq_broker`` fixture that
installing mqcore gives pytest (no conftest.py). Each scenario takes hours of the broker's
time and finishes in seconds: the test advances the broker's clock.

    python -m pytest examples/pytest-project
"""
from __future__ import annotations

import threading
import time

from mqcore.client import Message, Producer, PullConsumer, PushConsumer
from mqcore.client.transaction import LocalTransactionState, TransactionProducer
from mqcore.testing import wait_for


def _consume(broker, group, topic, listener):
    c = PushConsumer(group, namesrv_addr=broker.namesrv_addr, consume_from_where="first")
    c.subscribe(topic)
    c.register_listener(listener)
    return c.start()


def test_a_delay_level_of_two_hours_arrives_after_advance(rocketmq_broker):
    got = []
    with Producer("pg-delay", namesrv_addr=rocketmq_broker.namesrv_addr) as p:
        p.send(Message("VtDelay", b"later", delay_level=18))  # 2 h
        c = _consume(rocketmq_broker, "cg-delay", "VtDelay", lambda msgs, ctx: got.extend(msgs))
        try:
            assert wait_for(lambda: rocketmq_broker.waiting() == 1, 10)  # parked at level 18
            assert got == []  # not before its time
            t0 = time.monotonic()
            rocketmq_broker.advance(hours=2)
            assert wait_for(lambda: len(got) == 1, timeout=10, step=0.01)
            assert time.monotonic() - t0 < 2
            assert got[0].body == b"later" and got[0].properties.get("DELAY") == "18"
        finally:
            c.shutdown()


def test_a_timer_a_day_out_arrives_after_advance(rocketmq_broker):
    got = []
    with Producer("pg-timer", namesrv_addr=rocketmq_broker.namesrv_addr) as p:
        due = rocketmq_broker.now_ms() + 86_400_000
        p.send(Message("VtTimer", b"tomorrow", properties={"TIMER_DELIVER_MS": str(due)}))
        c = _consume(rocketmq_broker, "cg-timer", "VtTimer", lambda msgs, ctx: got.extend(msgs))
        try:
            rocketmq_broker.advance(hours=23)
            time.sleep(0.5)
            assert got == []
            t0 = time.monotonic()
            rocketmq_broker.advance(hours=1, seconds=1)
            assert wait_for(lambda: len(got) == 1, timeout=10, step=0.01)
            assert time.monotonic() - t0 < 2
            assert got[0].body == b"tomorrow" and got[0].store_timestamp >= due
        finally:
            c.shutdown()


def _dead_letters(broker, group):
    """The bodies in ``%DLQ%<group>`` (a PullConsumer: the topic exists only once a message dies)."""
    with PullConsumer("cg-dlq-reader", namesrv_addr=broker.namesrv_addr) as pc:
        out = []
        for mq in pc.fetch_subscribe_message_queues(f"%DLQ%{group}"):
            r = pc.pull(mq, "*", 0, 32)
            out += [m.body for m in r.messages]
        return out


def test_sixteen_failures_reach_the_dead_letter_queue_in_seconds(rocketmq_broker):
    attempts = []

    def always_fails(msgs, ctx):
        attempts.extend(m.reconsume_times for m in msgs)
        raise RuntimeError("the listener fails every time")

    store = rocketmq_broker.broker.store
    dead = lambda: store.get_max_offset_in_queue("%DLQ%cg-dlq", 0) > 0  # noqa: E731
    with Producer("pg-dlq", namesrv_addr=rocketmq_broker.namesrv_addr) as p:
        p.send(Message("VtDlq", b"poison"))  # the topic exists before its consumer starts
        c = _consume(rocketmq_broker, "cg-dlq", "VtDlq", always_fails)
        try:
            assert wait_for(lambda: len(attempts) == 1, timeout=10, step=0.005)
            t0 = time.monotonic()
            while not dead() and time.monotonic() - t0 < 10:
                seen = len(attempts)
                # the failed attempt's retry is parked at its delay level, then its time is skipped
                if not wait_for(lambda: rocketmq_broker.waiting() == 1 or dead(), timeout=2, step=0.001) or dead():
                    break
                rocketmq_broker.advance(hours=2)  # the longest step of the retry ladder
                wait_for(lambda: len(attempts) > seen, timeout=2, step=0.001)
            elapsed = time.monotonic() - t0
            assert dead(), f"no dead letter after {len(attempts)} attempts"
            assert attempts == list(range(17))
            assert elapsed < 30, f"16 retries took {elapsed:.2f} s of wall time (bench/bench_virtual_time.py times it)"
        finally:
            c.shutdown()
    assert _dead_letters(rocketmq_broker, "cg-dlq") == [b"poison"]


def test_a_transaction_check_back_comes_when_the_clock_passes_the_check_interval(rocketmq_broker):
    asked = threading.Event()

    def local(msg, arg):
        return LocalTransactionState.UNKNOW

    def check(msg):
        asked.set()
        return LocalTransactionState.COMMIT_MESSAGE

    got = []
    with TransactionProducer("pg-tx", namesrv_addr=rocketmq_broker.namesrv_addr, checker=check) as p:
        p.send_message_in_transaction(Message("VtTx", b"half"), local)
        c = _consume(rocketmq_broker, "cg-tx", "VtTx", lambda msgs, ctx: got.extend(msgs))
        try:
            time.sleep(0.5)
            assert not asked.is_set() and got == []
            t0 = time.monotonic()
            rocketmq_broker.advance(minutes=1, seconds=1)  # transactionCheckInterval 60 s, timeout 6 s
            assert asked.wait(10) and time.monotonic() - t0 < 2
            assert wait_for(lambda: len(got) == 1, timeout=10, step=0.01)
        finally:
            c.shutdown()


def test_clients_stay_connected_through_skipped_hours(rocketmq_broker):
    got = []
    with Producer("pg-live", namesrv_addr=rocketmq_broker.namesrv_addr) as p:
        c = _consume(rocketmq_broker, "cg-live", "VtLive", lambda msgs, ctx: got.extend(msgs))
        try:
            p.send(Message("VtLive", b"one"))
            assert wait_for(lambda: len(got) == 1, timeout=10, step=0.01)
            rocketmq_broker.advance(days=2)  # heartbeats expire after 120 s of wall time, not of this
            clients = rocketmq_broker.broker.clients
            assert clients.scan_expired() == []  # heartbeats are timed on the wall clock
            assert clients.group("cg-live") is not None and clients.group("cg-live").client_ids()
            p.send(Message("VtLive", b"two"))
            assert wait_for(lambda: len(got) == 2, timeout=10, step=0.01)
        finally:
            c.shutdown()
