#!/usr/bin/env python3
"""Scan throughput of the Spark reader vs. plain Python and vs. Spark over Parquet.

    python bench/bench_spark_scan.py [--messages 2000000] [--body-bytes 200] [--master local[2]]

Builds (once, cached in --dir) a store of N messages with B-byte bodies over 10 topics
x 4 queues (tags, keys, UNIQ_KEY, CLUSTER properties; 128 MiB commitlog files) through the
real MessageStore, then times, best of --repeat after a warm-up:

* ``python-arrow``: one process, the Cython column kernel -> Arrow (``read_store``), no Spark;
* ``python-tuples``: one process, ``decode_records`` -> Python tuples (the per-row baseline);
* ``spark-ds``: ``format("rocketmq")``, every column materialised (``noop`` sink);
* ``spark-ds`` selective: ``topic = 'BenchTopic3'`` (10 %), two columns -- pushdown on
  (served from the consume queues) and off (full walk, Spark filters), and with the
  source's ``columns`` option naming just those two;
* ``parquet-convert``: the DS written once to Parquet (zstd);
* ``spark-parquet``: the same queries over that Parquet copy;
* column sets: the DS with option ``columns`` (all, no map/array, no body, eight core
  columns, fixed-width only) next to Parquet reading the same columns, each with its
  ratio ``parquet seconds / DS seconds`` (>= 1.0 means the DS is at least as fast);
* ``spark-ds all columns, old defaults``: ``splitSize=0`` (one task per file) and 8 MiB
  batches, the defaults before 2026-11-23, next to the current ones (64 MiB splits, 32 MiB
  batches);
* ``--kernel`` (separately): the column kernel alone over one file, all columns vs. the
  projection flags (no map/keys; fixed-width only);
* ``--floor`` (separately, after a ``--keep`` run): a Python data source that yields
  pre-built Arrow batches (no decoding) next to the reader and Parquet, for the same
  columns: the cost of the Python Data Source path itself;
* ``spark-jvm``: ``format("rocketmq-jvm")``, the Java DataSource V2 reader (columnar
  batches, no Python worker), next to ``spark-ds`` and Parquet for all 26 columns, the
  8 core columns and the fixed-width ones, the three interleaved round by round; also
  alone with ``--jvm`` (builds the Parquet copy with the JVM reader if --dir has none);
  and the selective query (one topic, 2 columns) through the three, interleaved;
* a closing ``goal`` line per goal (full scan, selective query): the ratio and by how much
  it misses 1.0.

Prints one JSON line per case: seconds, rows, Mrows/s and MB/s of commitlog bytes, and
the 1-minute load average. ~1 GB of temp files in --dir, removed at the end unless --keep.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from mqcore._compat import default_column_kernels  # noqa: E402
from mqcore._compat import kernels as K  # noqa: E402

C = default_column_kernels()
from mqcore.config import StoreConfig  # noqa: E402
from mqcore.message import pack_host  # noqa: E402
from mqcore.spark.decode import read_store  # noqa: E402
from mqcore.spark.files import list_commitlog, locate_store, open_view  # noqa: E402
from mqcore.store.message_store import MessageStore  # noqa: E402

TOPICS = 10
QUEUES = 4
BATCH = 200
SELECTIVE_TOPIC = "BenchTopic3"
_ALL = ("topic,queue_id,queue_offset,commitlog_offset,store_size,body,body_crc,flag,sys_flag,born_timestamp,"
        "store_timestamp,born_host,store_host,reconsume_times,prepared_transaction_offset,tags,keys,msg_id,"
        "offset_msg_id,properties,is_retry,is_dlq,is_delayed,original_topic,delay_level,is_compressed").split(",")
_FIXED = ["queue_id", "queue_offset", "commitlog_offset", "store_size", "body_crc", "flag", "sys_flag",
          "born_timestamp", "store_timestamp", "reconsume_times", "prepared_transaction_offset", "is_retry",
          "is_dlq", "is_delayed", "delay_level", "is_compressed"]
#: which part of a scan costs: the same query over fewer (kinds of) columns
COLUMN_SETS = {
    "all 26 columns": _ALL,
    "no properties map, no keys array (24)": [c for c in _ALL if c not in ("properties", "keys")],
    "no body (25)": [c for c in _ALL if c != "body"],
    "8 core columns": ["topic", "queue_id", "queue_offset", "commitlog_offset", "store_timestamp", "tags", "msg_id",
                       "body"],
    "fixed-width only (16)": _FIXED,
}


def build_store(root: str, n: int, body_bytes: int) -> int:
    """Write the store unless a finished one with the same shape is cached; returns its bytes."""
    marker = os.path.join(root, f".bench-v3-{n}-{body_bytes}")
    if os.path.exists(marker):
        return int(open(marker).read())
    shutil.rmtree(root, ignore_errors=True)
    cfg = StoreConfig(store_path=root, commitlog_file_size_bytes=128 << 20, message_index_enable=False)
    born, store_host = pack_host("10.0.0.7", 40000), pack_host("10.0.0.1", 10911)
    noise = os.urandom(4 << 20).hex().encode()  # 8 MB of hex text: bodies vary like real payloads

    def body(i: int) -> bytes:
        head = b'{"id":%d,"user":"u%d","amount":%d.%02d,"note":"' % (i, i % 9973, i % 1000, i % 100)
        at = (i * 7919) % (len(noise) - body_bytes)
        return (head + noise[at:at + body_bytes])[:body_bytes - 2] + b'"}'
    t = time.perf_counter()
    with MessageStore(cfg) as store:
        i = 0
        while i < n:
            count = min(BATCH, n - i)
            items = K.encode_batch_items([(0, body(i + j), b"KEYS\x01key-%d\x02UNIQ_KEY\x01%s" % (
                i + j, uuid.UUID(int=i + j).hex.upper().encode())) for j in range(count)])
            b = i // BATCH
            r = store.put_batch(f"BenchTopic{b % TOPICS}", (b // TOPICS) % QUEUES, items, born_host=born,
                                store_host=store_host, born_timestamp=1_700_000_000_000 + i,
                                batch_properties={"TAGS": "Tag%d" % (b % 3), "WAIT": "false"})
            assert r.ok, r
            i += count
        total = store.get_max_phy_offset()
    print(f"# built {n:,} messages, {total / 1e6:,.1f} MB in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    with open(marker, "w") as f:
        f.write(str(total))
    return total


def best_of(repeat: int, fn, warmup: bool = True) -> tuple[float, object]:
    if warmup:
        fn()
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def report(case: str, seconds: float, rows: int, data_bytes: int, **extra) -> None:
    print(json.dumps({"bench": "spark_scan", "case": case, "seconds": round(seconds, 3), "rows": rows,
                      "mrows_per_s": round(rows / seconds / 1e6, 3), "mb_per_s": round(data_bytes / seconds / 1e6, 1),
                      **extra, "loadavg_1m": os.getloadavg()[0]}), flush=True)


def python_arrow(root: str, **options) -> int:
    return sum(b.num_rows for b in read_store(root, **options))


def python_tuples(root: str) -> int:
    n = 0
    for f in list_commitlog(locate_store(root)):
        with open_view(f.path) as v:
            pos = 0
            while True:
                recs = K.decode_records(v, pos, len(v), 65536)
                if not recs:
                    break
                n += len(recs)
                pos += sum(r[0] for r in recs)
    return n


def kernel_projection(root: str, repeat: int, data: int) -> None:
    """The column kernel alone over the first commitlog file: every column built, vs. no
    properties map / keys, vs. fixed-width columns only (the properties never scanned);
    cases interleaved, best of ``repeat``."""
    from mqcore.format import layout as L
    skip = dict(C.COLUMN_SKIP_FLAGS)
    cases = {"all columns": C.WITH_BODY,
             "no properties map, no keys": C.WITH_BODY | skip["properties"] | skip["keys"],
             "fixed-width only": sum(skip.values())}
    best, rows = {c: float("inf") for c in cases}, 0
    f = list_commitlog(locate_store(root))[0]
    with open_view(f.path) as v:
        size = len(v)
        for _ in range(repeat):
            for case, flags in cases.items():
                t, pos, rows = time.perf_counter(), 0, 0
                while True:
                    got, _, pos, reason, _, _ = C.decode_columns(v, pos, len(v), len(v), f.base_offset, 131072,
                                                                  32 << 20, None, -(1 << 63), (1 << 63) - 1, flags)
                    rows += got
                    if reason != L.ScanStop.MAX_COUNT:
                        break
                best[case] = min(best[case], time.perf_counter() - t)
    for case, s in best.items():
        report(f"kernel decode_columns, one file, {case} (1 process)", s, rows, min(data, size))


def floor_source():
    """``rocketmq_arrow_floor``: the reader's partitions and schema, but each task decodes
    ONE batch and yields it again and again up to its share of ``rows``: what Spark's
    Python Data Source path (Arrow over the worker socket, Arrow -> rows) costs with no
    decoding at all. Defined here, pickled by value to the workers."""
    from pyspark.sql.datasource import DataSource, InputPartition

    from mqcore.spark.decode import iter_split
    from mqcore.spark.options import ReadOptions
    from mqcore.spark.source import CommitLogReader

    class FloorReader(CommitLogReader):
        def __init__(self, opts, rows):
            super().__init__(opts)
            self.rows = rows

        def partitions(self):
            parts = super().partitions()
            return [InputPartition((i, len(parts), p.value)) for i, p in enumerate(parts)]

        def read(self, partition):
            i, count, split = partition.value
            want = self.rows // count + (self.rows % count if i == 0 else 0)
            batch = next(iter_split(split, self.opts))
            while want > 0:
                out = batch if want >= batch.num_rows else batch.slice(0, want)
                want -= out.num_rows
                yield out

    class FloorSource(DataSource):
        @classmethod
        def name(cls):
            return "rocketmq_arrow_floor"

        def schema(self):
            from mqcore.spark.decode import spark_ddl
            return spark_ddl(ReadOptions.from_options({"columns": self.options["columns"]}))

        def reader(self, schema):
            opts = ReadOptions.from_options({k: v for k, v in self.options.items() if k.lower() != "rows"})
            return FloorReader(opts, int(self.options["rows"]))

    return FloorSource


def floor_cases(spark, root: str, pq: str, n: int, data: int, repeat: int) -> None:
    """The Python Data Source floor next to the real reader and Parquet, same columns."""
    spark.dataSource.register(floor_source())
    for label in ("all 26 columns", "fixed-width only (16)"):
        cols = ",".join(COLUMN_SETS[label])
        cases = {"spark-ds": spark.read.format("rocketmq").option("columns", cols).load(root),
                 "floor (pre-built Arrow, no decode)": spark.read.format("rocketmq_arrow_floor")
                 .option("columns", cols).option("rows", str(n)).load(root),
                 "spark-parquet": spark.read.parquet(pq).select(*COLUMN_SETS[label])}
        for case, df in cases.items():
            s, _ = best_of(repeat, lambda: df.write.format("noop").mode("overwrite").save())
            report(f"{case} {label} (noop)", s, n, data)


JVM_SETS = ("all 26 columns", "8 core columns", "fixed-width only (16)")


def jvm_cases(spark, root: str, pq: str, n: int, data: int, repeat: int) -> dict:
    """The JVM reader next to the Python one and Parquet, same columns, interleaved: each
    round runs the three once, so load changes hit them alike. Returns the goal ratios."""
    goals = {}
    for label in JVM_SETS:
        cols = COLUMN_SETS[label]
        cases = {"spark-ds": spark.read.format("rocketmq").option("columns", ",".join(cols)).load(root),
                 "spark-jvm": spark.read.format("rocketmq-jvm").load(root).select(*cols),
                 "spark-parquet": spark.read.parquet(pq).select(*cols)}
        best = {c: float("inf") for c in cases}
        for i in range(repeat + 1):  # round 0 warms up
            for case, df in cases.items():
                t = time.perf_counter()
                df.write.format("noop").mode("overwrite").save()
                if i:
                    best[case] = min(best[case], time.perf_counter() - t)
        for case, s in best.items():
            extra = {} if case == "spark-parquet" else {"parquet_over_this": round(best["spark-parquet"] / s, 2)}
            report(f"{case} {label} (noop, interleaved)", s, n, data, **extra)
        goals[f"full scan ({label}), JVM reader"] = best["spark-parquet"] / best["spark-jvm"]
    # the selective query: the Python reader looks the topic up in its consume queues, the JVM
    # reader walks every record and skips the others' (it has no consume-queue path)
    sel = {"spark-ds (consume queues)": lambda: spark.read.format("rocketmq").option(
               "columns", "topic,commitlog_offset,store_timestamp").load(root),
           "spark-jvm (walk)": lambda: spark.read.format("rocketmq-jvm").load(root),
           "spark-parquet": lambda: spark.read.parquet(pq)}
    best = {c: float("inf") for c in sel}
    for i in range(repeat + 1):
        for case, df in sel.items():
            t = time.perf_counter()
            got = df().where(f"topic = '{SELECTIVE_TOPIC}'").select("commitlog_offset", "store_timestamp").agg(
                {"commitlog_offset": "count"}).first()[0]
            assert got == n // TOPICS, (case, got)
            if i:
                best[case] = min(best[case], time.perf_counter() - t)
    for case, s in best.items():
        extra = {} if case == "spark-parquet" else {"parquet_over_this": round(best["spark-parquet"] / s, 2)}
        report(f"{case} one topic, 2 columns (interleaved)", s, n // TOPICS, data, **extra)
    return goals


def session(master: str):
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.environ["PYTHONPATH"] = root + os.pathsep + os.environ.get("PYTHONPATH", "")
    from pyspark.sql import SparkSession

    from mqcore.spark import jvm
    from mqcore.spark.source import register
    builder = (SparkSession.builder.master(master).appName("bench_spark_scan")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.driver.memory", "4g").config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.python.filterPushdown.enabled", "true"))
    spark = jvm.with_jvm_reader(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def print_goals(goals: dict) -> None:
    for goal, ratio in goals.items():
        print(json.dumps({"bench": "spark_scan", "goal": goal, "parquet_over_ds": round(ratio, 2), "target": 1.0,
                          "met": ratio >= 1.0, "missed_by": round(max(0.0, 1.0 - ratio), 2),
                          "loadavg_1m": os.getloadavg()[0]}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=2_000_000)
    p.add_argument("--body-bytes", type=int, default=200)
    p.add_argument("--dir", default="/tmp/mqcore-bench-spark")
    p.add_argument("--keep", action="store_true", help="keep the store and Parquet copy in --dir for a rerun")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--floor", action="store_true",
                   help="only the Python Data Source floor next to the reader and Parquet (needs a --keep'd run's "
                        "Parquet copy in --dir)")
    p.add_argument("--kernel", action="store_true", help="only the column kernel's projection cases (no Spark)")
    p.add_argument("--jvm", action="store_true",
                   help="only the JVM reader next to the Python reader and Parquet (interleaved) and its goal lines")
    args = p.parse_args()
    root = os.path.join(args.dir, "store")
    data = build_store(root, args.messages, args.body_bytes)
    n = args.messages
    sel = n // TOPICS
    if args.kernel:
        kernel_projection(root, max(args.repeat, 5), data)
        return
    if args.jvm:
        spark = session(args.master)
        pq = os.path.join(args.dir, "parquet")
        if not os.path.isdir(pq):
            spark.read.format("rocketmq-jvm").load(root).write.mode("overwrite").option(
                "compression", "zstd").parquet(pq)
        print_goals(jvm_cases(spark, root, pq, n, data, args.repeat))
        spark.stop()
        if not args.keep:
            shutil.rmtree(args.dir, ignore_errors=True)
        return
    if args.floor:
        spark = session(args.master)
        floor_cases(spark, root, os.path.join(args.dir, "parquet"), n, data, args.repeat)
        spark.stop()
        return

    s, rows = best_of(args.repeat, lambda: python_arrow(root))
    assert rows == n, rows
    report("python-arrow all columns (1 process)", s, rows, data)
    s, rows = best_of(args.repeat, lambda: python_arrow(root, topics=SELECTIVE_TOPIC, includeBody="false"))
    assert rows == sel, rows
    report("python-arrow one topic, no bodies (1 process)", s, rows, data)
    s, rows = best_of(1, lambda: python_tuples(root), warmup=False)
    report("python-tuples decode_records (1 process)", s, rows, data)

    spark = session(args.master)
    ds = spark.read.format("rocketmq").load(root)
    parts = ds.rdd.getNumPartitions()
    s, _ = best_of(args.repeat, lambda: ds.write.format("noop").mode("overwrite").save())
    report("spark-ds all columns (noop)", s, n, data, partitions=parts, master=args.master)
    old = spark.read.format("rocketmq").option("splitSize", "0").option("batchSize", "8m") \
        .option("maxRowsPerBatch", "65536").load(root)
    s, _ = best_of(args.repeat, lambda: old.write.format("noop").mode("overwrite").save())
    report("spark-ds all columns, old defaults: splitSize=0, batchSize=8m (noop)", s, n, data,
           partitions=old.rdd.getNumPartitions())

    def selective(df):
        q = df.where(f"topic = '{SELECTIVE_TOPIC}'").select("commitlog_offset", "store_timestamp")
        return q.agg({"commitlog_offset": "count"}).first()[0]

    s, rows = best_of(args.repeat, lambda: selective(spark.read.format("rocketmq").load(root)))
    assert rows == sel, rows
    report("spark-ds one topic, 2 columns (pushdown -> consume queues)", s, rows, data)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    s, rows = best_of(args.repeat, lambda: selective(spark.read.format("rocketmq").load(root)))
    report("spark-ds one topic, 2 columns (no pushdown: walk + Spark filter)", s, rows, data)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")

    def selective_cols():
        cols = "topic,commitlog_offset,store_timestamp"  # topic: the filter's column must exist
        df = spark.read.format("rocketmq").option("columns", cols).load(root)
        return selective(df)

    s_ds_sel, rows = best_of(args.repeat, selective_cols)
    assert rows == sel, rows
    report("spark-ds one topic, 2 columns (pushdown -> consume queues, option columns)", s_ds_sel, rows, data)

    pq = os.path.join(args.dir, "parquet")
    s, _ = best_of(1, lambda: ds.write.mode("overwrite").option("compression", "zstd").parquet(pq), warmup=False)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(pq) for f in fs)
    report("parquet-convert (spark-ds -> zstd parquet, once)", s, n, data, parquet_mb=round(size / 1e6, 1))
    s_pq_sel, rows = best_of(args.repeat, lambda: selective(spark.read.parquet(pq)))
    assert rows == sel, rows
    report("spark-parquet one topic, 2 columns", s_pq_sel, rows, data,
           ds_vs_parquet=round(s_pq_sel / s_ds_sel, 2))
    goals = {"selective query (one topic, 2 columns, option columns)": s_pq_sel / s_ds_sel}

    for label, cols in COLUMN_SETS.items():
        dsc = spark.read.format("rocketmq").option("columns", ",".join(cols)).load(root)
        s_ds, _ = best_of(args.repeat, lambda: dsc.write.format("noop").mode("overwrite").save())
        pqc = spark.read.parquet(pq).select(*cols)
        s_pq, _ = best_of(args.repeat, lambda: pqc.write.format("noop").mode("overwrite").save())
        report(f"spark-ds {label} (noop)", s_ds, n, data)
        report(f"spark-parquet {label} (noop)", s_pq, n, data, ds_vs_parquet=round(s_pq / s_ds, 2))
        if cols is _ALL:
            goals["full scan (all 26 columns)"] = s_pq / s_ds
    goals.update(jvm_cases(spark, root, pq, n, data, args.repeat))
    print_goals(goals)
    spark.stop()
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
