"""mqcore's ``mqadmin queryMsgTraceById`` and ``updateOrderConf`` print what Apache's
(rocketmq-tools 4.9.8) prints on the same state, on mqbroker and on the Java 4.9.7 broker and
name server; mqbroker's dashboard trace view shows the same rows.

The traces are the official Java client's: a producer and two push consumer groups created
with ``enableMsgTrace=true`` (drivers/TraceScenario.java) write Pub / SubBefore / SubAfter
records to RMQ_SYS_TRACE_TOPIC, which the broker stores like any message. Both tools then read
the same stored records, so their outputs must be equal byte for byte (times are printed in
local time by both, from the records). The order configuration goes through a put, a get, a
put that replaces it, a get, a delete and a get of nothing.
"""
from __future__ import annotations

import contextlib
import html
import io
import re
import urllib.request

import pytest

from mqcore.admin import MQAdmin
from mqcore.admin.cli import main as mqadmin_main
from tests.support.processes import BrokerProcess
from tests.support.reference import JavaBroker, JavaNamesrv, mqadmin_batch, run_java_driver
from tests.support.waiting import free_port, wait_for

pytestmark = pytest.mark.timeout(600)

TOPIC = "TracedTopic"
PRODUCER_GROUP = "trace-pg"
GROUPS = ("trace-cg-a", "trace-cg-b")  # Java HashMap order: b first, neither sorted nor given order
ORDER_TOPIC = "OrderConfTopic"


def _ours(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = mqadmin_main(argv, out)
    return rc, out.getvalue(), err.getvalue()


def _trace_complete(text: str) -> bool:
    """One Pub row and a Sub row for each group (the consumers' traces arrive last)."""
    subs = {line.split()[1] for line in text.splitlines() if line.startswith("Sub ")}
    return sum(line.startswith("Pub ") for line in text.splitlines()) == 1 and subs == set(GROUPS)


def _scenario(namesrv: str, broker_addr: str, work, dashboard: str | None = None) -> dict:
    with MQAdmin(namesrv) as admin:
        admin.create_topic(broker_addr, TOPIC, read_queue_nums=2, write_queue_nums=2)
        assert wait_for(lambda: TOPIC in admin.topic_list(), timeout=30)
    p = run_java_driver("TraceScenario.java", [namesrv, TOPIC, PRODUCER_GROUP, *GROUPS], workdir=work,
                        background=True)
    try:
        lines = []
        for line in p.stdout:  # the driver's progress, up to its consumers having consumed
            lines.append(line)
            if line.startswith(("CONSUMED", "TIMEOUT")):
                break
        assert lines and lines[-1].startswith("CONSUMED"), "".join(lines)
        msg_id = re.search(r"^MSGID (\w+)$", "".join(lines), re.M).group(1)
        trace_cmd = ["queryMsgTraceById", "-n", namesrv, "-i", msg_id]
        # the clients' trace dispatchers send in the background, the broker indexes what it stored
        assert wait_for(lambda: _trace_complete(_ours(trace_cmd)[1]), timeout=60), _ours(trace_cmd)
        p.stdin.write("stop\n")
        p.stdin.flush()
        rest = p.communicate(timeout=120)[0]
        assert p.returncode == 0 and "DONE" in rest, rest
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(10)
    order = [["updateOrderConf", "-n", namesrv, "-t", ORDER_TOPIC, "-m", "put", "-v", "broker-x:4"],
             ["updateOrderConf", "-n", namesrv, "-t", ORDER_TOPIC, "-m", "get"],
             ["updateOrderConf", "-n", namesrv, "-t", ORDER_TOPIC, "-m", "put", "-v", "broker-x:8;broker-b:2"],
             ["updateOrderConf", "-n", namesrv, "-t", ORDER_TOPIC, "-m", "get"],
             ["updateOrderConf", "-n", namesrv, "-t", ORDER_TOPIC, "-m", "delete"],
             ["updateOrderConf", "-n", namesrv, "-t", ORDER_TOPIC, "-m", "get"]]
    # the dashboard's trace view of the same message, as mqbroker serves it
    page = None
    if dashboard is not None:
        with urllib.request.urlopen(f"{dashboard}/traces?msg_id={msg_id}", timeout=15) as r:
            page = r.read().decode()
    # Apache's sequence first, then ours on the state it left (nothing: the delete)
    apache = mqadmin_batch([trace_cmd, trace_cmd + ["-t", "RMQ_SYS_TRACE_TOPIC"], *order], home=work)
    ours = [_ours(trace_cmd), _ours(trace_cmd + ["-t", "RMQ_SYS_TRACE_TOPIC"])] + [_ours(c) for c in order]
    return {"msg_id": msg_id, "apache": apache, "ours": ours, "page": page}


@pytest.fixture(scope="module")
def on_mq(tmp_path_factory):
    work = tmp_path_factory.mktemp("trace-mq")
    port = free_port()
    with BrokerProcess(work / "store", broker_name="broker-mq", conf={"dashboardPort": port}) as b:
        yield _scenario(b.namesrv_addr, b.broker_addr, work, f"http://127.0.0.1:{port}")


@pytest.fixture(scope="module")
def on_java(tmp_path_factory):
    work = tmp_path_factory.mktemp("trace-java")
    with JavaNamesrv(work) as ns, JavaBroker(work / "store", ns.addr, conf={"traceTopicEnable": "true"}) as b:
        yield _scenario(ns.addr, b.addr, work)


@pytest.mark.parametrize("broker", ["on_mq", "on_java"])
def test_query_msg_trace_by_id_prints_what_apaches_prints(broker, request):
    run = request.getfixturevalue(broker)
    for apache, (rc, out, err) in zip(run["apache"][:2], run["ours"][:2], strict=True):
        assert rc == 0 and err == "", err
        assert _trace_complete(apache), apache
        assert out.rstrip("\n") == apache.rstrip("\n")  # same records, same layout, same group order
    lines = run["ours"][0][1].splitlines()
    assert lines[0].split() == ["#Type", "#ProducerGroup", "#ClientHost", "#SendTime", "#CostTimes", "#Status"]
    assert [line.split()[1] for line in lines if line.startswith("Sub ")] == ["trace-cg-b", "trace-cg-a"]
    pub = lines[1].split()
    assert pub[:3] == ["Pub", PRODUCER_GROUP, "127.0.0.1"] and pub[5].endswith("ms") and pub[6] == "success"


def _tables(page: str) -> dict[str, list[list[str]]]:
    """The trace view's tables ("pub", then each consumer group's), rows of cell texts."""
    found = {}
    for m in re.finditer(r'<table class="grid wide(?: trace-sub)?" (?:id="trace-pub"|data-group="([^"]+)")>(.*?)</table>',
                         page, re.S):
        rows = [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", tr, re.S)]
                for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", m.group(2), re.S)]
        found[html.unescape(m.group(1)) if m.group(1) else "pub"] = [r for r in rows if r]
    return found


def test_the_dashboards_trace_view_shows_what_apaches_tool_prints(on_mq):
    """The Java 4.9.8 client's traces (enableMsgTrace=true) on the dashboard's trace view: the
    Pub row and each group's Sub rows, in the groups' order, as Apache's queryMsgTraceById prints
    them (type, group, client host, cost, status; the page's times are UTC, the tool's local)."""
    printed = [line.split() for line in on_mq["apache"][0].splitlines()[1:] if line.strip()]
    pubs = [[r[0], r[1], r[2], r[-2], r[-1]] for r in printed if r[0] == "Pub"]
    subs = [[r[1], r[2], r[-2], r[-1]] for r in printed if r[0] == "Sub"]
    tables = _tables(on_mq["page"])
    assert [[r[0], r[1], r[2], r[4], r[5]] for r in tables.pop("pub")] == pubs and len(pubs) == 1, on_mq["page"]
    assert list(tables) == list(dict.fromkeys(s[0] for s in subs))  # the tool's group order
    shown = [[r[1], r[2], r[4], r[5]] for rows in tables.values() for r in rows if r[0] == "Sub"]
    assert shown == subs and {s[0] for s in subs} == set(GROUPS)
    # each consumer's SubBefore (the message reaching its listener) is shown before its Sub
    assert all([r[0] for r in rows] == ["SubBefore", "Sub"] for rows in tables.values()), tables


def test_the_traces_read_the_same_from_both_brokers(on_mq, on_java):
    def shape(text: str) -> list[list[str]]:  # times, costs and group order are the run's own
        rows = [line.split() for line in text.splitlines() if line.strip()]
        return sorted([r[0], r[1], r[2], r[-1]] for r in rows)
    assert shape(on_mq["ours"][0][1]) == shape(on_java["apache"][0])


@pytest.mark.parametrize("broker", ["on_mq", "on_java"])
def test_update_order_conf_prints_and_stores_what_apaches_does(broker, request):
    run = request.getfixturevalue(broker)
    apache, ours = run["apache"][2:], run["ours"][2:]
    for i, (a, (rc, out, err)) in enumerate(zip(apache[:-1], ours[:-1], strict=True)):
        assert rc == 0 and err == "", (i, err)
        assert out.rstrip("\n") == a.rstrip("\n"), i
    # a put replaces the whole value (Apache's tool puts it for the cluster, merging nothing)
    assert apache[3].rstrip("\n") == f"get orderConf success. topic=[{ORDER_TOPIC}], orderConf=[broker-x:8;broker-b:2] "
    assert apache[4].rstrip("\n") == f"delete orderConf success. topic=[{ORDER_TOPIC}]"
    # a get of nothing: Apache's tool prints its exception, ours says it on stderr and exits 1
    assert "UpdateOrderConfCommand command failed" in apache[5] and "CODE: 22" in apache[5], apache[5]
    rc, out, err = ours[-1]
    assert rc == 1 and out == "" and "code 22 (QUERY_NOT_FOUND)" in err, err
