"""Subscriptions and tag expressions (``SubscriptionData``, ``FilterAPI``).

``"TagA || TagB"`` subscribes to two tags, ``"*"`` (or empty) to everything. The
broker filters by tag hash codes (the consume queue's tagsCode); the client filters
again by the tag strings, because different tags can share a hash code. SQL92
expressions are passed to the broker untouched and not re-checked here.

Values only; any thread.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from mqcore.errors import IllegalArgumentError
from mqcore.tags import SUB_ALL, split_tags, subscribes_all, tag_codes

__all__ = ["SUB_ALL", "SubscriptionData", "build_subscription", "parse_tags"]

EXPRESSION_TAG = "TAG"
EXPRESSION_SQL92 = "SQL92"


def parse_tags(expression: str | None) -> tuple[str, ...]:
    """``"A || B"`` -> ``("A", "B")``; ``"*"``/empty -> ``()`` (everything). An expression
    naming no tag (``"||"``) is refused: a subscription that can match nothing is a mistake."""
    tags = split_tags(expression)
    if not tags and not subscribes_all(expression):
        raise IllegalArgumentError(f"tag expression {expression!r} names no tag; use '*' for all")
    return tags


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionData:
    topic: str
    sub_string: str
    tags_set: tuple[str, ...] = ()
    code_set: tuple[int, ...] = ()
    sub_version: int = 0
    expression_type: str = EXPRESSION_TAG
    class_filter_mode: bool = False

    @property
    def subscribes_all(self) -> bool:
        return not self.tags_set

    def matches_tags(self, tags: str | None) -> bool:
        """Client-side re-filter of a pulled message (``processPullResult``)."""
        if self.expression_type != EXPRESSION_TAG or not self.tags_set:
            return True
        return tags is not None and tags in self.tags_set

    def to_json_obj(self) -> dict[str, Any]:
        """HeartbeatData ``subscriptionDataSet`` entry (fastjson bean order)."""
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }


def build_subscription(topic: str, expression: str | None, sub_version: int,
                       expression_type: str = EXPRESSION_TAG) -> SubscriptionData:
    """``FilterAPI.buildSubscriptionData`` (+ SQL92 pass-through)."""
    if expression_type not in (EXPRESSION_TAG, EXPRESSION_SQL92):
        raise IllegalArgumentError(f"expression type must be TAG or SQL92, got {expression_type!r}")
    if expression_type == EXPRESSION_SQL92:
        if not expression or not expression.strip():
            raise IllegalArgumentError("an SQL92 subscription needs an expression")
        return SubscriptionData(topic, expression, sub_version=sub_version, expression_type=EXPRESSION_SQL92)
    tags = parse_tags(expression)
    if not tags:
        return SubscriptionData(topic, SUB_ALL, sub_version=sub_version)
    return SubscriptionData(topic, expression or SUB_ALL, tags,
                            tag_codes(tags), sub_version)
