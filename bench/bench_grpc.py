"""The 5.x gRPC endpoint next to the 4.x remoting path of the same broker, same run.

One mqbroker process with the gRPC endpoint on; both protocols are driven with their raw
request shapes from one asyncio client process (no client library on either side), 100 B
bodies:

* sync send: one request in flight (4.x SEND_MESSAGE_V2 / 5.x SendMessage)
* pipelined send: 64 in flight on one connection
* consume 32 per request, 4 in flight: 4.x PULL_MESSAGE (offset commit piggybacks on the
  next pull) / 5.x ReceiveMessage of 32 followed by one AckMessage of those 32 (a 5.x
  consumer must ack; that round trip is part of its cost) / RocketMQ 5's POP over remoting
  (POP_MESSAGE of 32, then one BATCH_ACK_MESSAGE: what the 5.x proxy in cluster mode does),
  of the 4.x topic by a group of its own

    python bench/bench_grpc.py            # ~1 min
    python bench/bench_grpc.py --quick
    python bench/bench_grpc.py --tls-mode disabled   # plaintext straight to grpcio, no TLS front

Prints one JSON line per figure (with the 1-minute load average) and a summary line.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import grpc  # noqa: E402

from mqcore.grpc.protocol import load_protocol  # noqa: E402
from mqcore.remoting import RemotingClient, RequestCode, create_request  # noqa: E402
from mqcore.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader  # noqa: E402

d, s, g = load_protocol()
META = [("x-mq-client-id", "bench@1")]
BODY = b"x" * 100


def start_broker(store: str, conf: str):
    p = subprocess.Popen([sys.executable, "-m", "mqcore.broker.cli", "-c", conf, "--store", store, "--listen-port", "0",
                          "--namesrv-port", "0", "--log-level", "INFO"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    grpc_addr = None
    for line in p.stdout:
        m = re.search(r"gRPC endpoint \(RocketMQ 5\.x\) serving on ([\d.]+:\d+)", line)
        if m:
            grpc_addr = m.group(1)
        if line.startswith("READY"):
            # keep reading its log, or the broker blocks once the pipe is full
            threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
            return p, line.split()[1].split("=")[1], grpc_addr
    raise RuntimeError("broker did not start")


async def run_load(one, total: int, inflight: int) -> float:
    sem = asyncio.Semaphore(inflight)

    async def guarded(i):
        async with sem:
            await one(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(guarded(i) for i in range(total)))
    return time.perf_counter() - t0


def row(out, workload, protocol, requests, secs, msgs):
    out.append({"workload": workload, "protocol": protocol, "requests": requests, "seconds": round(secs, 3),
                "msgs_per_s": round(msgs / secs), "loadavg_1m": round(os.getloadavg()[0], 2)})
    print(json.dumps(out[-1]), flush=True)


async def bench(addr4: str, addr5: str, n: int) -> list[dict]:
    out: list[dict] = []
    remoting = RemotingClient()
    channel = grpc.aio.insecure_channel(addr5)
    stub = g.MessagingServiceStub(channel)
    seq = iter(range(1 << 40))
    sent = {"Bench4": 0, "Bench5": 0}

    async def send4(topic):
        h = SendMessageRequestHeader(producer_group="PG", topic=topic, default_topic="TBW102",
                                     default_topic_queue_nums=4, queue_id=sent[topic] % 4, sys_flag=0,
                                     born_timestamp=int(time.time() * 1000), flag=0,
                                     properties=f"UNIQ_KEY\x01{next(seq):032X}")
        r = await remoting.invoke(addr4, create_request(RequestCode.SEND_MESSAGE_V2, h.to_ext(), BODY), 30000)
        assert r.code == 0, r.remark
        sent[topic] += 1

    async def send5(topic):
        m = d.Message(topic=d.Resource(name=topic), body=BODY)
        m.system_properties.message_id = f"01{next(seq):032X}"
        r = await stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=META, timeout=30)
        assert r.status.code == d.OK, r.status
        sent[topic] += 1

    for workload, inflight, total in (("sync send 100B", 1, n), ("pipelined send 100B (64 in flight)", 64, n * 2)):
        for protocol, fn, topic in (("4.x remoting", send4, "Bench4"), ("5.x gRPC", send5, "Bench5")):
            await run_load(lambda i: fn(topic), 200, inflight)  # warm up (and create the topic)
            secs = await run_load(lambda i: fn(topic), total, inflight)
            row(out, workload, protocol, total, secs, total)

    # consume everything each protocol's producer wrote to its topic
    total_msgs = sent["Bench4"]
    assert sent["Bench4"] == sent["Bench5"]

    async def pull_all_4() -> float:
        offsets = {q: 0 for q in range(4)}
        got = 0

        async def one(i):
            nonlocal got
            q = i % 4
            h = PullMessageRequestHeader(consumer_group="gb", topic="Bench4", queue_id=q, queue_offset=offsets[q],
                                         max_msg_nums=32, sys_flag=0x2, commit_offset=0, suspend_timeout_millis=0,
                                         sub_version=0, subscription="*")
            r = await remoting.invoke(addr4, create_request(RequestCode.PULL_MESSAGE, h.to_ext()), 30000)
            if r.code == 0:
                offsets[q] = int(r.ext_fields["nextBeginOffset"])
                got += _count_records(bytes(r.body))
        t0 = time.perf_counter()
        i = 0
        while got < total_msgs:
            await asyncio.gather(*(one(i + k) for k in range(4)))  # 4 in flight, one per queue
            i += 4
        return time.perf_counter() - t0

    async def receive_all_5() -> tuple[float, int]:
        got = 0
        requests = 0

        async def one(_):
            nonlocal got, requests
            req = s.ReceiveMessageRequest(group=d.Resource(name="gb5"), batch_size=32,
                                          filter_expression=d.FilterExpression(type=d.TAG, expression="*"))
            req.message_queue.topic.name = "Bench5"
            req.invisible_duration.FromSeconds(60)
            req.long_polling_timeout.FromMilliseconds(0)
            handles = []
            async for r in stub.ReceiveMessage(req, metadata=META, timeout=30):
                if r.HasField("message"):
                    handles.append((r.message.system_properties.message_id, r.message.system_properties.receipt_handle))
            requests += 1
            if handles:
                ack = s.AckMessageRequest(group=d.Resource(name="gb5"), topic=d.Resource(name="Bench5"))
                for mid, h in handles:
                    ack.entries.add(message_id=mid, receipt_handle=h)
                r = await stub.AckMessage(ack, metadata=META, timeout=30)
                assert r.status.code == d.OK, r.status
                got += len(handles)
        t0 = time.perf_counter()
        while got < total_msgs:
            await asyncio.gather(*(one(k) for k in range(4)))
        return time.perf_counter() - t0, requests

    secs = await pull_all_4()
    row(out, "consume 32 per request (4 in flight)", "4.x remoting (pull)", total_msgs // 32, secs, total_msgs)
    secs, requests = await receive_all_5()
    row(out, "consume 32 per request (4 in flight)", "5.x gRPC (receive + ack)", requests, secs, total_msgs)

    async def pop_all_4() -> tuple[float, int]:
        got = 0
        requests = 0

        async def one(_):
            nonlocal got, requests
            r = await remoting.invoke(addr4, create_request(RequestCode.POP_MESSAGE, {
                "consumerGroup": "gpop", "topic": "Bench4", "queueId": "-1", "maxMsgNums": "32",
                "invisibleTime": "60000", "pollTime": "0", "bornTime": "0", "initMode": "0", "expType": "TAG",
                "exp": "*"}), 30000)
            requests += 1
            if r.code != 0:
                return
            ext = r.ext_fields
            starts = {tuple(e.split(" ")[:2]): int(e.split(" ")[2]) for e in ext["startOffsetInfo"].split(";")}
            acks = []
            for e in ext["msgOffsetInfo"].split(";"):
                kind, qid, offs = e.split(" ")
                so = starts[(kind, qid)]
                bits = sum(1 << (int(o) - so) for o in offs.split(","))
                acks.append({"c": "gpop", "t": "Bench4", "r": kind, "so": so, "q": int(qid), "rq": 0,
                             "pt": int(ext["popTime"]), "it": 60000,
                             "b": base64.b64encode(bits.to_bytes((bits.bit_length() + 7) // 8, "little")).decode()})
                got += len(offs.split(","))
            body = json.dumps({"brokerName": "broker-a", "acks": acks}).encode()
            a = await remoting.invoke(addr4, create_request(RequestCode.BATCH_ACK_MESSAGE, body=body), 30000)
            assert a.code == 0, a.remark
        t0 = time.perf_counter()
        while got < total_msgs:
            await asyncio.gather(*(one(k) for k in range(4)))
        return time.perf_counter() - t0, requests

    secs, requests = await pop_all_4()
    row(out, "consume 32 per request (4 in flight)", "4.x remoting (pop + batch ack)", requests, secs, total_msgs)
    await remoting.shutdown()
    await channel.close()
    return out


def _count_records(body: bytes) -> int:
    from mqcore._compat import kernels
    return len(kernels.decode_records(body, 0, len(body), 1 << 30, False)) if body else 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    # permissive (a broker's default) puts the relay that tells TLS from plaintext in front of grpcio
    ap.add_argument("--tls-mode", default="permissive", choices=("permissive", "disabled"))
    args = ap.parse_args()
    n = 1000 if args.quick else 5000
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, "broker.conf")
        with open(conf, "w") as f:
            f.write(f"grpcServerEnable=true\ngrpcServerPort=0\ngrpcServerTlsMode={args.tls_mode}\n")
        broker, addr4, addr5 = start_broker(os.path.join(tmp, "store"), conf)
        try:
            results = asyncio.run(bench(addr4, addr5, n))
        finally:
            broker.terminate()
            broker.wait(30)
    print(json.dumps({"summary": {f"{r['workload']} / {r['protocol']}": r["msgs_per_s"] for r in results}}))


if __name__ == "__main__":
    main()
