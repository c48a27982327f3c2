"""Requests an abusive or broken client sends, with the answer Apache RocketMQ 4.9 gives.

One table, run against the Java broker (tests/reference/test_hardening_reference.py
proves the expected answers are Apache's) and against mqcore (tests/broker/test_hostile_names.py
proves mqcore gives the same ones). Each scenario is (name, request factory, expected
code, text the remark must contain or None).
"""
from __future__ import annotations

import json
import random
import socket
import struct
import threading
import time

from mqcore.message import properties_to_string
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode as R
from mqcore.remoting import create_request
from mqcore.remoting.command import encode_frame
from mqcore.remoting.headers import PullMessageRequestHeader, SendMessageRequestHeader

PLAIN = "HardenPlain"
DISABLED_GROUP = "CG_HARDEN_OFF"
FOUR_MIB = 4 * 1024 * 1024


def send_request(topic: str, body: bytes = b"x", code: int = RC.SEND_MESSAGE_V2, **props):
    h = SendMessageRequestHeader(producer_group="PG_HARDEN", topic=topic, default_topic="TBW102",
                                 default_topic_queue_nums=4, queue_id=0, sys_flag=0,
                                 born_timestamp=int(time.time() * 1000), flag=0,
                                 properties=properties_to_string(props))
    return create_request(code, h.to_ext(code), body)


def pull_request(topic: str, group: str = "CG_HARDEN", sub: str | None = None):
    h = PullMessageRequestHeader(consumer_group=group, topic=topic, queue_id=0, queue_offset=0, max_msg_nums=32,
                                 sys_flag=0x4 if sub is not None else 0, commit_offset=0,
                                 suspend_timeout_millis=0, sub_version=0, subscription=sub, expression_type="TAG")
    return create_request(RC.PULL_MESSAGE, h.to_ext())


def create_topic_request(topic: str):
    return create_request(RC.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})


def group_config_request(group: str, consume_enable: bool = True):
    body = json.dumps({"groupName": group, "consumeEnable": consume_enable, "consumeFromMinEnable": True,
                       "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16,
                       "brokerId": 0, "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True})
    return create_request(RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, None, body.encode())


FORBIDDEN = "Sending message to topic[{}] is forbidden."
ILLEGAL = "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"

# in order: later scenarios rely on earlier ones (the plain topic, the disabled group)
SCENARIOS = [
    ("send to a plain topic", lambda: send_request(PLAIN, TAGS="A"), R.SUCCESS, None),
    *[(f"send to {t}", (lambda t=t: send_request(t)), R.NO_PERMISSION, FORBIDDEN.format(t))
      for t in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
                "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT")],
    ("send v1 to SCHEDULE_TOPIC_XXXX", lambda: send_request("SCHEDULE_TOPIC_XXXX", code=RC.SEND_MESSAGE),
     R.NO_PERMISSION, FORBIDDEN.format("SCHEDULE_TOPIC_XXXX")),
    ("send batch to SCHEDULE_TOPIC_XXXX", lambda: send_request("SCHEDULE_TOPIC_XXXX", code=RC.SEND_BATCH_MESSAGE),
     R.NO_PERMISSION, FORBIDDEN.format("SCHEDULE_TOPIC_XXXX")),
    ("send DELAY=2 to SCHEDULE_TOPIC_XXXX", lambda: send_request("SCHEDULE_TOPIC_XXXX", DELAY="2"),
     R.NO_PERMISSION, FORBIDDEN.format("SCHEDULE_TOPIC_XXXX")),
    # 4.9 leaves these writable: the trace topic is written by clients with tracing on
    ("send to RMQ_SYS_TRACE_TOPIC", lambda: send_request("RMQ_SYS_TRACE_TOPIC"), R.SUCCESS, None),
    ("send to TBW102", lambda: send_request("TBW102"), R.SUCCESS, None),
    ("send to a/../b", lambda: send_request("a/../b"), R.SYSTEM_ERROR, ILLEGAL),
    ("create topic ../x", lambda: create_topic_request("../x"), R.SYSTEM_ERROR, ILLEGAL),
    ("create topic SCHEDULE_TOPIC_XXXX", lambda: create_topic_request("SCHEDULE_TOPIC_XXXX"), R.SYSTEM_ERROR,
     "The topic[SCHEDULE_TOPIC_XXXX] is conflict with system topic."),
    ("delete topic ../../victim", lambda: create_request(RC.DELETE_TOPIC_IN_BROKER, {"topic": "../../victim"}),
     R.SYSTEM_ERROR, ILLEGAL),
    ("pull with subscription ||", lambda: pull_request(PLAIN, sub="||"), R.SUBSCRIPTION_PARSE_FAILED,
     "parse the consumer's subscription failed"),
    ("pull with subscription ' || '", lambda: pull_request(PLAIN, sub=" || "), R.PULL_RETRY_IMMEDIATELY, None),
    ("pull with subscription *", lambda: pull_request(PLAIN, sub="*"), R.SUCCESS, None),
    ("disable a group", lambda: group_config_request(DISABLED_GROUP, consume_enable=False), R.SUCCESS, None),
    ("pull by a disabled group", lambda: pull_request(PLAIN, group=DISABLED_GROUP, sub="*"), R.NO_PERMISSION,
     f"subscription group no permission, {DISABLED_GROUP}"),
    ("query offset of a disabled group", lambda: create_request(RC.QUERY_CONSUMER_OFFSET, {
        "consumerGroup": DISABLED_GROUP, "topic": PLAIN, "queueId": "0"}), R.SUCCESS, None),
    ("send a body of exactly 4 MiB", lambda: send_request("HardenBig", b"x" * FOUR_MIB), R.SUCCESS, None),
    ("send a body of 4 MiB + 1", lambda: send_request("HardenBig", b"x" * (FOUR_MIB + 1)), R.MESSAGE_ILLEGAL, None),
]


def run(rc, addr: str) -> list[tuple[str, int, str]]:
    """(name, code, remark) of each scenario, in order."""
    out = []
    for name, make, _code, _remark in SCENARIOS:
        r = rc.invoke(addr, make(), 10_000)
        out.append((name, r.code, r.remark or ""))
    return out


def mismatches(results) -> list[str]:
    bad = []
    for (name, _make, want_code, want_remark), (_n, code, remark) in zip(SCENARIOS, results):
        if code != want_code or (want_remark is not None and want_remark not in remark):
            bad.append(f"{name}: got {code} {remark!r}, Apache 4.9 answers {want_code} {want_remark!r}")
    return bad


# --- fuzz: well-framed requests with hostile fields (tests/broker/test_hostile_names.py, bench/soak_fuzz.py) ---
_CODES = [RC.SEND_MESSAGE, RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE, RC.PULL_MESSAGE, RC.HEART_BEAT,
          RC.UPDATE_CONSUMER_OFFSET, RC.QUERY_CONSUMER_OFFSET, RC.CONSUMER_SEND_MSG_BACK,
          RC.UPDATE_AND_CREATE_TOPIC, RC.DELETE_TOPIC_IN_BROKER, RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
          RC.GET_MAX_OFFSET, RC.GET_MIN_OFFSET, RC.SEARCH_OFFSET_BY_TIMESTAMP, RC.QUERY_MESSAGE,
          RC.LOCK_BATCH_MQ, RC.UNLOCK_BATCH_MQ, RC.GET_CONSUMER_LIST_BY_GROUP, RC.UNREGISTER_CLIENT,
          RC.GET_CONSUME_STATS, RC.GET_TOPIC_STATS_INFO, RC.VIEW_MESSAGE_BY_ID]
_KEYS = ["topic", "consumerGroup", "producerGroup", "group", "queueId", "queueOffset", "maxMsgNums", "sysFlag",
         "commitOffset", "subscription", "a", "b", "c", "d", "e", "f", "g", "h", "offset", "delayLevel",
         "readQueueNums", "writeQueueNums", "perm", "timestamp", "key", "maxNum", "beginTimestamp", "endTimestamp"]
_NAMES = ["T", "FuzzT", "SCHEDULE_TOPIC_XXXX", "TBW102", "../../x", "..", "", " ", "a/b", "%RETRY%g", "%DLQ%g",
          "||", "*", "RMQ_SYS_TRANS_HALF_TOPIC", "x" * 300, "\u00e9t\u00e9", "-1", "0", "2147483648"]


def fuzz_frames(rng: random.Random, n: int, prepare=None):
    """``n`` complete frames: a real request code, random known keys with hostile values,
    sometimes a JSON body naming groups and topics. ``prepare(rng, request)`` may change
    each request before it is encoded (e.g. sign it)."""
    for i in range(n):
        code = rng.choice(_CODES)
        ext = {k: rng.choice(_NAMES) for k in rng.sample(_KEYS, rng.randrange(0, 10))}
        body = b""
        if rng.random() < 0.3:
            body = json.dumps({"clientID": "f", "groupName": rng.choice(_NAMES), "consumerGroup": rng.choice(_NAMES),
                               "consumerDataSet": [{"groupName": rng.choice(_NAMES), "subscriptionDataSet": [
                                   {"topic": rng.choice(_NAMES), "subString": rng.choice(_NAMES)}]}],
                               "mqSet": [{"topic": rng.choice(_NAMES), "brokerName": "b", "queueId": 0}]}).encode()
        elif rng.random() < 0.2:
            body = rng.randbytes(rng.randrange(0, 300))
        request = create_request(code, ext, body, opaque=i)
        if prepare is not None:
            prepare(rng, request)
        yield encode_frame(request)


def blast(addr: str, frames, conns: int, timeout_s: float = 60) -> int:
    """Write ``frames`` (a list per connection) pipelined over ``conns`` connections while
    reading the answers; returns how many answer frames came back."""
    host, port = addr.rsplit(":", 1)
    answered = [0] * conns

    def drain(s: socket.socket, i: int) -> None:
        buf = b""
        try:
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    return
                buf += chunk
                while len(buf) >= 4:
                    n = struct.unpack(">i", buf[:4])[0]
                    if len(buf) < 4 + n:
                        break
                    buf = buf[4 + n:]
                    answered[i] += 1
        except OSError:
            return

    socks, readers = [], []
    try:
        for i in range(conns):
            s = socket.create_connection((host, int(port)), timeout=timeout_s)
            socks.append(s)
            th = threading.Thread(target=drain, args=(s, i), daemon=True)
            th.start()
            readers.append(th)
        for s, batch in zip(socks, frames):
            try:
                s.sendall(b"".join(batch))
            except OSError:
                pass  # the broker closed this connection: counted by what came back
        want = sum(len(b) for b in frames)
        deadline = time.monotonic() + timeout_s
        while sum(answered) < want and time.monotonic() < deadline and any(t.is_alive() for t in readers):
            time.sleep(0.02)
    finally:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for th in readers:
            th.join(5)
    return sum(answered)
