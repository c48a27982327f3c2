"""The job the cluster test submits (and runs locally for the expected answer).

    spark-submit --master spark://HOST:PORT tests/spark/cluster_job.py STORE OUT
    python tests/spark/cluster_job.py STORE OUT --master local[2]

Prints one ``RESULT {json}`` line (where the executors imported mqcore from, rows per topic,
a checksum of the commitlog offsets) and writes every mqcore-analytics job's result under OUT.
"""
import argparse
import json


def where_mqcore(_):
    import mqcore
    from mqcore import _compat
    yield mqcore.__file__, _compat.kernels.__name__


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("store")
    p.add_argument("out")
    p.add_argument("--master")
    a = p.parse_args()
    from mqcore.spark.analytics.cli import parser
    from mqcore.spark.analytics.common import build_session
    spark = build_session(a.master, "mqcore-cluster-test")
    executors = spark.sparkContext.parallelize(range(2), 2).mapPartitions(where_mqcore).collect()
    df = spark.read.format("rocketmq").load(a.store)
    counts = {r["topic"]: r["count"] for r in df.groupBy("topic").count().collect()}
    checksum = df.selectExpr("sum(commitlog_offset) AS s").first()["s"]
    print("RESULT " + json.dumps({"executors": executors, "counts": counts, "checksum": checksum}), flush=True)
    for argv in (["volume", "--bucket", "1m"], ["lag"], ["retries"], ["lookup", "--key", "order-10"],
                 ["sizes"], ["export"]):
        name = argv[0]
        extra = [] if name == "export" else ["--show", "0"]
        args = parser().parse_args([name, a.store, *argv[1:], "--out", f"{a.out}/{name}", *extra])
        args.run(spark, args)
    spark.stop()


if __name__ == "__main__":
    main()
