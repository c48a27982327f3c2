"""JSON the way Java RocketMQ peers write and read it.

Three needs drive this module (remoting-protocol.md §2.1, §6):

* header *strings* must be escaped exactly as fastjson escapes them, so our frames are
  byte-identical to a Java peer's (the golden vectors pin this);
* bodies from Java peers may use fastjson's non-standard map keys (unquoted integers,
  even JSON objects) which every strict parser rejects: :func:`loads_lenient`;
* Java ``HashMap`` iteration order is what a Java peer emits for maps; some callers
  (tests, byte-exact broker responses) want to reproduce it: :func:`java_hashmap_order`.

``orjson`` is used for strict parsing when installed; the stdlib is the fallback.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from json.decoder import scanstring  # type: ignore[attr-defined]  # public in the module, absent from typeshed
from json.scanner import py_make_scanner  # type: ignore[attr-defined]
from typing import Any, TypeVar

from mqcore.errors import ProtocolError
from mqcore.format.javahash import string_hash

_orjson: Any
try:  # optional speed-up; the stdlib path gives the same results
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

__all__ = [
    "fastjson_quote",
    "loads_strict",
    "loads_lenient",
    "dumps_compact",
    "java_hashmap_order",
    "java_hash_order",
]

# --- fastjson string writer -----------------------------------------------------------
# fastjson SerializeWriter: U+0000-0007, 000B, 000E-001F, 007F-009F as \uXXXX with
# uppercase hex; \b \t \n \f \r \" \\ as short escapes; everything else raw UTF-8.
# Lone surrogates cannot be UTF-8 encoded, so we escape them too (valid JSON either way).
_SHORT_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}
_NEEDS_ESCAPE = re.compile('[\x00-\x1f"\\\\\x7f-\x9f\ud800-\udfff]')


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group()
    short = _SHORT_ESCAPES.get(ch)
    return short if short is not None else "\\u%04X" % ord(ch)


def fastjson_quote(text: str) -> str:
    """Return ``text`` as a JSON string literal, escaped exactly like fastjson."""
    if _NEEDS_ESCAPE.search(text) is None:
        return '"' + text + '"'
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'


# --- strict parsing ---------------------------------------------------------------------
def _as_text(data: str | bytes | bytearray | memoryview) -> str:
    if isinstance(data, str):
        return data
    try:
        # surrogatepass: a peer that wrote a lone surrogate still gets parsed, as Java would
        return bytes(data).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as e:
        raise ProtocolError(f"JSON text is not valid UTF-8: {e}") from e


def loads_strict(data: str | bytes | bytearray | memoryview) -> Any:
    """Parse standard JSON; any failure is a :class:`ProtocolError`.

    orjson is tried first (fast); on failure the stdlib parser gets a second look
    because it accepts a few valid inputs orjson refuses (escaped lone surrogates,
    integers beyond 64 bits).
    """
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except (ValueError, TypeError):
            pass  # fall through to the stdlib, which is more permissive
    text = _as_text(data)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"malformed JSON: {e}") from e


def dumps_compact(obj: Any, *, sort_keys: bool = True) -> bytes:
    """Standard compact JSON (UTF-8, no spaces, sorted keys like fastjson beans)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys).encode(
        "utf-8", "surrogatepass"
    )


# --- lenient parsing (fastjson map keys) -----------------------------------------------
_WS = re.compile(r"[ \t\n\r]*")
_INT_KEY = re.compile(r"-?[0-9]+")


def _skip_ws(s: str, pos: int) -> int:
    m = _WS.match(s, pos)
    return m.end() if m is not None else pos


class _LenientDecoder(json.JSONDecoder):
    """A JSONDecoder whose object parser also accepts fastjson's non-string keys.

    It reuses the stdlib's tokenizer (``scanstring``, number and literal scanning), so
    digits inside strings are never touched; only the *key position* of an object is
    widened to accept an unquoted integer (-> ``int`` key) or a nested object/array
    (-> a hashable tuple of its sorted items, for ``Map<MessageQueue, …>``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.parse_object = self._parse_object
        self.scan_once = py_make_scanner(self)  # the pure-Python scanner honours parse_object

    def _parse_key(self, s: str, end: int, scan_once: Any, strict: bool) -> tuple[Any, int]:
        ch = s[end : end + 1]
        if ch == '"':
            key, end = scanstring(s, end + 1, strict)
            return key, end
        if ch == "-" or ch.isdigit():
            m = _INT_KEY.match(s, end)
            if m is None:
                raise json.JSONDecodeError("Expecting property name", s, end)
            return int(m.group()), m.end()
        if ch in ("{", "["):
            value, end = scan_once(s, end)
            return _hashable(value), end
        raise json.JSONDecodeError("Expecting property name", s, end)

    def _parse_object(self, s_and_end: tuple[str, int], strict: bool, scan_once: Any, object_hook: Any,
                      object_pairs_hook: Any, memo: Any = None) -> tuple[dict[Any, Any], int]:
        s, end = s_and_end
        result: dict[Any, Any] = {}
        end = _skip_ws(s, end)
        if s[end : end + 1] == "}":
            return result, end + 1
        while True:
            key, end = self._parse_key(s, end, scan_once, strict)
            end = _skip_ws(s, end)
            if s[end : end + 1] != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", s, end)
            end = _skip_ws(s, end + 1)
            try:
                value, end = scan_once(s, end)
            except StopIteration as err:
                raise json.JSONDecodeError("Expecting value", s, err.value) from None
            result[key] = value
            end = _skip_ws(s, end)
            ch = s[end : end + 1]
            if ch == "}":
                return result, end + 1
            if ch != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", s, end)
            end = _skip_ws(s, end + 1)


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted(((k, _hashable(v)) for k, v in value.items()), key=lambda kv: repr(kv[0])))
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def loads_lenient(data: str | bytes | bytearray | memoryview) -> Any:
    """Parse JSON written by fastjson, including its non-standard map keys.

    * ``{"brokerAddrs":{0:"a",1:"b"}}`` -> ``{"brokerAddrs": {0: "a", 1: "b"}}``:
      unquoted integer keys become ``int`` keys; quoted keys stay ``str`` (callers that
      know a map is ``Map<Long,…>`` normalise with ``int(k)``).
    * ``{"offsetTable":{{"brokerName":"a","queueId":0,"topic":"t"}:12}}``: an object key
      becomes a tuple of its (key, value) pairs sorted by key.

    Standard JSON takes the fast strict path; only text the strict parser rejects goes
    through the (slower, pure-Python) lenient scanner. Malformed input raises
    :class:`ProtocolError`.
    """
    try:
        return loads_strict(data)
    except ProtocolError:
        pass  # not standard JSON: retry with fastjson's extensions below
    text = _as_text(data)
    decoder = _LenientDecoder()
    try:
        value, end = decoder.raw_decode(text, _skip_ws(text, 0))
    except (ValueError, RecursionError) as e:
        raise ProtocolError(f"malformed JSON: {e}") from e
    if _skip_ws(text, end) != len(text):
        raise ProtocolError(f"malformed JSON: extra data at character {end}")
    return value


# --- Java HashMap order -------------------------------------------------------------------
_HASHMAP_DEFAULT_CAPACITY = 16
T = TypeVar("T")
_HASHMAP_LOAD_FACTOR = 0.75


def java_hashmap_order(items: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Reorder ``items`` as a ``java.util.HashMap<String,…>`` filled in this order iterates.

    Java iterates bucket by bucket (index ``(h ^ h>>>16) & (capacity-1)``), and within a
    bucket in insertion order; resizes preserve that relative order. (Treeified buckets,
    8+ colliding keys, are not modelled.) Used to emit extFields byte-identical to Java.
    """
    pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
    return dict(java_hash_order(pairs, lambda pair: string_hash(pair[0])))


def java_hash_order(items: list[T], hash_of: Callable[[T], int]) -> list[T]:
    """``items`` in the order a ``java.util.HashMap`` (or ``HashSet``) filled with them in this
    order iterates, each keyed by the Java ``hashCode`` ``hash_of`` gives (as in
    :func:`java_hashmap_order`)."""
    capacity = _HASHMAP_DEFAULT_CAPACITY
    while len(items) > capacity * _HASHMAP_LOAD_FACTOR:
        capacity *= 2

    def bucket(item: T) -> int:
        h = hash_of(item) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(items, key=bucket)  # sorted() is stable: insertion order per bucket


# --- pretty writer (the <store>/config files) ---------------------------------------------------
def dumps_pretty(obj: Any) -> str:
    """fastjson-like pretty JSON: tabs, sorted keys, integer-keyed scalar maps on one line.

    Keys are always quoted (standard JSON); ``int`` keys are written as ``"0"``.
    """
    return "".join(_pretty(obj, 0))


def dumps_pretty_at(obj: Any, depth: int) -> str:
    """``dumps_pretty`` of a value nested ``depth`` levels deep in a larger document (its
    inner lines indented for that depth), so a table can keep its entries' text and join it."""
    return "".join(_pretty(obj, depth))


def _pretty_scalar(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _pretty_sort_key(key: Any) -> tuple[int, Any]:
    return (0, key) if isinstance(key, int) else (1, str(key))


def _pretty(obj: Any, depth: int) -> Iterator[str]:
    if not isinstance(obj, dict):
        if isinstance(obj, (list, tuple)):
            yield _pretty_scalar(list(obj))
        else:
            yield _pretty_scalar(obj)
        return
    if not obj:
        yield "{}"
        return
    keys = sorted(obj, key=_pretty_sort_key)
    if all(isinstance(k, int) and not isinstance(obj[k], dict) for k in keys):
        # a Map<Integer, Long> (queue offsets, delay levels): one line, as in §5.4
        yield "{" + ",".join(f'"{k}":{_pretty_scalar(obj[k])}' for k in keys) + "}"
        return
    inner = "\t" * (depth + 1)
    yield "{\n"
    for i, k in enumerate(keys):
        yield f"{inner}{_pretty_scalar(str(k))}:"
        yield from _pretty(obj[k], depth + 1)
        yield ",\n" if i < len(keys) - 1 else "\n"
    yield "\t" * depth + "}"
