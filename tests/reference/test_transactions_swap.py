"""A store with transactions still open, moved between mqbroker and Apache RocketMQ 4.9.7 both
ways: the broker that opens the copy finds the half messages in the store alone, checks them back
with the producer group's checker, and delivers exactly the committed ones.

The writing broker never checks back (transactionCheckInterval of 10 minutes); the reading one
checks every second."""
from __future__ import annotations

import pytest

from mqcore.client import LocalTransactionState, Message, TransactionProducer
from tests.client.integration.conftest import JAVA_BUSY_LIMITS
from tests.client.integration.helpers import FAST, create_topic, pull_everything
from tests.client.integration.test_transactions import Checker
from tests.reference.test_store_swap import GEOMETRY, copy_store
from tests.support.processes import BrokerProcess
from tests.support.reference import JavaBroker, JavaNamesrv
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(420)

S = LocalTransactionState
TOPIC, GROUP = "TxSwap", "tx-swap"
SLOW = {**GEOMETRY, "transactionCheckInterval": "600000", "transactionTimeOut": "1000"}
QUICK = {**GEOMETRY, "transactionCheckInterval": "1000", "transactionTimeOut": "1000"}
PRODUCER = {k: v for k, v in FAST.items() if k in ("heartbeat_broker_interval_ms", "poll_name_server_interval_ms")}


def leave_open(ns: str, broker_addr: str) -> None:
    """One committed transaction and two left open (the producer goes away without ending them)."""
    create_topic(broker_addr, ns, TOPIC, 2)
    with TransactionProducer(GROUP, checker=lambda m: S.UNKNOW, namesrv_addr=ns, **PRODUCER) as p:
        p.send_message_in_transaction(Message(TOPIC, b"done", keys=["done"]), lambda m, a: S.COMMIT_MESSAGE)
        for key in ("open-commit", "open-rollback"):
            p.send_message_in_transaction(Message(TOPIC, key.encode(), keys=[key]), lambda m, a: S.UNKNOW)


def resolve(ns: str) -> None:
    checker = Checker({"open-commit": S.COMMIT_MESSAGE, "open-rollback": S.ROLLBACK_MESSAGE})

    def delivered():
        return sorted(bytes(m.body) for m in pull_everything(ns, TOPIC, group="tx-swap-reader"))

    with TransactionProducer(GROUP, checker=checker, namesrv_addr=ns, **PRODUCER):
        assert wait_for(lambda: delivered() == [b"done", b"open-commit"] and "open-rollback" in checker.asked,
                        timeout=120), (delivered(), checker.asked)
    assert "done" not in checker.asked
    assert delivered() == [b"done", b"open-commit"]


def test_open_transactions_from_mqbroker_resolved_by_apache_rocketmq(tmp_path):
    with BrokerProcess(tmp_path / "mq-store", conf=SLOW) as mq:
        leave_open(mq.namesrv_addr, mq.broker_addr)
    store = copy_store(tmp_path / "mq-store", tmp_path / "for-java" / "store")
    with JavaNamesrv(tmp_path / "ns") as ns, JavaBroker(store, ns.addr, conf={**QUICK, **JAVA_BUSY_LIMITS}):
        resolve(ns.addr)


def test_open_transactions_from_apache_rocketmq_resolved_by_mqbroker(tmp_path):
    with JavaNamesrv(tmp_path / "ns") as ns, \
            JavaBroker(tmp_path / "java-store", ns.addr, conf={**SLOW, **JAVA_BUSY_LIMITS}) as jb:
        leave_open(ns.addr, jb.addr)
    store = copy_store(tmp_path / "java-store", tmp_path / "for-mq" / "store")
    with BrokerProcess(store, conf=QUICK) as mq:
        resolve(mq.namesrv_addr)
