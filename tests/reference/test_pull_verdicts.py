"""What a PULL answers at each edge of a queue, measured against Apache RocketMQ 5.3.3 and 4.9.7.

One store is written by mqbroker: topic ``VT`` with four queues - queue 0 long and cleaned in
part (its first records were in the deleted file), queue 1 cleaned whole, queue 2 short and
whole, queue 3 never written - and topic ``VT2``, created but never written. Its first commitlog
file is then deleted, as disk cleanup deletes it, and the store is copied to each broker. The
same raw PULL frames go to every one of them; the answer's code, remark, nextBeginOffset,
minOffset and maxOffset must be the Java brokers'. mqbroker answers through each of its paths:
the C fast path (a TAG ``*`` pull, compiled kernels), the twins (``MQCORE_PURE_PYTHON=1``) and
the general path (a SQL92 subscription: the pull pipeline leaves SQL92 to
``PullProcessor.pull``). docs/remoting-pulls.md tables the answers; where 4.9.7 and 5.3.3
differ, mqbroker answers as 5.3.3 and the differences are asserted here as the doc states them.
"""
from __future__ import annotations

import os
import shutil

import pytest

from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode as R
from mqcore.remoting import SyncRemotingClient, create_request
from mqcore.remoting.headers import PullMessageRequestHeader
from tests.support.processes import BrokerProcess
from tests.support.protocol import create_topic, send
from tests.support.reference import JavaBroker, JavaNamesrv
from tests.support.reference5 import Java5Broker, Java5Namesrv

pytestmark = pytest.mark.timeout(900)

#: one geometry for every broker (the files must be read the same way); SQL92 on for the general path
GEOMETRY = {"mappedFileSizeCommitLog": 1 << 20, "mappedFileSizeConsumeQueue": 30000 * 20,
            "maxHashSlotNum": 10000, "maxIndexNum": 40000, "enablePropertyFilter": "true"}
TOPIC, UNWRITTEN = "VT", "VT2"
LONG, CLEANED, SHORT, EMPTY = 0, 1, 2, 3
SHORT_LEN, CLEANED_LEN = 5, 10

#: (topic, queue id, offset) pulled; the long queue's edges are added once its bounds are known
CASES = [
    (TOPIC, EMPTY, 0), (TOPIC, EMPTY, 5),  # a queue never written to
    (TOPIC, SHORT, 0), (TOPIC, SHORT, 3), (TOPIC, SHORT, SHORT_LEN), (TOPIC, SHORT, SHORT_LEN + 1),
    (TOPIC, SHORT, 100),  # min 0: == max, > max
    (TOPIC, CLEANED, 0), (TOPIC, CLEANED, 5), (TOPIC, CLEANED, CLEANED_LEN), (TOPIC, CLEANED, CLEANED_LEN + 1),
    (TOPIC, CLEANED, 50),  # every record of the queue deleted
    (TOPIC, 4, 0), (TOPIC, 4, 7), (TOPIC, -1, 0),  # queue ids beyond the topic's queues
    ("NoSuchTopic", 0, 0), ("NoSuchTopic", 0, 9),  # an unknown topic
    (UNWRITTEN, 0, 0), (UNWRITTEN, 0, 3),  # a topic never written to
]


def _pull(rc, addr, topic, queue_id, offset, sql=False):
    """One raw PULL (no client library): a SUBSCRIPTION pull of ``*`` (TAG) or SQL92 ``TRUE``."""
    h = PullMessageRequestHeader(consumer_group="CG_verdicts", topic=topic, queue_id=queue_id,
                                 queue_offset=offset, max_msg_nums=32, sys_flag=0x4, commit_offset=0,
                                 suspend_timeout_millis=0, sub_version=0, subscription="TRUE" if sql else "*",
                                 expression_type="SQL92" if sql else "TAG")
    r = rc.invoke(addr, create_request(RC.PULL_MESSAGE, h.to_ext()), 10_000)
    ext = r.ext_fields or {}
    fields = [ext.get(k) for k in ("nextBeginOffset", "minOffset", "maxOffset")]
    # a refusal's remark is the broker's own prose; a store verdict's is the status's name
    remark = r.remark if r.code in (R.SUCCESS, R.PULL_NOT_FOUND, R.PULL_RETRY_IMMEDIATELY, R.PULL_OFFSET_MOVED) \
        else None
    return (int(r.code), remark, *(None if f is None else int(f) for f in fields))


def _answers(addr, cases, sql=False):
    with SyncRemotingClient() as rc:
        return {case: _pull(rc, addr, *case, sql=sql) for case in cases}


def _write_store(root):
    with BrokerProcess(root, conf=GEOMETRY) as b:
        create_topic(b, TOPIC)
        create_topic(b, UNWRITTEN)
        with SyncRemotingClient() as rc:
            # the long queue's first record at commitlog offset 0: 4.9.7 would serve another file's
            # bytes for a deleted record there (see the doc), which no one should match
            assert send(rc, b, TOPIC, b"first", queue_id=LONG).code == R.SUCCESS
            for i in range(CLEANED_LEN):
                assert send(rc, b, TOPIC, b"c%d" % i, queue_id=CLEANED).code == R.SUCCESS
            for i in range(600):  # about 2.4 MB: the long queue spans three 1 MiB commitlog files
                assert send(rc, b, TOPIC, b"x" * 4000, queue_id=LONG).code == R.SUCCESS
            for i in range(SHORT_LEN):
                assert send(rc, b, TOPIC, b"s%d" % i, queue_id=SHORT).code == R.SUCCESS
    files = sorted(os.listdir(root / "commitlog"))
    assert len(files) >= 3, files
    os.remove(root / "commitlog" / files[0])  # disk cleanup's deletion, done while no broker runs


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """{who: {case: (code, remark, next, min, max)}} for every broker and mqbroker path."""
    work = tmp_path_factory.mktemp("verdicts")
    source = work / "written"
    _write_store(source)
    out = {}

    def copy(name):
        dst = work / name
        shutil.copytree(source, dst)
        return dst

    with BrokerProcess(copy("mq"), conf=GEOMETRY) as b:
        first = _answers(b.broker_addr, [(TOPIC, LONG, 0)])[(TOPIC, LONG, 0)]
        lo, hi = first[3], first[4]
        assert 0 < lo < hi, first  # the long queue was cleaned in part
        cases = CASES + [(TOPIC, LONG, o) for o in (0, lo - 1, lo, hi - 1, hi, hi + 1, hi + 50)]
        out["mqbroker"] = _answers(b.broker_addr, cases)
        out["mqbroker general path"] = _answers(b.broker_addr, cases, sql=True)
    os.environ["MQCORE_PURE_PYTHON"] = "1"  # the broker process inherits it: the twins
    try:
        with BrokerProcess(copy("mq-twin"), conf=GEOMETRY) as b:
            out["mqbroker twin"] = _answers(b.broker_addr, cases)
            out["mqbroker twin general path"] = _answers(b.broker_addr, cases, sql=True)
    finally:
        del os.environ["MQCORE_PURE_PYTHON"]
    with Java5Namesrv(work / "ns5") as ns, Java5Broker(copy("java5"), ns.addr, conf=GEOMETRY) as jb:
        out["5.3.3"] = _answers(jb.broker_addr, cases)
    with JavaNamesrv(work / "ns4") as ns, JavaBroker(copy("java4"), ns.addr, conf=GEOMETRY) as jb:
        out["4.9.7"] = _answers(jb.addr, cases)
    return out, lo, hi


def test_every_mqbroker_path_answers_as_rocketmq_5_3_3(verdicts):
    answers, _, _ = verdicts
    theirs = answers["5.3.3"]
    for who in ("mqbroker", "mqbroker general path", "mqbroker twin", "mqbroker twin general path"):
        diff = {case: (mine, theirs[case]) for case, mine in answers[who].items() if mine != theirs[case]}
        assert not diff, f"{who} vs 5.3.3: {diff}"


def test_the_verdicts_are_what_the_doc_tables(verdicts):
    answers, lo, hi = verdicts
    got = answers["mqbroker"]
    # past the end: back to the max offset, whether the queue's min offset is 0 or not (never to 0)
    assert got[(TOPIC, SHORT, SHORT_LEN + 1)] == got[(TOPIC, SHORT, 100)] == \
        (R.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", SHORT_LEN, 0, SHORT_LEN)
    assert got[(TOPIC, LONG, hi + 50)] == (R.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", hi, lo, hi)
    assert got[(TOPIC, SHORT, SHORT_LEN)] == (R.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", SHORT_LEN, 0, SHORT_LEN)
    assert got[(TOPIC, LONG, 0)] == got[(TOPIC, LONG, lo - 1)] == (R.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", lo, lo, hi)
    # a queue never written to: empty, at 0 nothing yet, elsewhere moved to 0
    assert got[(TOPIC, EMPTY, 0)] == got[(UNWRITTEN, 0, 0)] == (R.PULL_NOT_FOUND, "NO_MESSAGE_IN_QUEUE", 0, 0, 0)
    assert got[(TOPIC, EMPTY, 5)] == got[(UNWRITTEN, 0, 3)] == (R.PULL_OFFSET_MOVED, "NO_MESSAGE_IN_QUEUE", 0, 0, 0)
    # a queue cleaned whole: its min offset is its max offset
    assert got[(TOPIC, CLEANED, 5)] == (R.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL", CLEANED_LEN, CLEANED_LEN, CLEANED_LEN)
    assert got[(TOPIC, 4, 0)] == got[(TOPIC, -1, 0)] == (R.INVALID_PARAMETER, None, None, None, None)
    assert got[("NoSuchTopic", 0, 9)] == (R.TOPIC_NOT_EXIST, None, None, None, None)


def test_rocketmq_4_9_7_answers_the_same_but_where_the_doc_says_it_differs(verdicts):
    answers, _, _ = verdicts
    mine, theirs = answers["mqbroker"], answers["4.9.7"]
    differs = {
        # 4.9.7 leaves a queue's min offset where it was when none of its last file's records is
        # left (0 here); 5.3.3 moves it to the max offset
        (TOPIC, CLEANED, 0): (R.PULL_RETRY_IMMEDIATELY, "MESSAGE_WAS_REMOVING", CLEANED_LEN, 0, CLEANED_LEN),
        (TOPIC, CLEANED, 5): (R.PULL_RETRY_IMMEDIATELY, "MESSAGE_WAS_REMOVING", CLEANED_LEN, 0, CLEANED_LEN),
        (TOPIC, CLEANED, CLEANED_LEN): (R.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE", CLEANED_LEN, 0, CLEANED_LEN),
        (TOPIC, CLEANED, CLEANED_LEN + 1): (R.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", CLEANED_LEN, 0, CLEANED_LEN),
        (TOPIC, CLEANED, 50): (R.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY", CLEANED_LEN, 0, CLEANED_LEN),
        # a queue id out of range: SYSTEM_ERROR (5.x: INVALID_PARAMETER)
        (TOPIC, 4, 0): (R.SYSTEM_ERROR, None, None, None, None),
        (TOPIC, 4, 7): (R.SYSTEM_ERROR, None, None, None, None),
        (TOPIC, -1, 0): (R.SYSTEM_ERROR, None, None, None, None),
    }
    assert {case: theirs[case] for case in differs} == differs
    diff = {case: (m, theirs[case]) for case, m in mine.items() if case not in differs and m != theirs[case]}
    assert not diff, f"mqbroker vs 4.9.7: {diff}"
