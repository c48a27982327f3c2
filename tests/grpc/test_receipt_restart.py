"""Receipt handles outlive a broker restart: a handle issued before it still acks its message
and still changes its invisible duration; a handle of a message already done is harmless."""
from __future__ import annotations

from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.rawclient import RawClient, d
from tests.support.processes import BrokerProcess


def test_handles_survive_a_restart(tmp_path):
    # SYNC_FLUSH: the endpoint's puts go through the broker's put pool, as the 4.x sends do
    with BrokerProcess(tmp_path / "store", conf={**TEST_CONF, "flushDiskType": "SYNC_FLUSH"}) as b:
        with RawClient(grpc_addr(b)) as c:
            for body in (b"one", b"two", b"three"):
                assert c.send("Restart5", body, message_id=f"01{body.hex():0>32}").status.code == d.OK
            status, got = c.receive("Restart5", "GR", invisible_ms=60_000)
            assert status.code == d.OK and sorted(m.body for m in got) == [b"one", b"three", b"two"]
            by_body = {m.body: m for m in got}
            assert c.ack("Restart5", "GR", by_body[b"three"]).status.code == d.OK
        b.restart()
        with RawClient(grpc_addr(b)) as c:
            # "one" acked with its old handle; "two" made invisible again with its old handle
            assert c.ack("Restart5", "GR", by_body[b"one"]).status.code == d.OK
            changed = c.change_invisible("Restart5", "GR", by_body[b"two"], 60_000)
            assert changed.status.code == d.OK and changed.receipt_handle
            # acking "three" again (done before the restart) is harmless
            assert c.ack("Restart5", "GR", by_body[b"three"]).status.code == d.OK
            status, again = c.receive("Restart5", "GR", polling_ms=1500)
            assert status.code == d.MESSAGE_NOT_FOUND and again == []
            two = d.Message()
            two.CopyFrom(by_body[b"two"])
            two.system_properties.receipt_handle = changed.receipt_handle
            assert c.ack("Restart5", "GR", two).status.code == d.OK
        b.restart()
        with RawClient(grpc_addr(b)) as c:
            # everything was acked: the committed offset says so after another restart
            status, again = c.receive("Restart5", "GR", polling_ms=1500)
            assert status.code == d.MESSAGE_NOT_FOUND, [m.body for m in again]
