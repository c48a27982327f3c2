"""The broker's small shared state the connection cores update in C (mqcore/_broker_state.pxi)
and their twins: the put latency ``Histogram`` (twin ``mqcore.histogram.Histogram``) and the
long-polling ``ArrivalGate`` (twin ``_pipeline_py.ArrivalGate``).

* both histograms put every value in the same bucket and keep the same sum;
* both gates pass an arrival on only while a pull is counted as parked;
* through a real broker: plain SENDs the C core stores call no arrival listener while no pull
  is parked, and a parked pull is woken by a SEND the core stores.
"""
from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import _pipeline_py
from mqcore.histogram import FLUSH_LATENCY_BOUNDS_S, PUT_LATENCY_BOUNDS_S
from mqcore.histogram import Histogram as PyHistogram
from mqcore.remoting import RequestCode, create_request
from mqcore.remoting.command import encode_frame
from tests.support.store import small_config

from mqcore import _pipeline  # the compiled kernels: a missing build fails here, never skips

KERNELS = {"cython": _pipeline, "twin": _pipeline_py}
TOPIC = "GateT"


def _state(h):
    return h.bounds, h.counts, h.sum, h.cumulative()


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.floats(allow_nan=False), st.sampled_from(PUT_LATENCY_BOUNDS_S),
                                 st.sampled_from([0.0, -0.0, math.inf, -math.inf, 1e-7, 6.0])), max_size=60))
def test_compiled_histogram_buckets_as_the_python_one(values):
    """Each value lands in the first bucket whose bound is >= it (bisect_left), on the bounds,
    below the first and above the last; the sums agree (the same additions in the same order)."""
    for bounds in (PUT_LATENCY_BOUNDS_S, FLUSH_LATENCY_BOUNDS_S):
        compiled, python = _pipeline.Histogram(bounds), PyHistogram(bounds)
        for v in values:
            compiled.observe(v)
            python.observe(v)
        got, want = _state(compiled), _state(python)
        assert got[0] == want[0] and got[1] == want[1] and got[3] == want[3]
        assert got[2] == want[2] or (math.isnan(got[2]) and math.isnan(want[2]))


def test_compiled_histogram_counts_nan_where_bisect_does():
    compiled, python = _pipeline.Histogram(PUT_LATENCY_BOUNDS_S), PyHistogram(PUT_LATENCY_BOUNDS_S)
    for h in (compiled, python):
        h.observe(float("nan"))
        h.observe(0.003)
    assert compiled.counts == python.counts and compiled.counts[0] == 1
    assert compiled.counts is not compiled.counts  # a list made when read: the buckets stay in C


def test_broker_stats_use_the_pipeline_kernels_histogram(monkeypatch):
    from mqcore import _compat
    from mqcore.broker.stats import BrokerStats

    monkeypatch.setattr(_compat, "pipeline_kernels", _pipeline)
    assert type(BrokerStats().put_latency) is _pipeline.Histogram
    monkeypatch.setattr(_compat, "pipeline_kernels", _pipeline_py)
    assert type(BrokerStats().put_latency) is PyHistogram


@pytest.mark.parametrize("kernel", KERNELS)
def test_arrival_gate_passes_arrivals_on_only_while_a_pull_is_parked(kernel):
    calls = []
    gate = KERNELS[kernel].ArrivalGate(lambda *args: calls.append(args))
    gate("T", 1, 5)
    assert calls == [] and gate.waiting == 0
    gate.waiting += 1
    gate("T", 1, 6)
    gate.waiting += 1
    gate("T", 2, 7)
    gate.waiting -= 2
    gate("T", 1, 8)
    assert calls == [("T", 1, 6), ("T", 2, 7)]
    assert gate.listener is not None


def _send(queue_id: int, body: bytes, opaque: int) -> bytes:
    ext = {"a": "GateP", "b": TOPIC, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0", "g": "1700000000123",
           "h": "0", "i": "UNIQ_KEY\x01U0\x02TAGS\x01tg", "j": "0", "k": "false", "m": "false"}
    return encode_frame(create_request(RequestCode.SEND_MESSAGE_V2, ext, body, opaque=opaque))


def _parked_pull(queue_id: int, opaque: int) -> bytes:
    ext = {"consumerGroup": "GateG", "topic": TOPIC, "queueId": str(queue_id), "queueOffset": "0",
           "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "15000",
           "subVersion": "0", "subscription": "*", "expressionType": "TAG"}
    return encode_frame(create_request(RequestCode.PULL_MESSAGE, ext, opaque=opaque))


async def _answer(reader) -> bytes:
    length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 10), "big")
    return await asyncio.wait_for(reader.readexactly(length), 10)


@pytest.mark.parametrize("kernel", KERNELS)
def test_core_sends_call_no_listener_until_a_pull_parks_and_then_wake_it(tmp_path, monkeypatch, kernel):
    """The C core's put reads the gate's count (the twin's put calls the twin gate): with no
    pull parked it calls no arrival listener; a pull parked by long polling is woken by the
    next SEND the pipeline stores and answered FOUND with that message; the count is back to
    0 once it is answered."""
    from mqcore import _compat
    from mqcore.broker.broker import Broker
    from mqcore.broker.config import BrokerConfig
    from mqcore.broker.long_polling import PullRequestHoldService
    from mqcore.broker.metadata import TopicConfig

    notified = []
    notify = PullRequestHoldService.notify

    def counting(self, topic, queue_id, max_offset):
        notified.append((topic, queue_id, max_offset))
        notify(self, topic, queue_id, max_offset)
    monkeypatch.setattr(PullRequestHoldService, "notify", counting)
    monkeypatch.setattr(_compat, "pipeline_kernels", KERNELS[kernel])
    stored_by_core = []

    async def scenario():
        broker = Broker(BrokerConfig(listen_port=0, namesrv_listen_port=0, broker_name="gate"),
                        small_config(tmp_path), clock=lambda: 1_700_000_000_000)
        await broker.start()
        try:
            assert (broker.server._channel_class.__name__ == "CoreChannel") == (kernel == "cython")
            assert type(broker.hold.arrivals) is KERNELS[kernel].ArrivalGate
            broker.topics.update(TopicConfig(TOPIC, 4, 4))
            put = broker.store.put_plain_sends

            def recording(items, born, store_host):  # the pipeline's store stage (StorePlainSends / its twin)
                stored, refusal = put(items, born, store_host)
                stored_by_core.extend(item[10] for item in items[:len(stored)])
                return stored, refusal
            broker.store.put_plain_sends = recording
            send_r, send_w = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            for i in range(3):
                send_w.write(_send(1, b"early%d" % i, i))
                assert b'"code":0' in await _answer(send_r)
            assert stored_by_core == [b"early0", b"early1", b"early2"] and notified == []
            # queue 1 was new: its first file is made off the put's path, and a pull parked while
            # that happens would also be told of queue 1; a read of the queue waits for it
            assert broker.store.get_max_offset_in_queue(TOPIC, 1) == 3 and notified == []
            pull_r, pull_w = await asyncio.open_connection(*broker.addr.rsplit(":", 1))
            pull_w.write(_parked_pull(2, 50))
            for _ in range(1000):  # until the general path has parked it
                if broker.hold.waiting_count:
                    break
                await asyncio.sleep(0.01)
            assert broker.hold.waiting_count == 1 and broker.hold.arrivals.waiting == 1
            send_w.write(_send(2, b"wakes", 9))
            assert b'"code":0' in await _answer(send_r)
            answer = await _answer(pull_r)
            assert stored_by_core[-1] == b"wakes" and notified == [(TOPIC, 2, 1)]
            for _ in range(1000):  # the hold's own clean-up runs after the answer is written
                if not broker.hold.arrivals.waiting:
                    break
                await asyncio.sleep(0.01)
            assert broker.hold.arrivals.waiting == 0
            send_w.write(_send(2, b"late", 10))
            assert b'"code":0' in await _answer(send_r)
            assert notified == [(TOPIC, 2, 1)]
            send_w.close()
            pull_w.close()
            return answer
        finally:
            await broker.shutdown()

    answer = asyncio.run(scenario())
    assert b'"opaque":50' in answer and b'"remark":"FOUND"' in answer and b"wakes" in answer
