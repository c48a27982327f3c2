"""Stores on remote file systems: byte-range reads, windows, and a real S3 server on loopback.

The windowed reader (what every remote store uses) is first checked against the local
mmap reader over pyarrow's LocalFileSystem with tiny windows, so records straddle windows
and splits everywhere. Then a copied store is read back from moto's S3 server through
pyarrow's S3FileSystem, in plain Python and through Spark.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyarrow import fs as pafs

from mqcore.errors import ConfigError, RecordDecodeError
from mqcore.format import layout as L
from mqcore.spark import files
from mqcore.spark.decode import SplitStats, iter_split, read_table
from mqcore.spark.files import StoreDirs, list_commitlog, locate_local_store, locate_store, take_snapshot
from mqcore.spark.options import ReadOptions
from mqcore.spark.plan import plan_splits
from mqcore.spark.storage import LOCAL, ArrowStorage, resolve
from tests.support import storegen

def rows(table: pa.Table) -> list[dict]:
    """Rows in commitlog order, maps as sorted pairs (comparable)."""
    t = table.sort_by([("commitlog_offset", "ascending")]).to_pylist()
    for r in t:
        r["properties"] = sorted(r["properties"])
    return t


def windowed_read(root: str, window: int, monkeypatch, stats: SplitStats | None = None, **options) -> pa.Table:
    """The remote code path over the local files: pyarrow's LocalFileSystem, ``window``-byte reads."""
    monkeypatch.setattr(files, "WINDOW_BYTES", window)
    opts = ReadOptions.from_options({"path": root, **{k: str(v) for k, v in options.items()}})
    st = ArrowStorage(pafs.LocalFileSystem(), "")
    dirs = StoreDirs(root, st.join(root, "commitlog"), st)
    snap = take_snapshot(dirs, opts.snapshot_offset)
    splits = plan_splits(dirs, snap, opts)
    assert splits and all(not s.storage.is_local for s in splits)
    batches = [b for s in splits for b in iter_split(s, opts, stats=stats)]
    return pa.Table.from_batches(batches, schema=batches[0].schema)


@pytest.mark.parametrize("window", [256, 1000, 1 << 20])
@pytest.mark.parametrize("split", ["0", "3000", "10k"])
def test_windowed_reads_equal_the_mmap_read(store_dir, monkeypatch, window, split):
    local = read_table(store_dir, splitSize=split)
    remote = windowed_read(store_dir, window, monkeypatch, splitSize=split)
    assert remote.num_rows == local.num_rows > 1000
    assert rows(remote) == rows(local)


def test_windowed_topic_read_by_consume_queue(store_dir, monkeypatch):
    local = read_table(store_dir, topics="Payments", useConsumeQueue="true")
    remote = windowed_read(store_dir, 700, monkeypatch, topics="Payments", useConsumeQueue="true")
    assert local.num_rows > 0
    assert set(pc.unique(remote["topic"]).to_pylist()) == {"Payments"}
    assert rows(remote) == rows(local)


def test_windowed_snapshot_end_equals_the_mmap_one(store_dir, monkeypatch):
    monkeypatch.setattr(files, "WINDOW_BYTES", 300)
    st = ArrowStorage(pafs.LocalFileSystem(), "")
    remote = take_snapshot(StoreDirs(store_dir, st.join(store_dir, "commitlog"), st))
    local = take_snapshot(locate_store(store_dir))
    assert (remote.end_offset, remote.first_ts, remote.tail_reason) == \
        (local.end_offset, local.first_ts, local.tail_reason)
    assert [f.base_offset for f in remote.files] == [f.base_offset for f in local.files]


def test_windowed_skip_of_a_corrupt_record(store_dir, tmp_path, monkeypatch):
    root = str(tmp_path / "store")
    shutil.copytree(store_dir, root)
    first = list_commitlog(locate_store(root))[1]
    with open(first.path, "r+b") as f:  # break the magic of the third record of the second file
        pos = 0
        for _ in range(2):
            f.seek(pos)
            pos += int.from_bytes(f.read(4), "big")
        f.seek(pos + L.REC_MAGIC)
        f.write(b"\0\0\0\0")
    with pytest.raises(RecordDecodeError, match=f"commitlog offset {first.base_offset + pos}"):
        windowed_read(root, 512, monkeypatch, splitSize="5000")
    local_stats, remote_stats = SplitStats(), SplitStats()
    local = pa.Table.from_batches(list(_local_batches(root, local_stats, onCorrupt="skip", splitSize="5000")))
    remote = windowed_read(root, 512, monkeypatch, stats=remote_stats, onCorrupt="skip", splitSize="5000")
    assert remote.num_rows == local.num_rows == 1199
    assert rows(remote) == rows(local)
    assert (remote_stats.corrupt, remote_stats.corrupt_bytes) == (local_stats.corrupt, local_stats.corrupt_bytes) \
        and local_stats.corrupt == 1


def _local_batches(root, stats, **options):
    opts = ReadOptions.from_options({"path": root, **options})
    dirs = locate_store(root)
    for s in plan_splits(dirs, take_snapshot(dirs), opts):
        yield from iter_split(s, opts, stats=stats)


def test_uris_resolve_to_their_file_systems(tmp_path):
    assert resolve(str(tmp_path)) == (LOCAL, str(tmp_path))
    assert resolve(f"file://{tmp_path}") == (LOCAL, str(tmp_path))
    st, path = resolve("s3a://bucket/a/store/", {"endpoint_override": "http://127.0.0.1:1", "access_key": "k",
                                                 "secret_key": "s", "region": "us-east-1"})
    assert isinstance(st.fs, pafs.S3FileSystem) and path == "bucket/a/store"
    assert st.display(path) == "s3a://bucket/a/store"
    with pytest.raises(ConfigError, match="bad fs"):
        resolve("s3://bucket/x", {"no_such_keyword": "1"})
    with pytest.raises(ConfigError, match="unknown option"):
        ReadOptions.from_options({"path": "/x", "fs": "1"})
    assert ReadOptions.from_options({"path": "s3://b/x", "fs.Region": "eu-west-1"}).fs_options == \
        (("region", "eu-west-1"),)


# --- a real S3 server on loopback: moto's server mode ------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory):
    if not os.environ.get("CI"):  # scripts/test installs moto[server]: under CI it must be there
        pytest.importorskip("moto.server")
    port = _free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not come up on {url}")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        log.close()


S3_OPTIONS = {"access_key": "testing", "secret_key": "testing", "region": "us-east-1"}


def s3_options(endpoint: str) -> dict[str, str]:
    return {"fs." + k: v for k, v in {**S3_OPTIONS, "endpoint_override": endpoint}.items()}


@pytest.fixture(scope="module")
def s3_store(s3_endpoint, store_dir):
    """The shared fixture store copied to s3://stores/copy (several commitlog files)."""
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    s3 = pafs.S3FileSystem(endpoint_override=s3_endpoint, allow_bucket_creation=True, **S3_OPTIONS)
    s3.create_dir("stores")
    pafs.copy_files(store_dir, "stores/copy", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=s3)
    return "s3a://stores/copy"


def test_s3_store_reads_like_the_local_copy(s3_store, s3_endpoint, store_dir):
    opts = s3_options(s3_endpoint)
    assert len(list_commitlog(locate_store(s3_store, {k[3:]: v for k, v in opts.items()}))) >= 4
    local = read_table(store_dir, splitSize="4k")
    remote = read_table(s3_store, splitSize="4k", **opts)
    assert remote.num_rows == local.num_rows > 1000
    assert rows(remote) == rows(local)
    by_queue = read_table(s3_store, topics="Orders", useConsumeQueue="true", **opts)
    assert rows(by_queue) == rows(read_table(store_dir, topics="Orders"))
    with pytest.raises(Exception, match="not a directory|is not a RocketMQ store"):
        read_table("s3a://stores/nothing-here", **opts)
    # without fs.* options the URI alone carries the settings, as pyarrow's from_uri reads them
    host = s3_endpoint.removeprefix("http://")
    uri = f"s3://testing:testing@stores/copy?endpoint_override={host}&scheme=http&region=us-east-1"
    assert rows(read_table(uri, topics="Payments")) == rows(read_table(store_dir, topics="Payments"))
    with pytest.raises(ConfigError, match="reads a store on the local disk"):
        locate_local_store(uri, "readStream.format('rocketmq')")


@pytest.mark.spark
def test_s3_store_through_spark(spark, s3_store, s3_endpoint, store_dir, store_truth):
    from pyspark.sql import functions as F  # a core dependency: missing it is an error, not a skip
    reader = spark.read.format("rocketmq").option("splitSize", "12k")
    for k, v in s3_options(s3_endpoint).items():
        reader = reader.option(k, v)
    remote = reader.load(s3_store)
    local = spark.read.format("rocketmq").load(store_dir)
    n_files = len(list_commitlog(locate_store(store_dir)))
    assert remote.rdd.getNumPartitions() > n_files  # byte-range splits: more partitions than files

    def fingerprint(df):
        h = F.xxhash64("commitlog_offset", "topic", "queue_offset", "body", "tags", "keys", "msg_id",
                       "store_timestamp", F.array_sort(F.map_entries("properties")))
        return df.agg(F.count("*"), F.bit_xor(h), F.sum(F.length("body"))).first()

    got = fingerprint(remote)
    assert got[0] == len(store_truth)
    assert got == fingerprint(local)
    payments = remote.where("topic = 'Payments'").select("commitlog_offset", "body").orderBy("commitlog_offset")
    assert payments.collect() == [(off, m.body) for off, (_, m) in sorted(store_truth.items())
                                  if m.topic == "Payments"]
