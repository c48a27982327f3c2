"""Requests an abusive or broken client sends, with the answer Apache RocketMQ 4.9 gives.

One table, run against the Java broker (tests/reference/test_hardening_reference.py
proves the expected answers are Apache's) and against mqcore (tests/broker/test_abuse.py
proves mqcore gives the same ones). Each scenario is (name, request factory, expected
code, text the remark must contain or None).
"""
from __future__ import annotations

import json
import time

from mqcore.message import properties_to_string
from mqcore.remoting import RequestCode as RC
from mqcore.remoting import ResponseCode as R
from mqcore.remoting import create_request
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
