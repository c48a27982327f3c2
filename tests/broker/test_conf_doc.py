"""docs/broker-conf.md is generated from the key tables and field comments (mqcore.broker.conf_doc):
the committed file must be what the code says now, and every key must be in it."""
from __future__ import annotations

import os

from mqcore.broker import conf, conf_doc

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "broker-conf.md")


def test_the_committed_reference_is_the_generated_one():
    with open(DOC, encoding="utf-8") as f:
        committed = f.read()
    assert committed == conf_doc.render(), (
        "docs/broker-conf.md is out of date: run  python -m mqcore.broker.conf_doc > docs/broker-conf.md")


def test_every_key_is_documented_and_mqcore_keys_are_explained():
    text = conf_doc.render()
    rows = {line.split("|")[1].strip().strip("`"): line.split("|") for line in text.splitlines()
            if line.startswith("| `")}
    for key in (*conf.BROKER_KEYS, *conf.STORE_KEYS, *conf.IGNORED_KEYS):
        assert key in rows, key
    for key in ("namesrvListenPort", "embeddedNamesrv", "maxFrameBytes", "serverFrameMinBytesPerSecond"):
        assert rows[key][2].strip() == "mqcore", rows[key]
    for key, origin in conf_doc.key_origins().items():
        if origin != "RocketMQ":  # a key of our own says what it does
            assert rows[key][6].strip(), f"{key} has no #: comment on its config field"
    assert rows["fileReservedTime"][5].strip() == "yes"  # a runtime key (mqadmin updateBrokerConfig)
