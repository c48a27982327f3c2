"""The interface the broker hands the 5.x endpoint (mqcore.grpc.source): the broker's real
managers have every method the endpoint's Protocols name, with the same parameters.

mypy would check this where Broker.grpc_source builds the source, but the broker module is
not yet under --strict; this checks it at run time, so a renamed manager method (or a new
call the endpoint makes without declaring it) fails here rather than in a 5.x client test.
"""
from __future__ import annotations

import inspect

import pytest

from mqcore.broker.broker import Broker
from mqcore.broker.config import BrokerConfig
from mqcore.broker.transaction import EndOutcome, EndResult
from mqcore.config import StoreConfig
from mqcore.grpc import source as S


def _members(proto: type) -> dict[str, object]:
    return {k: v for k, v in vars(proto).items()
            if not k.startswith("_") and (inspect.isfunction(v) or isinstance(v, property))}


def _check(proto: type, obj: object) -> list[str]:
    wrong = []
    assert _members(proto), proto  # the check has something to check
    for name, member in _members(proto).items():
        if not hasattr(obj, name):
            wrong.append(f"{type(obj).__name__} has no {name}")
        elif inspect.isfunction(member):
            want = [p for p in inspect.signature(member).parameters if p != "self"]
            have = list(inspect.signature(getattr(obj, name)).parameters)
            if have[:len(want)] != want:
                wrong.append(f"{type(obj).__name__}.{name}{tuple(have)} is not {proto.__name__}.{name}{tuple(want)}")
    assert isinstance(obj, proto) == (not [w for w in wrong if " has no " in w])
    return wrong


@pytest.fixture
def source(tmp_path):
    broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="src"),
                    StoreConfig(store_path=str(tmp_path / "store")))
    return broker, broker.grpc_source()


def test_the_brokers_managers_are_what_the_endpoint_declares(source):
    broker, src = source
    pairs = [(S.Topics, src.topics), (S.Groups, src.groups), (S.Offsets, src.offsets), (S.Stats, src.stats),
             (S.Latency, src.stats.put_latency), (S.Transactions, src.transactions), (S.Settings, src.settings()),
             (S.EndResult, EndResult(EndOutcome.REFUSED, remark="no such half message"))]
    wrong = [w for proto, obj in pairs for w in _check(proto, obj)]
    assert not wrong, wrong
    # the facts are read when asked, so a run-time config change reaches the endpoint
    assert src.settings() is broker.cfg and src.store_config() is broker.store_config
    assert src.send_refusal("SCHEDULE_TOPIC_XXXX") and src.send_refusal("Plain") is None
    assert src.acl is None  # aclEnable off


def test_a_refused_end_is_told_by_its_result():
    assert EndResult(EndOutcome.REFUSED).refused
    assert not any(EndResult(o).refused for o in EndOutcome if o is not EndOutcome.REFUSED)


def test_the_check_fails_for_a_manager_without_a_declared_method():
    class Groups:
        def ensure(self, group): ...
        def retry_max_times(self, topic): ...  # a parameter renamed

    wrong = _check(S.Groups, Groups())
    assert any("no consume_orderly" in w for w in wrong) and any("retry_max_times" in w for w in wrong)
