"""Transactions with the official RocketMQ 5.x Python client: ``python py5_tx_driver.py ENDPOINT
TOPIC``. Sends four transactional messages keyed by their fate: commit and rollback (ended by the
producer), unknown-commit and unknown-rollback (never ended: the broker's orphaned-transaction
recovery asks the checker, which decides by key). Then receives with a SimpleConsumer until both
committed ones arrived (or 60 s) and prints ``RESULT {...}``: what was received, what the checker
was asked, and what the send receipts carried."""
import json
import sys
import threading
import time

from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer,
                      TransactionChecker, TransactionResolution)


class Checker(TransactionChecker):
    def __init__(self):
        self.asked = []
        self.lock = threading.Lock()

    def check(self, message):
        key = sorted(message.keys)[0]
        with self.lock:
            self.asked.append(key)
        return TransactionResolution.COMMIT if key == "unknown-commit" else TransactionResolution.ROLLBACK


def main():
    endpoint, topic = sys.argv[1], sys.argv[2]
    config = ClientConfiguration(endpoint, Credentials(), request_timeout=5)
    checker = Checker()
    producer = Producer(config, (topic,), checker=checker)
    consumer = None
    try:
        producer.startup()
        receipts = {}
        for key in ("commit", "rollback", "unknown-commit", "unknown-rollback"):
            m = Message()
            m.topic, m.body, m.keys, m.tag = topic, f"body-{key}".encode(), key, "tx"
            transaction = producer.begin_transaction()
            receipt = producer.send(m, transaction)
            receipts[key] = bool(receipt.transaction_id)
            if key == "commit":
                transaction.commit()
            elif key == "rollback":
                transaction.rollback()
        consumer = SimpleConsumer(config, "G-py5-tx", {topic: FilterExpression("*")}, await_duration=5)
        consumer.startup()
        got = []
        deadline = time.time() + 60
        while time.time() < deadline and not ({"commit", "unknown-commit"} <= {g["key"] for g in got}
                                               and "unknown-rollback" in checker.asked):
            for msg in consumer.receive(16, 30) or []:
                got.append({"key": sorted(msg.keys)[0], "type": msg.message_type})
                consumer.ack(msg)
        print("RESULT " + json.dumps({"received": sorted(g["key"] for g in got),
                                      "types": sorted({g["type"] for g in got}),
                                      "asked": sorted(set(checker.asked)), "transaction_ids": receipts}),
              flush=True)
    except Exception as e:  # the test reads this line
        print("ERROR " + json.dumps({"type": type(e).__name__, "error": str(e)}), flush=True)
        raise SystemExit(1)
    finally:
        if consumer is not None:
            consumer.shutdown()
        producer.shutdown()


if __name__ == "__main__":
    main()
