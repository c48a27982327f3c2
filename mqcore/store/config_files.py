"""Crash-safe JSON files under ``<store>/config``: writing, reading with a backup, bean mapping.

Why this module exists: a broker's consumer offsets, delay-level progress, topics and
subscription groups live in small JSON files that a Java 4.9 broker must be able to
read after us, and that we must read after a Java broker. The tables themselves are
broker metadata (``mqcore/broker/metadata.py``); this module is the file mechanics
they share. Two details matter:

* **Crash safety** (RocketMQ ``ConfigManager.persist`` / ``MixAll.string2File``):
  ``persist`` writes ``X.tmp`` and fsyncs it, copies the previous ``X`` to ``X.bak``,
  then renames ``X.tmp`` over ``X`` (atomic) and fsyncs the directory. ``load`` reads
  ``X`` and falls back to ``X.bak`` when ``X`` is missing, empty or unparsable, logging
  why. A leftover ``X.tmp`` (crash before the rename) is never read.
* **fastjson quirks**: Java writes ``Map<Integer, Long>`` keys unquoted
  (``{"offsetTable":{"T@g":{0:250}}}``); we read them with the remoting layer's
  tokenizer-aware :func:`~mqcore.jsonutil.loads_lenient`. We always *write*
  standard JSON (quoted keys), in fastjson's pretty shape (:func:`~mqcore.jsonutil.dumps_pretty`).

:class:`JsonTable` is the base of every table: mutations and snapshots take a short
data lock; ``persist`` writes outside it (serialised by its own lock) so an fsync
never blocks ``commit``.
"""
from __future__ import annotations

import dataclasses
import errno
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Self, TypeVar

from mqcore.errors import CorruptFileError, DiskFullError, ProtocolError, StoreIOError
from mqcore.jsonutil import dumps_pretty, loads_lenient

log = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"
BAK_SUFFIX = ".bak"

T = TypeVar("T")
#: errors that mean "this file's content is not what we expect" (so try the backup)
_BAD_CONTENT = (ProtocolError, ValueError, TypeError, KeyError, AttributeError)


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


#: what identifies a file version we wrote ourselves: (inode, size, mtime ns)
Signature = tuple[int, int, int]


def _signature(st: os.stat_result) -> Signature:
    return st.st_ino, st.st_size, st.st_mtime_ns


def persist(path: str, obj: Any, *, ours: Signature | None = None) -> Signature | None:
    """Write ``obj`` (a JSON-able value, or ready text) to ``path`` crash-safely; returns the
    signature of the ``X`` written (None when it cannot be told).

    ``X.tmp`` is written and fsynced first, the previous ``X`` is kept as ``X.bak``
    (only if it parses: a damaged ``X`` must not overwrite a good backup), then
    ``X.tmp`` is renamed over ``X`` and the directory fsynced. At every instant either
    ``X`` or ``X.bak`` holds a complete version.

    ``ours``: the signature this function returned for the last write. When ``X`` still has
    it, ``X`` is the complete version written then, so it is renamed to ``X.bak`` instead of
    being read, parsed and copied there (the same content; between the two renames only
    ``X.bak`` exists, which every loader, RocketMQ's too, falls back to). A table persisted
    on every change (topics.json on each topic created) then costs one write and two fsyncs.
    """
    text = obj if isinstance(obj, str) else dumps_pretty(obj)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        _write_synced(path + TMP_SUFFIX, text.encode("utf-8"))
        try:
            unchanged = ours is not None and _signature(os.stat(path)) == ours
        except FileNotFoundError:
            unchanged = False
        previous = None if unchanged else _read_bytes(path)
        if unchanged:
            os.replace(path, path + BAK_SUFFIX)
        elif previous and previous.strip():
            if _parses(previous):
                _write_synced(path + BAK_SUFFIX + TMP_SUFFIX, previous)
                os.replace(path + BAK_SUFFIX + TMP_SUFFIX, path + BAK_SUFFIX)
            else:
                log.warning("%s does not parse; not copying it over %s%s", path, path, BAK_SUFFIX)
        os.replace(path + TMP_SUFFIX, path)
        _fsync_dir(directory)
        written = _signature(os.stat(path))
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):  # the caller refuses the change as a full disk
            raise DiskFullError(e.errno, f"the disk is full: cannot persist {path}: {e.strerror}") from e
        raise StoreIOError(e.errno, f"cannot persist {path}: {e.strerror or e}") from e
    log.debug("persisted %s (%d bytes)", path, len(text))
    return written


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


def expect_type(value: Any, kind: type, what: str) -> Any:
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not ok:
        raise ValueError(f"{what} should be {kind.__name__}, got {value!r:.60}")
    return value


def as_int_key(key: Any, what: str) -> int:
    """Map keys: unquoted (fastjson) arrive as int, quoted (ours, standard) as str."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and key.lstrip("-").isdigit():
        return int(key)
    raise ValueError(f"{what} key {key!r:.60} is not an integer")


def json_root(value: Any) -> dict:
    return expect_type(value, dict, "the document")


def int_map(value: Any, what: str) -> dict[int, int]:
    return {as_int_key(k, what): expect_type(v, int, f"{what}[{k}]") for k, v in expect_type(value, dict, what).items()}


# --- beans ------------------------------------------------------------------------------------------
def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


_TYPES = {"int": int, "bool": bool, "str": str}


def bean_to_json(obj: Any) -> dict[str, Any]:
    """A dataclass as a fastjson bean: camelCase property names (sorted when written)."""
    return {camel_case(f.name): getattr(obj, f.name) for f in dataclasses.fields(obj)}


def bean_from_json(cls: type[T], value: Any, what: str) -> T:
    """Build ``cls`` from a bean map; missing properties keep defaults, unknown ones
    (5.x ``attributes`` and the like) are ignored, wrong types raise ``ValueError``."""
    data = expect_type(value, dict, what)
    kwargs = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        key = camel_case(f.name)
        if key in data:
            kwargs[f.name] = expect_type(data[key], _TYPES[str(f.type)], f"{what}.{key}")
    return cls(**kwargs)


# --- tables -------------------------------------------------------------------------------------------
class JsonTable:
    """Shared persistence: a data lock for the table, a persist lock for the files."""

    file_name = ""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()
        self._persist_lock = threading.Lock()
        #: the signature of the file this table last wrote (``persist``'s ``ours``)
        self._written: Signature | None = None

    @classmethod
    def in_dir(cls, config_dir: str, **kwargs: Any) -> Self:
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
        return dumps_pretty(value)

    def persist(self) -> None:
        with self._persist_lock:
            self._written = persist(self.path, self.to_json(), ours=self._written)

    def replace_from_json(self, data: str | bytes) -> None:
        """Replace the table with a document in its file's format (a slave's copy of its
        master's table, RocketMQ's SlaveSynchronize) and persist it. Raises ``ProtocolError``
        / ``ValueError`` on a malformed document (the table is left as it was)."""
        self._take_json(data, self._replace_locked)

    def merge_from_json(self, data: str | bytes) -> None:
        """Take a document's entries over this table's, keeping the entries only this table
        has (a slave's copy of its master's consumer offsets: SlaveSynchronize's ``putAll``),
        and persist. Raises as ``replace_from_json``."""
        self._take_json(data, self._merge_locked)

    def _take_json(self, data: str | bytes, apply_locked: Callable[[Any], None]) -> None:
        decoded = self._decode(loads_lenient(data))
        with self._lock:
            apply_locked(decoded)
        self.persist()

    def _merge_locked(self, value: Any) -> None:  # pragma: no cover - overridden where merged
        raise NotImplementedError

    def load(self) -> bool:
        """Replace the table with the file's content; False when there was nothing to load."""
        decoded = load(self.path, self._decode)
        if decoded is None:
            return False
        with self._lock:
            self._replace_locked(decoded)
        return True
