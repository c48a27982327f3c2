"""The character rule for topic and group names (RocketMQ's ``TopicValidator``).

Names are 1..127 (topics, ``layout.MAX_TOPIC_LENGTH``) or 1..255 (groups) characters of
``[%|a-zA-Z0-9_-]``. The client, the broker's request guard and the store's own check all
ask this module; each words its refusal as its peer in RocketMQ does.
"""
from __future__ import annotations

import re
import string

#: the allowed characters, as RocketMQ's error remarks spell them
NAME_CHARS_TEXT = "[%|a-zA-Z0-9_-]"
NAME_PATTERN = re.compile(NAME_CHARS_TEXT + "+")
_NAME_BYTES = frozenset(("%|_-" + string.ascii_letters + string.digits).encode())
MAX_GROUP_LENGTH = 255


def valid_name_chars(name: str) -> bool:
    """Whether ``name`` is non-empty and every character is allowed."""
    return NAME_PATTERN.fullmatch(name) is not None


def valid_name_bytes(name: bytes) -> bool:
    """``valid_name_chars`` of an encoded name (the store's check, without decoding)."""
    return bool(name) and _NAME_BYTES.issuperset(name)
