"""The Prometheus endpoint (``metricsPort``), scraped on a live mqbroker process after
real producers and consumers did known things."""
from __future__ import annotations

import http.client
import socket
import time

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mqcore.client import Message, Producer, PullConsumer, PullStatus
from tests.client.integration.helpers import create_topic
from tests.support.processes import BrokerProcess

TOPIC = "MetricsTopic"
GROUP = "metrics-group"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict:
    """{name: [(labels, value)]} with sample names as exposed (``_total``, ``_bucket``...)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type").startswith("text/plain")
    text = resp.read().decode()
    conn.close()
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def value(samples: dict, name: str, **labels) -> float:
    hits = [v for lab, v in samples.get(name, []) if all(lab.get(k) == str(want) for k, want in labels.items())]
    assert len(hits) == 1, (name, labels, samples.get(name))
    return hits[0]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    port = free_port()
    store = tmp_path_factory.mktemp("metrics") / "store"
    # long polling off: a suspended pull is parked for shortPollingTimeMills instead
    with BrokerProcess(store, conf={"metricsPort": port, "mappedFileSizeCommitLog": 1 << 20,
                                    "flushIntervalCommitLog": 100, "longPollingEnable": "false",
                                    "shortPollingTimeMills": 300}) as b:
        yield b, port


def test_scrape_shows_what_producers_and_consumers_did(live):
    b, port = live
    create_topic(b.broker_addr, b.namesrv_addr, TOPIC, queues=2)
    with Producer("metrics-producer", namesrv_addr=b.namesrv_addr) as p:
        for i in range(6):
            p.send(Message(TOPIC, b"x" * 100, tags="t"))
        p.send(Message(TOPIC, b"later", delay_level=18))  # 2 h: stays in the delay backlog
    got = []
    with PullConsumer(GROUP, namesrv_addr=b.namesrv_addr) as pc:
        mqs = sorted(pc.fetch_subscribe_message_queues(TOPIC), key=lambda q: q.queue_id)
        ends = {}
        for mq in mqs:
            r = pc.pull(mq, "*", 0, 32)
            assert r.status is PullStatus.FOUND
            got.extend(r.messages)
            ends[mq.queue_id] = r.next_begin_offset
        # the group commits queue 0 fully and queue 1 not at all: lag = what queue 1 holds
        pc.update_consume_offset(mqs[0], ends[mqs[0].queue_id])
        pc.update_consume_offset(mqs[1], 0)
        pc.commit()
        # nothing new: the broker parks the pull for shortPollingTimeMills (300 ms), not the
        # 20 s the client asks for (longPollingEnable=false), nor answers at once
        t0 = time.monotonic()
        assert pc.pull_block_if_not_found(mqs[0], "*", ends[mqs[0].queue_id]).status is PullStatus.NO_NEW_MSG
        assert 0.25 <= time.monotonic() - t0 < 10
        pc.send_message_back(got[0], delay_level=0)    # -> %RETRY%group (delayed)
        pc.send_message_back(got[1], delay_level=-1)   # -> %DLQ%group at once
    assert len(got) == 6

    deadline = time.monotonic() + 30
    while True:  # the commitlog flush runs every 100 ms: wait for one to be timed
        m = scrape(port)
        flushes = value(m, "rocketmq_storage_flush_latency_seconds_count", broker="broker-a")
        if flushes >= 1 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert flushes >= 1

    # counted under the topic they were sent to, the delayed one included
    assert value(m, "rocketmq_messages_in_total", topic=TOPIC) == 7
    assert value(m, "rocketmq_throughput_in_total", topic=TOPIC) > 6 * 100
    assert value(m, "rocketmq_messages_in_total", topic="%RETRY%" + GROUP) == 1
    assert value(m, "rocketmq_messages_in_total", topic="%DLQ%" + GROUP) == 1
    assert value(m, "rocketmq_messages_out_total", topic=TOPIC, group=GROUP) == 6
    assert value(m, "rocketmq_throughput_out_total", topic=TOPIC, group=GROUP) > 6 * 100
    assert value(m, "rocketmq_producer_offset", topic=TOPIC) == 6  # the delayed one is not in its queue yet
    q0, q1 = ends[mqs[0].queue_id], ends[mqs[1].queue_id]
    assert value(m, "rocketmq_consumer_offset", topic=TOPIC, group=GROUP) == q0
    assert value(m, "rocketmq_group_diff", topic=TOPIC, group=GROUP) == q1
    assert value(m, "rocketmq_group_queue_diff", topic=TOPIC, group=GROUP, queueid=mqs[0].queue_id) == 0
    assert value(m, "rocketmq_group_queue_diff", topic=TOPIC, group=GROUP, queueid=mqs[1].queue_id) == q1
    assert value(m, "rocketmq_send_back_messages_total", group=GROUP, to="retry") == 1
    assert value(m, "rocketmq_send_back_messages_total", group=GROUP, to="dlq") == 1
    assert value(m, "rocketmq_group_dlqdiff", group=GROUP) == 1
    assert value(m, "rocketmq_schedule_backlog", delay_level=18) == 1
    assert value(m, "rocketmq_pull_requests_total", result="found") >= 2
    assert value(m, "rocketmq_pull_requests_total", result="not_found") >= 1
    assert value(m, "rocketmq_pull_long_polling_total") >= 1
    # every stored put was timed: 6 + the delayed one + 2 send-backs
    assert value(m, "rocketmq_put_latency_seconds_count") >= 9
    assert value(m, "rocketmq_put_latency_seconds_bucket", le="+Inf") == value(m, "rocketmq_put_latency_seconds_count")
    assert value(m, "rocketmq_broker_connections") >= 0
    assert value(m, "rocketmq_store_commitlog_bytes") == 1 << 20
    assert value(m, "rocketmq_store_consumequeue_bytes") > 0
    ratio = value(m, "rocketmq_brokeruntime_commitlog_disk_ratio")
    assert abs(ratio - psutil.disk_usage(b.store_dir).percent / 100) < 0.01  # what df says
    assert value(m, "rocketmq_store_disk_ratio_threshold", setting="diskMaxUsedSpaceRatio") == 0.75
    assert value(m, "rocketmq_store_disk_ratio_threshold", setting="diskSpaceCleanForciblyRatio") == 0.85
    assert value(m, "rocketmq_store_disk_ratio_threshold", setting="diskSpaceWarningLevelRatio") == 0.90
    # nothing was old or the disk full: cleanup deleted nothing, and says so
    assert value(m, "rocketmq_store_cleanup_deleted_files_total", reason="forcibly") == 0
    assert value(m, "rocketmq_store_cleanup_deleted_files_total", reason="expired") == 0
    assert "rocketmq_store_cleanup_unconsumed_messages_total" not in m  # no (topic, group) lost anything
    for lab, _v in m["rocketmq_messages_in_total"]:
        assert lab["cluster"] == "DefaultCluster" and lab["broker"] == "broker-a"


def _raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_bad_http_requests_are_answered_and_harmless(live):
    b, port = live
    assert _raw(port, b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert _raw(port, b"GET /nope HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert _raw(port, b"\x00\x01garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert _raw(port, b"GET /" + b"a" * 20000) == b""       # over the head limit: dropped
    assert _raw(port, b"GET /metrics HTTP/1.1\r\n") == b""  # hung up before the head ended
    assert value(scrape(port), "rocketmq_broker_connections") >= 0  # still serving
    assert b.proc.poll() is None


def test_one_disk_ratio_for_brokerstatus_the_metrics_and_the_cleanup(tmp_path):
    """brokerStatus/clusterList's commitLogDiskRatio and the disk-ratio gauges are the disk
    cleanup's own measure (a stand-in measure shows up unchanged in all of them), and that
    measure is df's Use% of the commitlog's partition."""
    import asyncio

    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.config import StoreConfig
    from mqcore.store.space import used_percent

    port = free_port()

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, metrics_port=port),
                        StoreConfig(store_path=str(tmp_path / "store")))
        await broker.start()
        try:
            real = broker.runtime_figures()["commitLogDiskRatio"]
            expected = used_percent(broker.store_config.store_path) / 100  # same partition
            broker.cleanup.disk_usage = lambda path: 42.0
            figures = broker.runtime_figures()
            m = await asyncio.to_thread(scrape, port)
            return real, expected, figures, m
        finally:
            await broker.shutdown()

    real, expected, figures, m = asyncio.run(scenario())
    assert abs(float(real) - expected) < 0.001
    assert figures["commitLogDiskRatio"] == "0.4200"
    assert value(m, "rocketmq_brokeruntime_commitlog_disk_ratio") == 0.42
    assert value(m, "rocketmq_brokeruntime_consumequeue_disk_ratio") == 0.42


def test_one_group_label_and_the_process_metrics(live):
    """Every per-group series labels the group ``group`` (as the RocketMQ exporter does), and the
    broker's own process is measured: memory, CPU, open files, Python's GC."""
    _b, port = live
    with Producer("metrics-label-producer", namesrv_addr=_b.namesrv_addr) as p:
        p.send(Message(TOPIC, b"x"))
    text = _text(port)
    assert "consumer_group=" not in text
    m = scrape(port)
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
                 "process_max_fds", "process_start_time_seconds"):
        assert len(m[name]) == 1 and m[name][0][1] > 0, name
    assert value(m, "process_resident_memory_bytes") > 10 << 20  # a real broker, not a stub
    assert any(lab.get("generation") == "0" for lab, _ in m["python_gc_collections_total"])
    assert "python_info" in m


def _text(port: int) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return text


def test_a_parked_pull_is_dropped_when_its_consumer_leaves(tmp_path):
    """``rocketmq_pull_long_polling_waiting`` returns to 0 as soon as the connection of a parked
    pull closes, not when its 30 s suspend time runs out."""
    import asyncio

    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.config import StoreConfig
    from mqcore.remoting import RemotingClient, RequestCode, create_request
    from mqcore.remoting.headers import PullMessageRequestHeader

    port = free_port()

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, metrics_port=port),
                        StoreConfig(store_path=str(tmp_path / "store")))
        await broker.start()
        try:
            client = RemotingClient()
            h = PullMessageRequestHeader(consumer_group="CG", topic="ParkT", queue_id=0, queue_offset=0,
                                         max_msg_nums=32, sys_flag=0x2, commit_offset=0, suspend_timeout_millis=30_000,
                                         sub_version=0, subscription=None, expression_type="TAG")
            await asyncio.to_thread(_create_topic, broker)
            parked = asyncio.ensure_future(client.invoke(broker.addr, create_request(RequestCode.PULL_MESSAGE,
                                                                                    h.to_ext()), 40_000))
            await _until(lambda: broker.hold.waiting_count == 1, 10)
            waiting = value(await asyncio.to_thread(scrape, port), "rocketmq_pull_long_polling_waiting")
            await client.shutdown()  # the consumer goes away
            parked.cancel()
            await _until(lambda: broker.hold.waiting_count == 0, 5)  # well before the 30 s suspend time
            after = value(await asyncio.to_thread(scrape, port), "rocketmq_pull_long_polling_waiting")
            return waiting, after
        finally:
            await broker.shutdown()

    def _create_topic(broker):
        from mqcore.remoting import SyncRemotingClient
        with SyncRemotingClient() as rc:
            r = rc.invoke(broker.addr, create_request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": "ParkT", "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1",
                "perm": "6", "topicFilterType": "SINGLE_TAG"}), 5000)
            assert r.code == 0, r.remark

    async def _until(cond, seconds):
        deadline = asyncio.get_running_loop().time() + seconds
        while not cond():
            assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
            await asyncio.sleep(0.05)

    assert asyncio.run(scenario()) == (1, 0)
