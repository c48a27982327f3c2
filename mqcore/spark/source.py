"""The ``rocketmq`` PySpark data source over commitlog files.

    spark.dataSource.register(RocketMQDataSource)        # or mqcore.spark.source.register(spark)
    df = spark.read.format("rocketmq").option("topics", "Orders").load("/data/rocketmq/store")

Where the code runs (PySpark 4.3 Python Data Source API): ``reader``, ``pushFilters`` and
``partitions`` run in a short-lived Python planner worker next to the driver; ``read``
runs in executor Python workers, which receive the reader pickled. Both must see the
store at the same path (shared storage on a cluster).

Filter pushdown: PySpark refuses a reader that implements ``pushFilters`` unless
``spark.sql.python.filterPushdown.enabled`` is true, and the data source cannot read that
conf. So with ``pushdown=auto`` (the default) ``reader()`` returns the pushdown-capable
reader only when it is called by PySpark's pushdown planner -- which only runs when the
conf is on -- and the plain reader otherwise. Every pushable condition is also an option
(``topics``, ``startTime``/``endTime``, ``startOffset``/``endOffset``), so queries prune
work either way.
"""
from __future__ import annotations

import datetime as dt
import os
import sys
from types import FrameType
from typing import TYPE_CHECKING, Iterable, Iterator, Union

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

from mqcore.spark.decode import SPARK_DDL, iter_split, spark_ddl
from mqcore.spark.files import locate_local_store, locate_store
from mqcore.spark.options import I64_MAX, I64_MIN, ReadOptions
from mqcore.spark.plan import plan_read
from mqcore.spark.stream import (
    StoreView,
    StreamOptions,
    from_json_offsets,
    latest_offsets,
    plan_ranges,
    read_range,
    to_json_offsets,
)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: a stream's offsets as Spark checkpoints them: {topic: {queue id text: queue offset}}
JsonOffsets = dict[str, dict[str, int]]
#: the comparisons of a column with one value
_COMPARISONS = (EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
Comparison = Union[EqualTo, EqualNullSafe, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual]
_PUSHDOWN_PLANNER = "data_source_pushdown_filters"


def _called_by_pushdown_planner() -> bool:
    """True inside PySpark's filter-pushdown planner worker (it only runs when the conf is on)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if (_PUSHDOWN_PLANNER in frame.f_globals.get("__name__", "")
                or frame.f_code.co_filename.endswith(_PUSHDOWN_PLANNER + ".py")):
            return True
        frame = frame.f_back
    return False


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: one row per commitlog record (see ``mqcore.spark.decode.COLUMNS``)."""

    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> str:
        # option columns prunes the schema (the Python Data Source API passes no projection);
        # streams take no such option and get every column
        columns = {k.lower(): v for k, v in self.options.items()}.get("columns")
        return SPARK_DDL if columns is None else spark_ddl(ReadOptions.from_options({"columns": columns}))

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = ReadOptions.from_options(self.options)
        locate_store(opts.path, opts.fs_options, opts.commit_log_path)  # fail at planning with a clear message, not in a task
        if opts.pushdown == "true" or (opts.pushdown == "auto" and _called_by_pushdown_planner()):
            return CommitLogPushdownReader(opts)
        return CommitLogReader(opts)

    def streamReader(self, schema: StructType) -> "DataSourceStreamReader":
        opts = StreamOptions.from_options(self.options)
        locate_local_store(opts.path, "readStream.format('rocketmq')")
        return ConsumeQueueStreamReader(opts)


class CommitLogReader(DataSourceReader):
    """Plans splits over a snapshot of the store and decodes them into Arrow batches."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        splits = plan_read(self.opts)
        if not splits:
            return [InputPartition(None)]  # nothing to read: one task that yields nothing
        return [InputPartition(s) for s in splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:
            return iter(())
        return iter_split(partition.value, self.opts)


class ConsumeQueueStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``readStream.format("rocketmq")``: micro-batches by consume queue (see ``mqcore.spark.stream``).

    Offsets are ``{topic: {queueId: queueOffset}}``; Spark keeps them in the query's checkpoint,
    so a restarted query resumes where the last committed batch ended.
    """

    def __init__(self, opts: StreamOptions) -> None:
        self.opts = opts
        self._available_now: JsonOffsets | None = None

    def _view(self) -> StoreView:
        return StoreView(locate_local_store(self.opts.path, "readStream.format('rocketmq')"), self.opts)

    def initialOffset(self) -> JsonOffsets:
        return to_json_offsets(self._view().start_offsets(self.opts))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        # Trigger.AvailableNow: read up to what is there now, in rate-limited batches
        self._available_now = to_json_offsets(latest_offsets(self._view(), {}, None))

    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        view = self._view()
        begin = from_json_offsets(start)
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = latest_offsets(view, begin, cap)
        if self._available_now is not None:
            ceiling = from_json_offsets(self._available_now)
            end = {k: max(begin.get(k, 0), min(v, ceiling.get(k, begin.get(k, 0)))) for k, v in end.items()}
        return to_json_offsets(end)

    def reportLatestOffset(self) -> JsonOffsets:
        return to_json_offsets(latest_offsets(self._view(), {}, None))

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> list[InputPartition]:
        ranges = plan_ranges(self._view(), from_json_offsets(start), from_json_offsets(end), self.opts)
        return [InputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(partition.value, self.opts)


def _micros(value: object) -> int:
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return (when - _EPOCH) // dt.timedelta(microseconds=1)
    if isinstance(value, dt.date):
        return _micros(dt.datetime(value.year, value.month, value.day, tzinfo=dt.timezone.utc))
    raise TypeError(type(value))


def _ms_bounds(f: Comparison) -> tuple[int, int] | None:
    """Exact store-time bounds in ms for a comparison on a microsecond timestamp.

    Store times are whole milliseconds, so ``ms * 1000 > v`` is ``ms >= v // 1000 + 1``,
    and so on: the pushed filter is fully handled and Spark need not re-check it.
    """
    try:
        v = _micros(f.value)
    except TypeError:
        return None
    ceil = -((-v) // 1000)
    if isinstance(f, GreaterThan):
        return v // 1000 + 1, I64_MAX
    if isinstance(f, GreaterThanOrEqual):
        return ceil, I64_MAX
    if isinstance(f, LessThan):
        return I64_MIN, ceil - 1
    if isinstance(f, LessThanOrEqual):
        return I64_MIN, v // 1000
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return (v // 1000, v // 1000) if v % 1000 == 0 else (1, 0)
    return None


def _offset_bounds(f: Comparison) -> tuple[int, int] | None:
    """[min, max) commitlog offsets for an integer comparison."""
    v = f.value
    if not isinstance(v, int) or isinstance(v, bool):
        return None
    if isinstance(f, GreaterThan):
        return v + 1, I64_MAX
    if isinstance(f, GreaterThanOrEqual):
        return v, I64_MAX
    if isinstance(f, LessThan):
        return 0, v
    if isinstance(f, LessThanOrEqual):
        return 0, v + 1
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return v, v + 1
    return None


def translate_filters(opts: ReadOptions, filters: list[Filter]) -> tuple[ReadOptions, list[Filter]]:
    """Fold the filters this reader handles exactly into the options; return the rest."""
    topics: set[str] | None = None
    ts_lo, ts_hi, off_lo, off_hi = I64_MIN, I64_MAX, 0, I64_MAX
    rest: list[Filter] = []
    for f in filters:
        col = getattr(f, "attribute", None)
        if not isinstance(f, (In, *_COMPARISONS)):  # IsNull, IsNotNull, Not(...), string matches: Spark keeps them
            rest.append(f)
            continue
        if col == ("topic",) and isinstance(f, (EqualTo, EqualNullSafe)) and isinstance(f.value, str):
            wanted = {f.value}
        elif col == ("topic",) and isinstance(f, In) and all(isinstance(v, str) for v in f.value):
            wanted = set(f.value)
        elif col == ("store_timestamp",) and not isinstance(f, In) and (b := _ms_bounds(f)) is not None:
            ts_lo, ts_hi = max(ts_lo, b[0]), min(ts_hi, b[1])
            continue
        elif col == ("commitlog_offset",) and not isinstance(f, In) and (b := _offset_bounds(f)) is not None:
            off_lo, off_hi = max(off_lo, b[0]), min(off_hi, b[1])
            continue
        else:
            rest.append(f)
            continue
        topics = wanted if topics is None else topics & wanted
    narrowed = opts.narrowed(topics=None if topics is None else tuple(sorted(topics)), min_store_ts=ts_lo,
                             max_store_ts=ts_hi, min_offset=max(off_lo, 0), max_offset=off_hi)
    return narrowed, rest


class CommitLogPushdownReader(CommitLogReader):
    """Adds ``pushFilters``: topic =/IN, store_timestamp and commitlog_offset comparisons."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.opts, rest = translate_filters(self.opts, list(filters))
        return rest


def workers_use_this_python(spark: SparkSession) -> bool:
    """In local mode, let Spark's Python workers run this interpreter unless told otherwise.

    Without ``PYSPARK_PYTHON`` (or ``spark.pyspark.python``) Spark starts ``python3`` from
    the PATH for its workers, which in a venv is the system's Python, without mqcore: the
    README's example run as ``.venv/bin/python example.py`` failed in the worker with
    ``No module named 'mqcore'``. On a cluster the driver's path means nothing to the
    executors, so nothing is changed there. True when this interpreter was chosen."""
    sc = spark.sparkContext
    if os.environ.get("PYSPARK_PYTHON") or sc.getConf().get("spark.pyspark.python"):
        return False
    if not (sc.master or "").startswith("local"):
        return False
    sc.pythonExec = sys.executable  # what every Python function registered from now on carries
    os.environ["PYSPARK_PYTHON"] = sys.executable  # and sessions started later in this process
    return True


def register(spark: SparkSession) -> None:
    """Register every reader of this package with a SparkSession (in local mode, with
    this interpreter for the Python workers: ``workers_use_this_python``)."""
    from mqcore.spark.aux_sources import ALL_AUX_SOURCES
    workers_use_this_python(spark)
    spark.dataSource.register(RocketMQDataSource)
    for source in ALL_AUX_SOURCES:
        spark.dataSource.register(source)
