"""Tag expressions (FilterAPI.buildSubscriptionData)."""
from __future__ import annotations

import pytest

from mqcore.client.consumer.subscription import build_subscription, parse_tags
from mqcore.errors import IllegalArgumentError


def test_parse_tags():
    assert parse_tags("TagA || TagB") == ("TagA", "TagB")
    assert parse_tags(" TagA||TagB ||  TagA ") == ("TagA", "TagB")
    assert parse_tags("*") == () and parse_tags("") == () and parse_tags(None) == ()
    with pytest.raises(IllegalArgumentError):
        parse_tags("||")


def test_subscription_codes_and_heartbeat_json():
    sub = build_subscription("T", "TagA || TagB", 1700000000000)
    assert sub.tags_set == ("TagA", "TagB") and sub.code_set == (2598919, 2598920)
    assert sub.to_json_obj() == {"classFilterMode": False, "codeSet": [2598919, 2598920], "expressionType": "TAG",
                                 "subString": "TagA || TagB", "subVersion": 1700000000000,
                                 "tagsSet": ["TagA", "TagB"], "topic": "T"}
    all_ = build_subscription("T", "*", 1)
    assert all_.subscribes_all and all_.sub_string == "*" and all_.to_json_obj()["codeSet"] == []


def test_client_side_filter():
    sub = build_subscription("T", "A || B", 1)
    assert sub.matches_tags("A") and sub.matches_tags("B")
    assert not sub.matches_tags("C") and not sub.matches_tags(None)
    assert build_subscription("T", "*", 1).matches_tags(None)
    sql = build_subscription("T", "a > 5", 1, "SQL92")
    assert sql.expression_type == "SQL92" and sql.matches_tags("anything")
    with pytest.raises(IllegalArgumentError):
        build_subscription("T", "x", 1, "XPATH")
