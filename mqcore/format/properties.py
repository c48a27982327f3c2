"""Message property strings (``MessageDecoder.messageProperties2String`` / ``string2messageProperties``).

On disk and on the wire properties are ``name U+0001 value`` segments joined by U+0002,
with no trailing separator. Reading is tolerant, as in Java: a segment without a name or
without a value is skipped. The Cython kernels walk the same grammar in C
(``_next_property`` in ``_store.pyx``); ``tests/test_layout.py`` checks they agree.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from mqcore.format.layout import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

#: the two separators as text (the byte forms are ``layout.NAME_VALUE_SEPARATOR`` / ``PROPERTY_SEPARATOR``)
NAME_VALUE_SEPARATOR_TEXT = NAME_VALUE_SEPARATOR.decode()
PROPERTY_SEPARATOR_TEXT = PROPERTY_SEPARATOR.decode()
_NV = NAME_VALUE_SEPARATOR_TEXT
_SEP = PROPERTY_SEPARATOR_TEXT


def property_spans(raw: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """(name at, name length, value at, value length) of each valid segment of ``raw[start:end]``.

    Positions are absolute in ``raw``; duplicates are all reported, in order (readers
    that keep one value keep the last, as Java's HashMap.put does).
    """
    end = len(raw) if end is None else end
    p = start
    while p < end:
        q = raw.find(PROPERTY_SEPARATOR, p, end)
        if q < 0:
            q = end
        k = raw.find(NAME_VALUE_SEPARATOR, p, q)
        if p < k < q - 1:
            yield p, k - p, k + 1, q - k - 1
        p = q + 1


def split_properties(raw: bytes) -> list[tuple[bytes, bytes]]:
    """Valid (name, value) pairs; a repeated name keeps only its last occurrence (at its position)."""
    pairs = [(raw[n:n + nl], raw[v:v + vl]) for n, nl, v, vl in property_spans(raw)]
    names = [p[0] for p in pairs]
    return [p for i, p in enumerate(pairs) if p[0] not in names[i + 1:]]


def parse_properties(s: str | bytes | bytearray | memoryview | None) -> dict[str, str]:
    """``string2messageProperties``: a dict; invalid UTF-8 is replaced, not an error."""
    if not s:
        return {}
    if isinstance(s, (bytes, bytearray, memoryview)):
        s = bytes(s).decode("utf-8", "replace")
    out: dict[str, str] = {}
    for seg in s.split(_SEP):
        i = seg.find(_NV)
        if 0 < i < len(seg) - 1:
            out[seg[:i]] = seg[i + 1:]
    return out


def format_properties(props: Mapping[str, str]) -> str:
    """``messageProperties2String``: ``None`` values are left out."""
    return _SEP.join(f"{k}{_NV}{v}" for k, v in props.items() if v is not None)


def has_separator(text: str) -> bool:
    """Whether a property name or value holds a separator (it would split differently when read)."""
    return _NV in text or _SEP in text


def separators_only_between(raw: bytes, count: int) -> bool:
    """Whether the encoding of ``count`` properties holds exactly the separators its shape
    needs, i.e. no name or value contains one (so a reader finds the same pairs)."""
    return raw.count(NAME_VALUE_SEPARATOR) == count and raw.count(PROPERTY_SEPARATOR) == max(count - 1, 0)


def format_pair(name: str, value: object) -> str:
    """One ``name U+0001 value`` segment."""
    return f"{name}{_NV}{value}"


def join_property_strings(first: bytes, second: bytes) -> bytes:
    """Two encoded property strings as one (a U+0002 between them when both are non-empty)."""
    if not first:
        return bytes(second)
    if not second:
        return bytes(first)
    return bytes(first) + PROPERTY_SEPARATOR + bytes(second)
