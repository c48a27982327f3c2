"""Consume-queue flushes follow RocketMQ's FlushConsumeQueueService: a file is msynced once
``flushConsumeQueueLeastPages`` of its pages are dirty, every file every
``flushConsumeQueueThoroughInterval``, and the checkpoint's consume-queue time moves only
with a thorough flush (crash recovery re-dispatches from it)."""
from __future__ import annotations


from mqcore.store.message_store import MessageStore
from mqcore.format import layout as L
from tests.support.store import msg, small_config
from tests.support.waiting import wait_for

CQ_FILE = 300_000 * 20


def _started(tmp_path, kernels, thorough_ms: int) -> MessageStore:
    """A store flushing every 20 ms, consume queues at 2 dirty pages, all of them every ``thorough_ms``."""
    s = MessageStore(small_config(tmp_path / "store", consume_queue_file_size_bytes=CQ_FILE,
                                  commitlog_file_size_bytes=4 << 20, flush_interval_consume_queue_ms=20,
                                  flush_interval_commitlog_ms=20, flush_consume_queue_least_pages=2,
                                  flush_consume_queue_thorough_interval_ms=thorough_ms), kernels=kernels)
    s.load()
    s.start()
    return s


def _cq_file(store, topic, qid):
    store.get_max_offset_in_queue(topic, qid)  # the queue's file exists once a reader asked
    return store.queues.get(topic, qid).queue.files[0]


def test_a_queue_with_few_dirty_units_waits_for_the_thorough_flush(tmp_path, kernels):
    s = _started(tmp_path, kernels, thorough_ms=3_600_000)
    synced, passes = [], []
    sync, logic = s.checkpoint.flush, s.flush_service.flush_logic
    s.checkpoint.flush = lambda: (synced.append(1), sync())[1]
    s.flush_service.flush_logic = lambda least: (passes.append(least), logic(least))[1]
    try:
        for i in range(10):
            s.put_message(msg(topic="Few", body=b"%d" % i))
        few = _cq_file(s, "Few", 0)
        for i in range(500):  # 10,000 bytes of units: two dirty pages
            s.put_message(msg(topic="Many", body=b"%d" % i))
        many = _cq_file(s, "Many", 0)
        assert wait_for(lambda: many.flushed_position == many.wrote_position, timeout=10)
        assert wait_for(lambda: s.commitlog.queue.flushed_offset() == s.commitlog.max_offset, timeout=10)
        seen = len(passes)  # ten more flush passes: "Few" must still be unflushed after them
        assert wait_for(lambda: len(passes) >= seen + 10, timeout=10)
        assert set(passes) == {2}  # none of them thorough
        assert few.wrote_position == 200 and few.flushed_position == 0
        assert synced == []  # the checkpoint file is not synced before a thorough flush either
        with open(tmp_path / "store" / "checkpoint", "rb") as f:  # but its page shows the times
            assert L.CHECKPOINT_FIELDS.unpack_from(f.read(), L.CKPT_PHYSIC_MSG_TIMESTAMP)[1] > 0
    finally:
        s.shutdown()
    assert few.flushed_position == 200  # a stop flushes everything


def test_the_thorough_flush_takes_every_file_and_moves_the_checkpoint(tmp_path, kernels):
    s = _started(tmp_path, kernels, thorough_ms=100)
    try:
        s.put_message(msg(topic="One", body=b"x"))
        one = _cq_file(s, "One", 0)
        assert wait_for(lambda: one.flushed_position == 20, timeout=10)
        assert wait_for(lambda: s.checkpoint.logics_msg_timestamp > 0, timeout=10)
    finally:
        s.shutdown()
