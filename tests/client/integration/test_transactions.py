"""mqcore.client's TransactionProducer against mqbroker and against Apache RocketMQ 4.9.7.

Both brokers run with a short check-back (transactionCheckInterval 1 s, transactionTimeOut
1 s), so an UNKNOW transaction is resolved by the checker within a few seconds. The same
scenario, the same outcome on both: commit delivered once, rollback never, unknown resolved by
the check-back, a half message invisible before its end."""
from __future__ import annotations

import threading

import pytest

from mqcore.client import LocalTransactionState, Message, TransactionProducer
from mqcore.message import Prop, decode_offset_msg_id
from tests.client.integration.conftest import start_java_broker
from tests.client.integration.helpers import FAST, create_topic, pull_everything
from tests.support.processes import BrokerProcess
from tests.support.waiting import wait_for

TX_CONF = {"transactionCheckInterval": "1000", "transactionTimeOut": "1000"}

S = LocalTransactionState


@pytest.fixture(scope="module")
def java_tx_broker(tmp_path_factory):
    h = start_java_broker(tmp_path_factory.mktemp("rmq-tx"), broker_name="broker-tx", conf=TX_CONF)
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture(params=["mqbroker", "rocketmq"])
def tx_broker(request, tmp_path):
    if request.param == "rocketmq":
        yield request.getfixturevalue("java_tx_broker")
        return
    with BrokerProcess(tmp_path / "store", conf=TX_CONF) as b:
        b.kind = "mqbroker"
        yield b


class Checker:
    """Answers check-backs from a table of decisions by key; records what it was asked."""

    def __init__(self, decisions: dict[str, LocalTransactionState]):
        self.decisions = decisions
        self.asked: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, msg):
        key = msg.keys[0]
        with self.lock:
            self.asked.append(key)
        return self.decisions.get(key, S.UNKNOW)


def test_commit_rollback_unknown(tx_broker):
    topic = f"TxTopic_{tx_broker.kind}"
    create_topic(tx_broker.broker_addr, tx_broker.namesrv_addr, topic, queues=2)
    checker = Checker({"unknown-then-commit": S.COMMIT_MESSAGE, "unknown-then-rollback": S.ROLLBACK_MESSAGE})
    group = f"tx-group-{tx_broker.kind}"
    with TransactionProducer(group, checker=checker, namesrv_addr=tx_broker.namesrv_addr, **_producer_fast()) as p:
        seen_before: list = []

        def commit_after_looking(msg, arg):
            # the half message is stored but not delivered: a reader of the topic sees nothing
            seen_before.extend(pull_everything(tx_broker.namesrv_addr, topic, group="tx-peek"))
            return S.COMMIT_MESSAGE

        r1 = p.send_message_in_transaction(Message(topic, b"committed", keys=["commit"]), commit_after_looking)
        r2 = p.send_message_in_transaction(Message(topic, b"rolled back", keys=["rollback"]),
                                           lambda m, a: S.ROLLBACK_MESSAGE)
        r3 = p.send_message_in_transaction(Message(topic, b"checked: commit", keys=["unknown-then-commit"]),
                                           lambda m, a: S.UNKNOW)
        r4 = p.send_message_in_transaction(Message(topic, b"checked: rollback", keys=["unknown-then-rollback"]),
                                           _raises)
        assert seen_before == []
        assert [r.local_transaction_state for r in (r1, r2, r3, r4)] == [S.COMMIT_MESSAGE, S.ROLLBACK_MESSAGE,
                                                                          S.UNKNOW, S.UNKNOW]
        assert r1.transaction_id == r1.msg_id

        def delivered():
            return sorted(bytes(m.body) for m in pull_everything(tx_broker.namesrv_addr, topic, group="tx-reader"))

        assert wait_for(lambda: delivered() == [b"checked: commit", b"committed"], timeout=60), delivered()
        assert wait_for(lambda: {"unknown-then-commit", "unknown-then-rollback"} <= set(checker.asked), timeout=60)
    msgs = {m.keys[0]: m for m in pull_everything(tx_broker.namesrv_addr, topic, group="tx-reader2")}
    assert sorted(msgs) == ["commit", "unknown-then-commit"]
    committed = msgs["commit"]
    assert committed.properties.get(Prop.TRAN_MSG) == "true"
    assert committed.properties.get(Prop.PGROUP) == group
    assert committed.msg_id == r1.msg_id  # the transaction id (UNIQ_KEY) is kept
    assert committed.sys_flag & 0xC == 0x8  # the commit sysflag
    # the half message's commitlog offset (the commit's header named it)
    assert committed.prepared_transaction_offset == decode_offset_msg_id(r1.offset_msg_id)[2]
    assert "commit" not in checker.asked and "rollback" not in checker.asked  # ended ones are never asked


def _raises(msg, arg):
    raise RuntimeError("the local transaction failed halfway")


def _producer_fast() -> dict:
    return {k: v for k, v in FAST.items() if k in ("heartbeat_broker_interval_ms", "poll_name_server_interval_ms")}


@pytest.mark.parametrize("how", ["restart", "kill9"])
def test_broker_gone_between_half_message_and_end(tx_broker, how):
    """The broker stops (cleanly, or kill -9) after storing the half message and before the end
    arrives: the end is lost, and after the broker is back its check-back resolves the
    transaction from the store alone."""
    topic = f"TxCrash_{tx_broker.kind}_{how}"
    create_topic(tx_broker.broker_addr, tx_broker.namesrv_addr, topic, queues=1)
    checker = Checker({"crash": S.COMMIT_MESSAGE})

    def broker_goes_away(msg, arg):
        if how == "kill9":
            tx_broker.kill9()
        else:
            _stop(tx_broker)
        return S.COMMIT_MESSAGE  # this end goes nowhere

    with TransactionProducer(f"tx-crash-{how}", checker=checker, namesrv_addr=tx_broker.namesrv_addr,
                             **_producer_fast()) as p:
        p.send_message_in_transaction(Message(topic, b"survives", keys=["crash"]), broker_goes_away)
        _start(tx_broker)

        def delivered():
            return [bytes(m.body) for m in pull_everything(tx_broker.namesrv_addr, topic, group="tx-crash-reader")]

        assert wait_for(lambda: delivered() == [b"survives"], timeout=90), delivered()
        assert "crash" in checker.asked
    assert delivered() == [b"survives"]  # once


def _stop(b):
    if getattr(b, "kind", "") == "rocketmq":
        b.java.stop()
    else:
        b.stop()


def _start(b):
    if getattr(b, "kind", "") == "rocketmq":
        b.java.start()
    else:
        b.start()


def test_asyncio_variant_and_the_metrics(tmp_path):
    """``asend_message_in_transaction`` with an async local transaction, and what the broker's
    metrics endpoint then counts (mqbroker only: the metrics are its own)."""
    import asyncio

    from tests.broker.test_metrics import free_port, scrape, value

    port = free_port()
    with BrokerProcess(tmp_path / "store", conf={**TX_CONF, "metricsPort": port}) as b:
        create_topic(b.broker_addr, b.namesrv_addr, "TxAsync", queues=1)
        checker = Checker({"async-unknown": S.ROLLBACK_MESSAGE})

        async def local(msg, arg):
            await asyncio.sleep(0)
            return arg

        async def main(p):
            return [await p.asend_message_in_transaction(Message("TxAsync", key.encode(), keys=[key]), local, state)
                    for key, state in (("async-commit", S.COMMIT_MESSAGE), ("async-rollback", S.ROLLBACK_MESSAGE),
                                       ("async-unknown", S.UNKNOW))]

        with TransactionProducer("tx-async", checker=checker, namesrv_addr=b.namesrv_addr, **_producer_fast()) as p:
            results = asyncio.run(main(p))
            assert [r.local_transaction_state for r in results] == [S.COMMIT_MESSAGE, S.ROLLBACK_MESSAGE, S.UNKNOW]
            assert wait_for(lambda: checker.asked == ["async-unknown"] and
                            value(scrape(port), "rocketmq_transaction_messages_total", state="rolled_back") == 2,
                            timeout=60), checker.asked
        samples = scrape(port)
        counts = {state: value(samples, "rocketmq_transaction_messages_total", state=state)
                  for state in ("half", "committed", "rolled_back", "refused", "discarded")}
        assert counts == {"half": 3, "committed": 1, "rolled_back": 2, "refused": 0, "discarded": 0}
        assert value(samples, "rocketmq_transaction_messages_total", state="checked") >= 1
        assert [bytes(m.body) for m in pull_everything(b.namesrv_addr, "TxAsync", group="tx-async-reader")] \
            == [b"async-commit"]
