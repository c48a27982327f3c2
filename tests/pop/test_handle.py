"""Receipt handles (RocketMQ 5's format, one for gRPC and remoting): what the broker issues
decodes back to the same fields; what a 5.x remoting client or proxy builds (8 or 9 fields)
decodes; anything else is refused with IllegalArgumentError."""
from __future__ import annotations

import pytest

from mqcore.errors import IllegalArgumentError
from mqcore.pop.handle import (POP_ORDER_REVIVE_QUEUE, TYPE_NORMAL, TYPE_RETRY, PopHandle, msg_offset_info,
                               order_count_info, pop_retry_topic, start_offset_info)


@pytest.mark.parametrize("kind", [TYPE_NORMAL, TYPE_RETRY])
def test_round_trip(kind):
    h = PopHandle(1230, 1_795_000_000_000, 30_000, 0, kind, "broker-a", 3, 1234, 987_654_321)
    assert PopHandle.decode(h.encode()) == h
    assert h.deadline_ms == 1_795_000_030_000
    assert h.store_topic("G", "T") == ("T" if kind == TYPE_NORMAL else "%RETRY%G_T")


def test_a_remoting_clients_handle_has_no_commitlog_offset():
    # what MQClientAPIImpl builds from a pop answer: ExtraInfoUtil's 8 fields
    h = PopHandle.decode("5 1795000000000 60000 999 1 broker-a 0 7")
    assert (h.ck_offset, h.queue_offset, h.commitlog_offset, h.retry, h.orderly) == (5, 7, -1, True, True)
    assert h.encode() == "5 1795000000000 60000 999 1 broker-a 0 7"
    assert h.revive_qid == POP_ORDER_REVIVE_QUEUE


@pytest.mark.parametrize("text", ["", "1", "garbage with spaces but not eight", "1 N 0 0 0 0 0 1 b",
                                  "0 0 0 0 3 b 0 0", "0 0 0 0 0  0 0", "x 0 0 0 0 b 0 0", "0 0 0 0 0 b 0 -1",
                                  "0 0 0 0 0 b 0 0 -2", "0 0 0 0 0 b 0 0 0 extra"])
def test_foreign_handles_are_refused(text):
    with pytest.raises(IllegalArgumentError):
        PopHandle.decode(text)


def test_answer_header_infos():
    retry = pop_retry_topic("G", "T")
    assert start_offset_info([(retry, 0, 4), ("T", 2, 10)]) == "1 0 4;0 2 10"
    assert msg_offset_info([(retry, 0, [4, 5]), ("T", 2, [10])]) == "1 0 4,5;0 2 10"
    assert order_count_info([("T", 1, 5, 2), ("T", 1, 6, 0)]) == "0 qo1%5 2;0 qo1%6 0"
