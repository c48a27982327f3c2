"""The dashboard (dashboardPort) of a real mqbroker process, driven in headless Chromium, with
real mqcore clients producing and consuming.

Screenshots of every page go to ``$MQCORE_DASHBOARD_SCREENSHOTS`` when set (docs/dashboard/
was made that way), else to a temp dir; each must be a real PNG.
"""
from __future__ import annotations

import html
import http.client
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from mqcore.client import ConsumeStatus, Message, Producer, PullConsumer, PullStatus, PushConsumer
from tests.grpc.conftest import TEST_CONF as GRPC_CONF, grpc_addr
from tests.dashboard.browser import send_basic_auth, shoot, start_browser, text_of
from tests.support import acl
from tests.support.processes import BrokerProcess
from tests.support.waiting import free_port, wait_for

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

GROUP = "dash-group"


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    port = free_port()
    store = tmp_path_factory.mktemp("dashboard") / "store"
    # the gRPC endpoint on: 5.x clients are shown beside 4.x ones
    with BrokerProcess(store, conf={"dashboardPort": port, "flushIntervalCommitLog": 100, **GRPC_CONF}) as b:
        b.dashboard = f"http://127.0.0.1:{port}"
        b.grpc_addr = grpc_addr(b)
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


def open_page(driver, url, heading):
    driver.get(url)
    h1 = text_of(driver, "h1")
    assert heading in h1, (url, h1, driver.page_source[:500])
    assert "Could not do that" not in h1


def test_pages_load(live, browser):
    for path, heading in (("/", "Broker broker-a"), ("/topics", "Topics"), ("/groups", "Consumer groups"),
                          ("/clients", "Clients"), ("/messages", "Messages"), ("/topics/TBW102", "Topic TBW102")):
        open_page(browser, live.dashboard + path, heading)
    browser.get(live.dashboard + "/")
    assert text_of(browser, "#status") == "serving"
    assert "commitlog" in text_of(browser, "#disks")
    browser.get(live.dashboard + "/topics/NoSuchTopic")
    assert "no topic 'NoSuchTopic'" in text_of(browser, "#error")


def test_a_topic_created_in_the_ui_exists_for_a_client(live, browser):
    browser.get(live.dashboard + "/topics")
    form = browser.find_element(By.ID, "create-topic")
    form.find_element(By.NAME, "name").send_keys("UiTopic")
    for name in ("read_queues", "write_queues"):
        box = form.find_element(By.NAME, name)
        box.clear()
        box.send_keys("3")
    form.find_element(By.CSS_SELECTOR, "button").click()
    assert wait_for(lambda: "/topics/UiTopic" in browser.current_url, 15)
    assert text_of(browser, "#topic-name") == "UiTopic"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#queues tr")) == 1 + 3
    with Producer("dash-producer", namesrv_addr=live.namesrv_addr) as p:
        # the name server learns the topic from the broker's registration, which the UI asked for
        results = [p.send(Message("UiTopic", f"m{i}".encode())) for i in range(6)]
    assert {r.message_queue.queue_id for r in results} <= {0, 1, 2}
    browser.get(live.dashboard + "/topics/UiTopic")
    cells = [row.find_elements(By.TAG_NAME, "td") for row in browser.find_elements(By.CSS_SELECTOR, "#queues tr")[1:]]
    assert sum(int(c[2].text) for c in cells) == 6  # max offsets
    browser.get(live.dashboard + "/topics")
    assert "UiTopic" in text_of(browser, "#topics")


def test_a_message_sent_by_a_client_is_found_by_key_and_its_body_shown(live, browser):
    body = {"order": 42, "items": ["tea", "milk"]}
    with Producer("dash-producer", namesrv_addr=live.namesrv_addr) as p:
        p.send(Message("KeyTopic", b"another message", keys=["order-41"]))
        sent = p.send(Message("KeyTopic", json.dumps(body).encode(), tags="created", keys=["order-42"]))
    browser.get(live.dashboard + "/messages")
    form = browser.find_element(By.ID, "search")
    form.find_element(By.NAME, "topic").send_keys("KeyTopic")
    form.find_element(By.NAME, "key").send_keys("order-42")
    form.find_element(By.CSS_SELECTOR, "button").click()
    # the click submits the form: wait for the results page, not the search page it replaces
    WebDriverWait(browser, 10).until(lambda b: "key=" in b.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "#results tr")[1:]
    assert len(rows) == 1, browser.page_source
    assert sent.msg_id in rows[0].text and "order-42" in rows[0].text and "created" in rows[0].text
    rows[0].find_element(By.TAG_NAME, "a").click()
    assert text_of(browser, "#msg-id") == sent.msg_id
    pretty = text_of(browser, "#body-json")  # the JSON view is the one shown first
    assert '"order": 42' in pretty and pretty.count("\n") >= 4
    browser.find_element(By.CSS_SELECTOR, "label[for=v-hex]").click()
    assert "7b 22 6f 72 64 65 72 22" in text_of(browser, "#body-hex")  # {"order"
    assert "order-42" in text_of(browser, "#props")
    # by the client's message id (with its topic) and by the broker's offset id (alone)
    for query in (f"msg_id={sent.msg_id}&topic=KeyTopic", f"msg_id={sent.offset_msg_id}"):
        browser.get(live.dashboard + "/messages?" + query)
        rows = browser.find_elements(By.CSS_SELECTOR, "#results tr")[1:]
        assert len(rows) == 1 and sent.msg_id in rows[0].text, query
    # by time range: both messages
    browser.get(live.dashboard + "/messages?topic=KeyTopic&begin=0")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#results tr")[1:]) == 2


def _lag(browser, url) -> int:
    browser.get(url)
    return int(text_of(browser, "#total-lag"))


def test_lag_drops_after_a_consumer_runs_and_a_reset_brings_it_back(live, browser):
    with Producer("dash-producer", namesrv_addr=live.namesrv_addr) as p:
        for i in range(10):
            p.send(Message("LagTopic", f"lag {i}".encode(), keys=[f"lag-{i}"]))
        start_ms = int(time.time() * 1000) - 60_000
    # the group commits offset 0 everywhere: all 10 are its lag
    with PullConsumer(GROUP, namesrv_addr=live.namesrv_addr) as pc:
        for mq in pc.fetch_subscribe_message_queues("LagTopic"):
            pc.update_consume_offset(mq, 0)
        pc.commit()
    url = f"{live.dashboard}/groups/{GROUP}"
    assert wait_for(lambda: _lag(browser, url) == 10, 20)
    got = []
    done = threading.Event()
    c = PushConsumer(GROUP, namesrv_addr=live.namesrv_addr, persist_consumer_offset_interval_ms=200)
    c.subscribe("LagTopic")

    @c.register_listener
    def on(msgs, ctx):
        got.extend(msgs)
        if len(got) >= 10:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    c.start()
    try:
        assert done.wait(60)
        assert wait_for(lambda: _lag(browser, url) == 0, 30)
        members = text_of(browser, "#members")
        assert "4.x remoting" in members and "PYTHON" in members and "V4_9_8" in members
        browser.get(live.dashboard + "/clients")
        assert GROUP in text_of(browser, "#clients")
        # the message's page says the group consumed it
        browser.get(f"{live.dashboard}/messages?topic=LagTopic&key=lag-3")
        browser.find_element(By.CSS_SELECTOR, "#results tr td a").click()
        assert f"{GROUP} " in text_of(browser, "#consumed") and "not yet" not in text_of(browser, "#consumed")
    finally:
        c.shutdown()
    # a reset with no time would skip the whole backlog: it asks first, and a "no" posts nothing
    browser.get(url)
    form = browser.find_element(By.ID, "reset-offset")
    Select(form.find_element(By.NAME, "topic")).select_by_visible_text("LagTopic")
    form.find_element(By.CSS_SELECTOR, "button").click()
    assert "whole backlog" in answer_dialog(browser, accept=False)
    assert browser.current_url == url and "offsets reset" not in browser.page_source
    # reset by time to before the messages: the lag is back (the group is offline by now)
    form = browser.find_element(By.ID, "reset-offset")
    Select(form.find_element(By.NAME, "topic")).select_by_visible_text("LagTopic")
    browser.execute_script("arguments[0].type = 'text'", form.find_element(By.NAME, "time"))
    form.find_element(By.NAME, "time").send_keys(str(start_ms))
    form.find_element(By.CSS_SELECTOR, "button").click()
    assert "first message stored at or after" in answer_dialog(browser, accept=True)
    assert wait_for(lambda: "offsets reset" in browser.page_source, 15)
    assert int(text_of(browser, "#total-lag")) == 10


def answer_dialog(driver, accept: bool) -> str:
    """The confirmation a destructive form asks (there must be one), answered; its text."""
    alert = WebDriverWait(driver, 5).until(lambda d: d.switch_to.alert)
    text = alert.text
    alert.accept() if accept else alert.dismiss()
    return text


def test_retries_and_dead_letters_are_traced_and_resent(live, browser):
    with Producer("dash-producer", namesrv_addr=live.namesrv_addr) as p:
        sent = p.send(Message("RetryTopic", b"will fail", keys=["fail-1"]))
    group = "dash-retry-group"
    with PullConsumer(group, namesrv_addr=live.namesrv_addr) as pc:
        mq = next(q for q in pc.fetch_subscribe_message_queues("RetryTopic")
                  if q.queue_id == sent.message_queue.queue_id)
        r = pc.pull(mq, "*", 0, 32)
        assert r.status is PullStatus.FOUND
        pc.send_message_back(r.messages[0], 0)    # a retry, after delay level 3
        pc.send_message_back(r.messages[0], -1)   # and straight to the dead-letter queue
        pc.update_consume_offset(mq, r.next_begin_offset)
        pc.commit()
    browser.get(f"{live.dashboard}/messages?topic=RetryTopic&key=fail-1")
    browser.find_element(By.CSS_SELECTOR, "#results tr td a").click()
    copies = text_of(browser, "#copies")
    assert "dead-letter queue" in copies and "waiting for its delay" in copies, copies
    assert "fail-1" in text_of(browser, "#facts")
    browser.get(f"{live.dashboard}/groups/{group}")
    assert text_of(browser, "#dlq") == "1"
    browser.find_element(By.LINK_TEXT, "show them").click()
    browser.find_element(By.CSS_SELECTOR, "#results tr td a").click()
    browser.find_element(By.CSS_SELECTOR, "#resend button").click()
    assert "Resend this dead letter" in answer_dialog(browser, accept=False)
    assert "resent to" not in browser.page_source  # "no" re-injects nothing
    browser.find_element(By.CSS_SELECTOR, "#resend button").click()
    answer_dialog(browser, accept=True)
    assert wait_for(lambda: "resent to %RETRY%" + group in browser.page_source, 15)
    assert text_of(browser, "#msg-id") == sent.msg_id
    assert "will fail" in text_of(browser, "#body-text")


class Grpc5Client:
    """A 5.x push consumer as the official clients announce one: a Telemetry stream whose first
    command is the client's settings (type, group, subscription, user agent), kept open."""

    def __init__(self, addr: str, client_id: str, group: str, topic: str):
        import grpc

        from mqcore.grpc.protocol import load_protocol
        d, s, g = load_protocol()
        self.channel = grpc.insecure_channel(addr)
        self.stop = threading.Event()
        settings = d.Settings(client_type=d.PUSH_CONSUMER,
                              user_agent=d.UA(language=d.PYTHON, version="5.1.2", platform="linux", hostname="test"))
        settings.subscription.group.name = group
        sub = settings.subscription.subscriptions.add()
        sub.topic.name = topic
        sub.expression.type = d.TAG
        sub.expression.expression = "*"

        def commands():
            yield s.TelemetryCommand(settings=settings)
            self.stop.wait(120)

        self.answers = g.MessagingServiceStub(self.channel).Telemetry(
            commands(), metadata=[("x-mq-client-id", client_id)], timeout=120)
        assert next(self.answers).HasField("settings")

    def close(self):
        self.stop.set()
        self.channel.close()


def test_5x_clients_are_shown_beside_4x_ones(live, browser):
    c5 = Grpc5Client(live.grpc_addr, "py5-client@test", "dash-5x-group", "UiTopic")
    try:
        # a 4.x producer is known to the broker by its heartbeats
        with Producer("dash-producer", namesrv_addr=live.namesrv_addr, heartbeat_broker_interval_ms=300) as p:
            p.send(Message("UiTopic", b"hello"))

            def rows():
                browser.get(live.dashboard + "/clients")
                return [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#clients tr")[1:]]

            assert wait_for(lambda: any("4.x remoting" in r and "producer dash-producer" in r for r in rows()), 15)
            five = [r for r in rows() if "py5-client@test" in r]
            assert len(five) == 1 and "5.x gRPC" in five[0] and "PYTHON" in five[0] and "5.1.2" in five[0], rows()
        browser.get(live.dashboard + "/groups/dash-5x-group")
        assert "5.x gRPC (PUSH_CONSUMER)" in text_of(browser, "#members")
        browser.get(live.dashboard + "/topics/UiTopic")
        assert "dash-5x-group" in browser.page_source  # a consumer group of the topic
    finally:
        c5.close()


def test_screenshots_of_every_page(live, browser, shots):
    """After the tests above left topics, groups and messages behind; the broker page's chart
    needs two samples of the counters (one every 5 s). Clients of both protocols stay
    connected while the pages are taken."""
    c5 = Grpc5Client(live.grpc_addr, "py5-client@shots", "dash-5x-group", "UiTopic")
    consumer = PushConsumer("dash-shots-group", namesrv_addr=live.namesrv_addr, consume_from_where="first")
    consumer.subscribe("UiTopic")
    consumer.register_listener(lambda msgs, ctx: ConsumeStatus.CONSUME_SUCCESS)
    consumer.start()
    p = Producer("dash-producer", namesrv_addr=live.namesrv_addr, heartbeat_broker_interval_ms=300).start()
    try:
        for i in range(20):
            p.send(Message("UiTopic", f"chart {i}".encode()))
        _take_screenshots(live, browser, shots)
    finally:
        p.shutdown()
        consumer.shutdown()
        c5.close()


def _take_screenshots(live, browser, shots):

    def sampled():  # the chart's series has the burst once the counters were sampled after it
        with urllib.request.urlopen(live.dashboard + "/api/rates?topic=UiTopic", timeout=10) as r:
            series = json.load(r)
        return len(series["t"]) >= 2 and series["put"][-1] > 0

    assert wait_for(sampled, 30, 0.5)
    browser.get(live.dashboard + "/")
    assert wait_for(lambda: browser.find_elements(By.CSS_SELECTOR, ".chart canvas"), 30, 0.5)
    shoot(browser, shots, "broker")
    for path, name in (("/topics", "topics"), ("/topics/UiTopic", "topic"), ("/groups", "groups"),
                       ("/groups/dash-shots-group", "group"), ("/clients", "clients"),
                       ("/messages?topic=KeyTopic&begin=0", "messages")):
        browser.get(live.dashboard + path)
        shoot(browser, shots, name)
    browser.get(f"{live.dashboard}/messages?topic=KeyTopic&key=order-42")
    browser.find_element(By.CSS_SELECTOR, "#results tr td a").click()
    shoot(browser, shots, "message")
    browser.get(f"{live.dashboard}/messages?topic=RetryTopic&key=fail-1")
    browser.find_element(By.CSS_SELECTOR, "#results tr td a").click()
    shoot(browser, shots, "message-trail")


def test_a_form_post_from_another_site_is_refused(live):
    req = urllib.request.Request(live.dashboard + "/topics/UiTopic/delete", data=b"", method="POST",
                                 headers={"Origin": "http://evil.example"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 403
    with urllib.request.urlopen(live.dashboard + "/topics/UiTopic", timeout=10) as r:
        assert r.status == 200


# --- ACL ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("dashboard-acl")
    yml = root / "plain_acl.yml"
    yml.write_text(acl.PLAIN_ACL_YML)
    port = free_port()
    with BrokerProcess(root / "store", conf={"aclEnable": "true", "plainAclFile": str(yml), "dashboardPort": port,
                                             "brokerAccessKey": acl.ADMIN[0],
                                             "brokerSecretKey": acl.ADMIN[1]}) as b:
        b.dashboard = f"http://127.0.0.1:{port}"
        yield b


def test_an_unauthenticated_visitor_is_refused_when_acl_is_on(acl_broker, browser):
    try:
        for who in (None, acl.NORMAL, (acl.ADMIN[0], "wrongSecret1")):
            send_basic_auth(browser, *(who or (None,)))
            for path in ("/", "/topics", "/static/dashboard.css", "/api/rates", "/traces", "/send", "/producers",
                         "/messages/export?offset=0"):
                browser.get(acl_broker.dashboard + path)
                # the browser gets the 401's challenge (a real one asks for the account): nothing
                # of the dashboard reaches the page
                page = browser.page_source
                assert "Topics" not in page and "brand" not in page and "uPlot" not in page, (who, path, page)
        send_basic_auth(browser, *acl.ADMIN)
        browser.get(acl_broker.dashboard + "/topics")
        assert text_of(browser, "h1") == "Topics"
    finally:
        send_basic_auth(browser, None)
    # the status and the challenge a browser needs to ask for the account
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(acl_broker.dashboard + "/", timeout=10)
    assert e.value.code == 401 and e.value.headers["WWW-Authenticate"].startswith("Basic ")


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, html.unescape(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, html.unescape(e.read().decode())


def _post(base: str, path: str, fields: dict) -> tuple[int, str]:
    data = urllib.parse.urlencode(fields).encode()
    req = urllib.request.Request(base + path, data=data, method="POST", headers={"Origin": base})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, html.unescape(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, html.unescape(e.read().decode())


def test_bad_input_gets_a_clear_answer_and_the_broker_serves_on(live):
    base = live.dashboard
    with Producer("dash-producer", namesrv_addr=live.namesrv_addr) as p:
        p.send(Message("BadInputTopic", b"x"))
    assert _get(base + "/messages/not-a-number")[0] == 400
    code, page = _get(base + "/messages/99999999999")
    assert code == 400 and "no message at commitlog offset 99999999999" in page
    code, page = _get(base + "/messages?key=order-1")
    assert code == 400 and "needs the topic" in page
    code, page = _get(base + "/messages?topic=KeyTopic&begin=yesterday")
    assert code == 400 and "'yesterday' is not a time" in page
    code, page = _post(base, "/topics", {"name": "bad topic!", "read_queues": "1", "write_queues": "1",
                                         "read_perm": "on"})
    assert code == 400 and "bad topic!" in page
    code, page = _post(base, "/topics", {"name": "T", "read_queues": "x", "write_queues": "1", "read_perm": "on"})
    assert code == 400 and "read_queues must be a whole number" in page
    code, page = _post(base, "/groups/nobody/reset", {"topic": "BadInputTopic", "time": ""})
    assert code == 400 and "has no offsets" in page
    code, page = _post(base, "/messages/0/resend", {})
    assert code == 400 and "not in a dead-letter queue" in page
    # garbage and an oversized head on the socket: refused, nothing else happens
    host, port = base.removeprefix("http://").split(":")
    for raw in (b"\x00\x01garbage\r\n\r\n", b"GET / HTTP/1.1\r\nX: " + b"a" * 100_000 + b"\r\n\r\n"):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(raw)
            answer = s.recv(100)  # an answer or a close, never a hang (the timeout)
            assert answer == b"" or answer[:10] in (b"HTTP/1.0 4", b"HTTP/1.1 4"), answer
    assert _get(base + "/")[0] == 200
    with Producer("dash-producer", namesrv_addr=live.namesrv_addr) as p:
        assert p.send(Message("BadInputTopic", b"still serving")).msg_id


def test_the_broker_stops_promptly_while_a_browser_keeps_a_connection_open(tmp_path):
    port = free_port()
    b = BrokerProcess(tmp_path / "store", conf={"dashboardPort": port}).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/topics")  # HTTP/1.1: the connection stays open after the answer
        assert conn.getresponse().read()
        t0 = time.monotonic()
        assert b.stop() == 0
        assert time.monotonic() - t0 < 10
    finally:
        b.stop()
