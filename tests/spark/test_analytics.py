"""The analytics jobs on the shared session, checked against the store's truth."""
from __future__ import annotations

import os

import pytest

from mqcore.spark.analytics.cli import parser
from tests.support.storegen import GEOMETRY

pytestmark = pytest.mark.spark


def run(spark, *argv):
    args = parser().parse_args([str(a) for a in argv])
    return args.run(spark, args)


def test_volume(spark, store_dir, store_truth, tmp_path, capsys):
    rows = run(spark, "volume", store_dir, "--bucket", "1m", "--out", tmp_path / "v", "--format", "parquet")
    assert sum(r["messages"] for r in rows) == len(store_truth)
    assert sum(r["bytes"] for r in rows) == sum(m.store_size for _, m in store_truth.values())
    tagged = sum(r["messages"] for r in rows if r["topic"] == "Orders" and r["tags"] == "TagA")
    assert tagged == sum(1 for _, m in store_truth.values() if m.topic == "Orders" and m.tags == "TagA")
    assert spark.read.parquet(str(tmp_path / "v")).count() == len(rows)
    assert "volume per topic and tag" in capsys.readouterr().out
    by_orig = run(spark, "volume", store_dir, "--by-original", "--no-tags", "--topics", "%RETRY%cg1,%DLQ%cg1")
    assert {r["topic"] for r in by_orig} == {"Orders"}


def test_lag(spark, store_dir, store_truth):
    rows = {(r["group"], r["topic"], r["queue_id"]): r for r in run(spark, "lag", store_dir, "--show", 0)}
    q0 = sum(1 for _, m in store_truth.values() if m.topic == "Orders" and m.queue_id == 0)
    r = rows[("cg1", "Orders", 0)]
    assert (r["max_offset"], r["consumer_offset"], r["lag"]) == (q0, 10, q0 - 10)
    assert rows[("cg1", "%RETRY%cg1", 0)]["lag"] == sum(1 for _, m in store_truth.values()
                                                       if m.topic == "%RETRY%cg1") - 2


def test_retries(spark, store_dir, store_truth):
    rows = {(r["group"], r["original_topic"], r["kind"]): r["messages"] for r in
            run(spark, "retries", store_dir, "--show", 0, "--dlq-messages", 0)}
    assert rows[("cg1", "Orders", "dlq")] == sum(1 for k, _ in store_truth.values() if k == "dlq")
    assert rows[("cg1", "Orders", "retry")] == sum(1 for k, _ in store_truth.values() if k == "retry")


def test_lookup_scan_and_index_agree(spark, store_dir, store_truth):
    scan = run(spark, "lookup", store_dir, "--key", "shared", "--show", 0)
    want = sorted(o for o, (_, m) in store_truth.items() if "shared" in m.keys)
    assert [r["commitlog_offset"] for r in scan] == want
    idx = run(spark, "lookup", store_dir, "--key", "shared", "--topic", "Orders", "--show", 0,
              "--index-slots", GEOMETRY["slots"], "--index-entries", GEOMETRY["entries"])
    assert [r["commitlog_offset"] for r in idx] == want[:64]
    uniq = run(spark, "lookup", store_dir, "--key", "UNIQ00000013", "--show", 0)
    assert len(uniq) == 1 and uniq[0]["msg_id"] == "UNIQ00000013"


def test_lookup_writes_csv_with_nested_columns(spark, store_dir, tmp_path):
    """keys (an array) goes to CSV as JSON text; Spark's CSV writer refuses arrays and maps."""
    rows = run(spark, "lookup", store_dir, "--key", "shared", "--show", 0, "--out", tmp_path / "l")
    back = spark.read.option("header", "true").csv(str(tmp_path / "l")).collect()
    assert len(back) == len(rows) > 0
    assert all(r["keys"].startswith("[") and '"shared"' in r["keys"] for r in back)


def test_sizes_and_plots(spark, store_dir, store_truth, tmp_path):
    if not os.environ.get("CI"):  # scripts/test installs the plots extra; CI must run this
        pytest.importorskip("matplotlib")
    rows = {r["topic"]: r for r in run(spark, "sizes", store_dir, "--show", 0, "--plot", tmp_path / "s.png")}
    orders = [m.store_size for _, m in store_truth.values() if m.topic == "Orders"]
    assert rows["Orders"]["messages"] == len(orders) and rows["Orders"]["size_max"] == max(orders)
    assert os.path.getsize(tmp_path / "s.png") > 1000
    kinds = [k for k, _ in store_truth.values()]
    assert sum(r["retried"] for r in rows.values()) == kinds.count("retry") + kinds.count("dlq")
    assert sum(r["delayed"] for r in rows.values()) == kinds.count("delayed")
    # the chart's data: one latency series per kind over the same bins, counts that add up
    from mqcore.spark.analytics import distributions
    from mqcore.spark.analytics.common import messages
    fig = distributions.plot(messages(spark, store_dir), None)
    sizes_ax, latency_ax = fig.axes
    labels = [t.get_text() for t in latency_ax.get_legend().get_texts()]
    want = {"normal": len(kinds) - kinds.count("retry") - kinds.count("dlq") - kinds.count("delayed"),
            "delayed": kinds.count("delayed"), "retried": kinds.count("retry") + kinds.count("dlq")}
    assert labels == [f"{k} ({n:,})" for k, n in want.items()]
    counts = [p.get_data().values.sum() for p in latency_ax.patches]
    assert counts == list(want.values())
    for ax in (sizes_ax, latency_ax):  # counts from 0; a log scale (when a bin would vanish) has plain ticks
        assert ax.get_ylim()[0] == 0 and ax.get_yscale() in ("linear", "symlog")
        if ax.get_yscale() == "symlog":
            assert ax.yaxis.get_major_formatter()(1000, 0) == "1,000" and "log scale" in ax.get_ylabel()
    run(spark, "volume", store_dir, "--show", 0, "--plot", tmp_path / "v.png")
    run(spark, "lag", store_dir, "--show", 0, "--plot", tmp_path / "l.png")
    assert os.path.getsize(tmp_path / "v.png") > 1000 and os.path.getsize(tmp_path / "l.png") > 1000


def test_export_to_parquet(spark, store_dir, store_truth, tmp_path):
    times = sorted(m.store_timestamp for _, m in store_truth.values())
    out = tmp_path / "orders.parquet"
    n = run(spark, "export", store_dir, "--out", out, "--topics", "Orders,Logs", "--start", times[100],
            "--end", times[500], "--partition-by", "topic", "--decompress")
    want = [o for o, (_, m) in store_truth.items()
            if m.topic in ("Orders", "Logs") and times[100] <= m.store_timestamp <= times[500]]
    assert n == len(want)
    back = spark.read.parquet(str(out))
    assert sorted(r[0] for r in back.select("commitlog_offset").collect()) == sorted(want)
    assert back.where("is_compressed").selectExpr("min(substring(body, 1, 8))").first()[0] == b"log line"


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_export_format_as_the_readme_says(spark, store_dir, store_truth, tmp_path, fmt):
    """`--out DIR --format ...` works for export too (it was refused); bodies survive as base64."""
    import base64
    out = tmp_path / f"orders.{fmt}"
    n = run(spark, "export", store_dir, "--out", out, "--topics", "Payments", "--format", fmt)
    want = {o: m for o, (_, m) in store_truth.items() if m.topic == "Payments"}
    assert n == len(want)
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("multiLine", "true")
    back = {int(r["commitlog_offset"]): r["body"] for r in reader.load(str(out)).collect()}
    assert sorted(back) == sorted(want)
    assert all(base64.b64decode(back[o]) == m.body for o, m in want.items())


def test_analytics_progress_bar_on_a_terminal_only(spark):
    """A tqdm bar of Spark's tasks while a job runs, written only to a terminal."""
    import io

    from mqcore.spark.analytics.common import spark_progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    def slow(it):
        import time as t
        t.sleep(0.5)
        return it

    tty, pipe = Terminal(), io.StringIO()
    with spark_progress(spark, tty, every_s=0.1):
        spark.sparkContext.parallelize(range(8), 8).mapPartitions(slow).count()
    with spark_progress(spark, pipe, every_s=0.1):
        spark.sparkContext.parallelize(range(4), 4).count()
    assert "tasks" in tty.getvalue() and "/8" in tty.getvalue(), tty.getvalue()
    assert pipe.getvalue() == ""


def test_a_path_that_is_not_a_store_is_a_one_line_error(tmp_path, capsys):
    from mqcore.spark.analytics.cli import main
    assert main(["volume", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["lag", str(tmp_path / "empty")]) == 2
    assert "is not a RocketMQ store" in capsys.readouterr().err
