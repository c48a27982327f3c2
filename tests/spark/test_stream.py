"""Streaming reads by consume queue: the planning and reading core (no Spark), then
``readStream.format("rocketmq")`` over a live mqbroker with producers writing."""
from __future__ import annotations

import logging
import os
import threading

import pytest

from mqcore.errors import ConfigError
from mqcore.spark.files import list_commitlog, locate_store
from mqcore.spark.stream import (
    DataLossError,
    StoreView,
    StreamOptions,
    allocate,
    latest_offsets,
    plan_ranges,
    read_range,
)
from mqcore.store.cleanup import CleanupService
from mqcore.store.message_store import MessageStore
from tests.support import storegen
from tests.support.processes import BrokerProcess


def _stream(root: str, **options) -> tuple[StreamOptions, StoreView]:
    opts = StreamOptions.from_options({"path": root, **{k: str(v) for k, v in options.items()}})
    return opts, StoreView(locate_store(root), opts)


def _read(opts, view, start, end) -> list[dict]:
    rows = []
    for r in plan_ranges(view, start, end, opts):
        for b in read_range(r, opts):
            rows += b.select(["topic", "queue_id", "queue_offset", "commitlog_offset", "tags"]).to_pylist()
    return rows


def _expected(truth, topics=None):
    """commitlog offsets of every message a stream of ``topics`` (None: non-system) sees."""
    return {off for off, (_, m) in truth.items()
            if (m.topic in topics if topics else not m.topic.startswith("SCHEDULE_TOPIC"))}


# --- the core, on a finished store -----------------------------------------------------------------
def test_reads_every_queue_once_in_rate_limited_batches(store_dir, store_truth):
    opts, view = _stream(store_dir, maxMessagesPerTrigger=97)
    start = view.start_offsets(opts)
    assert set(start) == {("Orders", q) for q in range(4)} | {("Payments", 0), ("Payments", 1), ("Logs", 0),
                                                              ("%RETRY%cg1", 0), ("%DLQ%cg1", 0)}
    assert all(v == 0 for v in start.values())
    seen, sizes = [], []
    for _ in range(100):
        end = latest_offsets(view, start, opts.max_messages_per_trigger)
        if end == start:
            break
        rows = _read(opts, view, start, end)
        sizes.append(len(rows))
        seen += rows
        start = end
    assert max(sizes) <= 97 and len(sizes) > 5
    offs = [r["commitlog_offset"] for r in seen]
    assert len(offs) == len(set(offs)) and set(offs) == _expected(store_truth)
    by_queue: dict = {}
    for r in seen:  # each queue is read in order, without gaps
        by_queue.setdefault((r["topic"], r["queue_id"]), []).append(r["queue_offset"])
    assert all(v == list(range(len(v))) for v in by_queue.values())


def test_allocate_is_fair_and_exact():
    backlog = {("a", 0): 5, ("a", 1): 100, ("b", 0): 100, ("c", 0): 0}
    grant = allocate(backlog, 101)
    assert grant == {("a", 0): 5, ("a", 1): 48, ("b", 0): 48, ("c", 0): 0}
    assert sum(allocate(backlog, 2).values()) == 2
    assert allocate(backlog, 1000) == backlog


def test_filters_and_starting_positions(store_dir, store_truth):
    opts, view = _stream(store_dir, topics="Orders,Logs", tags="TagA || zip")
    start = view.start_offsets(opts)
    rows = _read(opts, view, start, latest_offsets(view, start, None))
    want = {off for off, (_, m) in store_truth.items()
            if m.topic in ("Orders", "Logs") and m.properties.get("TAGS") in ("TagA", "zip")}
    assert {r["commitlog_offset"] for r in rows} == want and want

    opts, view = _stream(store_dir, startingOffsets="latest")
    start = view.start_offsets(opts)
    assert latest_offsets(view, start, None) == start  # nothing new since "now"

    opts, view = _stream(store_dir, topics="Orders", queueIds="1", startingOffsets='{"Orders": {"1": 5}}')
    start = view.start_offsets(opts)
    assert start == {("Orders", 1): 5}
    rows = _read(opts, view, start, latest_offsets(view, start, None))
    assert [r["queue_offset"] for r in rows][:2] == [5, 6] and {r["queue_id"] for r in rows} == {1}

    orders = sorted((m.store_timestamp, off) for off, (_, m) in store_truth.items() if m.topic == "Orders")
    t_mid = orders[len(orders) // 2][0]
    opts, view = _stream(store_dir, topics="Orders", startingTimestamp=t_mid)
    start = view.start_offsets(opts)
    rows = _read(opts, view, start, latest_offsets(view, start, None))
    assert {r["commitlog_offset"] for r in rows} == {off for ts, off in orders if ts >= t_mid}


@pytest.mark.parametrize("options, message", [
    ({"maxMessagesPerTrigger": "0"}, "positive"),
    ({"startingOffsets": "yesterday"}, "earliest, latest or JSON"),
    ({"startingOffsets": '{"Orders": [1]}'}, "earliest, latest or JSON"),
    ({"tags": " || "}, "tag expression"),
    ({"topcis": "Orders"}, "unknown option 'topcis'"),
    ({"failOnDataLoss": "maybe"}, "true/false"),
])
def test_bad_options_are_refused(store_dir, options, message):
    with pytest.raises(ConfigError, match=message):
        StreamOptions.from_options({"path": store_dir, **options})


def test_deleted_before_read_is_data_loss(tmp_path, caplog):
    root = str(tmp_path / "store")
    with MessageStore(storegen.config(root, 16 * 1024), clock=storegen.StepClock()) as store:
        for _, m in storegen.messages(400):
            assert store.put_message(m).ok
        opts, view = _stream(root, topics="Orders")
        start = view.start_offsets(opts)
        end = latest_offsets(view, start, None)
        # retention deletes the oldest commitlog files and the queue files behind them
        cleaner = CleanupService(store, clock=lambda: storegen.T0 + 10 ** 10, last_modified_ms=lambda mf: 0,
                                 hour_of=lambda now: 4, delete_interval_ms=0)
        report = cleaner.run_once()
        assert report.count("commitlog") >= 1
    assert list_commitlog(locate_store(root))[0].base_offset > 0
    with pytest.raises(DataLossError, match=r"topic Orders queue \d at queue offsets \[0, \d+\).*failOnDataLoss"):
        _read(opts, StoreView(locate_store(root), opts), start, end)
    lenient = StreamOptions.from_options({"path": root, "topics": "Orders", "failOnDataLoss": "false"})
    with caplog.at_level(logging.WARNING, logger="mqcore.spark.stream"):
        rows = _read(lenient, StoreView(locate_store(root), lenient), start, end)
    assert rows and "were deleted from the store" in caplog.text
    assert min(r["commitlog_offset"] for r in rows) >= list_commitlog(locate_store(root))[0].base_offset


# --- Spark, over a live broker -----------------------------------------------------------------------
def _send(addr: str, topic_tags: list[tuple[str, str]], n: int, first: int, sent: dict) -> None:
    from mqcore.client import Message, Producer
    with Producer("stream-pg", namesrv_addr=addr) as p:
        for i in range(first, first + n):
            topic, tags = topic_tags[i % len(topic_tags)]
            body = b"stream %d " % i + b"y" * (i % 300)
            r = p.send(Message(topic, body, tags=tags, keys=[f"k{i}"]))
            sent[(r.message_queue.topic, r.message_queue.queue_id, r.queue_offset)] = body


def _start_query(spark, store, ckpt, got, sizes, **options):
    def collect(df, batch_id):
        rows = df.select("topic", "queue_id", "queue_offset", "body", "tags").collect()
        sizes.append(len(rows))
        for r in rows:
            key = (r.topic, r.queue_id, r.queue_offset)
            got.setdefault(key, []).append(bytes(r.body))

    reader = spark.readStream.format("rocketmq")
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return (reader.load(store).writeStream.foreachBatch(collect).option("checkpointLocation", ckpt)
            .trigger(processingTime="300 milliseconds").start())


def test_spark_stream_over_a_live_broker(spark, tmp_path):
    store = str(tmp_path / "store")
    ckpt = str(tmp_path / "ckpt")
    # 64 KiB commitlog files: the stream crosses many roll-overs
    with BrokerProcess(store, conf={"mappedFileSizeCommitLog": 64 * 1024}) as broker:
        sent: dict = {}
        _send(broker.namesrv_addr, [("StreamA", "red"), ("StreamB", "blue")], 10, 0, sent)  # topics exist
        got: dict = {}
        sizes: list[int] = []
        query = _start_query(spark, store, ckpt, got, sizes, topics="StreamA,StreamB", maxMessagesPerTrigger=250)
        try:
            writer = threading.Thread(target=_send, args=(broker.namesrv_addr, [("StreamA", "red"),
                                                          ("StreamB", "blue")], 600, 10, sent))
            writer.start()  # producing while the query runs
            writer.join(120)
            query.processAllAvailable()  # every batch planned so far has run and been committed
        finally:
            query.stop()
        assert query.exception() is None
        assert len(list_commitlog(locate_store(store))) > 3
        assert max(sizes) <= 250 and len([s for s in sizes if s]) >= 3  # 610 messages
        assert all(len(v) == 1 for v in got.values())  # exactly once
        assert {k: v[0] for k, v in got.items()} == sent

        # a broker restart, more messages, and the same query resumed from its checkpoint
        broker.restart()
        more: dict = {}
        _send(broker.namesrv_addr, [("StreamA", "red")], 60, 5000, more)
        got2: dict = {}
        query = _start_query(spark, store, ckpt, got2, [], topics="StreamA,StreamB", maxMessagesPerTrigger=250)
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert {k: v[0] for k, v in got2.items()} == more  # only the new ones, once


def test_stream_bad_path_fails_at_start(spark, tmp_path):
    os.makedirs(tmp_path / "empty")
    query = spark.readStream.format("rocketmq").load(str(tmp_path / "empty")).writeStream.format("noop").start()
    try:  # the stream's own thread plans the first batch, so the error ends the query
        with pytest.raises(Exception, match="is not a RocketMQ store"):
            query.awaitTermination(180)
    finally:
        query.stop()


def test_tag_option_reads_like_a_subscription():
    """The same grammar as a consumer's subscription (mqcore.tags): blanks and repeats are
    dropped, as RocketMQ's FilterAPI does; an expression naming no tag is refused."""
    from mqcore.spark.stream import parse_tags
    assert parse_tags("*") is None and parse_tags("") is None
    assert parse_tags(" A ||B|| A || ") == frozenset({"A", "B"})
    with pytest.raises(ConfigError):
        parse_tags("||")
