"""Offset stores: increase-only updates, broker persistence, local files."""
from __future__ import annotations

import asyncio
import json
import os

import pytest

from mqcore.client.consumer.offset_store import (
    LocalFileOffsetStore,
    ReadOffsetType,
    RemoteBrokerOffsetStore,
)
from mqcore.errors import BrokerError, ConsumerGroupNotFoundError, RemotingTimeoutError
from mqcore.remoting.bodies import MessageQueue

A = MessageQueue("T", "b", 0)
B = MessageQueue("T", "b", 1)


class Access:
    def __init__(self) -> None:
        self.stored: dict = {}
        self.sent: list = []
        self.fail: BaseException | None = None
        self.refuse: dict = {}

    async def query_consumer_offset(self, group, mq):
        if self.fail:
            raise self.fail
        if mq not in self.stored:
            raise BrokerError(22, "Not found")
        return self.stored[mq]

    async def update_consumer_offset(self, group, mq, offset, oneway):
        self.sent.append((mq, offset, oneway))
        refusal = self.refuse.get(mq)
        if refusal is not None:
            raise refusal
        self.stored[mq] = offset


def run(coro):
    return asyncio.new_event_loop().run_until_complete(coro)


def test_increase_only_never_moves_backwards():
    store = RemoteBrokerOffsetStore("g", Access())
    store.update_offset(A, 10, increase_only=True)
    store.update_offset(A, 7, increase_only=True)
    assert store.read_offset_memory(A) == 10
    store.update_offset(A, 3, increase_only=False)  # explicit reset
    assert store.read_offset_memory(A) == 3
    assert store.read_offset_memory(B) == -1


def test_remote_read_and_persist():
    access = Access()
    store = RemoteBrokerOffsetStore("g", access)
    assert run(store.read_offset(A, ReadOffsetType.READ_FROM_STORE)) == -1
    access.stored[A] = 42
    assert run(store.read_offset(A, ReadOffsetType.MEMORY_FIRST_THEN_STORE)) == 42
    assert store.read_offset_memory(A) == 42
    access.fail = RemotingTimeoutError("down")
    assert run(store.read_offset(B, ReadOffsetType.READ_FROM_STORE)) == -2
    store.update_offset(A, 50, True)
    store.update_offset(B, 5, True)
    run(store.persist_all({A}))
    assert access.sent == [(A, 50, True)]
    assert store.read_offset_memory(B) == -1  # not owned any more: forgotten
    run(store.persist_all({A}, oneway=False))
    assert access.sent[-1] == (A, 50, False)


def test_a_commit_the_caller_waits_for_raises_the_first_refusal_after_trying_every_queue():
    access = Access()
    store = RemoteBrokerOffsetStore("g", access)
    store.update_offset(A, 4, True)
    store.update_offset(B, 9, True)
    access.refuse[A] = ConsumerGroupNotFoundError("g", "Group g not exist!", "127.0.0.1:10911")
    with pytest.raises(ConsumerGroupNotFoundError) as refused:
        run(store.commit_all({A, B}))
    assert "'g'" in str(refused.value) and "updateSubGroup" in str(refused.value) and refused.value.code == 26
    assert access.stored == {B: 9} and store.read_offset_memory(A) == 4  # B still sent; A kept for the next
    run(store.persist_all({A, B}, oneway=False))  # a background persist only logs it
    access.refuse[A] = RemotingTimeoutError("no answer")
    with pytest.raises(RemotingTimeoutError):
        run(store.commit_all({A, B}))
    del access.refuse[A]
    run(store.commit_all({A, B}))
    assert access.stored == {A: 4, B: 9}


def test_local_file_roundtrip_java_format(tmp_path):
    store = LocalFileOffsetStore("g", str(tmp_path), "1.2.3.4@DEFAULT")
    store.update_offset(A, 12, True)
    store.update_offset(B, 3, True)
    run(store.persist_all({A, B}))
    path = tmp_path / "1.2.3.4@DEFAULT" / "g" / "offsets.json"
    text = path.read_text()
    assert text == ('{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:12,'
                    '{"brokerName":"b","queueId":1,"topic":"T"}:3}}')
    again = LocalFileOffsetStore("g", str(tmp_path), "1.2.3.4@DEFAULT")
    again.load()
    assert again.read_offset_memory(A) == 12 and again.read_offset_memory(B) == 3
    assert run(again.read_offset(MessageQueue("T", "b", 9), ReadOffsetType.READ_FROM_STORE)) == -1


def test_local_file_falls_back_to_backup(tmp_path):
    store = LocalFileOffsetStore("g", str(tmp_path), "cid")
    store.update_offset(A, 1, True)
    run(store.persist_all({A}))
    store.update_offset(A, 2, True)
    run(store.persist_all({A}))
    assert os.path.exists(store.path + ".bak")
    with open(store.path, "w") as f:
        f.write("{garbage")
    again = LocalFileOffsetStore("g", str(tmp_path), "cid")
    again.load()
    assert again.read_offset_memory(A) == 1


def test_local_file_reads_standard_json_too(tmp_path):
    store = LocalFileOffsetStore("g", str(tmp_path), "cid")
    os.makedirs(os.path.dirname(store.path))
    with open(store.path, "w") as f:
        json.dump({"offsetTable": {}}, f)
    store.load()
    assert store.snapshot() == {}
