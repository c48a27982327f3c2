"""The name server's operator calls over the wire: QUERY_DATA_VERSION (changed or not, and the
liveness it refreshes), GET_TOPICS_BY_CLUSTER, WIPE/ADD_WRITE_PERM_OF_BROKER (which hold until the
broker's topic table changes) and GET/UPDATE_NAMESRV_CONFIG."""
from __future__ import annotations

import asyncio
import json

import pytest

from mqcore.clock import ManualClock
from mqcore.namesrv.config import NamesrvConfig
from mqcore.namesrv.routes import RouteInfoManager
from mqcore.namesrv.server import NameServer
from mqcore.remoting import RemotingClient, ResponseCode, create_request
from mqcore.remoting.codes import RequestCode as RC
from mqcore.remoting.headers import RegisterBrokerRequestHeader

pytestmark = pytest.mark.timeout(60)


def wrapper(version: int, *topics: str) -> dict:
    return {"dataVersion": {"counter": version, "timestamp": 7},
            "topicConfigTable": {t: {"topicName": t, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
                                 for t in topics}}


def test_wiped_write_perm_holds_until_the_topic_table_changes():
    r = RouteInfoManager(lambda: 0)
    r.register("C", "a:1", "a", 0, "", wrapper(1, "T", "U"))
    r.register("D", "b:1", "b", 0, "", wrapper(1, "T"))
    assert r.change_write_perm("a", False) == 2
    r.register("C", "a:1", "a", 0, "", wrapper(1, "T", "U"))  # the same table again: still wiped
    assert {q["brokerName"]: q["perm"] for q in r.route("T")["queueDatas"]} == {"a": 4, "b": 6}
    assert r.change_write_perm("a", True) == 2 and r.route("U")["queueDatas"][0]["perm"] == 6
    r.change_write_perm("a", False)
    r.register("C", "a:1", "a", 0, "", wrapper(2, "T", "U"))  # a new version: the broker's own perms
    assert r.route("U")["queueDatas"][0]["perm"] == 6
    assert r.topics_of_cluster("C") == ["T", "U"] and r.topics_of_cluster("D") == ["T"]
    assert r.topics_of_cluster("nope") == [] and r.change_write_perm("nope", False) == 0


def test_operator_calls_over_the_wire():
    clock = ManualClock(1_000_000)

    async def main():
        ns = NameServer(NamesrvConfig(listen_port=0, broker_channel_expired_ms=10_000), clock)
        port = await ns.start()
        addr = f"127.0.0.1:{port}"
        c = RemotingClient()
        try:
            async def call(code, ext=None, body=b""):
                return await c.invoke(addr, create_request(code, ext or {}, body), 3000)

            body = json.dumps({"topicConfigTableWrapper": None, "filterServerList": [],
                               "topicConfigSerializeWrapper": wrapper(3, "T")}).encode()
            h = RegisterBrokerRequestHeader(broker_name="a", broker_addr="127.0.0.1:1", cluster_name="C",
                                            ha_server_addr="", broker_id=0)
            assert (await call(RC.REGISTER_BROKER, h.to_ext(), body)).code == 0
            q = {"brokerName": "a", "brokerAddr": "127.0.0.1:1", "clusterName": "C", "brokerId": "0"}
            clock.advance(9_000)
            same = await call(RC.QUERY_DATA_VERSION, q, json.dumps({"counter": 3, "timestamp": 7}).encode())
            clock.advance(9_000)  # 18 s after registering, 9 s after the question: still alive
            kept = ns.routes.scan_not_active()
            other = await call(RC.QUERY_DATA_VERSION, q, json.dumps({"counter": 4, "timestamp": 7}).encode())
            stranger = await call(RC.QUERY_DATA_VERSION, {**q, "brokerAddr": "127.0.0.1:2"}, b'{"counter":3}')
            by_cluster = await call(RC.GET_TOPICS_BY_CLUSTER, {"cluster": "C"})
            wipe = await call(RC.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "a"})
            perm = ns.routes.route("T")["queueDatas"][0]["perm"]
            add = await call(RC.ADD_WRITE_PERM_OF_BROKER, {"brokerName": "a"})
            before = await call(RC.GET_NAMESRV_CONFIG)
            update = await call(RC.UPDATE_NAMESRV_CONFIG, body=b"orderMessageEnable=false\n")
            after = await call(RC.GET_NAMESRV_CONFIG)
            black = await call(RC.UPDATE_NAMESRV_CONFIG, body=b"rocketmqHome=/x\n")
            unknown = await call(RC.UPDATE_NAMESRV_CONFIG, body=b"listenPort=1\n")
            return (same, kept, other, stranger, by_cluster, wipe, perm, add, before, update, after, black, unknown,
                    port)
        finally:
            await c.shutdown()
            await ns.shutdown()

    (same, kept, other, stranger, by_cluster, wipe, perm, add, before, update, after, black, unknown,
     port) = asyncio.run(main())
    assert same.code == 0 and same.ext_fields["changed"] == "false"
    assert json.loads(same.body) == {"counter": 3, "timestamp": 7}
    assert kept == []
    assert other.ext_fields["changed"] == "true" and stranger.ext_fields["changed"] == "true" and not stranger.body
    assert json.loads(by_cluster.body) == {"topicList": ["T"]}
    assert wipe.ext_fields["wipeTopicCount"] == "1" and perm == 4 and add.ext_fields["addTopicCount"] == "1"
    assert f"listenPort={port}\n" in before.body.decode() and "orderMessageEnable=true\n" in before.body.decode()
    assert update.code == 0 and "orderMessageEnable=false\n" in after.body.decode()
    assert black.code == ResponseCode.NO_PERMISSION and black.remark == "Can not update config in black list."
    assert unknown.code == ResponseCode.SYSTEM_ERROR and "listenPort" in unknown.remark
