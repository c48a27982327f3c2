"""The mqbroker process's collector policy (mqcore.broker.cli.settle_gc)."""
from __future__ import annotations

import gc

from mqcore.broker.cli import GC_YOUNG_THRESHOLD, settle_gc


def test_settle_gc_freezes_what_is_alive_and_raises_the_young_threshold():
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    survivor = [object() for _ in range(10)]  # alive when the broker has started
    try:
        settle_gc()
        assert gc.get_freeze_count() > frozen_before + len(survivor) - 1
        assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, before[1], before[2])
        assert GC_YOUNG_THRESHOLD > before[0]
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
