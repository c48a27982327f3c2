"""Data sources for the store's other files: consume queues, index files, config JSON.

    spark.read.format("rocketmq.consumequeue").load(store)     # one row per queue unit
    spark.read.format("rocketmq.index").load(store)            # one row per index entry
    spark.read.format("rocketmq.files").load(store)            # one row per commitlog file (fsck)
    spark.read.format("rocketmq.topics").load(store)           # config/topics.json
    spark.read.format("rocketmq.consumeroffsets").load(store)  # config/consumerOffset.json
    spark.read.format("rocketmq.delayoffsets").load(store)     # config/delayOffset.json
    spark.read.format("rocketmq.subscriptiongroups").load(store)

Queue units and index entries are decoded with numpy into Arrow batches (one partition
per file); the config tables are tiny and come back as tuples from one partition.
"""
from __future__ import annotations

import datetime as dt
import os
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from mqcore.errors import ConfigError
from mqcore.format import layout as L
from mqcore.spark import configs
from mqcore.spark.files import (
    StoreDirs,
    list_queues,
    locate_local_store,
    read_units,
    scan_file,
    take_snapshot,
)
from mqcore.spark.index import list_index_files, read_entries
from mqcore.spark.options import parse_bool, parse_int

_TS = pa.timestamp("us", tz="UTC")


def _check_options(source: str, options: Mapping[str, str], allowed: set[str]) -> dict[str, str]:
    got = {k.lower(): v for k, v in options.items()}
    unknown = set(got) - allowed - {"path"}
    if unknown:
        raise ConfigError(f"unknown option(s) {sorted(unknown)} for format {source}; known: "
                          f"{sorted(allowed | {'path'})}")
    return got


def _topics(value: str | None) -> set[str] | None:
    if not value:
        return None
    return {t.strip() for t in value.split(",") if t.strip()}


# --- consume queues --------------------------------------------------------------------------------
CQ_SCHEMA = pa.schema([("topic", pa.string()), ("queue_id", pa.int32()), ("queue_offset", pa.int64()),
                       ("commitlog_offset", pa.int64()), ("size", pa.int32()), ("tags_code", pa.int64())])


def cq_batch(topic: str, queue_id: int, path: str, first_index: int) -> pa.RecordBatch:
    """The units of one consume-queue file (pre-blank filler units left out)."""
    units = read_units(path)
    index = np.arange(first_index, first_index + len(units), dtype=np.int64)
    keep = units["size"] != L.CQ_FILLER_SIZE
    units, index = units[keep], index[keep]
    n = len(units)
    return pa.RecordBatch.from_arrays([
        pa.array(np.full(n, topic, dtype=object), pa.string()) if n else pa.array([], pa.string()),
        pa.array(np.full(n, queue_id, np.int32)), pa.array(index),
        pa.array(units["phy_offset"]), pa.array(units["size"]), pa.array(units["tags_code"])], schema=CQ_SCHEMA)


class _FileReader(DataSourceReader):
    """One partition per part; a part is ``read_one``'s arguments (pickled to the executor)."""

    def __init__(self, parts: Sequence[tuple[Any, ...]], read_one: Callable[..., Any]) -> None:
        self.parts = parts
        self.read_one = read_one

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(p) for p in self.parts] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is not None:
            yield self.read_one(*partition.value)


class ConsumeQueueDataSource(DataSource):
    """``format("rocketmq.consumequeue")``; option ``topics`` limits the queues read."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq.consumequeue"

    def schema(self) -> str:
        return "topic STRING, queue_id INT, queue_offset BIGINT, commitlog_offset BIGINT, size INT, tags_code BIGINT"

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = _check_options(self.name(), self.options, {"topics", "topic"})
        dirs = locate_local_store(opts.get("path", ""), self.name())
        wanted = _topics(opts.get("topics") or opts.get("topic"))
        parts = [(q.topic, q.queue_id, path, first) for q in list_queues(dirs, wanted) for path, first in q.files]
        return _FileReader(parts, cq_batch)


# --- index ---------------------------------------------------------------------------------------------
INDEX_SCHEMA = pa.schema([("index_file", pa.string()), ("entry", pa.int32()), ("slot", pa.int32()),
                          ("key_hash", pa.int32()), ("commitlog_offset", pa.int64()),
                          ("store_timestamp", _TS), ("time_diff_s", pa.int32()), ("prev_entry", pa.int32())])


def index_batch(path: str, slots: int | None, entries: int | None) -> pa.RecordBatch:
    e = read_entries(path, slots, entries)
    n = len(e["entry"])
    name = os.path.basename(path)
    return pa.RecordBatch.from_arrays([
        pa.array([name] * n, pa.string()), pa.array(e["entry"]), pa.array(e["slot"]), pa.array(e["key_hash"]),
        pa.array(e["commitlog_offset"]), pa.array(e["store_timestamp_ms"] * 1000, _TS),
        pa.array(e["time_diff_s"]), pa.array(e["prev_entry"])], schema=INDEX_SCHEMA)


class IndexDataSource(DataSource):
    """``format("rocketmq.index")``; options ``indexSlots``/``indexEntries`` when not the defaults.

    ``store_timestamp`` is the index's own (second-resolution) time: begin + timeDiff.
    """

    @classmethod
    def name(cls) -> str:
        return "rocketmq.index"

    def schema(self) -> str:
        return ("index_file STRING, entry INT, slot INT, key_hash INT, commitlog_offset BIGINT, "
                "store_timestamp TIMESTAMP, time_diff_s INT, prev_entry INT")

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = _check_options(self.name(), self.options, {"indexslots", "indexentries"})
        dirs = locate_local_store(opts.get("path", ""), self.name())
        slots = parse_int("indexSlots", opts["indexslots"]) if "indexslots" in opts else None
        entries = parse_int("indexEntries", opts["indexentries"]) if "indexentries" in opts else None
        return _FileReader([(p, slots, entries) for p in list_index_files(dirs)], index_batch)


# --- commitlog file health ------------------------------------------------------------------------------
FILES_DDL = ("file STRING, base_offset BIGINT, size BIGINT, data_end BIGINT, records BIGINT, corrupt_records BIGINT, "
             "corrupt_bytes BIGINT, first_store_timestamp TIMESTAMP, last_store_timestamp TIMESTAMP, `end` STRING")


def _file_row(path: str, base: int, limit: int, check_crc: bool) -> Iterator[tuple[Any, ...]]:
    st = scan_file(path, base, limit, check_crc)

    def ts(ms: int) -> dt.datetime | None:
        return None if ms < 0 else dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)

    yield (os.path.basename(st.file), st.base_offset, st.size, st.data_end, st.records, st.corrupt_records,
           st.corrupt_bytes, ts(st.first_store_timestamp), ts(st.last_store_timestamp), st.end)


class _RowsReader(_FileReader):
    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if partition.value is not None:
            yield from self.read_one(*partition.value)


class FilesDataSource(DataSource):
    """``format("rocketmq.files")``: one row per commitlog file -- records, corrupt records
    (what ``onCorrupt=skip`` skips) and store-time bounds, within the planning snapshot.
    Option ``verifyCrc`` (default true)."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq.files"

    def schema(self) -> str:
        return FILES_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = _check_options(self.name(), self.options, {"verifycrc"})
        check = parse_bool("verifyCrc", opts.get("verifycrc", "true"))
        snap = take_snapshot(locate_local_store(opts.get("path", ""), self.name()))
        parts = [(f.path, f.base_offset, snap.data_end(i), check) for i, f in enumerate(snap.files)]
        return _RowsReader(parts, _file_row)


# --- config JSON -------------------------------------------------------------------------------------------
class _ConfigReader(DataSourceReader):
    def __init__(self, path: str, rows: Callable[[StoreDirs], Iterable[object]]) -> None:
        self.path = path
        self.rows = rows

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(self.path)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        for row in self.rows(locate_local_store(partition.value, "the rocketmq.* sources")):
            yield tuple(row) if isinstance(row, tuple) else tuple(vars(row).values())


def _config_source(fmt: str, ddl: str, rows: Callable[[StoreDirs], Iterable[object]], doc: str) -> type[DataSource]:
    class _Source(DataSource):
        __doc__ = doc

        @classmethod
        def name(cls) -> str:
            return fmt

        def schema(self) -> str:
            return ddl

        def reader(self, schema: StructType) -> DataSourceReader:
            opts = _check_options(fmt, self.options, set())
            locate_local_store(opts.get("path", ""), self.name())
            return _ConfigReader(opts.get("path", ""), rows)

    _Source.__name__ = _Source.__qualname__ = "".join(p.capitalize() for p in fmt.split(".")) + "DataSource"
    _Source.__module__ = __name__
    return _Source


TopicsDataSource = _config_source(
    "rocketmq.topics",
    "topic STRING, read_queue_nums INT, write_queue_nums INT, perm INT, topic_filter_type STRING, "
    "topic_sys_flag INT, `order` BOOLEAN", configs.topics, "config/topics.json, one row per topic")
ConsumerOffsetsDataSource = _config_source(
    "rocketmq.consumeroffsets", "topic STRING, `group` STRING, queue_id INT, offset BIGINT",
    configs.consumer_offsets, "config/consumerOffset.json: committed offset per topic, group and queue")
DelayOffsetsDataSource = _config_source(
    "rocketmq.delayoffsets", "delay_level INT, offset BIGINT", configs.delay_offsets,
    "config/delayOffset.json: next SCHEDULE_TOPIC_XXXX offset to deliver per delay level")
SubscriptionGroupsDataSource = _config_source(
    "rocketmq.subscriptiongroups",
    "`group` STRING, consume_enable BOOLEAN, consume_broadcast_enable BOOLEAN, retry_queue_nums INT, "
    "retry_max_times INT", configs.subscription_groups, "config/subscriptionGroup.json, one row per group")

ALL_AUX_SOURCES = (ConsumeQueueDataSource, IndexDataSource, FilesDataSource, TopicsDataSource,
                   ConsumerOffsetsDataSource, DelayOffsetsDataSource, SubscriptionGroupsDataSource)
