"""RocketMQ's delay levels (``messageDelayLevel``): the spec string and its parse.

Defined here, in the lowest layer, because the store's record reader needs the default
levels to compute a delayed message's due time, and ``mqcore.config`` builds on ``format``
(never the other way round).
"""
from __future__ import annotations

import re

from mqcore.errors import ConfigError

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(spec: str) -> tuple[int, ...]:
    """``"1s 5s 10s ..."`` -> delay in ms per level (level 1 first)."""
    out = []
    for word in spec.split():
        m = re.fullmatch(r"(\d+)([smhd])", word.strip())
        if not m:
            raise ConfigError(f"messageDelayLevel: {word!r} is not <number><s|m|h|d>")
        out.append(int(m.group(1)) * _UNIT_MS[m.group(2)])
    if not out:
        raise ConfigError("messageDelayLevel is empty")
    return tuple(out)
