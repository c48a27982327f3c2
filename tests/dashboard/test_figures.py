"""The dashboard's figures are the broker's: the disk ratio beside mqadmin brokerStatus's
commitLogDiskRatio and /metrics' gauge, the queue count beside mqadmin topicStatus, a topic's queue
counts and messages kept beside its route and topicStatus, a group's lag beside consumerProgress,
its waiting retries and dead letters beside topicStatus of its %RETRY% and %DLQ% topics, and its
dead-letter limit beside what the broker applied to its client's send-back -- on a real mqbroker."""
from __future__ import annotations

import html
import re
import urllib.request

import pytest

from mqcore.admin.api import MQAdmin
from mqcore.client import Message, Producer, PullConsumer, PullStatus
from tests.support.processes import BrokerProcess
from mqcore.errors import MQError, NoRouteError
from tests.support.waiting import free_port, wait_for

pytestmark = [pytest.mark.timeout(120)]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode("utf-8")


def _when_routed(call):
    got = []

    def attempt():
        try:
            got.append(call())
            return True
        except NoRouteError:
            return False
    assert wait_for(attempt, 20)
    return got[0]


def test_broker_topic_and_group_figures_agree_with_mqadmin_and_metrics(tmp_path):
    dash, metrics = free_port(), free_port()
    with BrokerProcess(tmp_path / "store", conf={"dashboardPort": dash, "metricsPort": metrics}) as b, \
            MQAdmin(b.namesrv_addr) as admin:
        admin.create_topic(b.broker_addr, "Figures", read_queue_nums=8, write_queue_nums=8)
        assert wait_for(lambda: "Figures" in admin.topic_list(), 20)  # the broker registers it soon after
        with Producer("fig-producer", namesrv_addr=b.namesrv_addr) as p:
            sent = p.send(Message("Figures", b"one", keys=["fig-1"]))  # one queue of eight holds data
        # disk: the page, brokerStatus and /metrics in the same second (a ratio moves by far less)
        page = _get(f"http://127.0.0.1:{dash}/")
        status = admin.broker_runtime_stats(b.broker_addr)
        scraped = _get(f"http://127.0.0.1:{metrics}/metrics")
        shown = float(re.search(r'<td class="ratio" data-ratio="([0-9.eE+-]+)"', page).group(1))
        gauge = float(re.search(r"^rocketmq_brokeruntime_commitlog_disk_ratio\{[^}]*\} ([0-9.eE+-]+)$",
                                scraped, re.M).group(1))
        assert shown == pytest.approx(float(status["commitLogDiskRatio"]), abs=0.002)
        assert shown == pytest.approx(gauge, abs=0.002)
        # queues: every queue mqadmin topicStatus lists, holding data or not
        queues = int(re.search(r'<span id="queue-count">(\d+)</span>', page).group(1))
        assert queues == sum(len(admin.topic_stats(t)) for t in admin.topic_list())
        assert queues >= 8
        # the topic page's queues: mqadmin topicStatus's, queue by queue
        topic_page = _get(f"http://127.0.0.1:{dash}/topics/Figures")
        rows = re.findall(r'<tr><td class="num">(\d+)</td><td class="num">(\d+)</td><td class="num">(\d+)</td>',
                          topic_page)
        stats = admin.topic_stats("Figures")
        assert sorted((int(q), int(lo), int(hi)) for q, lo, hi in rows) == sorted(
            (o.queue_id, o.min_offset, o.max_offset) for o in stats)
        assert sum(o.max_offset for o in stats) == 1
        # a group whose client sends its own maxReconsumeTimes (1): the page says 1, not 16
        group = "fig-group"
        with PullConsumer(group, namesrv_addr=b.namesrv_addr, max_reconsume_times=1) as pc:
            mq = next(q for q in pc.fetch_subscribe_message_queues("Figures")
                      if q.queue_id == sent.message_queue.queue_id)
            r = pc.pull(mq, "*", 0, 32)
            assert r.status is PullStatus.FOUND
            pc.send_message_back(r.messages[0], 0)
            pc.send_message_back(r.messages[0], 0)  # the copy: reconsume 0 < 1 -> retry; then DLQ is the broker's call
            pc.send_message_back(r.messages[0], -1)  # and one straight to the dead-letter queue
            for q in pc.fetch_subscribe_message_queues("Figures"):
                pc.update_consume_offset(q, 0)
            pc.commit()
        group_page = html.unescape(_get(f"http://127.0.0.1:{dash}/groups/{group}"))
        # its lag: mqadmin consumerProgress's diff over the group's topics (retry topics apart)
        stats = _when_routed(lambda: admin.consume_stats(group))  # the retry topic's route is registered soon
        want = sum(r.diff for r in stats.rows if not r.topic.startswith("%RETRY%"))
        assert want == 1 and re.search(r'id="total-lag">(\d+)<', group_page).group(1) == str(want)
        assert "dead letter after 1 retries (the maxReconsumeTimes its client sent" in group_page, group_page
        # its waiting retries and dead letters: what mqadmin topicStatus counts in its %RETRY% and
        # %DLQ% topics (a retry waits out its delay first: compared until the two agree, then
        # the three copies must be counted, one of them dead)
        def kept(topic):
            try:
                return sum(o.max_offset - o.min_offset for o in admin.topic_stats(topic))
            except (NoRouteError, MQError):  # no such topic (yet)
                return 0

        def cards():
            page = html.unescape(_get(f"http://127.0.0.1:{dash}/groups/{group}"))
            shown = tuple(int(re.search(rf'id="{c}">(\d+)<', page).group(1)) for c in ("retry", "dlq"))
            want = (kept(f"%RETRY%{group}"), kept(f"%DLQ%{group}"))
            return shown if shown == want and shown[1] == 1 and sum(shown) == 3 else None
        assert wait_for(cards, 30, 0.5), cards()
        # the topics table: queue counts as the route has them, messages kept as topicStatus sums them
        row = re.search(r'<a href="/topics/Figures">Figures</a></td><td>[^<]*</td><td class="num">(\d+) / (\d+)</td>'
                        r'<td>[^<]*</td>\s*<td class="num">(\d+)</td>', _get(f"http://127.0.0.1:{dash}/topics"))
        (q,) = admin.topic_route("Figures").queue_datas
        assert row and tuple(int(x) for x in row.groups()) == (q.read_queue_nums, q.write_queue_nums, kept("Figures"))
        other = html.unescape(_get(f"http://127.0.0.1:{dash}/groups/never-retried"))
        assert "dead letter after 16 retries (the group's retryMaxTimes" in other
