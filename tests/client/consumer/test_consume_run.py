"""The concurrent consumer's run of listener calls (``ListenerRunner`` and friends): the
compiled kernel and its pure-Python twin make the same listener calls with the same
arguments, reach the same outcomes (success, RECONSUME_LATER, an exception, None, a
value that is not a status, a partial ``ack_index``), send the same messages back, and
commit the same offsets; an offset never passes a message whose listener has not
returned, even while other threads consume the messages after it."""
from __future__ import annotations

import concurrent.futures
import threading

import pytest

from mqcore import _wire_client, _wire_client_py
from mqcore._compat import default_kernels
from mqcore.client.config import MessageModel, PushConsumerConfig
from mqcore.client.consumer.common import reset_retry_topic
from mqcore.client.consumer.consume_concurrently import ConsumeMessageConcurrentlyService
from mqcore.client.consumer.listener import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus
from mqcore.client.consumer.offset_store import OffsetStore
from mqcore.client.consumer.process_queue import ProcessQueue
from mqcore.client.message import MessageExt, decode_messages
from mqcore.client.consumer.stats import ConsumerStats
from mqcore.clock import ManualClock
from mqcore.message import Prop, pack_host, properties_to_bytes
from mqcore.remoting.bodies import MessageQueue
from tests.support.waiting import wait_for

KERNELS = pytest.mark.parametrize("kernels", [_wire_client, _wire_client_py], ids=["kernel", "twin"])
SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


def messages(n: int, first_offset: int = 0, topic: str = "T") -> list[MessageExt]:
    k = default_kernels()
    out = bytearray()
    for i in range(n):
        pb = properties_to_bytes({"KEYS": f"k{first_offset + i}"})
        buf = bytearray(k.record_size(1, len(topic), len(pb), 0))
        k.encode_record(buf, 0, topic.encode(), 0, 0, first_offset + i, len(out), 0, 1, pack_host("10.0.0.2", 1), 2,
                        pack_host("10.0.0.3", 2), 0, 0, b"x", pb)
        out += buf
    return decode_messages(bytes(out), "b")


class Consumer:
    """The consume service's view of a push consumer, recording what it is asked to do."""

    group = "g"
    message_model = MessageModel.CLUSTERING
    max_reconsume_times = 16

    def __init__(self, batch: int = 1, *, refuse_send_back: frozenset[int] = frozenset()) -> None:
        self.config = PushConsumerConfig(consumer_group="g", consume_message_batch_max_size=batch,
                                         local_retry_delay_ms=1)
        self.clock = ManualClock(1_700_000_000_123)
        self.offset_store = OffsetStore("g")
        self.stats = ConsumerStats(self.clock)
        self.sent_back: list[tuple[int, int]] = []
        self.refuse_send_back = set(refuse_send_back)
        self.lock = threading.Lock()

    def send_message_back(self, msg: MessageExt, delay_level: int, broker_name: str | None) -> bool:
        with self.lock:
            self.sent_back.append((msg.queue_offset, delay_level))
            if msg.queue_offset in self.refuse_send_back:
                self.refuse_send_back.discard(msg.queue_offset)  # refused once: consumed again locally
                return False
            return True

    def schedule(self, delay_ms: float, fn, *args) -> None:
        threading.Thread(target=fn, args=args).start()

    def reset_retry_topic(self, msgs: list[MessageExt]) -> None:
        reset_retry_topic(msgs, self.group)


class Script:
    """A listener whose answer depends on the (first) message's offset; it records every call."""

    def __init__(self, answers: dict[int, object]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[int], bool, str | None]] = []
        self.lock = threading.Lock()

    def __call__(self, msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext):
        offsets = [m.queue_offset for m in msgs]
        with self.lock:
            self.calls.append((offsets, isinstance(ctx, ConsumeConcurrentlyContext) and ctx.ack_index == 2**31 - 1,
                               msgs[0].properties.get(Prop.CONSUME_START_TIME)))
        answer = self.answers.get(offsets[0], SUCCESS)
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, tuple) and answer[0] == "ack":  # partial success of a batch
            ctx.ack_index = answer[1]
            return SUCCESS
        if isinstance(answer, tuple) and answer[0] == "delay":
            ctx.delay_level_when_next_consume = answer[1]
            return LATER
        return answer


def consume(kernels, listener, consumer: Consumer, runs: list[list[MessageExt]], threads: int = 1):
    mq = MessageQueue("T", "b", 0)
    pq = ProcessQueue()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        service = ConsumeMessageConcurrentlyService(consumer, listener, pool, kernels=kernels)
        for msgs in runs:
            pq.put_messages(msgs)
            service.submit(msgs, pq, mq)
        assert wait_for(lambda: pq.msg_count == 0 and not service._drainers, timeout=20)
        service.stop()
    return service, consumer.offset_store.read_offset_memory(mq)


MIXED = {3: LATER, 5: RuntimeError("boom"), 6: None, 8: "not a status", 10: ("delay", 5), 12: LATER}


@pytest.mark.parametrize("batch", [1, 3])
def test_kernel_and_twin_make_the_same_calls_outcomes_send_backs_and_offsets(batch):
    seen = {}
    for kernels in (_wire_client, _wire_client_py):
        listener = Script(MIXED if batch == 1 else {3: LATER, 6: ("ack", 1), 9: RuntimeError("boom"), 12: None})
        consumer = Consumer(batch, refuse_send_back=frozenset({12 if batch == 1 else 9}))
        service, offset = consume(kernels, listener, consumer, [messages(10), messages(5, 10)])
        seen[kernels.__name__] = (sorted(listener.calls), sorted(consumer.sent_back), offset,
                                  service.consumed_ok, service.consumed_failed)
    kernel, twin = seen.values()
    assert kernel == twin
    calls, sent_back, offset, ok, failed = kernel
    assert offset == 15  # every message given back: one past the last
    assert all(fresh_ctx and stamp == "1700000000123" for _, fresh_ctx, stamp in calls)
    if batch == 1:
        # one call per message (12 twice: its send-back was refused, it was consumed again locally)
        assert [c[0] for c in calls] == [[i] for i in range(13)] + [[12]] + [[13], [14]]
        assert sent_back == [(3, 0), (5, 0), (8, 0), (10, 5), (12, 0), (12, 0)]
        assert (ok, failed) == (10, 6)
    else:
        # 9 twice: its send-back was refused, it was consumed again locally
        assert [c[0] for c in calls] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9], [9], [10, 11, 12], [13, 14]]
        # 3..5 all went back; 6..8 acknowledged up to index 1: 8 went back; 9 raised (twice)
        assert sent_back == [(3, 0), (4, 0), (5, 0), (8, 0), (9, 0), (9, 0)]
        assert (ok, failed) == (10, 6)


@KERNELS
def test_each_call_gets_a_list_of_its_own_message_and_its_own_context_when_kept(kernels):
    kept = []

    def listener(msgs, ctx):
        kept.append((msgs, ctx, [m.queue_offset for m in msgs]))

    consume(kernels, listener, Consumer(), [messages(50)])
    assert [offsets for _, _, offsets in kept] == [[i] for i in range(50)]
    assert [[m.queue_offset for m in msgs] for msgs, _, _ in kept] == [[i] for i in range(50)]  # lists not reused
    assert len({id(ctx) for _, ctx, _ in kept}) == 50


@KERNELS
def test_a_context_changed_by_a_successful_listener_is_not_handed_to_the_next_call(kernels):
    seen = []

    def listener(msgs, ctx):
        seen.append((ctx.ack_index, ctx.delay_level_when_next_consume))
        ctx.ack_index = 0
        ctx.delay_level_when_next_consume = 7
        return SUCCESS

    consume(kernels, listener, Consumer(), [messages(20)])
    assert seen == [(2**31 - 1, 0)] * 20


@KERNELS
def test_the_offset_never_passes_a_message_whose_listener_has_not_returned(kernels):
    """Message 4's listener blocks: the watchdog starts more drainers, which consume the rest
    of the run (and what the stuck drainer consumed before 4 is settled); the committed offset
    stays at 4 until its listener returns."""
    release = threading.Event()
    consumed = set()
    lock = threading.Lock()

    def listener(msgs, ctx):
        if msgs[0].queue_offset == 4:
            assert release.wait(20)
        with lock:
            consumed.add(msgs[0].queue_offset)

    consumer = Consumer()
    mq = MessageQueue("T", "b", 0)
    pq = ProcessQueue()
    msgs = messages(200)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        service = ConsumeMessageConcurrentlyService(consumer, listener, pool, kernels=kernels)
        pq.put_messages(msgs)
        service.submit(msgs, pq, mq)
        try:
            assert wait_for(lambda: len(consumed) == 199 and pq.msg_count == 1, timeout=20)
            assert consumer.offset_store.read_offset_memory(mq) == 4
        finally:
            release.set()
        assert wait_for(lambda: pq.msg_count == 0 and not service._drainers, timeout=20)
        service.stop()
    assert consumer.offset_store.read_offset_memory(mq) == 200


@KERNELS
def test_messages_of_a_dropped_queue_are_not_consumed_nor_committed(kernels):
    calls = []
    pq = ProcessQueue()

    def listener(msgs, ctx):
        calls.append(msgs[0].queue_offset)
        if msgs[0].queue_offset == 2:
            pq.dropped = True  # a rebalance took the queue while message 2 was consumed

    consumer = Consumer()
    mq = MessageQueue("T", "b", 0)
    msgs = messages(10)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        service = ConsumeMessageConcurrentlyService(consumer, listener, pool, kernels=kernels)
        pq.put_messages(msgs)
        service.submit(msgs, pq, mq)
        assert wait_for(lambda: not service._drainers and not service._pending, timeout=20)
        service.stop()
    assert calls == [0, 1, 2]
    assert consumer.offset_store.read_offset_memory(mq) == -1  # nothing committed for a dropped queue


@KERNELS
def test_a_run_is_shared_by_the_threads_that_take_its_messages(kernels):
    """Several states take batches from one run: every message exactly once, in order per claim."""
    msgs = messages(100)
    pq = ProcessQueue()
    run = kernels.ConsumeRun(msgs, pq, MessageQueue("T", "b", 0))
    runner = kernels.ListenerRunner(lambda m, c: None, ConsumeConcurrentlyContext, SUCCESS, 7, "%RETRY%g",
                                    lambda m: None, ManualClock(1), False, Prop.CONSUME_START_TIME,
                                    Prop.CONSUME_START_TIME.encode() + b"\1", b"\2", 1.0, 30)
    states = [kernels.DrainerState(), kernels.DrainerState()]
    taken: list[MessageExt] = []
    turn = 0
    while True:
        code = runner.run(run, states[turn % 2])
        if code == kernels.RUN_EXHAUSTED:
            break
        assert code == kernels.RUN_SETTLE
        taken.extend(states[turn % 2].take_done()[0])
        turn += 1
    for state in states:
        taken.extend(state.take_done()[0])
    assert sorted(m.queue_offset for m in taken) == list(range(100))
    assert run.remaining == 0 and runner.consumed_ok == 100
    assert turn == 3  # settled every 30 messages (35, 35, 28 at the RUN_SETTLE points)
