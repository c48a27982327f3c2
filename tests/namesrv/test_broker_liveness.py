"""Name server behaviour real 4.x clients depend on (issue 11): a broker whose connection
closes leaves the routes at once, and a route lookup never creates a topic."""
from __future__ import annotations

import time

import pytest

from mqcore.message import properties_to_string
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from mqcore.remoting.headers import GetRouteInfoRequestHeader, SendMessageRequestHeader
from mqcore.jsonutil import loads_lenient
from tests.support.processes import BrokerProcess, NamesrvProcess

pytestmark = pytest.mark.timeout(120)


def route(rc, namesrv, topic):
    return rc.invoke(namesrv, create_request(RC.GET_ROUTEINFO_BY_TOPIC,
                                             GetRouteInfoRequestHeader(topic=topic).to_ext()), 5000)


def wait_for(predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_a_killed_broker_leaves_the_routes_when_its_connection_closes(tmp_path):
    with NamesrvProcess() as ns, SyncRemotingClient() as rc:
        broker = BrokerProcess(tmp_path / "store", namesrv=ns.addr)
        broker.start()
        try:
            # registration after start-up: a machine-speed wait, generous for a loaded CI box
            assert wait_for(lambda: route(rc, ns.addr, "TBW102").code == ResponseCode.SUCCESS, 30)
            started = time.monotonic()
            broker.kill9()  # no UNREGISTER_BROKER: only the closed connection tells
            # RocketMQ's onChannelDestroy: gone at once, not after the 120 s expiry
            assert wait_for(lambda: route(rc, ns.addr, "TBW102").code == ResponseCode.TOPIC_NOT_EXIST, 10)
            assert time.monotonic() - started < 10
            cluster = loads_lenient(rc.invoke(ns.addr, create_request(RC.GET_BROKER_CLUSTER_INFO), 5000).body)
            assert cluster["brokerAddrTable"] == {}
            # and a restarted broker registers again
            broker.restart()
            assert wait_for(lambda: route(rc, ns.addr, "TBW102").code == ResponseCode.SUCCESS, 30)
        finally:
            broker.stop()


def test_route_lookup_does_not_create_the_topic_only_a_send_does(tmp_path):
    with BrokerProcess(tmp_path / "store") as b, SyncRemotingClient() as rc:
        r = route(rc, b.namesrv_addr, "NotYetThere")
        assert r.code == ResponseCode.TOPIC_NOT_EXIST and "NotYetThere" in r.remark
        topics = loads_lenient(rc.invoke(b.broker_addr, create_request(RC.GET_ALL_TOPIC_CONFIG), 5000).body)
        assert "NotYetThere" not in topics["topicConfigTable"]
        # a consumer pulling it gets TOPIC_NOT_EXIST too; the producer's send creates it
        h = SendMessageRequestHeader(producer_group="PG", topic="NotYetThere", default_topic="TBW102",
                                     default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                     born_timestamp=int(time.time() * 1000), flag=0,
                                     properties=properties_to_string({"TAGS": "a"}))
        sent = rc.invoke(b.broker_addr, create_request(RC.SEND_MESSAGE_V2, h.to_ext(RC.SEND_MESSAGE_V2), b"x"), 5000)
        assert sent.code == ResponseCode.SUCCESS
        assert wait_for(lambda: route(rc, b.namesrv_addr, "NotYetThere").code == ResponseCode.SUCCESS, 10)
