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
    assert list(got["A"].get_xdata()) == [T0, T0 + H, T0 + 2 * H, T0 + 3 * H]
    assert list(got["A"].get_ydata()) == [5, 0, 0, 2]          # not a line straight across the gap
    assert list(got["B"].get_ydata()) == [0, 1, 0, 0]
    assert got["A"].get_marker() != got["B"].get_marker()
    assert xspan(ax) == 4 * H                                   # first bucket's start to last one's end
    assert ax.get_ylim()[0] == 0


def test_one_hourly_bucket_spans_one_hour_not_years():
    fig = volume.plot([{"bucket_start": T0, "topic": "A", "messages": 7}], None, "1h")
    assert xspan(fig.axes[0]) == H
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
    got = lines(ax)
    assert list(got["g1"].get_ydata()) == [4, 0, 3] and list(got["g2"].get_ydata()) == [0, 0, 1]
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
