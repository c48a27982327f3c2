"""The consume-queue manifest: each queue's offset range, written at a clean stop.

A consume-queue file deleted or cut short while the broker was stopped leaves no trace in
the queue itself: what is left looks like a shorter, valid queue. The manifest
(``<store>/consumequeue.manifest``, JSON ``{"topic/queueId": [min offset, max offset]}``)
records what each queue held at the last clean stop; the next start compares and rebuilds
a queue that lost units from the commitlog. It is removed when read, so after a crash
(no fresh manifest) only recovery's own checks apply. Apache RocketMQ ignores the file.
"""
from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mqcore.store.consume_queue import ConsumeQueue

log = logging.getLogger(__name__)

NAME = "consumequeue.manifest"


def path_in(store_path: str) -> str:
    return os.path.join(store_path, NAME)


def write(path: str, queues: Iterable[ConsumeQueue]) -> None:
    data = {f"{cq.topic}/{cq.queue_id}": [cq.min_offset(), cq.max_offset()] for cq in queues}
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(data, f, separators=(",", ":"), sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:  # a full disk: the next start simply has no manifest to compare with
        log.warning("cannot write the consume-queue manifest %s: %s", path, e)


def take(path: str) -> dict[tuple[str, int], tuple[int, int]]:
    """Read and remove the manifest; {} when there is none or it is unreadable."""
    try:
        with open(path) as f:
            raw = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable consume-queue manifest %s: %s", path, e)
        raw = {}
    try:
        os.unlink(path)
    except OSError:
        pass
    out = {}
    if isinstance(raw, dict):
        for key, value in raw.items():
            topic, _, qid = str(key).rpartition("/")
            if topic and qid.isdigit() and isinstance(value, list) and len(value) == 2:
                try:
                    out[(topic, int(qid))] = (int(value[0]), int(value[1]))
                except (TypeError, ValueError):
                    continue
    return out
