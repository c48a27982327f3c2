"""The dashboard's figures are the broker's: the disk ratio beside mqadmin brokerStatus's
commitLogDiskRatio and /metrics' gauge, the queue count beside mqadmin topicStatus, a topic's queue
counts and messages kept beside its route and topicStatus, a group's lag beside consumerProgress,
its waiting retries and dead letters beside topicStatus of its %RETRY% and %DLQ% topics, and its
dead-letter limit beside what the broker applied to its client's send-back; and the broker page's
version, uptime, put/get TPS, cluster membership and consumer groups online beside what mqadmin
brokerStatus, clusterList, consumerProgress and consumerConnection print -- on a real mqbroker."""
from __future__ import annotations

import contextlib
import html
import io
import json
import re
import urllib.request

import pytest

from mqcore.admin.api import MQAdmin
from mqcore.admin.cli import main as mqadmin_main
from mqcore.client import ConsumeStatus, Message, Producer, PullConsumer, PullStatus, PushConsumer
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


def _mqadmin(namesrv: str, *argv: str) -> str:
    """What ``mqadmin argv -n namesrv`` prints (mqcore's own tool, run in this process)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = mqadmin_main([*argv, "-n", namesrv], out=out)
    assert rc == 0, f"mqadmin {' '.join(argv)}: {err.getvalue()}"
    return out.getvalue()


def _broker_status(namesrv: str, addr: str) -> dict[str, str]:
    """``mqadmin brokerStatus -b addr``'s ``key : value`` lines."""
    out = {}
    for line in _mqadmin(namesrv, "brokerStatus", "-b", addr).splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def _seconds(runtime: str) -> int:
    """``[ 0 days, 0 hours, 1 minutes, 5 seconds ]`` -> 65."""
    d, h, m, s = (int(x) for x in re.fullmatch(
        r"\[ (\d+) days, (\d+) hours, (\d+) minutes, (\d+) seconds \]", runtime).groups())
    return ((d * 24 + h) * 60 + m) * 60 + s


def _span(page: str, ident: str) -> str:
    return html.unescape(re.search(rf'id="{ident}"[^>]*>([^<]*)<', page).group(1))


def test_broker_page_version_uptime_rates_and_members_agree_with_mqadmin(tmp_path):
    dash = free_port()
    got: list = []
    with BrokerProcess(tmp_path / "store", conf={"dashboardPort": dash}) as b, \
            MQAdmin(b.namesrv_addr) as admin:
        admin.create_topic(b.broker_addr, "Rates", read_queue_nums=4, write_queue_nums=4)
        assert wait_for(lambda: "Rates" in admin.topic_list(), 20)
        admin.create_group(b.broker_addr, "idle-cg")  # a group with no member: configured, not online
        c = PushConsumer("rates-cg", namesrv_addr=b.namesrv_addr, consume_from_where="first",
                         heartbeat_broker_interval_ms=300, rebalance_interval_ms=500)
        c.subscribe("Rates", "*")

        @c.register_listener
        def on(msgs, ctx):
            got.extend(msgs)
            return ConsumeStatus.CONSUME_SUCCESS

        with Producer("rates-pg", namesrv_addr=b.namesrv_addr) as p:
            c.start()
            try:
                for i in range(200):
                    p.send(Message("Rates", b"r%d" % i))
                assert wait_for(lambda: len(got) >= 200, 60)

                # rates and uptime: sampled once a second, so the page is read between two
                # brokerStatus (and a clusterList) reads and compared when the broker's figures
                # did not move in between (the page then shows that very sample)
                def bracketed():
                    before = _broker_status(b.namesrv_addr, b.broker_addr)
                    page = _get(f"http://127.0.0.1:{dash}/")
                    listed = json.loads(_mqadmin(b.namesrv_addr, "clusterList", "--json"))
                    after = _broker_status(b.namesrv_addr, b.broker_addr)
                    keys = ("putTps", "getTransferedTps", "runtime")
                    if any(before[k] != after[k] for k in keys) or "0.00" in (
                            before["putTps"].split()[1], before["getTransferedTps"].split()[1]):
                        return None  # moved in between, or the burst not yet in a sampled window
                    return before, page, listed
                seen: list = []
                assert wait_for(lambda: seen.append(bracketed()) or seen[-1], 30, 0.2)
                status, page, listed = seen[-1]
                put, get = _span(page, "put-tps"), _span(page, "get-tps")
                assert (put, get) == (status["putTps"], status["getTransferedTps"])
                # over the last minute 200 were put and delivered (non-zero, as waited for above): a
                # page showing 0, or another rate (getFoundTps counts pull requests, not messages), differs
                assert re.search(r'<p class="big">([0-9.]+) / ([0-9.]+)</p>', page).groups() == (
                    put.split()[0], get.split()[0])
                (row,) = [r for r in listed if r["addr"] == b.broker_addr]
                assert f"{float(put.split()[0]):9.2f}".strip() == f"{float(row['runtime']['putTps'].split()[0]):.2f}"
                # version: brokerStatus' and clusterList's #Version
                assert _span(page, "version") == status["brokerVersionDesc"] == row["runtime"]["brokerVersionDesc"]
                # uptime: the same text as brokerStatus' runtime, counted from its bootTimestamp
                assert _span(page, "uptime") == status["runtime"]
                assert _seconds(status["runtime"]) >= 1
                assert re.search(r'id="boot" data-ms="(\d+)"', page).group(1) == status["bootTimestamp"]
                # membership: the cluster and address clusterList lists this broker under
                assert (_span(page, "cluster"), _span(page, "addr")) == (row["cluster"], row["addr"])
                assert (row["brokerName"], row["brokerId"]) == (b.broker_name, 0)
                assert f"<h1>Broker {row['brokerName']}</h1>" in page

                # members: consumer groups online as consumerProgress counts their connections,
                # and each group's members as consumerConnection lists them
                def members_agree():
                    page = _get(f"http://127.0.0.1:{dash}/")
                    progress = json.loads(_mqadmin(b.namesrv_addr, "consumerProgress", "--json"))
                    online = sorted(r["group"] for r in progress if r["count"])
                    groups_page = html.unescape(_get(f"http://127.0.0.1:{dash}/groups"))
                    shown = dict(re.findall(r'<a href="/groups/[^"]*">([^<]*)</a></td><td class="num">(\d+)</td>',
                                            groups_page))
                    counted = {g: str(len(admin.consumer_connection(g).connections)) for g in online}
                    return (int(_span(page, "groups-online")) == len(online) and online == ["rates-cg"]
                            and int(_span(page, "group-count")) >= 2
                            and all(shown.get(g) == n for g, n in counted.items()) and counted == {"rates-cg": "1"})
                assert wait_for(members_agree, 20, 0.3)
            finally:
                c.shutdown()
