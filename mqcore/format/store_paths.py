"""The store root's note of where its parts live when broker.conf moves them elsewhere.

RocketMQ keeps nothing in ``storePathRootDir`` that names a ``storePathCommitLog`` on another
disk, so a reader given only the root (``mqcore.spark``, ``mqcore-analytics``) found an empty
``commitlog/`` and read 0 messages. The broker therefore writes ``config/storePaths.json``
(RocketMQ's key names, absolute paths) whenever a part is outside its default place, and
removes it when none is. Only the moved parts are listed; the Java broker ignores the file.
"""
from __future__ import annotations

import json
import os
from typing import Protocol

from mqcore.format import layout as L


class StoreDirs(Protocol):
    """Where a store's parts live (``mqcore.config.StoreConfig`` is one): named by what this
    module reads, so the lowest layer needs nothing of the config above it."""

    @property
    def store_path(self) -> str: ...
    @property
    def config_dir(self) -> str: ...
    @property
    def commitlog_dir(self) -> str: ...
    @property
    def consume_queue_dir(self) -> str: ...
    @property
    def index_dir(self) -> str: ...

#: broker.conf key -> StoreConfig property giving the directory actually used
KEYS = {"storePathCommitLog": "commitlog_dir", "storePathConsumeQueue": "consume_queue_dir",
        "storePathIndex": "index_dir"}
_DEFAULT_DIRS = {"storePathCommitLog": L.COMMITLOG_DIR, "storePathConsumeQueue": L.CONSUME_QUEUE_DIR,
                 "storePathIndex": L.INDEX_DIR}


def moved_parts(config: StoreDirs) -> dict[str, str]:
    """{broker.conf key: absolute directory} of the parts not under the root's default name."""
    out = {}
    for key, attr in KEYS.items():
        actual = os.path.abspath(getattr(config, attr))
        if actual != os.path.abspath(os.path.join(config.store_path, _DEFAULT_DIRS[key])):
            out[key] = actual
    return out


def record(config: StoreDirs) -> None:
    """Write (or remove) ``config/storePaths.json`` to match ``config``."""
    path = os.path.join(config.config_dir, L.STORE_PATHS_FILE)
    moved = moved_parts(config)
    if not moved:
        if os.path.exists(path):
            os.unlink(path)
        return
    os.makedirs(config.config_dir, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(moved, f, indent=1)
    os.replace(tmp, path)


def parse(text: str) -> dict[str, str]:
    """The file's content -> {broker.conf key: directory}; unknown keys are left out."""
    value = json.loads(text)
    if not isinstance(value, dict):
        return {}
    return {k: str(v) for k, v in value.items() if k in KEYS and v}
