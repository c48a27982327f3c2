"""What every analytics job shares: the session, the source DataFrames, output and plots.

Jobs run locally (``local[*]``) by default and on a cluster when started through
``spark-submit`` (which sets ``spark.master``; the session then inherits it). Each job
prints a readable table and can also write CSV or Parquet and, where a picture says more
than a table, a PNG (matplotlib, an optional dependency: ``pip install mqcore[plots]``).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, Sequence, TextIO

if TYPE_CHECKING:  # pyspark and matplotlib are imported where a job needs them
    from matplotlib.axes import Axes
    from matplotlib.container import BarContainer
    from matplotlib.figure import Figure
    from pyspark.sql import DataFrame, Row, SparkSession

log = logging.getLogger(__name__)

_SHORT_INTERVAL = re.compile(r"^\s*([0-9]+)\s*(s|m|h|d|w)\s*$")
_LONG_INTERVAL = re.compile(r"^\s*([0-9]+)\s+(second|minute|hour|day|week)s?\s*$", re.I)
_UNIT_WORD = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week"}
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400}


def bucket_seconds(text: str) -> int:
    """``30s`` / ``5m`` / ``1h`` / ``1d`` / ``1w`` or ``'10 minutes'`` -> seconds; anything else
    (``7q``, ``0h``) is an ``argparse.ArgumentTypeError``, so a bad option is refused before
    Spark starts."""
    m = _SHORT_INTERVAL.match(text)
    if m:
        n, unit = int(m.group(1)), _UNIT_WORD[m.group(2)]
    else:
        m = _LONG_INTERVAL.match(text)
        if not m:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a time bucket: use <number><s|m|h|d|w> (30s, 5m, 1h, 1d) or '<number> minutes'")
        n, unit = int(m.group(1)), m.group(2).lower()
    if n <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a time bucket must be longer than zero")
    return n * _UNIT_SECONDS[unit]


def interval(text: str) -> str:
    """A bucket option (see ``bucket_seconds``) -> a Spark interval (``'3600 seconds'``)."""
    return f"{bucket_seconds(text)} seconds"


def bucket(text: str) -> str:
    """argparse type of ``--bucket``: validated at parse time, kept as written."""
    bucket_seconds(text)
    return text


@dataclasses.dataclass
class Output:
    """Where a job's result goes besides the console."""

    out: str | None = None
    fmt: str = "csv"
    plot: str | None = None
    show: int = 50

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Output":
        return cls(args.out, args.format, args.plot, args.show)


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("store", help="store root (storePathRootDir) or its commitlog/ directory, on every node")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--out", help="also write the result here (a directory)")
    p.add_argument("--format", choices=("csv", "parquet"), default="csv", help="format of --out (default csv)")
    p.add_argument("--plot", help="write a PNG chart to this file (needs matplotlib)")
    p.add_argument("--show", type=int, default=50, help="rows to print (default 50; 0 prints none)")


def add_range_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topics", help="comma-separated topics (default: all)")
    p.add_argument("--start", help="earliest store time (epoch ms or ISO-8601, UTC by default)")
    p.add_argument("--end", help="latest store time, inclusive")


def submitted_master() -> str | None:
    """The master ``spark-submit`` (or a running pyspark shell) chose, else None.

    ``SparkConf()`` sees ``spark.master`` only once Python is connected to the JVM, and before
    the session exists it is not: asking it then always said "no master", so a job submitted
    to ``spark://...`` quietly ran in ``local[*]`` on the submitting machine. spark-submit
    starts the JVM first and tells Python where it is (``PYSPARK_GATEWAY_PORT``); only then
    is it worth connecting early (without it, connecting would start a JVM before the
    session's own settings are known)."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return None
    from pyspark import SparkConf, SparkContext
    SparkContext._ensure_initialized()  # connects to spark-submit's JVM, starts nothing
    return SparkConf().get("spark.master", None)


def build_session(master: str | None = None, app: str = "mqcore-analytics") -> SparkSession:
    """A SparkSession with the rocketmq sources registered and pushdown on."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from mqcore.spark.source import register
    builder = SparkSession.builder.appName(app)
    if master:
        builder = builder.master(master)
    elif submitted_master() is None:  # not under spark-submit
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.master("local[*]").config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.shuffle.partitions", str(max(2, os.cpu_count() or 2))))
    spark = (builder.config("spark.sql.python.filterPushdown.enabled", "true")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")  # before register: re-registering an auto-registered source warns
    register(spark)
    return spark


@contextlib.contextmanager
def spark_progress(spark: SparkSession, stream: TextIO | None = None, every_s: float = 0.5) -> Iterator[None]:
    """While the block runs, a progress bar of the active Spark stages' tasks on ``stream``
    (stderr) when it is a terminal; nothing otherwise (a pipe, a log file, cron). Spark's own
    console progress is off in local mode: it interleaves with the tables."""
    stream = sys.stderr if stream is None else stream
    if not (hasattr(stream, "isatty") and stream.isatty()):
        yield
        return
    from tqdm import tqdm
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    bar = tqdm(total=0, unit="tasks", desc="spark", file=stream, leave=False, dynamic_ncols=True)

    def poll() -> None:
        while not stop.wait(every_s):
            infos = [i for i in (tracker.getStageInfo(s) for s in tracker.getActiveStageIds()) if i is not None]
            if not infos:
                continue
            bar.total = sum(i.numTasks for i in infos)
            bar.n = sum(i.numCompletedTasks for i in infos)
            bar.set_description(f"spark stage {', '.join(str(i.stageId) for i in infos)}", refresh=False)
            bar.refresh()

    thread = threading.Thread(target=poll, name="mqcore-spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.close()


#: session conf that ``mqcore-analytics --read-past-damage`` sets: the reader's onCorrupt
ON_CORRUPT_CONF = "spark.mqcore.analytics.onCorrupt"


def messages(spark: SparkSession, store: str, topics: str | None = None, start: str | None = None,
             end: str | None = None, include_body: bool = False, **options: object) -> DataFrame:
    """The ``rocketmq`` DataFrame with the usual range options (bodies off unless asked);
    damage fails the read unless the session's ``ON_CORRUPT_CONF`` is ``skip``."""
    reader = (spark.read.format("rocketmq").option("includeBody", str(include_body).lower())
              .option("onCorrupt", spark.conf.get(ON_CORRUPT_CONF, "fail")))
    for key, value in (("topics", topics), ("startTime", start), ("endTime", end), *options.items()):
        if value is not None:
            reader = reader.option(key, str(value))
    return reader.load(store)


def csv_columns(df: DataFrame) -> DataFrame:
    """``df`` with array, map and struct columns as JSON text: CSV holds only flat values
    (``lookup``'s ``keys`` and ``properties`` made ``--out --format csv`` fail)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, MapType, StructType
    nested = (ArrayType, MapType, StructType)
    return df.select([F.to_json(F.col(f.name)).alias(f.name) if isinstance(f.dataType, nested) else F.col(f.name)
                      for f in df.schema.fields])


def emit(df: DataFrame, output: Output, title: str) -> list[Row]:
    """Print ``df`` as a table, write it if asked; returns the collected rows (small results)."""
    rows = df.collect()
    if output.show:
        print(f"\n== {title} ({len(rows)} rows) ==")
        print(format_table(df.columns, rows[:output.show]))
        if len(rows) > output.show:
            print(f"... {len(rows) - output.show} more rows (use --show or --out)")
    if output.out:
        if output.fmt == "csv":
            csv_columns(df).coalesce(1).write.mode("overwrite").option("header", "true").csv(output.out)
        else:
            df.coalesce(1).write.mode("overwrite").parquet(output.out)
        print(f"wrote {output.fmt} to {output.out}")
    return rows


def format_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned text table (numbers right-aligned)."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(isinstance(r[i], (int, float)) or r[i] is None for r in rows) for i in range(len(columns))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells])


def _cell(v: object) -> str:
    if v is None:
        return ""
    if isinstance(v, dt.datetime):
        return v.isoformat(sep=" ", timespec="milliseconds")
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def pyplot() -> ModuleType:
    """matplotlib's pyplot with a file-only backend, or a clear error."""
    try:
        import matplotlib
    except ImportError as e:
        raise SystemExit("--plot needs matplotlib: pip install 'mqcore[plots]'") from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_plot(fig: Figure, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote plot to {path}")


# --- plots that tell the truth -----------------------------------------------------------------------
#: marker and line style per series: overlapping series stay apart even in grey print
MARKERS = ("o", "s", "^", "D", "v", "x", "+", "*")
LINESTYLES = ("-", "--", ":", "-.")


def series_style(i: int) -> dict[str, Any]:  # keyword arguments of Axes.plot/step
    return {"marker": MARKERS[i % len(MARKERS)], "linestyle": LINESTYLES[(i // len(MARKERS) + i) % len(LINESTYLES)],
            "markersize": 4, "alpha": 0.85, "linewidth": 1.2}


def zero_filled(points: Mapping[dt.datetime, int], start: dt.datetime, end: dt.datetime,
                step: dt.timedelta) -> list[tuple[dt.datetime, int]]:
    """Every bucket from ``start`` to ``end`` (inclusive) with its count, 0 where none:
    a gap in the data is drawn as zeros, not as a straight line across it."""
    out: list[tuple[dt.datetime, int]] = []
    t = start
    while t <= end:
        out.append((t, points.get(t, 0)))
        t += step
    return out


def time_axis(ax: Axes, first: dt.datetime, last: dt.datetime, step: dt.timedelta) -> None:
    """x from the first bucket's start to the last bucket's end: one hourly bucket spans an
    hour, not the years matplotlib picks for a single date."""
    import matplotlib.dates as mdates
    ax.set_xlim(first, last + step)  # type: ignore[arg-type]  # dates go through matplotlib units; stubs say float
    locator = mdates.AutoDateLocator(minticks=3, maxticks=8)  # type: ignore[no-untyped-call]  # no annotations in matplotlib.dates
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]  # as above
    ax.set_xlabel("store time (UTC)")


def bucket_steps(points: list[tuple[dt.datetime, int]],
                 step: dt.timedelta) -> tuple[list[dt.datetime], list[int]]:
    """A zero-filled series (``zero_filled``) as the x and y of a step line drawn with
    ``where="post"``: each bucket is a flat segment across its whole span (the last one
    closed at its end), so a single hourly bucket fills its hour instead of being a dot in
    the corner of the axis."""
    if not points:
        return [], []
    xs = [t for t, _ in points] + [points[-1][0] + step]
    ys = [v for _, v in points] + [points[-1][1]]
    return xs, ys


#: above this ratio of the largest to the smallest series, a linear axis flattens the small one
LOG_RATIO = 20


def counts_axis(ax: Axes, peaks: Sequence[float], which: str = "y") -> bool:
    """Linear from 0 when the series are of one size; a symmetric log scale (linear below 1,
    so zero buckets still show) when the smallest series would vanish next to the largest.
    Returns True for the log scale (the caller says so in its axis label)."""
    nonzero = [p for p in peaks if p > 0]
    if len(nonzero) >= 1 and max(nonzero) / min(nonzero) > LOG_RATIO:
        from matplotlib.ticker import FuncFormatter, SymmetricalLogLocator
        (ax.set_yscale if which == "y" else ax.set_xscale)("symlog", linthresh=1)
        axis = ax.yaxis if which == "y" else ax.xaxis
        axis.set_major_locator(SymmetricalLogLocator(base=10, linthresh=1))
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        (ax.set_ylim if which == "y" else ax.set_xlim)(0, max(nonzero) * 3)
        return True
    (ax.set_ylim if which == "y" else ax.set_xlim)(0, max(nonzero, default=1) * 1.15)
    return False


def value_labels(ax: Axes, bars: BarContainer, values: Sequence[float]) -> None:
    """Each bar's value written at its end: a lag of 5 next to one of 5,000 reads as 5, not 0."""
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize="small")
