"""Runs steps with the official RocketMQ 5.x Python client (rocketmq-python-client), in its
own virtual environment: ``python py5_driver.py ENDPOINT STEPS_JSON``. Prints one JSON line
per step (``RESULT {...}``). Steps:

  {"op": "send", "topic": T, "body": str, "tag"?, "keys"?, "props"?, "group"?, "delay_s"?}
  {"op": "receive", "topic": T, "group": G, "want": N, "invisible_s": S, "timeout_s": S,
   "ack"?: bool, "tag"?: expression}
  {"op": "ack", "group": G, "ids": [...]}                      (messages from earlier receives)
  {"op": "change_invisible", "group": G, "id": ID, "invisible_s": S}
  {"op": "sleep_until_receivable" ...} is not offered: receive waits by long polling.
MQCORE_PY5_AK / MQCORE_PY5_SK in the environment sign the requests (5.x ACL).
"""
import json
import os
import sys
import time

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def main():
    endpoint, steps = sys.argv[1], json.loads(sys.argv[2])
    credentials = Credentials(os.environ.get("MQCORE_PY5_AK", ""), os.environ.get("MQCORE_PY5_SK", ""))
    config = ClientConfiguration(endpoint, credentials, request_timeout=5)
    producer = None
    consumers = {}
    seen = {}  # message id -> Message (the newest delivery)
    try:
        for step in steps:
            op = step["op"]
            if op == "send":
                if producer is None:
                    producer = Producer(config, (step["topic"],))
                    producer.startup()
                m = Message()
                m.topic = step["topic"]
                m.body = step["body"].encode()
                if step.get("tag"):
                    m.tag = step["tag"]
                if step.get("keys"):
                    m.keys = step["keys"][0]
                    for k in step["keys"][1:]:
                        m.keys = k
                for k, v in step.get("props", {}).items():
                    m.add_property(k, v)
                if step.get("group"):
                    m.message_group = step["group"]
                if step.get("delay_s"):
                    m.delivery_timestamp = int(time.time()) + step["delay_s"]
                receipt = producer.send(m)
                out = {"message_id": receipt.message_id}
            elif op == "receive":
                key = (step["group"], step["topic"])
                c = consumers.get(key)
                if c is None:
                    c = SimpleConsumer(config, step["group"],
                                       {step["topic"]: FilterExpression(step.get("tag", "*"))},
                                       await_duration=step.get("await_s", 5))
                    c.startup()
                    consumers[key] = c
                got = []
                deadline = time.time() + step.get("timeout_s", 20)
                while len(got) < step["want"] and time.time() < deadline:
                    for msg in c.receive(min(32, step["want"] - len(got)), step["invisible_s"]) or []:
                        seen[msg.message_id] = (c, msg)
                        got.append({"id": msg.message_id, "body": msg.body.decode(), "tag": msg.tag,
                                    "keys": sorted(msg.keys), "props": dict(msg.properties),
                                    "attempt": msg.delivery_attempt, "group": msg.message_group,
                                    "type": msg.message_type, "delivery_ts": msg.delivery_timestamp,
                                    "topic": msg.topic, "corrupted": msg.corrupted,
                                    "received_ms": int(time.time() * 1000)})
                        if step.get("ack"):
                            c.ack(msg)
                out = {"messages": got}
            elif op == "ack":
                for mid in step["ids"]:
                    c, msg = seen[mid]
                    c.ack(msg)
                out = {"acked": len(step["ids"])}
            elif op == "change_invisible":
                c, msg = seen[step["id"]]
                c.change_invisible_duration(msg, step["invisible_s"])
                out = {"changed": step["id"]}
            else:
                raise SystemExit(f"unknown step {op}")
            print("RESULT " + json.dumps(out), flush=True)
    except Exception as e:  # the test reads this line: which step failed and how
        print("ERROR " + json.dumps({"type": type(e).__name__, "error": str(e)}), flush=True)
        raise SystemExit(1)
    finally:
        if producer is not None:
            producer.shutdown()
        for c in consumers.values():
            c.shutdown()


if __name__ == "__main__":
    main()
