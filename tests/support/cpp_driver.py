"""Drives the Apache RocketMQ C++ client (PyPI rocketmq==0.4.4) for interoperability tests.

Runs inside the C++ client's own venv (see scripts/test), never imported by pytest:

    python cpp_driver.py '<json command>'

Prints one JSON line per event (``{"sent": ...}``, ``{"got": ...}``) and a final
``{"done": ...}``; exits with ``os._exit`` because the library's threads can hold
the interpreter open.
"""
import json
import os
import sys
import threading
import time


def out(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def text(v):
    if v is None:
        return ""
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def msg_json(m):
    return {"topic": text(m.topic), "tags": text(m.tags), "keys": text(m.keys),
            "body": text(m.body), "id": text(m.id), "queue_id": m.queue_id,
            "queue_offset": m.queue_offset, "reconsume_times": m.reconsume_times,
            "store_timestamp": m.store_timestamp, "born_timestamp": m.born_timestamp,
            "props": {k: text(m.get_property(k)) for k in ("UNIQ_KEY", "RETRY_TOPIC", "DELAY")}}


def credentials(client, cmd):
    """Plain ACL: ``"access_key"``/``"secret_key"`` in the command sign every request."""
    if cmd.get("access_key"):
        client.set_session_credentials(cmd["access_key"], cmd["secret_key"], cmd.get("channel", "ALIYUN"))


def produce(cmd):
    from rocketmq.client import Message, Producer
    p = Producer(cmd.get("group", "PG_CPP"))
    p.set_namesrv_addr(cmd["namesrv"])
    credentials(p, cmd)
    if cmd.get("send_timeout_ms"):
        p.set_timeout(cmd["send_timeout_ms"])
    p.start()
    for i, spec in enumerate(cmd["messages"]):
        m = Message(spec["topic"])
        if spec.get("tags"):
            m.set_tags(spec["tags"])
        if spec.get("keys"):
            m.set_keys(spec["keys"])
        if spec.get("delay_level"):
            m.set_delay_time_level(spec["delay_level"])
        for k, v in (spec.get("props") or {}).items():
            m.set_property(k, v)
        m.set_body(spec["body"])
        if cmd.get("report_failures"):  # a refused send is an expected outcome, reported as an event
            try:
                r = p.send_sync(m)
            except Exception as e:
                out({"send_failed": i, "text": f"{type(e).__name__}: {e}"})
                continue
        else:
            r = p.send_sync(m)
        out({"sent": i, "status": int(r.status), "msg_id": r.msg_id, "offset": r.offset, "at": time.time()})
    p.shutdown()
    out({"done": True})


def push(cmd):
    from rocketmq.client import PushConsumer
    got = []
    failures = {}
    lock = threading.Lock()
    fail_times = cmd.get("fail_times", 0)

    def callback(m):
        try:
            j = msg_json(m)
        except Exception as e:  # a driver bug must show, not look like a lost message
            out({"error": f"decoding a received message: {type(e).__name__}: {e}"})
            raise
        j["at"] = time.time()
        key = j["props"]["UNIQ_KEY"] or j["body"]
        with lock:
            n = failures.get(key, 0)
            if n < fail_times:
                failures[key] = n + 1
                out({"failed": j})
                raise RuntimeError("asked to fail")  # the wrapper answers RECONSUME_LATER
            got.append(j)
        out({"got": j})

    c = PushConsumer(cmd["group"])
    c.set_namesrv_addr(cmd["namesrv"])
    credentials(c, cmd)
    c.subscribe(cmd["topic"], callback, expression=cmd.get("expression", "*"))
    c.start()
    deadline = time.time() + cmd.get("timeout", 20)
    while time.time() < deadline and len(got) < cmd.get("expect", 1 << 30):
        time.sleep(0.1)
    time.sleep(cmd.get("linger", 0))
    out({"shutting_down": True, "count": len(got)})  # run_cpp: see SHUTDOWN_ABORT
    c.shutdown()
    out({"done": True, "count": len(got)})


def pull(cmd):
    from rocketmq.client import PullConsumer
    c = PullConsumer(cmd["group"])
    c.set_namesrv_addr(cmd["namesrv"])
    c.start()
    n = 0
    for m in c.pull(cmd["topic"], cmd.get("expression", "*")):
        out({"got": msg_json(m)})
        n += 1
    c.shutdown()
    out({"done": True, "count": n})


if __name__ == "__main__":
    command = json.loads(sys.argv[1])
    try:
        {"produce": produce, "push": push, "pull": pull}[command["mode"]](command)
    except Exception as e:  # report to the test, which fails with this text
        out({"error": f"{type(e).__name__}: {e}"})
        os._exit(1)
    os._exit(0)
