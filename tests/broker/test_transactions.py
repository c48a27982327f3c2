"""TransactionService over a real store with an injected clock (no broker process): half
messages, END_TRANSACTION answers, and the check-back's walk, its copies, its progress in
consumerOffset.json and its discards."""
from __future__ import annotations

import pytest

from mqcore.broker.config import BrokerConfig
from mqcore.broker.groups import ConsumerOffsetManager
from mqcore.broker.topics import TopicConfigManager
from mqcore.broker.transaction import (
    CHECK_GROUP,
    CHECK_MAX_TOPIC,
    HALF_TOPIC,
    OP_TOPIC,
    EndOutcome,
    TransactionService,
)
from mqcore.clock import ManualClock
from mqcore.format import layout as L
from mqcore.message import MessageExtBrokerInner, Prop, pack_host, string_to_properties
from mqcore.remoting import RequestCode, ResponseCode
from mqcore.remoting.headers import CheckTransactionStateRequestHeader, EndTransactionRequestHeader
from mqcore.store.message_store import MessageStore
from tests.support.store import records, small_config

T0 = 1_750_000_000_000
BORN = pack_host("10.1.2.3", 45678)
STORE = pack_host("127.0.0.1", 10911)
GROUP = "pg-orders"


class World:
    """A store, the broker tables the service uses, and the service; ``reopen`` is a restart."""

    def __init__(self, path, clock, **cfg):
        self.path, self.clock, self.cfg = path, clock, BrokerConfig(**cfg)
        self.open()

    def open(self):
        self.store = MessageStore(small_config(self.path, commitlog_file_size_bytes=1 << 20,
                                               consume_queue_file_size_bytes=20 * 256), clock=self.clock)
        self.store.load()
        self.store.start()
        cdir = self.store.config.config_dir
        self.topics = TopicConfigManager(self.cfg, cdir, self.clock)
        self.topics.load()
        self.offsets = ConsumerOffsetManager.in_dir(cdir)
        self.offsets.load()
        self.tx = TransactionService(store=self.store, offsets=self.offsets, topics=self.topics,
                                     store_host=lambda: STORE, configs=lambda: self.cfg, clock=self.clock)

    def reopen(self):
        self.offsets.persist()
        self.topics.persist()
        self.store.shutdown()
        self.open()

    def close(self):
        self.store.shutdown()

    def half(self, topic="Orders", qid=2, key="k1", **props):
        m = MessageExtBrokerInner(topic=topic, body=b"body-" + key.encode(), queue_id=qid,
                                  properties={Prop.TRAN_MSG: "true", Prop.PGROUP: GROUP, Prop.UNIQ_KEY: "U-" + key,
                                              Prop.KEYS: key, Prop.TAGS: "t", **props},
                                  sys_flag=L.SYSFLAG_TRANSACTION_PREPARED, born_timestamp=self.clock(),
                                  born_host=BORN, store_host=STORE)
        r = self.tx.put_half(m)
        assert r.status.stored
        return r

    def end(self, r, kind, *, group=GROUP, queue_offset=None, phy=None, from_check=False):
        return self.tx.end(EndTransactionRequestHeader(
            producer_group=group, tran_state_table_offset=r.queue_offset if queue_offset is None else queue_offset,
            commit_log_offset=r.phy_offset if phy is None else phy, commit_or_rollback=kind, msg_id="x",
            from_transaction_check=from_check))

    def real(self, topic="Orders", qid=2):
        return records(self.store, topic, qid)[1]

    def count(self, topic, qid=0):
        return self.store.get_max_offset_in_queue(topic, qid)


@pytest.fixture
def clock():
    return ManualClock(T0)


@pytest.fixture
def w(tmp_path, clock):
    world = World(tmp_path / "store", clock, transaction_timeout_ms=6000, transaction_check_max=3)
    yield world
    world.close()


COMMIT, ROLLBACK, UNKNOWN = L.SYSFLAG_TRANSACTION_COMMIT, L.SYSFLAG_TRANSACTION_ROLLBACK, L.SYSFLAG_TRANSACTION_NOT


def test_half_message_is_stored_in_the_half_topic_and_answered_for_the_real_queue(w):
    r = w.half()
    assert r.queue_id == 2 and r.queue_offset == 0  # the producer's queue, the half queue's offset
    assert w.real() == []  # invisible in its topic
    (rec,) = records(w.store, HALF_TOPIC, 0)[1]
    assert rec.sys_flag & L.SYSFLAG_TRANSACTION_MASK == UNKNOWN  # cleared, so the half queue indexes it
    props = string_to_properties(bytes(rec.properties).decode())
    assert props[Prop.REAL_TOPIC] == "Orders" and props[Prop.REAL_QID] == "2" and props[Prop.PGROUP] == GROUP


def test_commit_writes_the_real_message_then_the_op_record(w):
    w.half(key="a")
    r = w.half(key="b")
    assert w.end(r, COMMIT).outcome is EndOutcome.COMMITTED
    (m,) = w.real()
    assert m.body == b"body-b" and m.sys_flag & L.SYSFLAG_TRANSACTION_MASK == COMMIT
    assert m.prepared_offset == r.phy_offset
    props = string_to_properties(bytes(m.properties).decode())
    assert props[Prop.UNIQ_KEY] == "U-b" and props[Prop.TRAN_MSG] == "true" and props[Prop.PGROUP] == GROUP
    (op,) = records(w.store, OP_TOPIC, 0)[1]
    assert op.body == b"1" and string_to_properties(bytes(op.properties).decode())[Prop.TAGS] == "d"  # the half message's queue offset
    assert w.tx.stats.committed == 1


def test_rollback_writes_only_the_op_record(w):
    r = w.half()
    assert w.end(r, ROLLBACK).outcome is EndOutcome.ROLLED_BACK
    assert w.real() == [] and w.count(OP_TOPIC) == 1


def test_unknown_writes_nothing_and_gets_no_answer(w):
    r = w.half()
    before = w.store.get_max_phy_offset()
    assert w.end(r, UNKNOWN).outcome is EndOutcome.PENDING
    assert w.end(r, 99).outcome is EndOutcome.PENDING
    assert w.store.get_max_phy_offset() == before


@pytest.mark.parametrize("change, remark", [
    (dict(group="other-group"), "The producer group wrong"),
    (dict(queue_offset=7), "The transaction state table offset wrong"),
    (dict(phy=10 ** 12), "Find prepared transaction message failed"),
    (dict(phy=-5), "Find prepared transaction message failed"),
    (dict(phy=3), "Find prepared transaction message failed"),  # inside a record
])
def test_bad_ends_are_refused_and_write_nothing(w, change, remark):
    r = w.half()
    before = w.store.get_max_phy_offset()
    res = w.end(r, COMMIT, **change)
    assert (res.outcome, res.code, res.remark) == (EndOutcome.REFUSED, ResponseCode.SYSTEM_ERROR, remark)
    assert w.store.get_max_phy_offset() == before and w.tx.stats.refused == 1


def test_an_end_naming_an_ordinary_message_is_refused(w):
    plain = w.store.put_message(MessageExtBrokerInner(topic="Orders", body=b"x", queue_id=0,
                                                      properties={Prop.PGROUP: GROUP}, born_host=BORN,
                                                      store_host=STORE, born_timestamp=T0))
    before = w.store.get_max_phy_offset()
    res = w.end(plain, COMMIT)
    assert res.outcome is EndOutcome.REFUSED and "not a half message" in res.remark
    assert w.store.get_max_phy_offset() == before


# --- check-back ----------------------------------------------------------------------------------------
def test_check_asks_about_old_unresolved_half_messages_only(w, clock):
    done = w.half(key="done")
    w.half(key="open")
    w.end(done, ROLLBACK)
    clock.advance(5000)
    assert w.tx.check().checks == []  # younger than transactionTimeOut
    clock.advance(2000)
    rnd = w.tx.check(producer_channel=lambda g: "chan-" + g)
    (check,) = rnd.checks
    cmd = check.command
    assert (check.group, check.channel) == (GROUP, "chan-" + GROUP)
    assert cmd.code == RequestCode.CHECK_TRANSACTION_STATE and cmd.is_oneway
    h = CheckTransactionStateRequestHeader.from_command(cmd)
    # about the copy written for this check: the third record of the half queue
    assert h.tran_state_table_offset == 2 and h.msg_id == h.transaction_id == "U-open"
    (body,) = w.store.k.decode_records(cmd.body, 0, len(cmd.body), 5)
    assert body.topic == "Orders" and body.queue_id == 2 and body.phy_offset == h.commit_log_offset
    assert string_to_properties(bytes(body.properties).decode())[Prop.TRANSACTION_CHECK_TIMES] == "1"
    assert w.offsets.query(CHECK_GROUP, HALF_TOPIC, 0) == 2  # past the two originals
    assert w.offsets.query(CHECK_GROUP, OP_TOPIC, 0) == 1  # the op record is consumed
    # the producer answers about the copy: done, never asked again
    res = w.tx.end(EndTransactionRequestHeader(producer_group=GROUP, tran_state_table_offset=2,
                                               commit_log_offset=h.commit_log_offset, commit_or_rollback=COMMIT,
                                               msg_id="U-open", from_transaction_check=True))
    assert res.outcome is EndOutcome.COMMITTED and [m.body for m in w.real()] == [b"body-open"]
    clock.advance(60_000)
    assert w.tx.check().checks == [] and w.offsets.query(CHECK_GROUP, HALF_TOPIC, 0) == 3


def test_after_check_max_the_message_is_discarded_to_the_check_max_topic(w, clock):
    w.half(key="never")
    asked = []
    for _ in range(5):
        clock.advance(7000)
        asked += w.tx.check().checks
    assert len(asked) == 3  # transactionCheckMax
    (parked,) = records(w.store, CHECK_MAX_TOPIC, 0)[1]
    assert parked.body == b"body-never" and w.topics.get(CHECK_MAX_TOPIC) is not None
    assert w.tx.stats.discarded == 1 and w.tx.stats.checked == 3


def test_check_immunity_delays_the_first_check(w, clock):
    w.half(key="slow", **{Prop.CHECK_IMMUNITY_TIME_IN_SECONDS: "20"})
    for _ in range(2):  # 7, 14 s: immune, carried forward as copies that remember the first offset
        clock.advance(7000)
        assert w.tx.check().checks == []
    clock.advance(7000)  # 21 s
    (asked,) = w.tx.check().checks
    (rec,) = w.store.k.decode_records(asked.command.body, 0, len(asked.command.body), 1)
    assert string_to_properties(bytes(rec.properties).decode())[Prop.TRAN_PREPARED_QUEUE_OFFSET] == "0"


def test_check_progress_survives_a_restart(w, clock):
    w.half(key="a")
    clock.advance(7000)
    assert len(w.tx.check().checks) == 1
    w.reopen()
    clock.advance(7000)
    (again,) = w.tx.check().checks  # the copy, checked a second time: not the original again
    (rec,) = w.store.k.decode_records(again.command.body, 0, len(again.command.body), 1)
    assert string_to_properties(bytes(rec.properties).decode())[Prop.TRANSACTION_CHECK_TIMES] == "2"


def test_mqstore_dump_shows_the_transaction_of_each_record(w, capsys):
    import json

    from mqcore.tools import mqstore

    r = w.half(key="dumped")
    w.end(r, COMMIT)
    w.store.shutdown()
    assert mqstore.main(["dump", str(w.path), "--commitlog"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    seen = [(row["topic"], row["transaction"], row["transaction_id"]) for row in rows]
    assert seen == [(HALF_TOPIC, "none", "U-dumped"), ("Orders", "commit", "U-dumped"), (OP_TOPIC, "none", None)]
    w.open()  # the fixture closes it
