"""TopicRouteData parsing and the views derived from it."""
from __future__ import annotations

import pytest

from mqcore.client.route import (
    TopicRouteData,
    route_to_publish_info,
    route_to_subscribe_info,
)
from mqcore.errors import ProtocolError
from mqcore.remoting.bodies import MessageQueue

QUOTED = (b'{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"b",'
          b'"cluster":"C"},{"brokerAddrs":{"0":"10.0.0.3:10911"},"brokerName":"a","cluster":"C"}],'
          b'"filterServerTable":{},"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":2,"topicSysFlag":0,'
          b'"writeQueueNums":3},{"brokerName":"a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}')
UNQUOTED = QUOTED.replace(b'"0":', b"0:").replace(b'"1":', b"1:")


@pytest.mark.parametrize("body", [QUOTED, UNQUOTED])
def test_decode_both_key_styles(body):
    route = TopicRouteData.decode(body)
    assert [q.broker_name for q in route.queue_datas] == ["a", "b"]
    b = route.broker("b")
    assert b is not None and b.broker_addrs == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
    assert b.master_addr == "10.0.0.1:10911"


def test_decode_ignores_unknown_fields_and_go_typo():
    body = (b'{"brokerDatas":[{"brokerAddrs":{"0":"x:1"},"brokerName":"a","cluster":"C","zoneName":"z"}],'
            b'"queueDatas":[{"brokerName":"a","perm":6,"readQueueNums":1,"topicSynFlag":3,"writeQueueNums":1}],'
            b'"topicQueueMappingByBroker":{}}')
    route = TopicRouteData.decode(body)
    assert route.queue_datas[0].topic_sys_flag == 3


def test_decode_rejects_garbage():
    with pytest.raises(ProtocolError):
        TopicRouteData.decode(b"[1,2]")
    with pytest.raises(ProtocolError):
        TopicRouteData.decode(b'{"queueDatas":[{"perm":6}]}')


def test_publish_info_uses_write_queues_of_brokers_with_masters():
    route = TopicRouteData.decode(QUOTED)
    info = route_to_publish_info("T", route)
    assert [(q.broker_name, q.queue_id) for q in info.message_queues] == [
        ("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1), ("b", 2)]
    assert info.write_queue_nums("b") == 3 and info.write_queue_nums("zzz") == -1
    slave_only = UNQUOTED.replace(b'{0:"10.0.0.3:10911"}', b'{2:"10.0.0.3:10911"}')
    queues = route_to_publish_info("T", TopicRouteData.decode(slave_only)).message_queues
    assert {q.broker_name for q in queues} == {"b"}  # broker "a" has no master: not writable


def test_publish_info_skips_read_only_brokers_and_subscribe_skips_write_only():
    body = QUOTED.replace(b'"brokerName":"a","perm":6', b'"brokerName":"a","perm":4').replace(
        b'"brokerName":"b","perm":6', b'"brokerName":"b","perm":2')
    route = TopicRouteData.decode(body)
    assert {q.broker_name for q in route_to_publish_info("T", route).message_queues} == {"b"}
    assert {q.broker_name for q in route_to_subscribe_info("T", route)} == {"a"}


def test_subscribe_info_uses_read_queues():
    subs = route_to_subscribe_info("T", TopicRouteData.decode(QUOTED))
    assert MessageQueue("T", "b", 1) in subs and MessageQueue("T", "b", 2) not in subs
    assert len(subs) == 6


def test_order_topic_conf():
    route = TopicRouteData.decode(QUOTED.replace(b'"filterServerTable":{}',
                                                  b'"filterServerTable":{},"orderTopicConf":"a:2;b:1"'))
    info = route_to_publish_info("T", route)
    assert info.order_topic
    assert [(q.broker_name, q.queue_id) for q in info.message_queues] == [("a", 0), ("a", 1), ("b", 0)]


def test_tbw102_route_is_capped():
    capped = TopicRouteData.decode(QUOTED).with_queue_nums_capped(3)
    assert [(q.read_queue_nums, q.write_queue_nums) for q in capped.queue_datas] == [(3, 3), (2, 2)]


def test_a_route_refresh_in_flight_at_shutdown_leaves_no_stray_task_warning(tmp_path):
    """A consumer shut down while its periodic route refreshes wait on a name server that never
    answers: each request fails as its connection closes, with nobody awaiting it any more.
    asyncio used to print "Task exception was never retrieved" for each at exit."""
    import socket
    import subprocess
    import sys
    import textwrap
    with socket.socket() as silent:  # accepts and reads, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        script = textwrap.dedent(f"""
            import gc, time
            from mqcore.client import PushConsumer
            c = PushConsumer("stray-cg", namesrv_addr="127.0.0.1:{port}", mq_client_api_timeout_ms=6000,
                             poll_name_server_interval_ms=200)
            c.subscribe("StrayTopic", "*")
            c.register_listener(lambda msgs, ctx: None)
            c.start()
            remoting = c._instance.api.remoting
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:  # refreshes in flight on the name server's connection
                ch = remoting.connected("127.0.0.1:{port}")
                if ch is not None and ch.inflight_count >= 1:
                    break
                time.sleep(0.02)
            else:
                raise SystemExit("no route refresh went out")
            c.shutdown()
            gc.collect()
            print("DONE")
        """)
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
    assert "DONE" in r.stdout, r.stdout + r.stderr
    assert "was never retrieved" not in r.stderr, r.stderr
