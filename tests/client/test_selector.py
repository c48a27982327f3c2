"""Queue selectors agree with Java's SelectMessageQueueByHash."""
from __future__ import annotations

from mqcore.client.message import Message
from mqcore.client.selector import java_hash_code, select_by_hash, select_by_random
from mqcore.remoting.bodies import MessageQueue

QUEUES = [MessageQueue("T", "a", i) for i in range(4)]


def test_java_hash_codes():
    assert java_hash_code("hello") == 99162322
    assert java_hash_code(7) == 7 and java_hash_code(-7) == -7
    assert java_hash_code(2**40 + 5) == ((2**40 + 5) ^ ((2**40 + 5) >> 32)) & 0xFFFFFFFF
    assert java_hash_code(True) == 1231


def test_select_by_hash_matches_java():
    msg = Message("T", b"x")
    assert select_by_hash(QUEUES, msg, "hello").queue_id == 99162322 % 4
    assert select_by_hash(QUEUES, msg, -7).queue_id == 3  # Math.abs(-7 % 4) = 3
    assert select_by_hash(QUEUES, msg, 1000).queue_id == 0
    # "order-123".hashCode() is -392797389: Java's -392797389 % 4 is -1, so queue 1 (Python's % gives 3)
    assert java_hash_code("order-123") == -392797389
    assert select_by_hash(QUEUES, msg, "order-123").queue_id == 1
    # a long key uses Long.hashCode: (int)(v ^ (v >>> 32))
    assert select_by_hash(QUEUES, msg, 2**40 + 5).queue_id == abs(java_hash_code(2**40 + 5)) % 4


def test_select_by_random_stays_in_range():
    assert {select_by_random(QUEUES, Message("T", b"x"), None).queue_id for _ in range(200)} <= {0, 1, 2, 3}
