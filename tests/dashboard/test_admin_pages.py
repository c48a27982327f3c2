"""The dashboard's pages at parity with rocketmq-dashboard, on one real mqbroker process driven
in headless Chromium, with real mqcore clients: the message-trace view (compared with mqadmin
queryMsgTraceById), a test send (its SendResult read back by a consumer), topic config edit and
subscription group create/edit/delete (compared with what the admin RPCs answer mqadmin), a topic
deleted only after its question is answered yes, the
producer view, a consumer's running info and consume-directly (forwarded to the client), and
a DLQ batch resend and export. Every change asks first, and every new POST needs the Origin.

Each page is shot at 1024 and 390 px and must not scroll sideways at either; the screenshots go
to ``$MQCORE_DASHBOARD_SCREENSHOTS`` when set (else a temp dir), as in test_dashboard_browser.py.
"""
from __future__ import annotations

import contextlib
import datetime
import html
import io
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

from mqcore.admin import MQAdmin
from mqcore.admin.cli import main as mqadmin_main
from mqcore.admin.tools_api import AdminTools
from mqcore.errors import BrokerError
from mqcore.client import ConsumeStatus, Message, Producer, PullConsumer, PullStatus, PushConsumer
from mqcore.remoting import RequestCode
from tests.dashboard.browser import shoot, start_browser, text_of
from tests.support.processes import BrokerProcess
from tests.support.waiting import free_port, wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    port = free_port()
    store = tmp_path_factory.mktemp("dashboard-admin") / "store"
    with BrokerProcess(store, conf={"dashboardPort": port, "flushIntervalCommitLog": 100}) as b:
        b.dashboard = f"http://127.0.0.1:{port}"
        _make_chart_group(b.namesrv_addr)
        with MQAdmin(b.namesrv_addr) as admin:
            _make_queue_topic(admin, b)
            b.admin = admin
            yield b


@pytest.fixture(scope="module")
def browser():
    driver = start_browser()
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    where = os.environ.get("MQCORE_DASHBOARD_SCREENSHOTS") or str(tmp_path_factory.mktemp("shots"))
    os.makedirs(where, exist_ok=True)
    return where


def _shoot(driver, shots, name):
    """Taken whether or not the screenshots are kept: neither width may scroll sideways."""
    shoot(driver, shots, name)


def answer_dialog(driver, accept: bool) -> str:
    alert = WebDriverWait(driver, 5).until(lambda d: d.switch_to.alert)
    text = alert.text
    alert.accept() if accept else alert.dismiss()
    return text


def _get(url: str) -> tuple[int, str, dict]:
    try:
        with urllib.request.urlopen(url, timeout=15) as r:
            return r.status, r.read().decode(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), dict(e.headers)


def _post(base: str, path: str, fields, origin: str | None = "same") -> tuple[int, str]:
    data = urllib.parse.urlencode(fields).encode()
    headers = {} if origin is None else {"Origin": base if origin == "same" else origin}
    req = urllib.request.Request(base + path, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, html.unescape(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, html.unescape(e.read().decode())


def _mqadmin_trace(namesrv: str, msg_id: str) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stderr(io.StringIO()):
        mqadmin_main(["queryMsgTraceById", "-n", namesrv, "-i", msg_id, "--json"], out)
    return json.loads(out.getvalue() or "[]")


def _utc(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _rows(driver, css):
    return [[td.text for td in tr.find_elements(By.TAG_NAME, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, f"{css} tr")[1:]]


# --- 1. message traces ----------------------------------------------------------------------------------
def test_the_trace_view_shows_what_mqadmin_query_msg_trace_by_id_prints(live, browser, shots):
    with Producer("dash-traced-pg", namesrv_addr=live.namesrv_addr, enable_msg_trace=True) as p:
        sent = p.send(Message("DashTraced", b"traced", tags="TagT", keys=["trace-1"]))
    got = threading.Event()
    c = PushConsumer("dash-traced-cg", namesrv_addr=live.namesrv_addr, enable_msg_trace=True,
                     consume_from_where="first")
    c.subscribe("DashTraced")
    c.register_listener(lambda msgs, ctx: (got.set(), ConsumeStatus.CONSUME_SUCCESS)[1])
    with c:
        assert got.wait(60)

        def traced():
            views = _mqadmin_trace(live.namesrv_addr, sent.msg_id)
            return views if {"Pub", "SubBefore", "SubAfter"} <= {v["type"] for v in views} else None
        assert wait_for(traced, 30)
    views = traced()
    browser.get(f"{live.dashboard}/traces")
    form = browser.find_element(By.ID, "trace-search")
    form.find_element(By.NAME, "msg_id").send_keys(sent.msg_id)
    form.find_element(By.CSS_SELECTOR, "button").click()
    WebDriverWait(browser, 10).until(lambda b: "msg_id=" in b.current_url)
    pub = next(v for v in views if v["type"] == "Pub")
    assert _rows(browser, "#trace-pub") == [["Pub", pub["groupName"], pub["clientHost"], _utc(pub["timestamp"]),
                                             f"{pub['costTime']}ms", pub["status"], "DashTraced", "TagT",
                                             "trace-1", pub["storeHost"], pub["offsetMsgId"]]]
    assert pub["groupName"] == "dash-traced-pg" and pub["status"] == "success"
    sub = browser.find_element(By.CSS_SELECTOR, '.trace-sub[data-group="dash-traced-cg"]')
    shown = [[td.text for td in tr.find_elements(By.TAG_NAME, "td")] for tr in sub.find_elements(By.TAG_NAME, "tr")[1:]]
    expect = [["Sub" if v["type"] == "SubAfter" else "SubBefore", v["groupName"], v["clientHost"], _utc(v["timestamp"]),
               f"{v['costTime']}ms" if v["type"] == "SubAfter" else "",
               v["status"] if v["type"] == "SubAfter" else "handed to the listener",
               str(v["retryTimes"]) if v["type"] == "SubBefore" else "", v["requestId"] or ""]
              for v in views if v["type"] in ("SubBefore", "SubAfter")]
    assert shown == expect
    _shoot(browser, shots, "trace")
    # the message's page links to its trace
    browser.get(f"{live.dashboard}/messages?msg_id={sent.offset_msg_id}")
    browser.find_element(By.CSS_SELECTOR, "#results tr td a").click()
    browser.find_element(By.ID, "trace-link").click()
    assert "trace record(s) of " + sent.msg_id in text_of(browser, "#trace-summary")
    # an id with no trace: an empty view, not an error
    browser.get(f"{live.dashboard}/traces?msg_id=AC110001000000000000000000000000")
    assert text_of(browser, "#trace-summary").startswith("0 trace record(s)")


# --- 2. test message ------------------------------------------------------------------------------------
def test_a_test_message_is_sent_and_its_send_result_read_back_by_a_consumer(live, browser, shots):
    with Producer("dash-pg", namesrv_addr=live.namesrv_addr) as p:
        p.send(Message("DashSendT", b"first"))  # the topic exists, with its 4 queues
    browser.get(f"{live.dashboard}/send?topic=DashSendT")
    form = browser.find_element(By.ID, "send")
    form.find_element(By.NAME, "tags").send_keys("TagS")
    form.find_element(By.NAME, "keys").send_keys("k-1 <b>k-2</b>")
    form.find_element(By.NAME, "body").send_keys('{"hello": "<script>alert(1)</script>"}')
    form.find_element(By.CSS_SELECTOR, "button").click()
    WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "send-result"))
    result = dict(r.split(" ", 1) for r in text_of(browser, "#send-result").splitlines())
    assert result["sendStatus"] == "SEND_OK"
    qid = int(result["messageQueue"].split("queueId=")[1].rstrip("]"))
    offset = int(result["queueOffset"])
    assert "topic=DashSendT, brokerName=broker-a" in result["messageQueue"]
    _shoot(browser, shots, "send")
    with PullConsumer("dash-send-reader", namesrv_addr=live.namesrv_addr) as pc:
        mq = next(q for q in pc.fetch_subscribe_message_queues("DashSendT") if q.queue_id == qid)
        r = pc.pull(mq, "*", offset, 1)
    assert r.status is PullStatus.FOUND
    m = r.messages[0]
    assert (m.msg_id, m.offset_msg_id, m.tags, m.keys) == (result["msgId"], result["offsetMsgId"], "TagS",
                                                          ["k-1", "<b>k-2</b>"])
    assert bytes(m.body) == b'{"hello": "<script>alert(1)</script>"}'
    # shown escaped on the message's page: no markup of its own
    browser.find_element(By.ID, "sent-link").click()
    browser.find_element(By.CSS_SELECTOR, "#results tr td a").click()
    assert "<b>k-2</b>" in text_of(browser, "#facts")
    assert not browser.find_elements(By.CSS_SELECTOR, "#facts b")


# --- 3. topic config and subscription groups --------------------------------------------------------------
def _topic_config(live, topic):
    resp = live.admin._invoke(live.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    tc = live.admin._json(resp)["topicConfigTable"][topic]
    return tc["readQueueNums"], tc["writeQueueNums"], tc["perm"]


def _group_config(live, group):
    resp = live.admin._invoke(live.broker_addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    return live.admin._json(resp)["subscriptionGroupTable"].get(group)


def test_a_topic_config_edited_in_the_ui_is_what_the_admin_rpcs_answer(live, browser, shots):
    with Producer("dash-pg", namesrv_addr=live.namesrv_addr) as p:
        p.send(Message("DashEditT", b"x"))
    url = f"{live.dashboard}/topics/DashEditT"
    browser.get(url)
    form = browser.find_element(By.ID, "update-topic")
    for name, value in (("read_queues", "2"), ("write_queues", "3")):
        box = form.find_element(By.NAME, name)
        box.clear()
        box.send_keys(value)
    form.find_element(By.NAME, "write_perm").click()  # read only
    form.find_element(By.NAME, "write_queues").send_keys(Keys.ENTER)  # Enter asks too
    assert "Fewer write queues" in answer_dialog(browser, accept=False)
    assert _topic_config(live, "DashEditT") == (4, 4, 6)
    form.find_element(By.CSS_SELECTOR, "button").click()
    assert "Fewer write queues" in answer_dialog(browser, accept=False)
    assert _topic_config(live, "DashEditT") == (4, 4, 6)  # "no" changed nothing
    browser.find_element(By.CSS_SELECTOR, "#update-topic button").click()
    answer_dialog(browser, accept=True)
    assert wait_for(lambda: "topic DashEditT updated" in browser.page_source, 15)
    assert _topic_config(live, "DashEditT") == (2, 3, 4)
    route = live.admin.topic_route("DashEditT")  # registered with the name server as it answered
    assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [(2, 3, 4)]
    assert "2 read / 3 write queues, permission R-" in browser.page_source
    _shoot(browser, shots, "topic-config")
    # the refusals are the RPC's own: a system topic, queue counts out of range
    code, page = _post(live.dashboard, "/topics/SCHEDULE_TOPIC_XXXX/update",
                       {"read_queues": 1, "write_queues": 1, "read_perm": "on"})
    assert code == 400 and "conflict with system topic" in page, page[:400]
    code, page = _post(live.dashboard, "/topics/DashEditT/update",
                       {"read_queues": 0, "write_queues": 1, "read_perm": "on"})
    assert code == 400 and "queue numbers must be 1..1024" in page
    assert _topic_config(live, "DashEditT") == (2, 3, 4)


def test_deleting_a_topic_asks_first_and_no_keeps_it(live, browser):
    with Producer("dash-pg", namesrv_addr=live.namesrv_addr) as p:
        p.send(Message("DashDelT", b"x"))
    browser.get(f"{live.dashboard}/topics/DashDelT")
    browser.find_element(By.CSS_SELECTOR, "#delete-topic button").click()
    assert "Delete topic DashDelT and its messages?" in answer_dialog(browser, accept=False)
    assert "DashDelT" in _all_topics(live)  # "no" deleted nothing
    browser.find_element(By.CSS_SELECTOR, "#delete-topic button").click()
    answer_dialog(browser, accept=True)
    assert wait_for(lambda: "topic DashDelT deleted" in browser.page_source, 15)
    assert "DashDelT" not in _all_topics(live)


def _all_topics(live) -> set[str]:
    resp = live.admin._invoke(live.broker_addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    return set(live.admin._json(resp)["topicConfigTable"])


def test_a_group_is_created_edited_and_deleted_as_mqadmin_sees_it(live, browser, shots):
    browser.get(f"{live.dashboard}/groups")
    form = browser.find_element(By.ID, "create-group")
    form.find_element(By.NAME, "name").send_keys("dash-new-group")
    form.find_element(By.NAME, "consume_broadcast_enable").click()  # off
    box = form.find_element(By.NAME, "retry_max_times")
    box.clear()
    box.send_keys("5")
    form.find_element(By.CSS_SELECTOR, "button").click()
    assert wait_for(lambda: "/groups/dash-new-group" in browser.current_url, 15)
    cfg = _group_config(live, "dash-new-group")
    assert cfg is not None and cfg["retryMaxTimes"] == 5 and cfg["consumeBroadcastEnable"] is False \
        and cfg["consumeEnable"] is True
    # the dead-letter figure on the page is the broker's for that group
    assert text_of(browser, "#dead-letter-after").startswith("dead letter after 5 retries")
    _shoot(browser, shots, "group-config")
    form = browser.find_element(By.ID, "group-config")
    form.find_element(By.NAME, "consume_enable").click()  # off
    box = form.find_element(By.NAME, "retry_max_times")
    box.clear()
    box.send_keys("2")
    form.find_element(By.CSS_SELECTOR, "button").click()
    assert "consume off" in answer_dialog(browser, accept=True)
    assert wait_for(lambda: "group dash-new-group updated" in browser.page_source, 15)
    cfg = _group_config(live, "dash-new-group")
    assert cfg["retryMaxTimes"] == 2 and cfg["consumeEnable"] is False and cfg["consumeBroadcastEnable"] is False
    # consume off is the broker's rule: a pull by the group is refused
    with PullConsumer("dash-new-group", namesrv_addr=live.namesrv_addr) as pc:
        mq = pc.fetch_subscribe_message_queues("DashSendT")[0]
        with pytest.raises(Exception, match="no permission"):
            pc.pull(mq, "*", 0, 1)
    # delete: asks, "no" keeps it, "yes" removes it
    browser.find_element(By.CSS_SELECTOR, "#delete-group button").click()
    assert "Delete the subscription group config of dash-new-group" in answer_dialog(browser, accept=False)
    assert _group_config(live, "dash-new-group") is not None
    browser.find_element(By.CSS_SELECTOR, "#delete-group button").click()
    answer_dialog(browser, accept=True)
    assert wait_for(lambda: "group dash-new-group deleted" in browser.page_source, 15)
    assert _group_config(live, "dash-new-group") is None
    # the RPC's refusals and the form's own: a bad name, numbers out of range or not numbers
    code, page = _post(live.dashboard, "/groups", {"name": "bad group!"})
    assert code == 400 and "illegal characters" in page
    for field, value in (("retry_max_times", "x"), ("retry_max_times", "99999999999999"), ("retry_queue_nums", "-3")):
        code, page = _post(live.dashboard, "/groups", {"name": "dash-odd", field: value})
        assert code == 400 and field in page, (field, value, page[:300])
    assert _group_config(live, "dash-odd") is None


# --- 4. producers, running info, consume directly -----------------------------------------------------------
def test_producers_running_info_and_consume_directly(live, browser, shots):
    got: list = []
    c = PushConsumer("dash-live-cg", namesrv_addr=live.namesrv_addr, consume_from_where="first",
                     heartbeat_broker_interval_ms=300)
    c.subscribe("DashLiveT", "TagL || TagM")

    @c.register_listener
    def on(msgs, ctx):
        got.extend(bytes(m.body) for m in msgs)
        return ConsumeStatus.CONSUME_SUCCESS

    with Producer("dash-live-pg", namesrv_addr=live.namesrv_addr, heartbeat_broker_interval_ms=300) as p:
        sent = p.send(Message("DashLiveT", b"live one", tags="TagL"))
        c.start()
        try:
            assert wait_for(lambda: b"live one" in got, 60)
            def producers():  # known from its heartbeats (every 300 ms here)
                try:
                    return live.admin.producer_connection("dash-live-pg", "DashLiveT")
                except BrokerError:
                    return None
            assert wait_for(producers, 15)
            expect = producers()
            browser.get(f"{live.dashboard}/producers")
            Select(browser.find_element(By.NAME, "group")).select_by_visible_text("dash-live-pg")
            browser.find_element(By.CSS_SELECTOR, "#producer-search button").click()
            WebDriverWait(browser, 10).until(lambda b: b.find_elements(By.ID, "producers"))
            assert [r[1:4] for r in _rows(browser, "#producers")] == [[e.client_id, e.client_addr, e.language]
                                                                     for e in expect]
            assert _rows(browser, "#producers")[0][4] == "V4_9_8"
            _shoot(browser, shots, "producers")
            # a consumer's running info, asked of it through the broker
            browser.get(f"{live.dashboard}/groups/dash-live-cg")
            link = WebDriverWait(browser, 15).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#members a.running"))
            link[0].click()
            assert text_of(browser, "h1") == "Consumer running info", browser.page_source[:1500]
            client_id = text_of(browser, "#running-client")
            info = AdminTools(live.admin).running_info("dash-live-cg", client_id)
            # what the consumer answered mqadmin consumerStatus, and the same through the page
            subs = [[s[0], s[2]] for s in _rows(browser, "#running-subs")]
            assert subs == [[s["topic"], s["subString"]] for s in info["subscriptionSet"]]
            assert ["DashLiveT", "TagL || TagM"] in subs
            queues = [(r[0], int(r[2]), r[3]) for r in _rows(browser, "#running-queues")]
            assert queues == sorted((dict(k)["topic"], dict(k)["queueId"], str(v["commitOffset"]))
                                    for k, v in info["mqTable"].items())
            props = dict(r.split(" ", 1) for r in text_of(browser, "#running-props").splitlines())
            assert props["PROP_CONSUME_TYPE"] == info["properties"]["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
            _shoot(browser, shots, "running-info")
            # consume directly: asks, then the listener runs on the message again
            browser.get(f"{live.dashboard}/messages?msg_id={sent.offset_msg_id}")
            browser.find_element(By.CSS_SELECTOR, "#results tr td a").click()
            before = got.count(b"live one")
            browser.find_element(By.CSS_SELECTOR, "#consume-directly button").click()
            assert "second delivery" in answer_dialog(browser, accept=False)
            assert got.count(b"live one") == before
            # Enter on the focused button (the keyboard's submit) asks the same question
            browser.find_element(By.CSS_SELECTOR, "#consume-directly button").send_keys(Keys.ENTER)
            assert "second delivery" in answer_dialog(browser, accept=False)
            assert got.count(b"live one") == before
            browser.find_element(By.CSS_SELECTOR, "#consume-directly button").click()
            answer_dialog(browser, accept=True)
            WebDriverWait(browser, 20).until(lambda b: b.find_elements(By.ID, "consume-result"))
            assert "CR_SUCCESS" in text_of(browser, "#consume-result")
            assert got.count(b"live one") == before + 1
        finally:
            c.shutdown()
    # a consumer that is gone: the broker's refusal, a 400
    code, page, _ = _get(f"{live.dashboard}/groups/dash-live-cg/running?client_id=nobody@1")
    assert code == 400 and "not online" in html.unescape(page)
    code, page, _ = _get(f"{live.dashboard}/producers?group=nobody-pg")
    assert code == 400 and "not exist" in html.unescape(page)


# --- 5. DLQ batch resend and export -------------------------------------------------------------------------
def test_dead_letters_are_resent_in_a_batch_and_exported(live, browser, shots):
    group = "dash-dlq-group"
    with Producer("dash-pg", namesrv_addr=live.namesrv_addr) as p:
        sent = [p.send(Message("DashDlqT", f"dead {i}".encode(), keys=[f"dead-{i}"])) for i in range(3)]
    with PullConsumer(group, namesrv_addr=live.namesrv_addr) as pc:
        for s in sent:
            mq = next(q for q in pc.fetch_subscribe_message_queues("DashDlqT") if q.queue_id == s.message_queue.queue_id)
            r = pc.pull(mq, "*", s.queue_offset, 1)
            pc.send_message_back(r.messages[0], -1)  # straight to the dead-letter queue
    dlq = f"%DLQ%{group}"
    search = f"{live.dashboard}/messages?topic={urllib.parse.quote(dlq)}&begin=0&end=4000000000000"
    assert wait_for(lambda: len(_rows_at(browser, search)) == 3, 15)
    boxes = browser.find_elements(By.CSS_SELECTOR, "#results input[name=offset]")
    offsets = [b.get_attribute("value") for b in boxes]
    # export: the chosen dead letters as JSON (what the button's GET fetches)
    code, body, headers = _get(f"{live.dashboard}/messages/export?" + urllib.parse.urlencode(
        [("offset", o) for o in offsets[:2]]))
    assert code == 200 and "attachment" in headers["Content-Disposition"] and "dead-letters.json" in \
        headers["Content-Disposition"]
    rows = json.loads(body)
    assert [r["topic"] for r in rows] == [dlq, dlq] and {r["body"] for r in rows} <= {f"dead {i}" for i in range(3)}
    assert {r["msgId"] for r in rows} <= {s.msg_id for s in sent}
    # resend two: asks first
    boxes[0].click()
    boxes[1].click()
    browser.find_element(By.ID, "resend-selected").click()
    assert "Resend the selected dead letters" in answer_dialog(browser, accept=False)
    assert "resent" not in browser.page_source
    browser.find_element(By.ID, "resend-selected").click()
    answer_dialog(browser, accept=True)
    assert wait_for(lambda: "2 dead letter(s) resent to %RETRY%" + group in browser.page_source, 15)
    retry = live.admin.topic_stats(f"%RETRY%{group}")
    assert sum(o.max_offset - o.min_offset for o in retry) == 2
    # the export button is a GET of the same form (no confirmation: it changes nothing)
    browser.get(search)
    browser.find_elements(By.CSS_SELECTOR, "#results input[name=offset]")[2].click()
    assert browser.find_element(By.ID, "export").get_attribute("formmethod") == "get"
    _shoot(browser, shots, "dlq-batch")
    # odd selections are 400s
    for query in ("", "offset=x", "offset=99999999999999999999", "offset=123456789012"):
        assert _get(f"{live.dashboard}/messages/export?{query}")[0] == 400, query
    code, page = _post(live.dashboard, "/messages/resend", [("offset", offsets[0]), ("offset", "0")])
    assert code == 400


def _rows_at(browser, url):
    browser.get(url)
    return _rows(browser, "#results")


# --- 6. consume TPS and lag over time ------------------------------------------------------------------------
CHART_GROUP = "dash-chart-group"


def _make_chart_group(namesrv: str) -> None:
    """A group with a lag and deliveries, made when the broker starts: the charts sample it
    every 5 s while the other tests run, so their test needs no wait of its own for samples."""
    with Producer("dash-pg", namesrv_addr=namesrv) as p:
        for i in range(6):
            p.send(Message("DashChartT", f"c{i}".encode()))
    with PullConsumer(CHART_GROUP, namesrv_addr=namesrv) as pc:
        for mq in pc.fetch_subscribe_message_queues("DashChartT"):
            r = pc.pull(mq, "*", 0, 1)  # one message of each queue that has any: counted as delivered
            pc.update_consume_offset(mq, r.next_begin_offset if r.status is PullStatus.FOUND else 0)
        pc.commit()


def test_the_group_charts_are_the_consume_stats_mqadmin_reads(live, browser, shots):
    group = CHART_GROUP
    url = f"{live.dashboard}/groups/{group}"

    def agree():
        # the page's newest sample against what mqadmin consumerProgress reads now (the two
        # are taken at different moments: equal once a sample follows the last change)
        stats = live.admin.consume_stats(group)
        browser.get(url)
        charts = {c: browser.find_elements(By.CSS_SELECTOR, f"#{c}-chart") for c in ("lag", "tps")}
        if not all(charts.values()) or charts["lag"][0].tag_name != "svg":
            return False
        tps = float(charts["tps"][0].get_attribute("data-last"))
        return (int(charts["lag"][0].get_attribute("data-last")) == stats.diff_total
                and abs(tps - stats.consume_tps) < 0.01 + stats.consume_tps * 0.01
                and int(charts["lag"][0].get_attribute("data-points")) >= 2)
    assert wait_for(agree, 30, 0.5)
    stats = live.admin.consume_stats(group)
    assert stats.diff_total == 6 - sum(1 for r in stats.rows if r.consumer_offset > 0)
    for r in stats.rows:  # a line per queue, ending at that queue's lag
        cell = browser.find_element(By.CSS_SELECTOR, f'td.spark[data-queue="{r.topic}/{r.queue_id}"] svg')
        assert int(cell.get_attribute("data-last")) == r.diff
    _shoot(browser, shots, "group-charts")


# --- 7. per-queue offsets over time on the topic page ---------------------------------------------------------
QUEUE_TOPIC = "DashQueueT"


def _send_to_queues(namesrv: str, counts: dict[int, int]) -> None:
    with Producer("dash-queue-pg", namesrv_addr=namesrv) as p:
        queues = {q.queue_id: q for q in p.fetch_publish_message_queues(QUEUE_TOPIC)}
        for qid, n in counts.items():
            for i in range(n):
                p.send(Message(QUEUE_TOPIC, f"q{qid}-{i}".encode()), queue=queues[qid])


def _make_queue_topic(admin: MQAdmin, b) -> None:
    """Four queues holding 1, 2, 3 and 0 messages from the start: sampled every 5 s while the
    other tests run, as the chart group is."""
    admin.create_topic(b.broker_addr, QUEUE_TOPIC, read_queue_nums=4, write_queue_nums=4)
    assert wait_for(lambda: QUEUE_TOPIC in admin.topic_list(), 20)
    _send_to_queues(b.namesrv_addr, {0: 1, 1: 2, 2: 3})


def test_the_topic_page_draws_each_queues_offsets_over_time_as_topic_status_reads_them(live, browser, shots):
    url = f"{live.dashboard}/topics/{QUEUE_TOPIC}"

    def sampled_before():  # a sample of queue 1 holding its first 2 (taken while other tests ran)
        browser.get(url)
        spark = browser.find_elements(By.CSS_SELECTOR, 'td.spark[data-queue="1"] svg')
        return spark and spark[0].get_attribute("data-last") == "2"
    assert wait_for(sampled_before, 20, 0.5)
    _send_to_queues(live.namesrv_addr, {1: 4})  # queue 1's line rises from 2 to 6 in a later sample

    def agree():
        # the page's newest sample against mqadmin topicStatus now (equal once a sample
        # follows the last send), queue by queue, and the kept total over all queues
        stats = {o.queue_id: o for o in live.admin.topic_stats(QUEUE_TOPIC)}
        browser.get(url)
        chart = browser.find_elements(By.CSS_SELECTOR, "#kept-chart")
        if not chart or chart[0].tag_name != "svg" or int(chart[0].get_attribute("data-last")) != sum(
                o.max_offset - o.min_offset for o in stats.values()):
            return False
        for qid, o in stats.items():
            spark = browser.find_elements(By.CSS_SELECTOR, f'td.spark[data-queue="{qid}"] svg')
            if not spark or int(spark[0].get_attribute("data-last")) != o.max_offset:
                return False
            kept = browser.find_element(By.CSS_SELECTOR, f'td.kept[data-queue="{qid}"]').text
            if int(kept) != o.max_offset - o.min_offset:
                return False
        return True
    assert wait_for(agree, 40, 0.5)
    stats = {o.queue_id: o.max_offset for o in live.admin.topic_stats(QUEUE_TOPIC)}
    assert stats == {0: 1, 1: 6, 2: 3, 3: 0}
    # queue 1's line holds the earlier sample (2) too: a line over time, not one figure
    spark = browser.find_element(By.CSS_SELECTOR, 'td.spark[data-queue="1"] svg')
    assert int(spark.get_attribute("data-points")) >= 2
    ys = [float(pt.split(",")[1]) for pt in browser.find_element(
        By.CSS_SELECTOR, 'td.spark[data-queue="1"] svg polyline').get_attribute("points").split()]
    assert max(ys) > min(ys), ys  # it rose (SVG y grows downwards: lower values, higher points)
    _shoot(browser, shots, "topic-queues")


# --- the guards on the new endpoints ----------------------------------------------------------------------
NEW_POSTS = ("/send", "/topics/DashEditT/update", "/groups", "/groups/dash-x/config", "/groups/dash-x/delete",
             "/messages/resend", "/messages/0/consume")


def test_every_new_post_needs_the_dashboards_origin_and_odd_values_are_400s(live):
    for path in NEW_POSTS:
        for origin in (None, "http://evil.example"):
            code, _ = _post(live.dashboard, path, {"topic": "DashSendT", "body": "x", "name": "dash-x"}, origin)
            assert code == 403, (path, origin, code)
    assert _group_config(live, "dash-x") is None
    odd = [("/send", {"topic": "bad topic!", "body": "x"}), ("/send", {"topic": "DashSendT", "body": ""}),
           ("/send", {"topic": "SCHEDULE_TOPIC_XXXX", "body": "x"}),
           ("/topics/DashEditT/update", {"read_queues": "x"}),
           ("/topics/DashEditT/update", {"read_queues": "99999999999", "write_queues": "1", "read_perm": "on"}),
           ("/topics/NoSuchTopic/update", {"read_queues": "1", "write_queues": "1"}),
           ("/groups/no-such-group/delete", {}), ("/groups", {"name": ""}),
           ("/messages/x/consume", {"consumer": "g c"}), ("/messages/0/consume", {"consumer": ""}),
           ("/messages/resend", {}), ("/messages/resend", {"offset": "-1"})]
    for path, fields in odd:
        code, page = _post(live.dashboard, path, fields)
        assert code == 400 and "Traceback" not in page, (path, fields, code, page[:300])
    # a body past the dashboard's 64 KiB request limit: 413, the request limit's own answer
    assert _post(live.dashboard, "/send", {"topic": "DashSendT", "body": "x" * 70_000})[0] == 413
    for path in ("/traces?msg_id=" + "x" * 200, "/traces?msg_id=a&topic=bad%20topic", "/producers?group=" + "g" * 300,
                 "/groups/g/running", "/groups/g/running?client_id=" + "c" * 300):
        code, page, headers = _get(live.dashboard + path)
        assert code == 400 and "Traceback" not in page, (path, code)
        assert headers.get("X-Frame-Options") == "DENY"
    for path in ("/traces", "/producers", "/send"):
        code, _, headers = _get(live.dashboard + path)
        assert code == 200 and headers.get("X-Frame-Options") == "DENY"
    with Producer("dash-pg", namesrv_addr=live.namesrv_addr) as p:  # and the broker serves on
        assert p.send(Message("DashSendT", b"still serving")).msg_id
