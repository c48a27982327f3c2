"""Consume-queue files cost disk in proportion to what they hold (sparse, as RocketMQ's), their
blocks reserved in steps ahead of the write position; every unit written lands in a reserved block.

(The full-disk side of the reservation steps is in test_disk_full.py.)
"""
from __future__ import annotations

import os

from mqcore.remoting import ResponseCode, SyncRemotingClient
from mqcore.store.mapped_file import MAX_RESERVE_STEP, PAGE_SIZE
from mqcore.store.message_store import MessageStore
from mqcore.store.results import PutMessageStatus
from tests.broker.test_protocol import decode, pull, send
from tests.support.processes import BrokerProcess
from tests.support.store import msg, small_config

CQ_FILE = 300_000 * 20  # RocketMQ's default consume-queue file


def _cq_files(root: str, topic: str) -> dict[int, list[str]]:
    base = os.path.join(root, "consumequeue", topic)
    return {int(q): [os.path.join(base, q, n) for n in sorted(os.listdir(os.path.join(base, q)))]
            for q in os.listdir(base)}


def _blocks(path: str) -> int:
    return os.stat(path).st_blocks * 512


def _check_reserved(store, topic, qid):
    """Every file's written units lie below its reserved end, which is at most a step ahead."""
    cq = store.queues.get(topic, qid)
    for mf in cq.queue.files:
        assert mf.wrote_position <= mf.reserved_end <= mf.file_size
        ahead = mf.reserved_end - mf.wrote_position
        assert ahead <= max(mf.wrote_position, PAGE_SIZE) + PAGE_SIZE and ahead <= MAX_RESERVE_STEP + PAGE_SIZE, \
            (mf.wrote_position, mf.reserved_end)


def test_one_message_queues_hold_one_page_and_a_long_queue_its_units(tmp_path, kernels):
    s = MessageStore(small_config(tmp_path / "store", consume_queue_file_size_bytes=CQ_FILE,
                                  commitlog_file_size_bytes=4 << 20), kernels=kernels)
    s.load()
    s.start()
    try:
        for q in range(8):
            assert s.put_message(msg(topic="One", qid=q, body=b"x")).status is PutMessageStatus.PUT_OK
        # 30,000 units (600,000 bytes): single puts, then batches (the writer's two paths)
        for i in range(20_000):
            assert s.put_message(msg(topic="Long", body=b"%d" % i)).status is PutMessageStatus.PUT_OK
        for i in range(0, 10_000, 100):
            assert all(r.status is PutMessageStatus.PUT_OK
                       for r in s.put_messages([msg(topic="Long", body=b"b") for _ in range(100)]))
        for q in range(8):
            _check_reserved(s, "One", q)
        _check_reserved(s, "Long", 0)
        assert s.get_max_offset_in_queue("Long", 0) == 30_000
    finally:
        s.shutdown()
    root = str(tmp_path / "store")
    for q, files in _cq_files(root, "One").items():
        assert len(files) == 1 and os.path.getsize(files[0]) == CQ_FILE
        assert _blocks(files[0]) <= 2 * PAGE_SIZE, (q, _blocks(files[0]))
    (long_file,) = _cq_files(root, "Long")[0]
    held = 30_000 * 20
    assert held <= _blocks(long_file) <= 2 * held + PAGE_SIZE, _blocks(long_file)
    # reopened: every unit is there, and appending goes on past the loaded (unreserved) file's end
    s = MessageStore(small_config(tmp_path / "store", consume_queue_file_size_bytes=CQ_FILE,
                                  commitlog_file_size_bytes=4 << 20), kernels=kernels)
    s.load()
    s.start()
    try:
        assert s.get_max_offset_in_queue("Long", 0) == 30_000
        for i in range(5_000):
            assert s.put_message(msg(topic="Long", body=b"again")).status is PutMessageStatus.PUT_OK
        _check_reserved(s, "Long", 0)
        got = s.get_message("Long", 0, 34_990, 32)
        assert got.message_count == 10
    finally:
        s.shutdown()


def test_broker_send_pipeline_crosses_reservation_steps(tmp_path):
    """The send pipeline's own unit writes (the C fast path) stop at a reserved end, the general
    steps reserve the next step, and every unit arrives."""
    n = 3_000  # 60,000 bytes of units: a dozen steps from one page
    with BrokerProcess(tmp_path / "store", conf={"mappedFileSizeConsumeQueue": CQ_FILE}) as b, \
            SyncRemotingClient() as rc:
        for i in range(n):
            r = send(rc, b, "Steps", b"m%05d" % i)
            assert r.code == ResponseCode.SUCCESS, r.remark
        got, offset = [], 0
        while offset < n:
            batch = decode(pull(rc, b, "Steps", offset, sub="*").body)
            assert batch, offset
            got.extend(batch)
            offset += len(batch)
        assert [m.body for m in got] == [b"m%05d" % i for i in range(n)]
        assert [m.queue_offset for m in got] == list(range(n))
        (path,) = _cq_files(str(tmp_path / "store"), "Steps")[0]
        assert n * 20 <= _blocks(path) <= 2 * n * 20 + PAGE_SIZE, _blocks(path)
