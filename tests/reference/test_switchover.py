"""Moving a broker between Apache RocketMQ 4.9.7 and mqbroker without downtime (docs/migration.md,
"Moving without downtime"): the new broker joins the running master as its slave (same brokerName,
brokerId=1, brokerRole=SLAVE, same mappedFileSizeCommitLog), catches up, the old master is made
read-only (brokerPermission=4) until the slave holds its last byte, then stopped, and the slave
is restarted on its store as the master (brokerId=0) with the same name server.

A producer keeps sending across the whole switch and a clustering push consumer keeps
consuming: every acknowledged message is consumed, the group carries on from where it was
(duplicates bounded, no reset to offset 0), and the window in which sends failed is measured
and printed (``-s`` shows it)."""
from __future__ import annotations

import contextlib

import pytest

from mqcore.admin import MQAdmin
from tests.support.processes import BrokerProcess, NamesrvProcess
from tests.support.reference import JavaBroker, JavaNamesrv, free_port_block
from tests.support.switchover import SwitchTraffic, caught_up, switch_over, switch_report
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(600)

FILE = 16 * 1024 * 1024  # the Java test broker's commitlog file size: master and slave must match
NAME, TOPIC, GROUP = "broker-move", "MoveTopic", "move-cg"
SLAVE = {"brokerId": 1, "brokerRole": "SLAVE"}
BEFORE, AFTER = 1000, 1000  # messages acknowledged before the slave joins, and after the switch


def _check(t: SwitchTraffic, admin: MQAdmin, acked_before_switch: int, new_master: str) -> None:
    assert t.wait_consumed_all(120), f"acknowledged but never consumed: {sorted(t.missing())[:20]} {t.report()}"
    # the group went on from its offsets: a reset to 0 would consume the ~BEFORE messages again
    assert t.duplicates() <= acked_before_switch // 10, t.report()
    assert t.refused_window_s() > 0, "no send failed: the switch was not exercised"
    route = admin.topic_route(TOPIC)
    assert [b.broker_addrs for b in route.broker_datas] == [{0: new_master}]
    print(switch_report(t))
    # the new master holds the group's offsets: a consumer started now would resume at the end
    t.close()
    assert wait_for(lambda: admin.consume_stats(GROUP, TOPIC).diff_total == 0, timeout=30), \
        admin.consume_stats(GROUP, TOPIC)


def test_apache_master_to_mqbroker_without_downtime(tmp_path):
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(JavaNamesrv(tmp_path / "ns"))
        admin = stack.enter_context(MQAdmin(ns.addr))
        java = stack.enter_context(JavaBroker(tmp_path / "java", ns.addr, broker_name=NAME))
        admin.create_topic(java.addr, TOPIC, read_queue_nums=4, write_queue_nums=4)
        admin.create_group(java.addr, GROUP)
        t = stack.enter_context(SwitchTraffic(ns.addr, TOPIC, GROUP))
        assert t.wait_acked(BEFORE), t.report()
        # 1. mqbroker joins as the slave: it finds the master's HA address in the name server's answer
        mq = BrokerProcess(tmp_path / "mq", namesrv=ns.addr, broker_name=NAME,
                           conf={"mappedFileSizeCommitLog": FILE, **SLAVE})
        stack.enter_context(mq)
        assert caught_up(admin, java.addr, mq.broker_addr, TOPIC, GROUP), t.report()
        # 2.-3. the master read-only, the slave caught up, the Apache master stopped, mqbroker
        # restarted on its store as the master
        acked = switch_over(admin, t, java, java.addr, mq, mq.broker_addr, TOPIC, GROUP)
        assert t.wait_acked(acked + AFTER), t.report()
        t.stop_sending()
        _check(t, admin, acked, mq.broker_addr)


def test_mqbroker_master_to_apache_without_downtime(tmp_path):
    with contextlib.ExitStack() as stack:
        ns = stack.enter_context(NamesrvProcess())
        admin = stack.enter_context(MQAdmin(ns.addr))
        # a fixed port: the Apache slave asks for topic configs on the VIP port, listenPort - 2
        mq = stack.enter_context(BrokerProcess(tmp_path / "mq", namesrv=ns.addr, broker_name=NAME,
                                               conf={"mappedFileSizeCommitLog": FILE},
                                               listen_port=free_port_block(2)))
        admin.create_topic(mq.broker_addr, TOPIC, read_queue_nums=4, write_queue_nums=4)
        admin.create_group(mq.broker_addr, GROUP)
        t = stack.enter_context(SwitchTraffic(ns.addr, TOPIC, GROUP))
        assert t.wait_acked(BEFORE), t.report()
        java = stack.enter_context(JavaBroker(tmp_path / "java", ns.addr, broker_name=NAME, conf=dict(SLAVE)))
        assert caught_up(admin, mq.broker_addr, java.addr, TOPIC, GROUP), t.report()
        acked = switch_over(admin, t, mq, mq.broker_addr, java, java.addr, TOPIC, GROUP)
        assert t.wait_acked(acked + AFTER, timeout=240), t.report()
        t.stop_sending()
        _check(t, admin, acked, java.addr)
