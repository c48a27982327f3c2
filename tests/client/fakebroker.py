"""A tiny in-process name server + broker pair: a unit-test double for client logic.

NOT a broker: in-memory queues, no persistence, no delay levels (retries are
redelivered at once), pulls wait at most ``hold_s`` for new messages. It speaks the
real wire protocol through ``mqcore.remoting`` so the client is exercised end to end
on loopback.

Kept only for what a real ``mqbroker`` cannot be made to do on demand: injected faults
(``fail_next_sends`` with any response code, ``send_delay_s``, ``fail_send_back``), a
second broker in the same process for failover, and a group with no stored offset that
gets QUERY_NOT_FOUND while its queue still holds its first message (a real broker answers
0 until expired files are deleted). Scenarios a real broker can serve run against one
(``tests/client/consumer/test_push.py``'s ``mqbroker`` fixture, ``tests/client/integration``),
so rules such as retry and DLQ are tested on the broker that has them, not on this double.
"""
from __future__ import annotations

import asyncio
import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from mqcore._compat import kernels
from mqcore.format.batch import iter_batch_items
from mqcore.jsonutil import dumps_compact, loads_lenient
from mqcore.message import (
    Prop,
    offset_msg_id,
    pack_host,
    properties_to_bytes,
    string_to_properties,
)
from mqcore.remoting import RemotingServer, RequestCode, ResponseCode, create_response
from mqcore.remoting.bodies import (
    GetConsumerListByGroupResponseBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
)
from mqcore.remoting.headers import (
    ConsumerSendMsgBackRequestHeader,
    GetConsumerListByGroupRequestHeader,
    GetMaxOffsetRequestHeader,
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    QueryConsumerOffsetRequestHeader,
    SearchOffsetRequestHeader,
    SendMessageRequestHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from tests.support.waiting import free_port


@dataclass
class Stored:
    topic: str
    queue_id: int
    queue_offset: int
    phy: int
    record: bytes
    tags: str | None
    props: dict
    body: bytes
    flag: int
    sys_flag: int
    reconsume: int
    born_ts: int


@dataclass
class FakeBroker:
    name: str
    server: RemotingServer
    addr: str = ""
    queues: dict = field(default_factory=lambda: collections.defaultdict(list))
    topics: dict = field(default_factory=dict)  # topic -> queue count
    commitlog: dict = field(default_factory=dict)  # phy -> Stored
    next_phy: int = 0
    offsets: dict = field(default_factory=dict)  # (group, topic, qid) -> offset
    consumers: dict = field(default_factory=lambda: collections.defaultdict(dict))  # group -> {cid: channel}
    locks: dict = field(default_factory=dict)  # (group, mq) -> cid
    sent: list = field(default_factory=list)  # request codes seen, in order
    fail_next_sends: int = 0
    fail_code: int = ResponseCode.SYSTEM_ERROR
    down: bool = False
    send_delay_s: float = 0.0
    fail_send_back: bool = False
    query_offset_delay_s: float = 0.0  # QUERY_CONSUMER_OFFSET answered this late
    query_offset_inflight: int = 0
    query_offset_most_inflight: int = 0  # the most offset queries seen waiting at once


class FakeCluster:
    """``with FakeCluster(brokers=2) as c: c.namesrv_addr ...``"""

    def __init__(self, brokers: int = 1, queues: int = 4, hold_s: float = 0.2) -> None:
        self.n = brokers
        self.default_queues = queues
        self.hold_s = hold_s
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.brokers: list[FakeBroker] = []
        self.namesrv: RemotingServer | None = None
        self.namesrv_addr = ""
        self.arrived: asyncio.Event | None = None

    # --- lifecycle ------------------------------------------------------------------------
    def __enter__(self) -> FakeCluster:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()

    def call(self, fn: Any, *args: Any) -> Any:
        async def run() -> Any:
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(10)

    async def _start(self) -> None:
        self.arrived = asyncio.Event()
        self.namesrv = RemotingServer(name="fake-namesrv")
        self.namesrv.register_processor(RequestCode.GET_ROUTEINFO_BY_TOPIC, self._route)
        port = await self.namesrv.start("127.0.0.1", 0)
        self.namesrv_addr = f"127.0.0.1:{port}"
        for i in range(self.n):
            server = RemotingServer(name=f"fake-broker-{i}")
            b = FakeBroker(f"broker-{chr(ord('a') + i)}", server)
            b.topics["TBW102"] = 8
            self._register(b)
            port = await server.start("127.0.0.1", 0)
            b.addr = f"127.0.0.1:{port}"
            self.brokers.append(b)

    async def _stop(self) -> None:
        for b in self.brokers:
            await b.server.shutdown(0.5)
        if self.namesrv is not None:
            await self.namesrv.shutdown(0.5)
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    def create_topic(self, topic: str, queues: int | None = None) -> None:
        for b in self.brokers:
            self.call(b.topics.__setitem__, topic, queues or self.default_queues)

    def kill(self, index: int) -> None:
        """Make broker ``index`` unreachable (closes connections, refuses new ones)."""
        b = self.brokers[index]

        async def go() -> None:
            b.down = True
            await b.server.shutdown(0.1)
        asyncio.run_coroutine_threadsafe(go(), self.loop).result(10)

    # --- name server -------------------------------------------------------------------------
    def _route(self, ch: Any, req: Any) -> Any:
        topic = GetRouteInfoRequestHeader.from_command(req).topic
        qds, bds = [], []
        for b in self.brokers:
            if topic in b.topics:
                n = b.topics[topic]
                qds.append({"brokerName": b.name, "perm": 6, "readQueueNums": n, "topicSysFlag": 0,
                            "writeQueueNums": n})
                bds.append({"brokerAddrs": {"0": b.addr}, "brokerName": b.name, "cluster": "DefaultCluster"})
        if not qds:
            return create_response(req, ResponseCode.TOPIC_NOT_EXIST, f"No topic route info for {topic}")
        body = '{"brokerDatas":%s,"filterServerTable":{},"queueDatas":%s}' % (
            dumps_compact(bds).decode(), dumps_compact(qds).decode())
        body = body.replace('{"0":', "{0:")  # fastjson's unquoted Long keys
        return create_response(req, body=body.encode())

    # --- broker ---------------------------------------------------------------------------------
    def _register(self, b: FakeBroker) -> None:
        s = b.server
        for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
            s.register_processor(code, lambda ch, req, b=b: self._send(b, ch, req))
        s.register_processor(RequestCode.PULL_MESSAGE, lambda ch, req, b=b: self._pull(b, ch, req))
        s.register_processor(RequestCode.HEART_BEAT, lambda ch, req, b=b: self._heartbeat(b, ch, req))
        s.register_processor(RequestCode.UNREGISTER_CLIENT, lambda ch, req, b=b: self._unregister(b, ch, req))
        s.register_processor(RequestCode.GET_CONSUMER_LIST_BY_GROUP, lambda ch, req, b=b: self._cids(b, req))
        s.register_processor(RequestCode.QUERY_CONSUMER_OFFSET, lambda ch, req, b=b: self._query_off(b, req))
        s.register_processor(RequestCode.UPDATE_CONSUMER_OFFSET, lambda ch, req, b=b: self._update_off(b, req))
        s.register_processor(RequestCode.GET_MAX_OFFSET, lambda ch, req, b=b: self._max_off(b, req))
        s.register_processor(RequestCode.GET_MIN_OFFSET,
                             lambda ch, req, b=b: create_response(req, ext_fields={"offset": 0}))
        s.register_processor(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, lambda ch, req, b=b: self._search(b, req))
        s.register_processor(RequestCode.CONSUMER_SEND_MSG_BACK, lambda ch, req, b=b: self._send_back(b, req))
        s.register_processor(RequestCode.LOCK_BATCH_MQ, lambda ch, req, b=b: self._lock(b, req))
        s.register_processor(RequestCode.UNLOCK_BATCH_MQ, lambda ch, req, b=b: self._unlock(b, req))

    def _append(self, b: FakeBroker, topic: str, qid: int, body: bytes, props: dict, flag: int, sys_flag: int,
                born_ts: int, reconsume: int = 0) -> Stored:
        q = b.queues[(topic, qid)]
        props = dict(props)
        props.pop(Prop.WAIT, None)
        props[Prop.CLUSTER] = "DefaultCluster"
        pb = properties_to_bytes(props)
        host, port = b.addr.split(":")
        store_host = pack_host(host, int(port))
        size = kernels.record_size(len(body), len(topic.encode()), len(pb), 0)
        buf = bytearray(size)
        kernels.encode_record(buf, 0, topic.encode(), qid, flag, len(q), b.next_phy, sys_flag, born_ts,
                              pack_host("127.0.0.1", 5555), int(time.time() * 1000), store_host, reconsume, 0,
                              body, pb)
        s = Stored(topic, qid, len(q), b.next_phy, bytes(buf), props.get(Prop.TAGS), props, body, flag, sys_flag,
                   reconsume, born_ts)
        b.commitlog[b.next_phy] = s
        b.next_phy += size
        q.append(s)
        return s

    async def _notify(self) -> None:
        assert self.arrived is not None
        event, self.arrived = self.arrived, asyncio.Event()
        event.set()

    async def _send(self, b: FakeBroker, ch: Any, req: Any) -> Any:
        b.sent.append(req.code)
        if b.send_delay_s:
            await asyncio.sleep(b.send_delay_s)
        if b.fail_next_sends > 0:
            b.fail_next_sends -= 1
            return create_response(req, b.fail_code, "injected failure")
        h = SendMessageRequestHeader.from_command(req)
        if h.topic not in b.topics:
            b.topics[h.topic] = min(h.default_topic_queue_nums, 8) if not h.topic.startswith("%") else 1
        props = string_to_properties(h.properties)
        topic, qid = h.topic, h.queue_id
        reconsume = h.reconsume_times or 0
        if req.code == RequestCode.SEND_BATCH_MESSAGE:
            items = _split_batch(bytes(req.body))
            stored = [self._append(b, topic, qid, body, {**string_to_properties(p), **props}, flag, h.sys_flag,
                                   h.born_timestamp) for flag, body, p in items]
        else:
            stored = [self._append(b, topic, qid, bytes(req.body), props, h.flag, h.sys_flag, h.born_timestamp,
                                   reconsume)]
        await self._notify()
        host, port = b.addr.split(":")
        ids = ",".join(offset_msg_id(pack_host(host, int(port)), s.phy) for s in stored)
        return create_response(req, ext_fields={"msgId": ids, "queueId": qid, "queueOffset": stored[0].queue_offset,
                                                "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})

    async def _pull(self, b: FakeBroker, ch: Any, req: Any) -> Any:
        h = PullMessageRequestHeader.from_command(req)
        if h.sys_flag & 1 and h.commit_offset > 0:
            b.offsets[(h.consumer_group, h.topic, h.queue_id)] = h.commit_offset
        q = b.queues[(h.topic, h.queue_id)]
        tags = None
        if h.subscription and h.subscription.strip() != "*":
            tags = {t.strip() for t in h.subscription.split("||")}
        deadline = time.monotonic() + (self.hold_s if h.sys_flag & 2 else 0)
        while True:
            if h.queue_offset > len(q):
                return create_response(req, ResponseCode.PULL_OFFSET_MOVED, "OFFSET_OVERFLOW_BADLY",
                                       _pull_ext(len(q), len(q)))
            chunk = q[h.queue_offset:h.queue_offset + h.max_msg_nums]
            if chunk:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return create_response(req, ResponseCode.PULL_NOT_FOUND, "OFFSET_OVERFLOW_ONE",
                                       _pull_ext(h.queue_offset, len(q)))
            assert self.arrived is not None
            try:
                await asyncio.wait_for(self.arrived.wait(), remaining)
            except asyncio.TimeoutError:
                pass
        next_off = h.queue_offset + len(chunk)
        if tags is not None:
            chunk = [s for s in chunk if s.tags in tags]
        if not chunk:
            return create_response(req, ResponseCode.PULL_RETRY_IMMEDIATELY, "NO_MATCHED_MESSAGE",
                                   _pull_ext(next_off, len(q)))
        return create_response(req, ResponseCode.SUCCESS, "FOUND", _pull_ext(next_off, len(q)),
                               b"".join(s.record for s in chunk))

    async def _heartbeat(self, b: FakeBroker, ch: Any, req: Any) -> Any:
        data = loads_lenient(bytes(req.body))
        cid = data["clientID"]
        for c in data.get("consumerDataSet", []):
            group = c["groupName"]
            if cid not in b.consumers[group]:
                b.consumers[group][cid] = ch
                await self._notify_ids_changed(b, group)
        return create_response(req)

    async def _notify_ids_changed(self, b: FakeBroker, group: str) -> None:
        from mqcore.remoting.command import create_request
        for ch in list(b.consumers[group].values()):
            if ch.is_active:
                try:
                    await ch.send_request_oneway(create_request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                                                                {"consumerGroup": group}, oneway=True))
                except Exception:  # noqa: BLE001 - test double: a dead channel is fine
                    pass

    async def _unregister(self, b: FakeBroker, ch: Any, req: Any) -> Any:
        h = UnregisterClientRequestHeader.from_command(req)
        if h.consumer_group and b.consumers[h.consumer_group].pop(h.client_id, None) is not None:
            for key in [k for k, v in b.locks.items() if v == h.client_id]:
                del b.locks[key]
            await self._notify_ids_changed(b, h.consumer_group)
        return create_response(req)

    def _cids(self, b: FakeBroker, req: Any) -> Any:
        group = GetConsumerListByGroupRequestHeader.from_command(req).consumer_group
        ids = sorted(b.consumers[group])
        if not ids:
            return create_response(req, ResponseCode.SYSTEM_ERROR, "no consumer for this group")
        return create_response(req, body=GetConsumerListByGroupResponseBody(ids).encode())

    def _query_off(self, b: FakeBroker, req: Any) -> Any:
        if b.query_offset_delay_s:
            return self._query_off_late(b, req)
        return self._query_off_now(b, req)

    def _query_off_now(self, b: FakeBroker, req: Any) -> Any:
        h = QueryConsumerOffsetRequestHeader.from_command(req)
        off = b.offsets.get((h.consumer_group, h.topic, h.queue_id))
        if off is None:
            return create_response(req, ResponseCode.QUERY_NOT_FOUND, "Not found")
        return create_response(req, ext_fields={"offset": off})

    async def _query_off_late(self, b: FakeBroker, req: Any) -> Any:
        b.query_offset_inflight += 1
        b.query_offset_most_inflight = max(b.query_offset_most_inflight, b.query_offset_inflight)
        try:
            await asyncio.sleep(b.query_offset_delay_s)
        finally:
            b.query_offset_inflight -= 1
        return self._query_off_now(b, req)

    def _update_off(self, b: FakeBroker, req: Any) -> Any:
        h = UpdateConsumerOffsetRequestHeader.from_command(req)
        if h.commit_offset >= 0:
            b.offsets[(h.consumer_group, h.topic, h.queue_id)] = h.commit_offset
        return create_response(req)

    def _max_off(self, b: FakeBroker, req: Any) -> Any:
        h = GetMaxOffsetRequestHeader.from_command(req)
        return create_response(req, ext_fields={"offset": len(b.queues[(h.topic, h.queue_id)])})

    def _search(self, b: FakeBroker, req: Any) -> Any:
        h = SearchOffsetRequestHeader.from_command(req)
        q = b.queues[(h.topic, h.queue_id)]
        off = next((s.queue_offset for s in q if s.born_ts >= h.timestamp), len(q))
        return create_response(req, ext_fields={"offset": off})

    async def _send_back(self, b: FakeBroker, req: Any) -> Any:
        h = ConsumerSendMsgBackRequestHeader.from_command(req)
        if b.fail_send_back:
            return create_response(req, ResponseCode.SYSTEM_ERROR, "injected send-back failure")
        s = b.commitlog.get(h.offset)
        if s is None:
            return create_response(req, ResponseCode.SYSTEM_ERROR, "no message at offset")
        props = dict(s.props)
        props.setdefault(Prop.RETRY_TOPIC, s.topic)
        props.setdefault(Prop.ORIGIN_MESSAGE_ID, h.origin_msg_id or "")
        # the retry/DLQ rule (max reconsume times, delay levels) is the real broker's and is
        # tested against mqbroker (tests/client/integration/test_groups.py); the fake only
        # stores what was sent back, for client behaviour a real broker cannot provoke
        topic = "%RETRY%" + h.group
        b.topics.setdefault(topic, 1)
        b.sent.append(("back", h.delay_level, s.reconsume))
        self._append(b, topic, 0, s.body, props, s.flag, s.sys_flag, s.born_ts, s.reconsume + 1)
        await self._notify()
        return create_response(req)

    def _lock(self, b: FakeBroker, req: Any) -> Any:
        body = LockBatchRequestBody.decode(bytes(req.body))
        ok = []
        for mq in body.mq_set:
            holder = b.locks.get((body.consumer_group, mq))
            if holder in (None, body.client_id):
                b.locks[(body.consumer_group, mq)] = body.client_id
                ok.append(mq)
        return create_response(req, body=LockBatchResponseBody(ok).encode())

    def _unlock(self, b: FakeBroker, req: Any) -> Any:
        body = LockBatchRequestBody.decode(bytes(req.body))
        for mq in body.mq_set:
            if b.locks.get((body.consumer_group, mq)) == body.client_id:
                del b.locks[(body.consumer_group, mq)]
        return create_response(req)

    # --- inspection --------------------------------------------------------------------------------
    def messages(self, topic: str) -> list[Stored]:
        out: list[Stored] = []
        for b in self.brokers:
            for (t, _q), msgs in list(b.queues.items()):
                if t == topic:
                    out.extend(msgs)
        return out


def _pull_ext(next_off: int, max_off: int) -> dict:
    return {"suggestWhichBrokerId": 0, "nextBeginOffset": next_off, "minOffset": 0, "maxOffset": max_off}


def _split_batch(body: bytes) -> list[tuple[int, bytes, bytes]]:
    return [(flag, bytes(b), bytes(p)) for flag, b, p in iter_batch_items(body)]




__all__ = ["FakeCluster", "MessageQueue", "free_port"]
