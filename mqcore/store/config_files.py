"""The JSON metadata files under ``<store>/config`` (store-format.md §5.4).

Why this module exists: a broker's consumer offsets, delay-level progress, topics and
subscription groups live in small JSON files that a Java 4.9 broker must be able to
read after us, and that we must read after a Java broker. Two details matter:

* **Crash safety** (RocketMQ ``ConfigManager.persist`` / ``MixAll.string2File``):
  ``persist`` writes ``X.tmp`` and fsyncs it, copies the previous ``X`` to ``X.bak``,
  then renames ``X.tmp`` over ``X`` (atomic) and fsyncs the directory. ``load`` reads
  ``X`` and falls back to ``X.bak`` when ``X`` is missing, empty or unparsable, logging
  why. A leftover ``X.tmp`` (crash before the rename) is never read.
* **fastjson quirks**: Java writes ``Map<Integer, Long>`` keys unquoted
  (``{"offsetTable":{"T@g":{0:250}}}``); we read them with the remoting layer's
  tokenizer-aware :func:`~mqcore.remoting.jsonutil.loads_lenient`. We always *write*
  standard JSON (quoted keys), in fastjson's pretty shape: tab indentation, bean
  properties sorted by name, integer-keyed maps on one line.

The table classes are plain data plus persistence, no broker policy. Each may be used
from any thread: mutations and snapshots take a short data lock; ``persist`` writes
outside it (serialised by its own lock) so an fsync never blocks ``commit``.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from mqcore.errors import CorruptFileError, ProtocolError, StoreIOError
from mqcore.remoting.jsonutil import loads_lenient

log = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"
BAK_SUFFIX = ".bak"

TOPICS_FILE = "topics.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
DELAY_OFFSET_FILE = "delayOffset.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"

#: ``ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR``
TOPIC_GROUP_SEPARATOR = "@"
TOPIC_FILTER_TYPES = ("SINGLE_TAG", "MULTI_TAG")

T = TypeVar("T")
#: errors that mean "this file's content is not what we expect" (so try the backup)
_BAD_CONTENT = (ProtocolError, ValueError, TypeError, KeyError, AttributeError)


# --- writing ------------------------------------------------------------------------------------
def to_json(obj: Any) -> str:
    """fastjson-like pretty JSON: tabs, sorted keys, integer-keyed scalar maps on one line.

    Keys are always quoted (standard JSON); ``int`` keys are written as ``"0"``.
    """
    return "".join(_pretty(obj, 0))


def _scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _sort_key(key: Any) -> tuple[int, Any]:
    return (0, key) if isinstance(key, int) else (1, str(key))


def _pretty(obj: Any, depth: int):
    if not isinstance(obj, dict):
        if isinstance(obj, (list, tuple)):
            yield _scalar(list(obj))
        else:
            yield _scalar(obj)
        return
    if not obj:
        yield "{}"
        return
    keys = sorted(obj, key=_sort_key)
    if all(isinstance(k, int) and not isinstance(obj[k], dict) for k in keys):
        # a Map<Integer, Long> (queue offsets, delay levels): one line, as in §5.4
        yield "{" + ",".join(f'"{k}":{_scalar(obj[k])}' for k in keys) + "}"
        return
    inner = "\t" * (depth + 1)
    yield "{\n"
    for i, k in enumerate(keys):
        yield f"{inner}{_scalar(str(k))}:"
        yield from _pretty(obj[k], depth + 1)
        yield ",\n" if i < len(keys) - 1 else "\n"
    yield "\t" * depth + "}"


def _write_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_bytes(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StoreIOError(e.errno, f"cannot read {path}: {e.strerror}") from e


def _parses(data: bytes) -> bool:
    try:
        loads_lenient(data)
    except ProtocolError:
        return False
    return True


def persist(path: str, obj: Any) -> None:
    """Write ``obj`` (a JSON-able value, or ready text) to ``path`` crash-safely.

    ``X.tmp`` is written and fsynced first, the previous ``X`` is kept as ``X.bak``
    (only if it parses: a damaged ``X`` must not overwrite a good backup), then
    ``X.tmp`` is renamed over ``X`` and the directory fsynced. At every instant either
    ``X`` or ``X.bak`` holds a complete version.
    """
    text = obj if isinstance(obj, str) else to_json(obj)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        _write_synced(path + TMP_SUFFIX, text.encode("utf-8"))
        previous = _read_bytes(path)
        if previous and previous.strip():
            if _parses(previous):
                _write_synced(path + BAK_SUFFIX + TMP_SUFFIX, previous)
                os.replace(path + BAK_SUFFIX + TMP_SUFFIX, path + BAK_SUFFIX)
            else:
                log.warning("%s does not parse; not copying it over %s%s", path, path, BAK_SUFFIX)
        os.replace(path + TMP_SUFFIX, path)
        _fsync_dir(directory)
    except OSError as e:
        raise StoreIOError(e.errno, f"cannot persist {path}: {e.strerror or e}") from e
    log.debug("persisted %s (%d bytes)", path, len(text))


# --- reading ------------------------------------------------------------------------------------
def _identity(value: Any) -> Any:
    return value


def load(path: str, decode: Callable[[Any], T] = _identity) -> T | None:
    """Parse ``path`` (falling back to ``path.bak``) and return ``decode(value)``.

    ``None`` when neither file exists or both are empty (a fresh broker). Raises
    :class:`CorruptFileError` when a file has content but neither yields a valid value:
    starting from nothing would silently reset consumer offsets, so an operator must
    decide (RocketMQ refuses to start in that case too).
    """
    problems: list[str] = []
    damaged = False
    for candidate in (path, path + BAK_SUFFIX):
        data = _read_bytes(candidate)
        if data is None or not data.strip():
            problems.append(f"{candidate} is {'missing' if data is None else 'empty'}")
            continue
        try:
            value = decode(loads_lenient(data))
        except _BAD_CONTENT as e:
            damaged = True
            problems.append(f"{candidate} is unparsable ({e})")
            continue
        if candidate != path:
            log.warning("loaded %s instead: %s", candidate, "; ".join(problems))
        else:
            log.info("loaded %s", candidate)
        return value
    if damaged:
        raise CorruptFileError("; ".join(problems) + ". Repair or remove the files to start from an empty table.")
    log.info("%s: nothing to load (%s)", path, "; ".join(problems))
    return None


def _expect(value: Any, kind: type, what: str) -> Any:
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise ValueError(f"{what} should be {kind.__name__}, got {value!r:.60}")
    return value


def _as_int_key(key: Any, what: str) -> int:
    """Map keys: unquoted (fastjson) arrive as int, quoted (ours, standard) as str."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and key.lstrip("-").isdigit():
        return int(key)
    raise ValueError(f"{what} key {key!r:.60} is not an integer")


def _root(value: Any) -> dict:
    return _expect(value, dict, "the document")


def _int_map(value: Any, what: str) -> dict[int, int]:
    return {_as_int_key(k, what): _expect(v, int, f"{what}[{k}]") for k, v in _expect(value, dict, what).items()}


# --- beans ------------------------------------------------------------------------------------------
def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


_TYPES = {"int": int, "bool": bool, "str": str}


def bean_to_json(obj: Any) -> dict[str, Any]:
    """A dataclass as a fastjson bean: camelCase property names (sorted when written)."""
    return {_camel(f.name): getattr(obj, f.name) for f in dataclasses.fields(obj)}


def bean_from_json(cls: type[T], value: Any, what: str) -> T:
    """Build ``cls`` from a bean map; missing properties keep defaults, unknown ones
    (5.x ``attributes`` and the like) are ignored, wrong types raise ``ValueError``."""
    data = _expect(value, dict, what)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = _camel(f.name)
        if key in data:
            kwargs[f.name] = _expect(data[key], _TYPES[str(f.type)], f"{what}.{key}")
    return cls(**kwargs)


@dataclasses.dataclass
class DataVersion:
    """``DataVersion``: bumped on every change so peers can tell tables apart."""

    counter: int = 0
    timestamp: int = 0

    def next(self, now_ms: int) -> None:
        self.counter += 1
        self.timestamp = now_ms


@dataclasses.dataclass
class TopicConfig:
    """``TopicConfig`` (common/TopicConfig.java); defaults are the Java constructor's."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def __post_init__(self) -> None:
        if self.topic_filter_type not in TOPIC_FILTER_TYPES:
            raise ValueError(f"topicFilterType {self.topic_filter_type!r} is not one of {TOPIC_FILTER_TYPES}")


@dataclasses.dataclass
class SubscriptionGroupConfig:
    """``SubscriptionGroupConfig`` (4.9 fields); defaults are the Java field initialisers."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- tables -------------------------------------------------------------------------------------------
class _JsonTable:
    """Shared persistence: a data lock for the table, a persist lock for the files."""

    file_name = ""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()

    @classmethod
    def in_dir(cls, config_dir: str, **kwargs: Any):
        """The table at its standard name inside ``<store>/config``."""
        return cls(os.path.join(config_dir, cls.file_name), **kwargs)

    def to_json_value(self) -> dict:  # pragma: no cover - overridden
        raise NotImplementedError

    def _replace_locked(self, value: Any) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _decode(self, value: Any) -> Any:  # pragma: no cover - overridden
        raise NotImplementedError

    def to_json(self) -> str:
        with self._lock:
            value = self.to_json_value()
        return to_json(value)

    def persist(self) -> None:
        with self._persist_lock:
            persist(self.path, self.to_json())

    def load(self) -> bool:
        """Replace the table with the file's content; False when there was nothing to load."""
        decoded = load(self.path, self._decode)
        if decoded is None:
            return False
        with self._lock:
            self._replace_locked(decoded)
        return True


class ConsumerOffsetTable(_JsonTable):
    """``consumerOffset.json``: ``topic@group`` -> {queue id: next offset to consume}."""

    file_name = CONSUMER_OFFSET_FILE

    def __init__(self, path: str):
        super().__init__(path)
        self._table: dict[str, dict[int, int]] = {}

    @staticmethod
    def key(group: str, topic: str) -> str:
        return f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record a committed offset; negative offsets (a client's "unknown") are ignored."""
        if offset < 0:
            return
        with self._lock:
            self._table.setdefault(self.key(group, topic), {})[queue_id] = offset

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        with self._lock:
            return self._table.get(self.key(group, topic), {}).get(queue_id)

    def query_queues(self, group: str, topic: str) -> dict[int, int]:
        with self._lock:
            return dict(self._table.get(self.key(group, topic), {}))

    def remove(self, group: str, topic: str) -> None:
        with self._lock:
            self._table.pop(self.key(group, topic), None)

    def snapshot(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {k: dict(v) for k, v in self._table.items()}

    def to_json_value(self) -> dict:
        return {"offsetTable": {k: dict(v) for k, v in self._table.items()}}

    def _decode(self, value: Any) -> dict[str, dict[int, int]]:
        table = _expect(_root(value).get("offsetTable", {}), dict, "offsetTable")
        out = {}
        for key, queues in table.items():
            if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key:
                raise ValueError(f"offsetTable key {key!r:.60} is not topic@group")
            out[key] = _int_map(queues, f"offsetTable[{key}]")
        return out

    def _replace_locked(self, value: dict[str, dict[int, int]]) -> None:
        self._table = value


class DelayOffsetTable(_JsonTable):
    """``delayOffset.json``: delay level -> next SCHEDULE_TOPIC_XXXX queue offset to deliver."""

    file_name = DELAY_OFFSET_FILE

    def __init__(self, path: str):
        super().__init__(path)
        self._table: dict[int, int] = {}

    def update(self, level: int, offset: int) -> None:
        with self._lock:
            self._table[level] = offset

    def query(self, level: int) -> int | None:
        with self._lock:
            return self._table.get(level)

    def snapshot(self) -> dict[int, int]:
        with self._lock:
            return dict(self._table)

    def to_json_value(self) -> dict:
        return {"offsetTable": dict(self._table)}

    def _decode(self, value: Any) -> dict[int, int]:
        return _int_map(_root(value).get("offsetTable", {}), "offsetTable")

    def _replace_locked(self, value: dict[int, int]) -> None:
        self._table = value


BeanT = TypeVar("BeanT", TopicConfig, SubscriptionGroupConfig)


class _VersionedBeanTable(_JsonTable, Generic[BeanT]):
    """``{"dataVersion": {...}, "<table_key>": {name: bean}}``; changes bump dataVersion."""

    table_key = ""
    bean_cls: type
    name_attr = ""

    def __init__(self, path: str, *, clock: Callable[[], int] = _now_ms):
        super().__init__(path)
        self.clock = clock
        self.data_version = DataVersion()
        self._table: dict[str, BeanT] = {}

    def get(self, name: str) -> BeanT | None:
        with self._lock:
            bean = self._table.get(name)
            return dataclasses.replace(bean) if bean is not None else None

    def put(self, bean: BeanT) -> None:
        with self._lock:
            self._table[getattr(bean, self.name_attr)] = dataclasses.replace(bean)
            self.data_version.next(self.clock())

    def remove(self, name: str) -> bool:
        with self._lock:
            if self._table.pop(name, None) is None:
                return False
            self.data_version.next(self.clock())
            return True

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._table)

    def snapshot(self) -> dict[str, BeanT]:
        with self._lock:
            return {k: dataclasses.replace(v) for k, v in self._table.items()}

    def to_json_value(self) -> dict:
        return {"dataVersion": bean_to_json(self.data_version),
                self.table_key: {k: bean_to_json(v) for k, v in self._table.items()}}

    def _decode(self, value: Any) -> tuple[DataVersion, dict[str, BeanT]]:
        root = _root(value)
        version = bean_from_json(DataVersion, root.get("dataVersion", {}), "dataVersion")
        table = {}
        for name, raw in _expect(root.get(self.table_key, {}), dict, self.table_key).items():
            what = f"{self.table_key}[{name}]"
            if isinstance(raw, dict) and _camel(self.name_attr) not in raw:
                raw = {**raw, _camel(self.name_attr): name}
            table[str(name)] = bean_from_json(self.bean_cls, raw, what)
        return version, table

    def _replace_locked(self, value: tuple[DataVersion, dict[str, BeanT]]) -> None:
        self.data_version, self._table = value


class TopicConfigTable(_VersionedBeanTable[TopicConfig]):
    """``topics.json`` (``TopicConfigSerializeWrapper``): topic name -> ``TopicConfig``."""

    file_name = TOPICS_FILE
    table_key = "topicConfigTable"
    bean_cls = TopicConfig
    name_attr = "topic_name"


class SubscriptionGroupTable(_VersionedBeanTable[SubscriptionGroupConfig]):
    """``subscriptionGroup.json``: group name -> ``SubscriptionGroupConfig``."""

    file_name = SUBSCRIPTION_GROUP_FILE
    table_key = "subscriptionGroupTable"
    bean_cls = SubscriptionGroupConfig
    name_attr = "group_name"
