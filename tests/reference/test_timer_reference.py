"""Timer messages with the official Java remoting clients (5.x ``setDeliverTimeMs`` and
``recallMessage``; 4.9.8 with ``TIMER_DELAY_SEC``) against mqbroker, and the same scenarios
against Apache RocketMQ 5.3.3 (broker + proxy in local mode, timerWheelEnable=true): the
same deliveries, the same properties on them, the same answers to malformed timers."""
from __future__ import annotations

import pytest

from tests.support.processes import BrokerProcess
from tests.support.reference import run_java_driver
from tests.support.reference5 import Java5Namesrv, Java5Proxy, run_java5_driver

pytestmark = pytest.mark.timeout(400)
#: what a delivery may take past its due time at the broker: the rest of its second plus the
#: re-put (a loaded 2-core machine); the consumer's arrival adds its pull
LATE_MS = 1000 + 500
ARRIVAL_MS = LATE_MS + 1000


def _parse(out: str):
    sent, got, other = {}, {}, []
    for line in out.splitlines():
        w = line.split()
        if not w:
            continue
        if w[0] == "SENT":
            sent[w[1]] = (int(w[2]), w[3])
        elif w[0] == "GOT":
            props = dict(x.split("=", 1) for x in w[4:])
            got.setdefault(w[1], []).append((int(w[2]), int(w[3]), props))
        elif w[0] in ("RECALL", "RECALLBAD", "RECALLEXPIRED", "ERR", "DONE"):
            other.append(w)
    return sent, got, other


def _run(java5: bool, ns: str, topic: str, how: str, count: int, delay_ms: int, recall: int = -1, tmp=None):
    run = run_java5_driver if java5 else run_java_driver
    args = [ns, topic, how, str(count), str(delay_ms)] + ([str(recall)] if recall >= 0 else [])
    proc = run("TimerScenarios.java", args, timeout_s=180, workdir=tmp)
    assert "DONE" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    return _parse(proc.stdout)


def _check_deliveries(sent, got, recalled=()):
    assert set(got) == set(sent) - set(recalled), (sorted(got), sorted(sent))
    for body, arrivals in got.items():
        due = sent[body][0]
        arrival, store_ts, props = arrivals[0]
        assert store_ts >= due - 5, (body, store_ts - due)  # not before (5 ms: the JVM's and broker's clocks)
        assert store_ts - due < LATE_MS, (body, store_ts - due)
        assert arrival - due < ARRIVAL_MS, (body, arrival - due)
    return {k for arrivals in got.values() for k in arrivals[0][2]}


def _both(tmp_path, scenario):
    """The scenario's outcome on mqbroker, then on Apache 5.3.3 (recall on in both: it is off
    by default in both)."""
    with BrokerProcess(tmp_path / "mq", conf={"recallMessageEnable": "true"}) as b:
        ours = scenario(b.namesrv_addr, tmp_path)
    with Java5Namesrv(tmp_path / "ns") as ns, Java5Proxy(tmp_path / "ref", ns.addr,
                                                          conf={"recallMessageEnable": "true"}):
        ref = scenario(ns.addr, tmp_path)
    return ours, ref


def test_java5_set_deliver_time_ms_and_recall_match_apache(tmp_path):
    def scenario(ns, tmp):
        return _run(True, ns, "TimerJ5", "deliver", 12, 3500, recall=4, tmp=tmp)

    (s1, g1, o1), (s2, g2, o2) = _both(tmp_path, scenario)
    keys_ours = _check_deliveries(s1, g1, recalled=["t4"])
    keys_ref = _check_deliveries(s2, g2, recalled=["t4"])
    assert keys_ours == keys_ref, (keys_ours, keys_ref)  # TIMER_DELIVER_MS, TIMER_OUT_MS, ENQUEUE/DEQUEUE
    recall_ours = [w for w in o1 if w[0].startswith("RECALL")]
    recall_ref = [w for w in o2 if w[0].startswith("RECALL")]
    assert [w[:2] for w in recall_ours] == [w[:2] for w in recall_ref], (recall_ours, recall_ref)
    assert ["RECALLEXPIRED", "604"] in [w[:2] for w in recall_ours]  # ILLEGAL_OPERATION, timestamp invalid
    for got in (g1, g2):
        for body, arrivals in got.items():
            props = arrivals[0][2]
            assert int(props["TIMER_OUT_MS"]) % 1000 == 0


def test_java4_client_timer_delay_sec_matches_apache(tmp_path):
    def scenario(ns, tmp):
        return _run(False, ns, "TimerJ4", "delaysec", 8, 2000, tmp=tmp)

    (s1, g1, _), (s2, g2, _) = _both(tmp_path, scenario)
    assert _check_deliveries(s1, g1) == _check_deliveries(s2, g2)


@pytest.mark.parametrize("bad", ["TIMER_DELAY_SEC=abc", "TIMER_DELIVER_MS=1.5e12", "TIMER_DELAY_SEC=999999",
                                 "TIMER_DELAY_MS=-5000", "TIMER_DELAY_SEC=99999999999999999"])
def test_malformed_timers_get_the_java_brokers_answer(tmp_path, bad):
    def scenario(ns, tmp):
        return _run(False, ns, "TimerBad", "bad:" + bad, 0, 0, tmp=tmp)[2]

    ours, ref = _both(tmp_path, scenario)
    assert ours == ref  # the same code and remark, or stored alike
