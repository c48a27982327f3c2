"""5.x delivery timestamps use the store's timer, the same one 4.x remoting timers use: both
interleave in one wheel, each arrives in its second, and pending gRPC timers are delivered
after a restart with the gRPC endpoint off."""
from __future__ import annotations

import datetime
import time

from mqcore.remoting import ResponseCode, SyncRemotingClient
from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.rawclient import RawClient, d
from tests.support.processes import BrokerProcess
from tests.support.protocol import decode, pull, send
from tests.support.waiting import wait_for

TOPIC = "Timer5"


def _ts(ms: int):
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)


def _served(rc, b):
    out = []
    for q in range(8):
        off = 0
        while True:
            r = pull(rc, b, TOPIC, off, queue_id=q, sub="*")
            if r.code != ResponseCode.SUCCESS:
                break
            out += decode(r.body)
            off = int(r.ext_fields["nextBeginOffset"])
    return out


def test_grpc_and_remoting_timers_interleave_and_survive_a_restart_without_grpc(tmp_path):
    b = BrokerProcess(tmp_path / "store", conf=TEST_CONF)
    with b, SyncRemotingClient() as rc:
        now = int(time.time() * 1000)
        due = {}
        with RawClient(grpc_addr(b)) as c:
            for i in range(6):
                body, at = b"grpc-%d" % i, now + 2000 + i * 400
                due[body] = at
                assert c.send(TOPIC, body, delivery_timestamp=_ts(at)).status.code == d.OK
                body, at = b"remoting-%d" % i, now + 2200 + i * 400
                due[body] = at
                assert send(rc, b, TOPIC, body, TIMER_DELIVER_MS=str(at)).code == ResponseCode.SUCCESS
            far = now + 15_000
            assert c.send(TOPIC, b"grpc-after-restart", delivery_timestamp=_ts(far)).status.code == d.OK
            too_far = c.send(TOPIC, b"x", delivery_timestamp=_ts(now + 4 * 86400_000))
            assert too_far.status.code == d.ILLEGAL_DELIVERY_TIME
        assert wait_for(lambda: len(_served(rc, b)) == 12, timeout=15, step=0.1)
        got = _served(rc, b)
        for m in got:
            assert m.store_timestamp >= due[m.body] - 5 and m.store_timestamp - due[m.body] < 1500, m.body
        b.stop()
        b.conf["grpcServerEnable"] = "false"
        b.start()
        assert wait_for(lambda: any(m.body == b"grpc-after-restart" for m in _served(rc, b)), timeout=30, step=0.2)
        late = [m for m in _served(rc, b) if m.body == b"grpc-after-restart"]
        assert len(late) == 1 and late[0].store_timestamp >= far - 5
        assert len(_served(rc, b)) == 13


def test_grpc_recall_message_removes_one_and_is_off_by_default(tmp_path):
    from tests.grpc.rawclient import s

    with BrokerProcess(tmp_path / "store", conf={**TEST_CONF, "recallMessageEnable": "true"}) as b, \
            SyncRemotingClient() as rc, RawClient(grpc_addr(b)) as c:
        at = int(time.time() * 1000) + 2500
        keep = c.send(TOPIC, b"keep", delivery_timestamp=_ts(at)).entries[0]
        drop = c.send(TOPIC, b"drop", delivery_timestamp=_ts(at)).entries[0]
        assert keep.recall_handle and drop.recall_handle
        req = s.RecallMessageRequest(topic=d.Resource(name=TOPIC), recall_handle=drop.recall_handle)
        ans = c.call("RecallMessage", req)
        assert ans.status.code == d.OK and ans.message_id == drop.message_id
        bad = c.call("RecallMessage", s.RecallMessageRequest(topic=d.Resource(name=TOPIC), recall_handle="x"))
        assert bad.status.code == d.BAD_REQUEST
        assert wait_for(lambda: len(_served(rc, b)) == 1, timeout=15, step=0.1)
        time.sleep(1.5)
        assert [m.body for m in _served(rc, b)] == [b"keep"]
    with BrokerProcess(tmp_path / "store2", conf=TEST_CONF) as b, RawClient(grpc_addr(b)) as c:
        h = c.send(TOPIC, b"x", delivery_timestamp=_ts(int(time.time() * 1000) + 60_000)).entries[0].recall_handle
        off = c.call("RecallMessage", s.RecallMessageRequest(topic=d.Resource(name=TOPIC), recall_handle=h))
        assert off.status.code == d.FORBIDDEN
