"""The store's hot state (mqcore/store/hot_state.py): the store's classes on their kernels'
bases - struct fields read typed by the compiled StorePlainSends and PullReader, slots in the
twin - and every write by the Python code seen by the C code and back."""
from __future__ import annotations

import os
import types

import pytest

from mqcore import _pipeline, _store, _store_py
from mqcore.remoting import RequestCode, create_request
from mqcore.remoting.command import encode_frame
from mqcore.store.hot_state import CORES, on_kernels
from mqcore.store.message_store import MessageStore
from tests.support.store import BORN, STORE, msg, small_config

TOPIC = "HotT"
CLUSTER = b"DefaultCluster"
NOW = 1_700_000_000_000


def _store_on(path, kernels) -> MessageStore:
    st = MessageStore(small_config(path, broker_cluster_name="DefaultCluster"), clock=lambda: NOW, kernels=kernels)
    st.load()
    st.start()
    st.queues.defer_new = None  # compared put by put: a new queue's file is made inline, not by a thread
    return st


def _objects(st: MessageStore):
    """(core name, object) for every object of the store that has a hot-state base."""
    out = [("MessageWriterCore", st.writer), ("DispatcherCore", st.dispatcher),
           ("MappedFileQueueCore", st.commitlog.queue), ("IndexServiceCore", st.index)]
    out += [("MappedFileCore", mf) for mf in st.commitlog.queue.files]
    for cq in st.queues:
        out += [("ConsumeQueueCore", cq), ("MappedFileQueueCore", cq.queue)]
        out += [("MappedFileCore", mf) for mf in cq.queue.files]
    for f in st.index.files:
        out += [("IndexFileCore", f), ("MappedFileCore", f.mf)]
    return out


@pytest.mark.parametrize("kernels", [_store, _store_py], ids=["cython", "twin"])
def test_the_store_builds_its_classes_on_its_kernels_bases(tmp_path, kernels):
    other = _store_py if kernels is _store else _store
    st = _store_on(tmp_path, kernels)
    try:
        for i in range(120):  # the commitlog and the consume queues roll to new files
            assert st.put_message(msg(TOPIC, body=b"m%03d" % i * 60, qid=i % 2, KEYS="k%d" % i)).ok
        objs = _objects(st)
        assert {name for name, _ in objs} == set(CORES)
        assert len([o for name, o in objs if name == "MappedFileCore"]) > 5
        for name, obj in objs:
            assert isinstance(obj, getattr(kernels, name)) and not isinstance(obj, getattr(other, name)), (name, obj)
    finally:
        st.shutdown()


def _c_fields(core: type) -> set[str]:
    return {k for k, v in vars(core).items()
            if isinstance(v, (types.GetSetDescriptorType, types.MemberDescriptorType)) and not k.startswith("__")}


def test_the_twin_bases_hold_the_fields_of_the_c_bases():
    for name in CORES:
        c, twin = getattr(_store, name), getattr(_store_py, name)
        assert _c_fields(c) and _c_fields(c) == set(twin.__slots__), name


def test_on_kernels_builds_one_class_per_base_and_keeps_the_python_class_without_one():
    from mqcore.store.mapped_file import MappedFile

    cls = on_kernels(MappedFile, _store)
    assert cls is on_kernels(MappedFile, _store) and issubclass(cls, MappedFile)
    assert cls.__name__ == "MappedFile" and cls.__doc__ == MappedFile.__doc__
    assert on_kernels(MappedFile, object()) is MappedFile  # kernels without bases (a test's stand-in)


def _plain(i: int, qid: int, body: bytes):
    ext = {"a": "PG", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(qid), "f": "0", "g": str(NOW - i), "h": "0",
           "i": f"UNIQ_KEY\x01U{i:05d}\x02TAGS\x01t{i % 3}", "j": "0", "k": "false", "m": "false"}
    frame = encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, ext, body, opaque=i))
    items, stop = _pipeline.parse_plain_sends(frame, 0, len(frame), 1 << 20, CLUSTER, True)
    assert stop == len(frame) and len(items) == 1
    return items


def _state(st: MessageStore):
    """The store's in-memory hot state, by position (comparable between two stores; not the
    flushed positions, which the flush threads move when they run, nor an index file's)."""
    w, d = st.writer, st.dispatcher
    files = lambda q: [(mf.file_from_offset, mf.wrote_position, mf.reserved, mf.closed)  # noqa: E731
                       for mf in q.files]
    return (w.last_store_timestamp, dict(w.queue_offsets), w.refuse_reason, w.disk_full_reason,
            d.last_store_timestamp, d.no_new_queues_below, files(st.commitlog.queue),
            sorted((cq.topic, cq.queue_id, cq.max_physic_offset, cq.min_logic_offset, files(cq.queue))
                   for cq in st.queues),
            [(f.mf.reserved, bytes(f.mf.buf[:40])) for f in st.index.files])  # (its flush moves wrote_position)


def _files(root) -> dict[str, bytes]:
    got = {}
    for sub in ("commitlog", "consumequeue", "index"):
        for d, _dirs, names in os.walk(os.path.join(root, sub)):
            for name in names:
                with open(os.path.join(d, name), "rb") as f:
                    got[os.path.relpath(os.path.join(d, name), root)] = f.read()
    return got


def test_plain_sends_on_c_fields_and_on_slots_leave_the_same_files_and_state(tmp_path, monkeypatch):
    """The compiled store stage on a store of C bases (fields read and written as structs) and
    on a store of the twin's (it hands every put to the writer's Python body), with Python
    puts, refusals set and cleared by Python code, recovery bookkeeping and file rolls in
    between: the same answers, files and in-memory state after every step."""
    from mqcore import _compat

    monkeypatch.setattr(_compat, "pipeline_kernels", _pipeline)  # the compiled store stage, also under MQCORE_PURE_PYTHON
    stores = [_store_on(tmp_path / "c", _store), _store_on(tmp_path / "twin", _store_py)]
    assert all(isinstance(st.put_plain_sends, _pipeline.StorePlainSends) for st in stores)
    try:
        for i in range(700):
            qid, body = i % 3, b"b%04d" % i * (1 + i % 37)
            if i == 100:
                for st in stores:
                    st.writer.refuse_reason = "shutting down"
            if i == 110:
                for st in stores:
                    st.writer.refuse_reason = None
            if i == 150:  # recovery's bookkeeping: the general steps append
                for st in stores:
                    st.dispatcher.no_new_queues_below = 1
            if i == 160:
                for st in stores:
                    st.dispatcher.no_new_queues_below = -1
            if i == 200:  # a new store file could not be had a moment ago
                for st in stores:
                    st.writer.disk_full_reason, st.writer._disk_full_until_ms = "the disk is full", NOW + 1
            if i == 210:
                for st in stores:
                    st.writer.disk_full_reason = None
            if i % 23 == 5:  # the Python path writes the same fields
                got = [st.put_message(msg(TOPIC, body=body, qid=qid, KEYS="py%d" % i)) for st in stores]
                assert [(r.status, r.queue_offset, r.phy_offset) for r in got] == \
                    [(r.status, r.queue_offset, r.phy_offset) for r in got[:1]] * 2
            else:
                got = [st.put_plain_sends(_plain(i, qid, body), BORN, STORE) for st in stores]
                assert got[0][0] == got[1][0], i
                assert (got[0][1] is None) == (got[1][1] is None) and (100 <= i < 110 or 200 <= i < 210) == \
                    (got[0][1] is not None), i
                if got[0][1] is not None:
                    assert (got[0][1].status, got[0][1].remark) == (got[1][1].status, got[1][1].remark)
            a, b = _state(stores[0]), _state(stores[1])
            assert a == b, (i, [(x, y) for x, y in zip(a, b) if x != y])
        assert len(stores[0].commitlog.queue.files) >= 3 and len(stores[0].index.files) >= 2
        assert all(len(cq.queue.files) >= 2 for cq in stores[0].queues)
    finally:
        for st in stores:
            st.shutdown()
    assert _files(tmp_path / "c") == _files(tmp_path / "twin")


def test_the_store_stage_checks_each_object_it_reads_as_a_base(tmp_path, monkeypatch):
    """The compiled store stage reads the store's own classes after one pointer comparison;
    any other object is checked: one of a subclass is read the same, one not on the base is a
    TypeError, never a read of the wrong memory."""
    from mqcore import _compat

    monkeypatch.setattr(_compat, "pipeline_kernels", _pipeline)  # also under MQCORE_PURE_PYTHON
    st = _store_on(tmp_path / "s", _store)
    ref = _store_on(tmp_path / "ref", _store)
    try:
        queue = st.commitlog.queue

        class Later(queue.file_class):
            """A file class the stage was not built with (still on the base)."""

        queue.file_class = Later
        for i in range(600):  # the commitlog rolls to files of Later
            got = [s.put_plain_sends(_plain(i, i % 2, b"s%04d" % i * 30), BORN, STORE) for s in (st, ref)]
            assert got[0] == got[1] and got[0][1] is None and len(got[0][0]) == 1
        assert type(queue.files[-1]) is Later and len(queue.files) >= 3
        assert _state(st) == _state(ref)
        queue.files.append(object())  # not a mapped file at all
        try:
            with pytest.raises(TypeError):
                st.put_plain_sends(_plain(600, 0, b"x"), BORN, STORE)
        finally:
            queue.files.pop()
        got = [s.put_plain_sends(_plain(601, 0, b"y"), BORN, STORE) for s in (st, ref)]
        assert got[0] == got[1] and len(got[0][0]) == 1
    finally:
        st.shutdown()
        ref.shutdown()
    assert _files(tmp_path / "s") == _files(tmp_path / "ref")
