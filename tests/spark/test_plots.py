"""The data behind the analytics charts (matplotlib only, no Spark): gaps are zeros, one
bucket spans one bucket, series are told apart, bad options are refused before Spark."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest

pytest.importorskip("matplotlib")  # scripts/test installs the plots extra
import matplotlib.dates as mdates  # noqa: E402

from mqcore.spark.analytics import lag, volume  # noqa: E402
from mqcore.spark.analytics.common import bucket_seconds, interval  # noqa: E402

H = dt.timedelta(hours=1)
T0 = dt.datetime(2024, 5, 1, 10, 0)


def lines(ax) -> dict:
    return {ln.get_label(): ln for ln in ax.get_lines()}


def xspan(ax) -> dt.timedelta:
    lo, hi = ax.get_xlim()
    return mdates.num2date(hi) - mdates.num2date(lo)


def test_volume_gaps_are_zero_and_series_differ():
    rows = [{"bucket_start": T0, "topic": "A", "messages": 5}, {"bucket_start": T0 + 3 * H, "topic": "A", "messages": 2},
            {"bucket_start": T0 + H, "topic": "B", "messages": 1}]
    fig = volume.plot(rows, None, "1h")
    ax = fig.axes[0]
    got = lines(ax)
    # steps: each bucket flat across its span, closed at the last bucket's end
    assert list(got["A (7)"].get_xdata()) == [T0, T0 + H, T0 + 2 * H, T0 + 3 * H, T0 + 4 * H]
    assert list(got["A (7)"].get_ydata()) == [5, 0, 0, 2, 2]       # not a line straight across the gap
    assert got["A (7)"].get_drawstyle() == "steps-post"
    assert list(got["B (1)"].get_ydata()) == [0, 1, 0, 0, 0]
    assert got["A (7)"].get_marker() != got["B (1)"].get_marker()
    assert xspan(ax) == 4 * H                                   # first bucket's start to last one's end
    assert ax.get_ylim()[0] == 0


def test_one_hourly_bucket_spans_one_hour_not_years():
    fig = volume.plot([{"bucket_start": T0, "topic": "A", "messages": 7}], None, "1h")
    assert xspan(fig.axes[0]) == H
    # drawn across its hour, not as a point in the corner of the axis
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [T0, T0 + H] and list(line.get_ydata()) == [7, 7]
    fig = volume.plot([{"bucket_start": T0, "topic": "A", "messages": 7}], None, "5m")
    assert xspan(fig.axes[0]) == dt.timedelta(minutes=5)


def test_lag_backlog_gaps_are_zero():
    lag_rows = [{"group": "g1", "topic": "T", "lag": 3}, {"group": "g1", "topic": "T", "lag": 4},
                {"group": "g2", "topic": "T", "lag": 1}]
    back = [{"group": "g1", "bucket_start": T0, "unconsumed": 4}, {"group": "g1", "bucket_start": T0 + 2 * H,
                                                                   "unconsumed": 3},
            {"group": "g2", "bucket_start": T0 + 2 * H, "unconsumed": 1}]
    fig = lag.plot(lag_rows, back, None, "1h")
    bars, ax = fig.axes
    assert sorted(p.get_width() for p in bars.patches) == [1, 7]
    assert sorted(t.get_text() for t in bars.texts) == ["1", "7"]   # every bar says its value
    got = lines(ax)
    assert list(got["g1"].get_ydata()) == [4, 0, 3, 3] and list(got["g2"].get_ydata()) == [0, 0, 1, 1]
    assert got["g1"].get_marker() != got["g2"].get_marker()
    assert xspan(ax) == 3 * H


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("5m", 300), ("1h", 3600), ("2d", 172800),
                                           ("1w", 604800), ("10 minutes", 600), ("1 hour", 3600)])
def test_bucket_options(text, seconds):
    assert bucket_seconds(text) == seconds and interval(text) == f"{seconds} seconds"


@pytest.mark.parametrize("bad", ["7q", "0h", "h", "-1m", "1.5h"])
def test_bad_bucket_is_refused_before_spark_starts(bad, tmp_path):
    # argparse refuses it while parsing, before main() locates the store or builds a session
    p = subprocess.run([sys.executable, "-m", "mqcore.spark.analytics.cli", "volume", str(tmp_path),
                        f"--bucket={bad}"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert f"'{bad}'" in p.stderr and "time bucket" in p.stderr


def test_small_topics_stay_visible_next_to_large_ones():
    rows = [{"bucket_start": T0 + i * H, "topic": "Big", "messages": 50_000} for i in range(3)]
    rows += [{"bucket_start": T0 + H, "topic": "Small", "messages": 5}]
    ax = volume.plot(rows, None, "1h").axes[0]
    assert ax.get_yscale() == "symlog" and "log scale" in ax.get_ylabel()
    # of one size: a plain linear axis from 0
    ax = volume.plot([{"bucket_start": T0, "topic": "A", "messages": 5},
                      {"bucket_start": T0, "topic": "B", "messages": 7}], None, "1h").axes[0]
    assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0


def test_a_small_lag_is_labelled_and_not_flattened():
    fig = lag.plot([{"group": "g1", "topic": "T", "lag": 5}, {"group": "g2", "topic": "T", "lag": 5000}], [], None)
    bars = fig.axes[0]
    assert sorted(t.get_text() for t in bars.texts) == ["5", "5,000"]
    assert bars.get_xscale() == "symlog"


def test_the_pngs(tmp_path):
    """The files a user opens: written, and of a sensible size."""
    rows = [{"bucket_start": T0 + i * H, "topic": "Big", "messages": 50_000 - i * 900} for i in range(6)]
    rows += [{"bucket_start": T0 + H, "topic": "Small", "messages": 5}]
    volume.plot(rows, str(tmp_path / "volume.png"), "1h")
    volume.plot([{"bucket_start": T0, "topic": "Only", "messages": 7}], str(tmp_path / "one.png"), "1h")
    lag.plot([{"group": "g1", "topic": "T", "lag": 5}, {"group": "g2", "topic": "T", "lag": 5000}],
             [{"group": "g1", "bucket_start": T0, "unconsumed": 5}, {"group": "g2", "bucket_start": T0 + H,
                                                                      "unconsumed": 5000}],
             str(tmp_path / "lag.png"), "1h")
    for name in ("volume.png", "one.png", "lag.png"):
        assert (tmp_path / name).stat().st_size > 10_000


def test_size_counts_start_at_zero_so_49k_is_not_drawn_a_tenth_of_70k():
    from mqcore.spark.analytics import distributions
    edges = [100.0, 200.0, 300.0]
    fig = distributions.draw(edges, {None: [49_000, 70_000]}, edges, {"normal": [49_000, 70_000]}, None)
    for ax in fig.axes:
        assert ax.get_yscale() == "linear" and ax.get_ylim()[0] == 0 and "log" not in ax.get_ylabel()
    # a bin of 3 beside one of 70 k: a log scale from 0, said in the label
    fig = distributions.draw(edges, {None: [3, 70_000]}, edges, {"normal": [3, 70_000]}, None)
    for ax in fig.axes:
        assert ax.get_yscale() == "symlog" and ax.get_ylim()[0] == 0 and "log scale" in ax.get_ylabel()


def test_two_minutes_of_backlog_get_small_buckets_and_a_long_bucket_says_so():
    assert lag.auto_bucket(dt.timedelta(minutes=2)) == "10s"
    assert lag.auto_bucket(dt.timedelta(hours=5)) == "5m" and lag.auto_bucket(dt.timedelta(hours=6)) == "15m"
    assert lag.auto_bucket(dt.timedelta(0)) == "1s"
    back = [{"group": "g1", "bucket_start": T0, "unconsumed": 40}]
    span = (T0 + dt.timedelta(minutes=10), T0 + dt.timedelta(minutes=12))
    title = lag.plot([{"group": "g1", "topic": "T", "lag": 40}], back, None, "1h", span).axes[1].get_title()
    assert "span only 2 min" in title
    fine = lag.plot([{"group": "g1", "topic": "T", "lag": 40}], back, None, "1h",
                    (T0, T0 + dt.timedelta(minutes=55))).axes[1].get_title()
    assert "span only" not in fine


def test_lag_bucket_option_takes_auto():
    from mqcore.spark.analytics.cli import parser
    assert parser().parse_args(["lag", "/s"]).bucket == "auto"
    assert parser().parse_args(["lag", "/s", "--bucket", "5m"]).bucket == "5m"
