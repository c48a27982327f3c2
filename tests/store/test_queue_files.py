"""A new consume queue's first file is made off the put's path (QueueFileService): the put
returns before the queue's directory and file exist, a reader still sees every put before
it, the file comes without a reader too, and nothing is lost when the store stops or is
killed while a queue waits for its file."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mqcore.store.message_store import MessageStore
from mqcore.store.results import GetMessageStatus, PutMessageStatus
from tests.support.store import msg, records, small_config
from tests.support.waiting import wait_for


@pytest.fixture
def store(tmp_path, kernels):
    """A started store (small files), shut down after the test."""
    s = MessageStore(small_config(tmp_path / "store"), kernels=kernels)
    s.load()
    s.start()
    yield s
    s.shutdown()


def _queue_dir(root, topic, qid) -> str:
    return os.path.join(str(root), "consumequeue", topic, str(qid))


def test_a_put_to_a_new_queue_returns_before_its_file_is_made(store, tmp_path):
    with store.queues._making:  # the service cannot make the file while the test holds this
        r = store.put_message(msg(topic="Fresh", body=b"first"))
        assert r.status is PutMessageStatus.PUT_OK and r.queue_offset == 0
        r2 = store.put_message(msg(topic="Fresh", body=b"second"))
        assert r2.queue_offset == 1
        assert ("Fresh", 0) in store.queues.pending
        assert not os.path.exists(_queue_dir(tmp_path / "store", "Fresh", 0))
    # the service makes it (no reader asks)
    assert wait_for(lambda: ("Fresh", 0) in store.queues.queues, timeout=10)
    assert os.path.isdir(_queue_dir(tmp_path / "store", "Fresh", 0))
    got, recs = records(store, "Fresh", 0)
    assert got.status is GetMessageStatus.FOUND
    assert [bytes(r.body) for r in recs] == [b"first", b"second"]
    # the queue now takes the ordinary path
    assert store.put_message(msg(topic="Fresh", body=b"third")).queue_offset == 2
    assert store.get_max_offset_in_queue("Fresh", 0) == 3


def test_a_reader_sees_a_pending_queue_s_units(store, tmp_path):
    store.queue_file_service.shutdown()  # only readers make files now
    arrived = []
    store.add_arrival_listener(lambda t, q, m: arrived.append((t, q, m)))
    for i in range(3):
        store.put_message(msg(topic="ReadMe", qid=1, body=b"m%d" % i))
    assert ("ReadMe", 1) in store.queues.pending and not arrived
    assert store.get_max_offset_in_queue("ReadMe", 1) == 3  # the reader made the file
    assert arrived == [("ReadMe", 1, 3)]  # long-polling pulls are woken then
    _, recs = records(store, "ReadMe", 1)
    assert [bytes(r.body) for r in recs] == [b"m0", b"m1", b"m2"]


def test_a_batch_to_a_new_queue_waits_and_lands_in_order(store, tmp_path):
    with store.queues._making:
        results = store.put_messages([msg(topic="Batch", qid=2, body=b"b%d" % i) for i in range(40)])
        assert [r.queue_offset for r in results] == list(range(40))
    _, recs = records(store, "Batch", 2, n=64)
    assert [bytes(r.body) for r in recs] == [b"b%d" % i for i in range(40)]


def test_deleting_a_topic_while_its_queue_waits_leaves_nothing(store, tmp_path):
    with store.queues._making:
        store.put_message(msg(topic="Gone", body=b"x"))
        store.delete_topic("Gone")
        assert ("Gone", 0) not in store.queues.pending
    assert store.queues.make_all_ready()
    assert not os.path.exists(_queue_dir(tmp_path / "store", "Gone", 0))
    assert store.get_max_offset_in_queue("Gone", 0) == 0


def test_a_clean_stop_writes_the_waiting_units(tmp_path, kernels):
    cfg = small_config(tmp_path / "store")
    s = MessageStore(cfg, kernels=kernels)
    s.load()
    s.start()
    s.queue_file_service.shutdown()
    s.put_message(msg(topic="Stop", body=b"kept"))
    assert ("Stop", 0) in s.queues.pending
    s.shutdown()
    assert not os.path.exists(cfg.abort_path)
    s2 = MessageStore(cfg, kernels=kernels)
    s2.load()
    s2.start()
    try:
        _, recs = records(s2, "Stop", 0)
        assert [bytes(r.body) for r in recs] == [b"kept"]
    finally:
        s2.shutdown()


KILLED = textwrap.dedent("""
    import sys, time
    from tests.support.store import msg, small_config
    from mqcore.store.message_store import MessageStore
    s = MessageStore(small_config(sys.argv[1]))
    s.load(); s.start()
    s.put_message(msg(topic="Before", body=b"other"))
    s.get_max_offset_in_queue("Before", 0)  # that queue has its file
    s.queues._making.acquire()  # the new queue's file is never made before the kill
    r = s.put_message(msg(topic="Killed", qid=3, body=b"acknowledged"))
    s.put_message(msg(topic="Before", body=b"after"))
    s.flush_service.wakeup()
    print("ACK", r.queue_offset, flush=True)
    time.sleep(60)
""")


def test_a_kill_while_a_queue_waits_loses_no_unit(tmp_path, kernels):
    root = tmp_path / "store"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(root)], stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    try:
        line = proc.stdout.readline()
        assert line.split() == ["ACK", "0"], line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert not os.path.exists(_queue_dir(root, "Killed", 3))
    s = MessageStore(small_config(root), kernels=kernels)
    report = s.load()
    s.start()
    try:
        assert report.abnormal
        _, recs = records(s, "Killed", 3)
        assert [bytes(r.body) for r in recs] == [b"acknowledged"]
        _, before = records(s, "Before", 0)
        assert [bytes(r.body) for r in before] == [b"other", b"after"]
    finally:
        s.shutdown()
