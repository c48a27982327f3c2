"""Request-reply at the wire: mqbroker answers SEND_REPLY_MESSAGE(_V2) as Apache RocketMQ
4.9.7 does. The same scenario (tests/support/reply_scenarios.py: well-formed replies, a
missing or unknown requester, a requester that refuses or never answers, malformed headers)
runs against the Java broker and mqbroker; codes, push contents, stored replies and queue
offsets must agree."""
from __future__ import annotations

import asyncio

from tests.support import reply_scenarios as rs
from tests.support.processes import BrokerProcess
from tests.support.reference import JavaBroker, JavaNamesrv

#: refused by the header reader or the name guard: Apache's remark names a Java exception and
#: its answer carries MSG_REGION/TRACE_ON; mqbroker's names the field. The code is the same.
_REMARK_AND_KEYS_DIFFER = {"bad_queue_id_type", "bad_born_timestamp", "missing_topic_field", "illegal_topic_name",
                           "queue_id_out_of_range"}


def test_reply_wire_matches_java_broker(tmp_path):
    with JavaNamesrv(tmp_path / "ns") as ns, JavaBroker(tmp_path / "java", ns.addr) as jb:
        java = asyncio.run(rs.run(jb.addr, "DefaultCluster", include_silent=True))
    with BrokerProcess(tmp_path / "mq") as b:
        ours = asyncio.run(rs.run(b.broker_addr, "DefaultCluster", include_silent=True))
    assert java.outcomes.keys() == ours.outcomes.keys()
    for name, expected in java.outcomes.items():
        got = ours.outcomes[name]
        assert got.code == expected.code, (name, got, expected)
        assert got.queue_offset == expected.queue_offset, (name, got, expected)
        assert got.pushed == expected.pushed, (name, got.pushed, expected.pushed)
        if name not in _REMARK_AND_KEYS_DIFFER:
            assert got.remark == expected.remark, (name, got, expected)
            assert got.answer_keys == expected.answer_keys, (name, got, expected)
    # the silent requester: both wait about 10 s for the push's answer, then refuse the reply
    assert 9 < java.outcomes[rs.SILENT].elapsed_s < 15 and 9 < ours.outcomes[rs.SILENT].elapsed_s < 15
    assert ours.stored.keys() == java.stored.keys()
    for topic, records in java.stored.items():
        assert len(ours.stored[topic]) == len(records), topic
        for (got_props, got_body), (props, body) in zip(ours.stored[topic], records):
            assert (got_props, got_body) == (props, body), (topic, set(got_props.items()) ^ set(props.items()))
    assert len(java.stored["DefaultCluster_REPLY_TOPIC"]) == 8
