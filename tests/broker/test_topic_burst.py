"""Topics created in a burst: each answered only once persisted and routed, so all of them
survive a kill -9, and the name server routes every one (each registered alone, incrementally)."""
from __future__ import annotations

import json
import os

from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode, SyncRemotingClient, create_request
from tests.broker.test_protocol import decode, pull, send
from tests.support.processes import BrokerProcess

N = 300


def _create(rc, b, name: str, queues: int = 4) -> None:
    r = rc.invoke(b.broker_addr, create_request(RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": name, "defaultTopic": "TBW102", "readQueueNums": str(queues), "writeQueueNums": str(queues),
        "perm": "6", "topicFilterType": "SINGLE_TAG"}), 10_000)
    assert r.code == ResponseCode.SUCCESS, r.remark


def _routed(rc, b, name: str) -> dict | None:
    r = rc.invoke(b.namesrv_addr, create_request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": name}), 5000)
    return json.loads(bytes(r.body)) if r.code == ResponseCode.SUCCESS else None


def test_burst_of_created_topics_survives_kill9_and_is_routed(tmp_path):
    names = [f"Burst{i}" for i in range(N)]
    with BrokerProcess(tmp_path / "store") as b, SyncRemotingClient() as rc:
        for name in names:
            _create(rc, b, name)
            # answered: already routed by the name server (registered before the answer)
            assert _routed(rc, b, name) is not None, name
        # every earlier topic is still routed after the later ones registered alone
        for name in names:
            route = _routed(rc, b, name)
            assert route is not None and route["queueDatas"][0]["writeQueueNums"] == 4, name
        _create(rc, b, names[7], queues=2)  # an update, registered alone as well
        assert _routed(rc, b, names[7])["queueDatas"][0]["writeQueueNums"] == 2
        assert send(rc, b, names[-1], b"last").code == ResponseCode.SUCCESS
        b.kill9()
        b.restart()
        r = rc.invoke(b.broker_addr, create_request(RC.GET_ALL_TOPIC_CONFIG), 5000)
        table = json.loads(bytes(r.body))["topicConfigTable"]
        assert set(names) <= set(table)
        assert table[names[7]]["writeQueueNums"] == 2 and table[names[0]]["writeQueueNums"] == 4
        for name in names:
            assert _routed(rc, b, name) is not None, name
        assert [m.body for m in decode(pull(rc, b, names[-1], 0, sub="*").body)] == [b"last"]
    # the file a 4.9 broker reads: the last version, and the one before it as .bak
    config = tmp_path / "store" / "config"
    last = json.loads((config / "topics.json").read_text())["topicConfigTable"]
    bak = json.loads((config / "topics.json.bak").read_text())["topicConfigTable"]
    assert set(names) <= set(last) and len(bak) >= len(last) - 1
    assert not os.path.exists(config / "topics.json.tmp")
