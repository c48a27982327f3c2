"""Validation before the network."""
from __future__ import annotations

import pytest

from mqcore.client.message import Message
from mqcore.client.validators import check_batch, check_message
from mqcore.errors import IllegalArgumentError

MAX = 4 * 1024 * 1024


@pytest.mark.parametrize("topic", ["", " ", "a b", "tópico", "x" * 128, "SCHEDULE_TOPIC_XXXX"])
def test_bad_topics(topic):
    with pytest.raises(IllegalArgumentError):
        check_message(Message(topic, b"x"), MAX)


@pytest.mark.parametrize("topic", ["T", "%RETRY%g", "a|b", "A-b_9", "x" * 127])
def test_good_topics(topic):
    check_message(Message(topic, b"x"), MAX)


def test_body_rules():
    with pytest.raises(IllegalArgumentError, match="empty"):
        check_message(Message("T", b""), MAX)
    with pytest.raises(IllegalArgumentError, match="over the limit"):
        check_message(Message("T", b"x" * 11), 10)
    check_message(Message("T", b"x" * 10), 10)


def test_delay_level_range():
    check_message(Message("T", b"x", delay_level=18), MAX)
    for bad in ("19", "-1", "abc"):
        m = Message("T", b"x")
        m.properties["DELAY"] = bad
        with pytest.raises(IllegalArgumentError, match="delay level"):
            check_message(m, MAX)


def test_batch_rules():
    check_batch([Message("T", b"1"), Message("T", b"2")], MAX)
    with pytest.raises(IllegalArgumentError):
        check_batch([], MAX)
    with pytest.raises(IllegalArgumentError, match="same topic"):
        check_batch([Message("T", b"1"), Message("U", b"2")], MAX)
    with pytest.raises(IllegalArgumentError, match="delayed"):
        check_batch([Message("T", b"1", delay_level=2)], MAX)
    with pytest.raises(IllegalArgumentError, match="retry"):
        check_batch([Message("%RETRY%g", b"1")], MAX)
    with pytest.raises(IllegalArgumentError, match="wait_store"):
        check_batch([Message("T", b"1"), Message("T", b"2", wait_store_msg_ok=False)], MAX)


def test_batch_rules_hold_for_every_message_not_only_the_first():
    """check_batch takes the usual message in one step (issue 34): whatever is wrong with a
    later message is still refused, with the same message as the full checks give."""
    ok = Message("T", b"1")

    def later(msg):
        return [ok, Message("T", b"2"), msg]

    with pytest.raises(IllegalArgumentError, match="empty"):
        check_batch(later(Message("T", b"")), MAX)
    with pytest.raises(IllegalArgumentError, match="over the limit"):
        check_batch([Message("T", b"x"), Message("T", b"x" * 11)], 10)
    check_batch([Message("T", b"x"), Message("T", b"x" * 10)], 10)
    with pytest.raises(IllegalArgumentError, match="delayed"):
        check_batch(later(Message("T", b"3", delay_level=2)), MAX)
    with pytest.raises(IllegalArgumentError, match="not an integer"):
        check_batch(later(Message("T", b"3", properties={"DELAY": "soon"})), MAX)
    with pytest.raises(IllegalArgumentError, match="wait_store"):
        check_batch(later(Message("T", b"3", wait_store_msg_ok=False)), MAX)
    check_batch([Message("T", b"1", wait_store_msg_ok=False), Message("T", b"2", wait_store_msg_ok=False)], MAX)
    with pytest.raises(IllegalArgumentError, match="wait_store"):
        check_batch([Message("T", b"1", wait_store_msg_ok=False), Message("T", b"2")], MAX)
    with pytest.raises(IllegalArgumentError, match="same topic"):
        check_batch(later(Message("U", b"3")), MAX)
    with pytest.raises(IllegalArgumentError, match="expected a Message"):
        check_batch(later("not a message"), MAX)

    class Delayed(Message):  # a subclass is checked through its own properties
        __slots__ = ()

        @property
        def properties(self):
            return {**self._properties, "DELAY": "3"}

    with pytest.raises(IllegalArgumentError, match="delayed"):
        check_batch(later(Delayed("T", b"3")), MAX)
