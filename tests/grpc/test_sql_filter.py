"""SQL92 receives for 5.x consumers, served as 4.x SQL92 pulls are: only with
``enablePropertyFilter=true``; matched on the message's properties (user properties and the
tag); an expression that does not parse answers ``ILLEGAL_FILTER_EXPRESSION``."""
from __future__ import annotations

from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.rawclient import RawClient, d, s
from tests.support.processes import BrokerProcess


def test_sql92_receive(tmp_path):
    with BrokerProcess(tmp_path / "store", conf={**TEST_CONF, "enablePropertyFilter": "true"}) as b:
        with RawClient(grpc_addr(b)) as c:
            for i, tag in ((1, "odd"), (2, "even"), (3, "odd")):
                assert c.send("Sql5", f"m{i}".encode(), tag=tag).status.code == d.OK
            m = d.Message(topic=d.Resource(name="Sql5"), body=b"m4", user_properties={"a": "4"})
            m.system_properties.message_id = "01SQL00000000000000000000000000004"
            m.system_properties.tag = "even"
            assert c.call("SendMessage", s.SendMessageRequest(messages=[m])).status.code == d.OK
            status, got = c.receive("Sql5", "GSql", sql="TAGS = 'even' AND a IS NOT NULL", polling_ms=2000)
            assert status.code == d.OK and [m.body for m in got] == [b"m4"]
            status, got = c.receive("Sql5", "GSqlOdd", sql="TAGS = 'odd'", polling_ms=2000)
            assert status.code == d.OK and sorted(m.body for m in got) == [b"m1", b"m3"]
            bad = c.receive("Sql5", "GSql", sql="a >>> 1")[0]
            assert bad.code == d.ILLEGAL_FILTER_EXPRESSION and "a >>> 1" in bad.message


def test_sql92_receive_refused_when_the_property_filter_is_off(module_grpc_broker):
    with RawClient(module_grpc_broker.grpc_addr) as c:
        assert c.send("SqlOff5", b"x").status.code == d.OK
        status = c.receive("SqlOff5", "GSqlOff", sql="a = 1")[0]
        assert status.code == d.UNSUPPORTED and "enablePropertyFilter" in status.message
