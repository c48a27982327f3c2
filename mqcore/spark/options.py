"""Options of the ``rocketmq`` reader, parsed once into a frozen dataclass.

Spark hands a data source its options as a case-insensitive string map. They are
turned into typed values here so the planner and the executors share one meaning, and
unknown names fail loudly (a typo such as ``topcis`` would otherwise read everything).
Pushed-down Spark filters narrow the same fields (``narrowed``), so options and
filters are two spellings of one thing and work with or without
``spark.sql.python.filterPushdown.enabled``.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any, Mapping

from mqcore.errors import ConfigError

I64_MIN = -(1 << 63)
I64_MAX = (1 << 63) - 1

_SIZE = re.compile(r"^\s*([0-9]+)\s*([kmgt]?)(i?b)?\s*$", re.I)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}

#: option name (lower case) -> (field, parser, help)
_DOC = {
    "path": "store root or commitlog directory (what .load(path) passes)",
    "commitlogpath": "the commitlog directory when it is not the root's commitlog/ (the broker's "
                     "storePathCommitLog; found by itself in the root's config/storePaths.json when mqbroker wrote it)",
    "topics": "comma-separated topics to read (also 'topic')",
    "starttime": "earliest store time: epoch ms or ISO-8601 (UTC when no zone), inclusive",
    "endtime": "latest store time, inclusive",
    "startoffset": "first commitlog offset, inclusive",
    "endoffset": "commitlog offset to stop before, exclusive",
    "columns": "comma-separated columns to produce (default: all); the rest is never built nor sent to Spark",
    "includebody": "false leaves body null and skips copying body bytes (default true)",
    "decompress": "inflate compressed bodies (zlib; LZ4 and Zstandard when their package is installed; default false)",
    "verifycrc": "check BODYCRC; a mismatch is a corrupt record (default false)",
    "oncorrupt": "fail (default) or skip: read past damage (a corrupt or torn record, a missing commitlog file, "
                 "consume queues pointing past the log) and log a report of it",
    "splitsize": "byte-range split size (default 64m, so files spread over cores); 0 = one partition per file",
    "maxrowsperbatch": "rows per Arrow batch (default 131072)",
    "batchsize": "record bytes per Arrow batch (default 32m)",
    "useconsumequeue": "auto (default), true or false: read a topic's records via its consume queues",
    "pushdown": "auto (default), true or false: accept Spark filter pushdown",
    "snapshotoffset": "read up to this commitlog offset instead of the live end (repeatable reads)",
    "timeslackms": "clock slack when pruning files by store time (default 60000)",
    "fs.*": "for a remote store URI: a keyword of the pyarrow file system's constructor, e.g. for S3 "
            "fs.endpoint_override, fs.access_key, fs.secret_key, fs.region, fs.scheme",
}
_FS_PREFIX = "fs."


def parse_bool(name: str, value: str) -> bool:
    v = str(value).strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise ConfigError(f"option {name}: {value!r} is not true/false")


def parse_size(name: str, value: str) -> int:
    m = _SIZE.match(str(value))
    if not m:
        raise ConfigError(f"option {name}: {value!r} is not a size such as 134217728, 128m or 1g")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def parse_int(name: str, value: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError as e:
        raise ConfigError(f"option {name}: {value!r} is not an integer") from e


def parse_time_ms(name: str, value: object) -> int:
    """Epoch milliseconds from an int, a digit string, an ISO-8601 text or a datetime."""
    if isinstance(value, dt.datetime):
        when = value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
        return int(when.timestamp() * 1000)
    text = str(value).strip()
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise ConfigError(f"option {name}: {value!r} is neither epoch milliseconds nor an ISO-8601 time") from e
    return parse_time_ms(name, when)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    v = str(value).strip().lower()
    if v not in allowed:
        raise ConfigError(f"option {name}: {value!r} is not one of {', '.join(allowed)}")
    return v


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """Typed options; ranges are inclusive store times (ms) and [min, max) offsets."""

    path: str = ""
    commit_log_path: str | None = None
    topics: tuple[str, ...] | None = None
    min_store_ts: int = I64_MIN
    max_store_ts: int = I64_MAX
    min_offset: int = 0
    max_offset: int = I64_MAX
    include_body: bool = True
    decompress: bool = False
    verify_crc: bool = False
    on_corrupt: str = "fail"
    # 64 MiB splits: 3 files of 128 MiB on 2 cores become 6 tasks, not 2 + 1 with a core idle;
    # big batches: Spark's Arrow ingestion pays per batch, and wide batches amortise it
    split_size: int = 64 << 20
    max_rows_per_batch: int = 131072
    max_bytes_per_batch: int = 32 << 20
    use_consume_queue: str = "auto"
    pushdown: str = "auto"
    snapshot_offset: int | None = None
    time_slack_ms: int = 60_000
    fs_options: tuple[tuple[str, str], ...] = ()
    columns: tuple[str, ...] | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> "ReadOptions":
        kw: dict[str, Any] = {}  # ReadOptions fields of several types, each parsed by _parse_one
        fs: dict[str, str] = {}  # remote file system settings, passed on to pyarrow
        for raw_name, value in options.items():
            name = raw_name.lower()
            if name == "topic":
                name = "topics"
            if name.startswith(_FS_PREFIX) and len(name) > len(_FS_PREFIX):
                fs[name[len(_FS_PREFIX):]] = str(value)
                continue
            if name not in _DOC:
                raise ConfigError(f"unknown option {raw_name!r} for format rocketmq; known options:\n"
                                  + "\n".join(f"  {k}: {v}" for k, v in _DOC.items()))
            kw.update(_parse_one(name, value))
        return cls(**kw, fs_options=tuple(sorted(fs.items())))

    def __post_init__(self) -> None:
        if self.max_rows_per_batch < 1 or self.max_bytes_per_batch < 1:
            raise ConfigError("maxRowsPerBatch and batchSize must be positive")
        if self.split_size < 0:
            raise ConfigError("splitSize must be >= 0")

    @property
    def is_empty(self) -> bool:
        """The ranges or the topic list exclude every record."""
        return (self.min_store_ts > self.max_store_ts or self.min_offset >= self.max_offset
                or (self.topics is not None and not self.topics))

    def narrowed(self, *, topics: tuple[str, ...] | None = None, min_store_ts: int = I64_MIN,
                 max_store_ts: int = I64_MAX, min_offset: int = 0, max_offset: int = I64_MAX) -> "ReadOptions":
        """Intersect with more conditions (pushed-down filters): every condition holds."""
        if topics is not None:
            topics = tuple(t for t in topics if self.topics is None or t in self.topics)
        return dataclasses.replace(
            self,
            topics=self.topics if topics is None else topics,
            min_store_ts=max(self.min_store_ts, min_store_ts),
            max_store_ts=min(self.max_store_ts, max_store_ts),
            min_offset=max(self.min_offset, min_offset),
            max_offset=min(self.max_offset, max_offset),
        )


def _parse_one(name: str, value: str) -> dict[str, Any]:
    if name == "path":
        return {"path": str(value)}
    if name == "topics":
        return {"topics": tuple(t.strip() for t in str(value).split(",") if t.strip())}
    if name == "columns":
        return {"columns": tuple(c.strip().lower() for c in str(value).split(",") if c.strip())}
    if name == "starttime":
        return {"min_store_ts": parse_time_ms(name, value)}
    if name == "endtime":
        return {"max_store_ts": parse_time_ms(name, value)}
    if name == "startoffset":
        return {"min_offset": parse_int(name, value)}
    if name == "endoffset":
        return {"max_offset": parse_int(name, value)}
    if name in ("includebody", "decompress", "verifycrc"):
        field = {"includebody": "include_body", "decompress": "decompress", "verifycrc": "verify_crc"}[name]
        return {field: parse_bool(name, value)}
    if name == "oncorrupt":
        return {"on_corrupt": _choice(name, value, ("fail", "skip"))}
    if name == "splitsize":
        return {"split_size": parse_size(name, value)}
    if name == "maxrowsperbatch":
        return {"max_rows_per_batch": parse_int(name, value)}
    if name == "batchsize":
        return {"max_bytes_per_batch": parse_size(name, value)}
    if name == "useconsumequeue":
        return {"use_consume_queue": _choice(name, value, ("auto", "true", "false"))}
    if name == "pushdown":
        return {"pushdown": _choice(name, value, ("auto", "true", "false"))}
    if name == "snapshotoffset":
        return {"snapshot_offset": parse_int(name, value)}
    if name == "commitlogpath":
        return {"commit_log_path": str(value) or None}
    if name == "timeslackms":
        return {"time_slack_ms": parse_int(name, value)}
    raise ConfigError(f"option {name} is documented but not parsed")  # pragma: no cover
