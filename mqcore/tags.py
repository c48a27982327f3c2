"""Tag expressions (``FilterAPI``): ``"TagA || TagB"``, or ``"*"`` for every tag.

The one parser of the expression a consumer subscribes with, used by the client
(which sends it and re-filters pulled messages by tag string) and by the broker
(which filters consume-queue units by the tags' hash codes). A tag's code is Java's
``String.hashCode`` of it, the tagsCode a consume-queue unit stores.
"""
from __future__ import annotations

from collections.abc import Iterable

from mqcore.format.javahash import string_hash

__all__ = ["SUB_ALL", "subscribes_all", "split_tags", "tag_codes", "unparsable"]

#: the expression that matches every tag
SUB_ALL = "*"


def subscribes_all(expression: str | None) -> bool:
    """True for ``*``, an empty or a blank expression (no filtering at all)."""
    return expression is None or expression.strip() in ("", SUB_ALL)


def split_tags(expression: str | None) -> tuple[str, ...]:
    """The tags an expression names, in order, without blanks or repeats; ``()`` for
    ``*``. An expression of blank tags only (``" || "``) names no tag either: callers
    tell it from ``*`` with :func:`subscribes_all`."""
    if subscribes_all(expression):
        return ()
    tags: list[str] = []
    for part in expression.split("||"):  # type: ignore[union-attr]  # not None: subscribes_all
        tag = part.strip()
        if tag and tag not in tags:
            tags.append(tag)
    return tuple(tags)


def unparsable(expression: str) -> bool:
    """True where RocketMQ's ``FilterAPI`` fails: an expression that splits on ``||``
    into nothing (Java's split drops trailing empty pieces): ``"||"``, ``"||||"``. An
    expression of blank tags (``" || "``) parses, to no tag at all."""
    if expression in ("", SUB_ALL):
        return False
    return all(piece == "" for piece in expression.split("||"))


def tag_codes(tags: Iterable[str]) -> tuple[int, ...]:
    """The consume-queue tagsCode of each tag (``String.hashCode``)."""
    return tuple(string_hash(t) for t in tags)
