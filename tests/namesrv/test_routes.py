import itertools

from mqcore.namesrv.routes import RouteInfoManager

_versions = itertools.count(1)


def wrapper(*topics, queues=4, version=None):
    """A broker's topic table; each call is a new table version, as a broker bumps it per change."""
    return {"dataVersion": {"counter": next(_versions) if version is None else version, "timestamp": 1},
            "topicConfigTable": {t: {"topicName": t, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6}
                                 for t in topics}}


def test_route_merges_brokers_and_expires_silent_ones():
    now = [0]
    r = RouteInfoManager(lambda: now[0], expiry_ms=120_000)
    r.register("C", "10.0.0.1:10911", "a", 0, "", wrapper("T", "U"))
    now[0] = 60_000
    r.register("C", "10.0.0.2:10911", "b", 0, "", wrapper("T", queues=8))
    route = r.route("T")
    assert [bd["brokerName"] for bd in route["brokerDatas"]] == ["a", "b"]
    assert [qd["writeQueueNums"] for qd in route["queueDatas"]] == [4, 8]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911"}
    now[0] = 130_000  # a: last seen at 0 -> expired; b: 70 s ago -> alive
    assert r.scan_not_active() == ["10.0.0.1:10911"]
    assert [bd["brokerName"] for bd in r.route("T")["brokerDatas"]] == ["b"]
    assert r.route("U") is None
    # a re-registration without a topic drops that topic for the broker
    r.register("C", "10.0.0.2:10911", "b", 0, "", wrapper("V"))
    assert r.route("T") is None and r.route("V") is not None
    assert r.cluster_info()["clusterAddrTable"] == {"C": ["b"]}


def test_incremental_registration_keeps_the_brokers_other_topics():
    """A broker registering a created topic alone (RocketMQ's registerIncrementBrokerData,
    marked incremental by mqbroker) adds or updates it and keeps the broker's other topics; a
    whole table still drops the ones missing from it."""
    r = RouteInfoManager(lambda: 0)
    r.register("C", "10.0.0.1:10911", "a", 0, "", wrapper("T", "U"))
    r.register("C", "10.0.0.1:10911", "a", 0, "", wrapper("V", queues=2), incremental=True)
    assert r.route("T") is not None and r.route("U") is not None
    assert [qd["writeQueueNums"] for qd in r.route("V")["queueDatas"]] == [2]
    r.register("C", "10.0.0.1:10911", "a", 0, "", wrapper("T", queues=8), incremental=True)
    assert [qd["writeQueueNums"] for qd in r.route("T")["queueDatas"]] == [8]
    r.register("C", "10.0.0.1:10911", "a", 0, "", wrapper("T", "V"))
    assert r.route("U") is None and r.route("T") is not None and r.route("V") is not None
