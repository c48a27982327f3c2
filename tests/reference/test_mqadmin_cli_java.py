"""``mqadmin`` (mqcore.admin) against Apache RocketMQ: the scenarios that run against mqbroker
in tests/admin/test_mqadmin_cli.py, unchanged, against the Java name server and broker."""
from __future__ import annotations

import pytest

from tests.admin import scenarios
from tests.admin.scenarios import Target

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def target(java_cluster):
    ns, broker = java_cluster
    return Target(ns.addr, broker.addr, broker.broker_name)


def test_broker_state(target):
    scenarios.broker_state(target)


def test_topic_lifecycle(target):
    scenarios.topic_lifecycle(target, "AdmLifecycle")


def test_no_route(target):
    scenarios.no_route(target, "AdmNobodyMadeThis")


def test_messages(target):
    scenarios.messages(target, "AdmMessages")


def test_groups_and_offsets(target):
    scenarios.groups_and_offsets(target, "AdmOffsets", "adm-cg")


def test_update_broker_config(target):
    """The Java broker takes any key; a runtime key really changes (read back by getBrokerConfig)."""
    t = target
    t.ok("updateBrokerConfig", "-b", t.broker_addr, "-k", "autoCreateSubscriptionGroup", "-v", "false")
    assert t.ok("getBrokerConfig", "-b", t.broker_addr, "--json").json["autoCreateSubscriptionGroup"] == "false"
    t.ok("updateBrokerConfig", "-c", t.cluster, "-k", "autoCreateSubscriptionGroup", "-v", "true")
    assert t.ok("getBrokerConfig", "-b", t.broker_addr, "--json").json["autoCreateSubscriptionGroup"] == "true"


def test_update_broker_config_survives_restart(java_cluster):
    """What mqbroker matches: the Java broker saves updateBrokerConfig into its -c file (it
    rewrites the file with every setting it has) and reads it back at the next start. Last in
    the module: it restarts the shared broker."""
    ns, broker = java_cluster
    conf_path = broker.workdir / "broker.conf"

    def restart():
        broker._argv = lambda: ["-c", str(conf_path), "-n", ns.addr]  # the file as the broker left it
        broker.restart()
        return Target(ns.addr, broker.addr, broker.broker_name)

    scenarios.config_survives_restart(Target(ns.addr, broker.addr, broker.broker_name), conf_path, restart)
