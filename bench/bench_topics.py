"""Many topics (issue 34): mqbroker next to Apache RocketMQ 4.9.7's Java broker, same run.

Workloads, per round and broker (fresh topic names per round):

* ``topic creation``: ``--topics`` UPDATE_AND_CREATE_TOPIC requests one after another (8 queues
  each, mqadmin updateTopic's default), each answered before the next is sent: topics/s;
* ``first message``: one SEND_MESSAGE_V2 (100 B) to queue 0 of each topic just created, one at
  a time: each lands in a queue that has no consume-queue file yet; p50 and p90 of the round trip;
* ``1000 topics`` / ``1 topic``: ``--messages`` sends over ``--conns`` connections (one thread
  each, ``--window`` requests in flight per connection, frames built beforehand so the client's
  cost is a socket write and a response count) spread round-robin over all the round's topics
  (queues 0-3), then the same count to one of them: msg/s of each and their ratio. ``cold``:
  the first such pass, which also creates the 3 queues per topic not written yet; ``warm``: a
  second pass, every queue existing (the steady state of a broker with that many topics);
* ``consume-queue disk``: the blocks (``st_blocks``) the round's consume-queue files hold on
  disk after the above, per file.

Both brokers use 6,000,000-byte consume-queue files (RocketMQ's default 300,000 units) and
ASYNC_FLUSH on throw-away stores; the rounds alternate which broker goes first. Prints one JSON
line per round and workload, then the medians with the 1-minute load average.

    python bench/bench_topics.py                       # 3 rounds, 1000 topics, 200,000 messages
    python bench/bench_topics.py --rounds 1 --topics 200 --messages 50000
    python bench/bench_topics.py --only mqbroker       # without the Java broker
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.bench_reference import JAVA_CONF, ensure_jars, loadavg  # noqa: E402
from mqcore.remoting import RequestCode as RC  # noqa: E402
from mqcore.remoting import ResponseCode as R  # noqa: E402
from mqcore.remoting import SyncRemotingClient, create_request  # noqa: E402
from mqcore.remoting.command import encode_frame  # noqa: E402
from mqcore.remoting.headers import SendMessageRequestHeader  # noqa: E402
from tests.support.processes import BrokerProcess  # noqa: E402
from tests.support.reference import JavaBroker, JavaNamesrv  # noqa: E402

CQ_FILE = 300_000 * 20
SYSTEMS = ("mqbroker", "rocketmq-4.9.7")


def _send_request(topic: str, queue_id: int, body: bytes):
    h = SendMessageRequestHeader(producer_group="PG", topic=topic, default_topic="TBW102", default_topic_queue_nums=4,
                                 queue_id=queue_id, sys_flag=0, born_timestamp=int(time.time() * 1000), flag=0,
                                 properties="UNIQ_KEY\x01ABCDEF0123456789ABCDEF0123456789")
    return create_request(RC.SEND_MESSAGE_V2, h.to_ext(RC.SEND_MESSAGE_V2), body)


def create_topics(addr: str, names: list[str]) -> float:
    with SyncRemotingClient() as rc:
        t0 = time.perf_counter()
        for name in names:
            r = rc.invoke(addr, create_request(RC.UPDATE_AND_CREATE_TOPIC, {
                "topic": name, "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8", "perm": "6",
                "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}), 10_000)
            if r.code != R.SUCCESS:
                raise RuntimeError(f"create {name}: {r.code} {r.remark}")
        return time.perf_counter() - t0


def first_messages(addr: str, names: list[str], body: bytes) -> list[float]:
    out = []
    with SyncRemotingClient() as rc:
        rc.invoke(addr, create_request(RC.GET_BROKER_RUNTIME_INFO), 5000)  # the connection, outside the timing
        for name in names:
            req = _send_request(name, 0, body)
            t0 = time.perf_counter()
            r = rc.invoke(addr, req, 10_000)
            out.append(time.perf_counter() - t0)
            if r.code != R.SUCCESS:
                raise RuntimeError(f"first send to {name}: {r.code} {r.remark}")
    return out


def _frames(topics: list[str], count: int, offset: int, body: bytes) -> list[bytes]:
    """One frame per (topic, queue) used by a connection, reused round-robin (the opaque is
    only echoed by the brokers)."""
    per = {}
    out = []
    for i in range(count):
        key = (topics[(offset + i) % len(topics)], (offset + i) // len(topics) % 4)
        f = per.get(key)
        if f is None:
            f = per[key] = encode_frame(_send_request(key[0], key[1], body))
        out.append(f)
    return out


def pump(host: str, port: int, frames: list[bytes], window: int, out: dict) -> None:
    """Send ``frames`` keeping ``window`` unanswered; count SUCCESS and SYSTEM_BUSY answers (a
    Java broker answers busy when a request waited in its queue past waitTimeMillsInSendQueue:
    that send is counted as not done, not as an error of the run)."""
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    n = len(frames)
    sent = answered = ok = busy = 0
    buf = b""
    try:
        while answered < n:
            if sent < n and sent - answered < window:
                k = min(n, answered + window) - sent
                s.sendall(b"".join(frames[sent:sent + k]))
                sent += k
            data = s.recv(1 << 20)
            if not data:
                raise RuntimeError("connection closed")
            buf += data
            pos = 0
            while len(buf) - pos >= 8:
                total, hlen = struct.unpack_from(">II", buf, pos)
                if len(buf) - pos < 4 + total:
                    break
                header = buf[pos + 8:pos + 8 + (hlen & 0xFFFFFF)]
                if b'"code":0,' in header:
                    ok += 1
                elif b'"code":2,' in header:
                    busy += 1
                else:
                    out.setdefault("errors", []).append(header[:200])
                pos += 4 + total
                answered += 1
            buf = buf[pos:]
    finally:
        s.close()
        out["ok"] = out.get("ok", 0) + ok
        out["busy"] = out.get("busy", 0) + busy


def throughput(addr: str, topics: list[str], messages: int, conns: int, window: int, body: bytes) -> float:
    host, port = addr.rsplit(":", 1)
    per = messages // conns
    frames = [_frames(topics, per, k * 7919, body) for k in range(conns)]
    counts: dict = {}
    threads = [threading.Thread(target=pump, args=(host, int(port), f, window, counts)) for f in frames]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - t0
    errors = counts.get("errors", [])
    if errors or counts.get("busy"):
        raise RuntimeError(f"{len(errors)} sends failed, {counts.get('busy', 0)} refused busy, e.g. {errors[:1]!r}")
    return per * conns / seconds


def cq_disk(store: Path, prefix: str) -> tuple[int, float]:
    """(files, KiB of blocks per file) of the consume-queue files of the round's topics."""
    files = blocks = 0
    root = store / "consumequeue"
    for topic in os.listdir(root) if root.is_dir() else ():
        if not topic.startswith(prefix):
            continue
        for dirpath, _, names in os.walk(root / topic):
            for name in names:
                files += 1
                blocks += os.stat(os.path.join(dirpath, name)).st_blocks
    return files, round(blocks * 512 / 1024 / max(files, 1), 1)


def run_round(system: str, rnd: int, addr: str, store: Path, args) -> list[dict]:
    prefix = f"ManyT{rnd}x"
    names = [f"{prefix}{i}" for i in range(args.topics)]
    body = b"x" * 100
    rows = []

    def row(workload: str, **fields) -> None:
        r = {"bench": "topics", "round": rnd, "system": system, "workload": workload, **fields,
             "loadavg_1m": loadavg()}
        print(json.dumps(r), flush=True)
        rows.append(r)

    seconds = create_topics(addr, names)
    row("topic creation", topics=args.topics, seconds=round(seconds, 3), topics_per_s=round(args.topics / seconds, 1))
    lat = sorted(first_messages(addr, names, body))
    row("first message", queues=len(lat), p50_ms=round(lat[len(lat) // 2] * 1e3, 3),
        p90_ms=round(lat[int(len(lat) * 0.9)] * 1e3, 3))
    cold = throughput(addr, names, args.messages, args.conns, args.window, body)
    many = throughput(addr, names, args.messages, args.conns, args.window, body)
    one = throughput(addr, names[:1], args.messages, args.conns, args.window, body)
    row("1000 topics vs 1 topic", topics=args.topics, conns=args.conns, messages=args.messages,
        cold_msgs_per_s=int(cold), many_msgs_per_s=int(many), one_msgs_per_s=int(one), ratio=round(many / one, 2),
        cold_ratio=round(cold / one, 2))
    files, kib = cq_disk(store, prefix)
    row("consume-queue disk", files=files, kib_per_file=kib)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--messages", type=int, default=200_000, help="per throughput measurement")
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--window", type=int, default=64, help="requests in flight per connection")
    ap.add_argument("--only", choices=SYSTEMS, action="append")
    ap.add_argument("--mq-conf", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra broker.conf line for mqbroker (repeatable)")
    ap.add_argument("--tree", help="run mqbroker from this checkout (its kernels built) instead of this one")
    args = ap.parse_args(argv)
    systems = tuple(args.only or SYSTEMS)
    if "rocketmq-4.9.7" in systems:
        ensure_jars()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-topics-") as tmp:
        work = Path(tmp)
        if args.tree:
            os.environ["PYTHONPATH"] = os.path.abspath(args.tree)
            os.chdir(args.tree)
        brokers: dict[str, tuple[str, Path]] = {}
        stack = []
        try:
            if "mqbroker" in systems:
                conf = {"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeConsumeQueue": CQ_FILE,
                        **dict(kv.split("=", 1) for kv in args.mq_conf)}
                mq = BrokerProcess(work / "mq", conf=conf).__enter__()
                stack.append(mq)
                brokers["mqbroker"] = (mq.broker_addr, work / "mq")
            if "rocketmq-4.9.7" in systems:
                jns = JavaNamesrv(work / "ns").__enter__()
                stack.append(jns)
                jb = JavaBroker(work / "java", jns.addr, conf=JAVA_CONF).__enter__()
                stack.append(jb)
                brokers["rocketmq-4.9.7"] = (jb.addr, work / "java")
            for rnd in range(args.rounds):
                for system in systems if rnd % 2 == 0 else systems[::-1]:
                    addr, store = brokers[system]
                    rows.extend(run_round(system, rnd, addr, store, args))
        finally:
            for p in reversed(stack):
                p.__exit__(None, None, None)

    def med(system: str, workload: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["system"] == system and r["workload"] == workload)

    print(f"\n| workload | {' | '.join(systems)} |" + (" mqbroker vs Java (>1: better) |" if len(systems) == 2 else ""))
    print("|---" * (len(systems) + 1 + (len(systems) == 2)) + "|")
    for workload, key, unit in (("topic creation", "topics_per_s", "topics/s"),
                                ("first message", "p50_ms", "ms p50"),
                                ("1000 topics vs 1 topic", "cold_msgs_per_s", "msg/s, all topics, cold"),
                                ("1000 topics vs 1 topic", "many_msgs_per_s", "msg/s, all topics, warm"),
                                ("1000 topics vs 1 topic", "one_msgs_per_s", "msg/s, one topic"),
                                ("1000 topics vs 1 topic", "cold_ratio", "all topics cold / one topic"),
                                ("1000 topics vs 1 topic", "ratio", "all topics warm / one topic"),
                                ("consume-queue disk", "kib_per_file", "KiB of blocks per CQ file")):
        vals = [med(s, workload, key) for s in systems]
        cells = " | ".join(f"{v:,.3g}" if key == "p50_ms" else f"{v:,.2f}" if "ratio" in key else f"{v:,.0f}"
                           for v in vals)
        ratio = ""
        if len(systems) == 2:
            a, b = vals
            # "how many times as good": lower is better for latency and disk
            ratio = f" {(b / a if key in ('p50_ms', 'kib_per_file') else a / b):.2f} |" if a and b else " - |"
        print(f"| {workload} ({unit}) | {cells} |{ratio}")
    print(f"load average (1 min) at the end: {loadavg()}; {args.rounds} rounds, {args.topics} topics, "
          f"{args.messages} messages, {args.conns} connections x {args.window} in flight")
    return 0


if __name__ == "__main__":
    sys.exit(main())
