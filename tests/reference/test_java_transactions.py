"""The official RocketMQ 4.9.8 Java client's TransactionMQProducer against mqbroker and against
the Java broker 4.9.7: the same scenario (tests/reference/drivers/TransactionScenarios.java) gives
the same facts on both.

Both brokers run with a short check-back (transactionCheckInterval 1 s, transactionTimeOut 1 s),
so UNKNOW transactions are resolved by the producer's checker within seconds."""
from __future__ import annotations

import os

import pytest

from tests.support.java_drivers import compile_drivers, run_driver, scenario_results
from tests.support.processes import BrokerProcess
from tests.support.reference import JavaBroker, JavaNamesrv

pytestmark = pytest.mark.timeout(900)

TX_CONF = {"transactionCheckInterval": "1000", "transactionTimeOut": "1000"}


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    return compile_drivers(tmp_path_factory.mktemp("driver-classes"))


def _run(classes, namesrv, tmp, scenarios):
    r = run_driver(classes, "TransactionScenarios", [namesrv, f"p{os.getpid()}", *scenarios], logroot=tmp)
    results = scenario_results(r.stdout)
    missing = [s for s in scenarios if s not in results]
    assert not missing, f"driver ended without {missing}:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}"
    return results


def _ok(results, name) -> dict:
    passed, facts, line = results[name]
    assert passed, line
    return facts


@pytest.fixture(scope="module")
def on_mqbroker(classes, tmp_path_factory):
    work = tmp_path_factory.mktemp("tx-mq")
    with BrokerProcess(work / "store", conf=TX_CONF) as b:
        return _run(classes, b.namesrv_addr, work, ["tx"])


@pytest.fixture(scope="module")
def on_java(classes, tmp_path_factory):
    work = tmp_path_factory.mktemp("tx-java")
    with JavaNamesrv(work) as ns, JavaBroker(work / "store", ns.addr, conf=TX_CONF):
        return _run(classes, ns.addr, work, ["tx"])


def test_commit_once_rollback_never_unknown_resolved_by_check_back(on_mqbroker):
    facts = _ok(on_mqbroker, "tx")
    assert facts["received"] == "[commit,unknown-commit]" and facts["counts"] == "[1,1]", facts
    assert facts["states"] == "[commit:COMMIT_MESSAGE,rollback:ROLLBACK_MESSAGE,unknown-commit:UNKNOW," \
                              "unknown-rollback:UNKNOW]", facts
    # the checker was asked about the two unknown ones only, with the real topic restored
    assert facts["asked"] == "[unknown-commit@TxJava,unknown-rollback@TxJava]", facts
    # what a consumer sees of a committed message: TRAN_MSG and PGROUP kept, the commit sysflag,
    # the half message's commitlog offset
    assert facts["seen"] == "[commit:true:pg-tx:8:true,unknown-commit:true:pg-tx:8:true]", facts


def test_the_same_facts_as_the_java_broker(on_mqbroker, on_java):
    mine, theirs = _ok(on_mqbroker, "tx"), _ok(on_java, "tx")
    keys = ["received", "counts", "states", "asked", "seen", "txIdIsMsgId"]
    assert {k: mine[k] for k in keys} == {k: theirs[k] for k in keys}


def test_reject_transaction_message_refuses_promptly(classes, tmp_path):
    with BrokerProcess(tmp_path / "store", conf={"rejectTransactionMessage": "true"}) as b:
        facts = _ok(_run(classes, b.namesrv_addr, tmp_path, ["refused"]), "refused")
    assert facts["refused"] == "true" and int(facts["ms"]) < 10_000, facts
