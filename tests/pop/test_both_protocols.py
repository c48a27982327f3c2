"""One pop state behind both protocols: a message received over gRPC is invisible to a remoting
POP_MESSAGE of the same group (and the reverse), and a handle issued on one is acked on the
other (one receipt handle format)."""
from __future__ import annotations

from mqcore.remoting import ResponseCode as R
from mqcore.remoting import SyncRemotingClient
from tests.broker.test_pop_remoting import ack, handles, pop
from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.rawclient import RawClient, d
from tests.support.processes import BrokerProcess


def test_grpc_and_remoting_pops_share_one_state(tmp_path):
    with BrokerProcess(tmp_path / "store", conf=TEST_CONF) as b, SyncRemotingClient() as rc:
        with RawClient(grpc_addr(b)) as c:
            assert c.send("Both5", b"over-grpc").status.code == d.OK
            status, got = c.receive("Both5", "GBoth", invisible_ms=3000)
            assert status.code == d.OK and [m.body for m in got] == [b"over-grpc"]
            # in flight for the group, whichever protocol asks
            assert pop(rc, b, "Both5", group="GBoth").code == R.POLLING_TIMEOUT
            # the gRPC handle acks over remoting
            (m_grpc,) = got
            assert c.send("Both5", b"over-remoting").status.code == d.OK
            resp = pop(rc, b, "Both5", group="GBoth", invisible_ms=3000, poll_ms=3000)
            ((m, extra),) = handles(resp, "broker-a")
            assert m.body == b"over-remoting"
            status, none = c.receive("Both5", "GBoth", polling_ms=500)
            assert status.code == d.MESSAGE_NOT_FOUND and none == []
            handle = m_grpc.system_properties.receipt_handle.split(" ")
            qid, qoff = int(handle[6]), int(handle[7])

            class Popped:  # what ack() needs of a message
                queue_id, queue_offset = qid, qoff
            assert ack(rc, b, "Both5", Popped, m_grpc.system_properties.receipt_handle, group="GBoth").code == R.SUCCESS
            # and the remoting handle acks over gRPC
            msg = d.Message()
            msg.system_properties.message_id = "x"
            msg.system_properties.receipt_handle = extra
            assert c.ack("Both5", "GBoth", msg).status.code == d.OK
            # both done: nothing comes back after their invisible times
            status, again = c.receive("Both5", "GBoth", polling_ms=5000)
            assert status.code == d.MESSAGE_NOT_FOUND, [x.body for x in again]
            assert b.proc.poll() is None
