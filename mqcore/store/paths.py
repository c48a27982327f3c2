"""Paths the store builds from names that arrive over the network (topics, queue ids).

Every such path is resolved and must stay under the store directory it belongs to: a
name like ``..`` or ``a/../../b`` is refused with ``IllegalArgumentError`` before any
file is created, opened or deleted, whatever the callers validated before.
"""
from __future__ import annotations

import os

from mqcore.errors import IllegalArgumentError


def under_root(root: str, *names: str) -> str:
    """``root/names...``, refusing names that are empty, ``.``/``..``, contain a path
    separator or NUL, or resolve (through symlinks too) outside ``root``."""
    for name in names:
        if not name or name in (".", "..") or "/" in name or "\0" in name or (os.altsep and os.altsep in name):
            raise IllegalArgumentError(f"{name!r} cannot name a store file or directory")
    path = os.path.join(root, *names)
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
        raise IllegalArgumentError(f"{path!r} resolves outside the store directory {root!r}")
    return path
