"""5.x traffic shows on the broker's Prometheus endpoint as 4.x traffic does: sends counted per
topic with their bytes and put latency, receives as messages out per group, a forward to
the DLQ as a send-back, and the runtime throughput (``putTps``) that ``brokerStatus`` shows."""
from __future__ import annotations

import datetime
import time

from mqcore.admin import MQAdmin
from tests.broker.test_metrics import free_port, scrape, value
from tests.grpc.conftest import TEST_CONF, grpc_addr
from tests.grpc.rawclient import RawClient, d, s
from tests.support.processes import BrokerProcess

TOPIC = "Metric5"
GROUP = "GMetric5"


def test_grpc_sends_and_receives_are_counted(tmp_path):
    port = free_port()
    with BrokerProcess(tmp_path / "store", conf={**TEST_CONF, "metricsPort": port}) as b:
        with RawClient(grpc_addr(b)) as c:
            before = scrape(port)
            assert "rocketmq_messages_in_total" not in before  # nothing was sent yet
            latency_before = value(before, "rocketmq_put_latency_seconds_count")
            for i in range(3):
                assert c.send(TOPIC, b"y" * 200, tag="t").status.code == d.OK
            timed = c.send(TOPIC, b"later", delivery_timestamp=_in_an_hour())
            assert timed.status.code == d.OK
            status, got = c.receive(TOPIC, GROUP, invisible_ms=60_000)
            assert status.code == d.OK and len(got) == 3
            req = s.ForwardMessageToDeadLetterQueueRequest(
                group=d.Resource(name=GROUP), topic=d.Resource(name=TOPIC),
                receipt_handle=got[0].system_properties.receipt_handle,
                message_id=got[0].system_properties.message_id, delivery_attempt=1, max_delivery_attempts=16)
            assert c.call("ForwardMessageToDeadLetterQueue", req).status.code == d.OK
            hb = s.HeartbeatRequest(group=d.Resource(name=GROUP), client_type=d.SIMPLE_CONSUMER)
            assert c.call("Heartbeat", hb).status.code == d.OK

        m = scrape(port)
        # under the topic the client named, the timed one included (it waits in the timer topic)
        assert value(m, "rocketmq_messages_in_total", topic=TOPIC) == 4
        assert value(m, "rocketmq_throughput_in_total", topic=TOPIC) > 3 * 200
        assert value(m, "rocketmq_put_latency_seconds_count") >= latency_before + 4
        assert value(m, "rocketmq_messages_out_total", topic=TOPIC, group=GROUP) == 3
        assert value(m, "rocketmq_throughput_out_total", topic=TOPIC, group=GROUP) > 3 * 200
        assert value(m, "rocketmq_send_back_messages_total", group=GROUP, to="dlq") == 1
        assert value(m, "rocketmq_messages_in_total", topic="%DLQ%" + GROUP) == 1
        assert value(m, "rocketmq_grpc_clients", client_type="SIMPLE_CONSUMER") == 1

        # brokerStatus's putTps: rates between once-a-second samples of the store's offsets, so
        # sends are kept coming until a sample has seen some
        admin = MQAdmin(b.namesrv_addr)
        try:
            with RawClient(grpc_addr(b)) as c:
                deadline = time.monotonic() + 20
                while True:
                    assert c.send(TOPIC, b"z").status.code == d.OK
                    tps = admin.broker_runtime_stats(b.broker_addr)["putTps"]
                    if float(tps.split()[0]) > 0 or time.monotonic() > deadline:
                        break
                    time.sleep(0.2)
        finally:
            admin.close()
        assert float(tps.split()[0]) > 0, tps


def _in_an_hour() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
