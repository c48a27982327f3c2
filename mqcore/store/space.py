"""Disk-space guard: the ratio check made before every new store file is created.

RocketMQ refuses writes once the store's partition is above
``diskSpaceWarningLevelRatio`` (90 %), but only notices it in the periodic cleanup
pass (every 10 s, first after 60 s), so a fast producer can fill the disk first. The
guard is asked before each new commitlog, consume-queue or index file: when creating
it would take the partition above the ratio, ``DiskFullError`` is raised and the put
that needed the file is refused. The periodic cleanup pass keeps deciding deletions.
"""
from __future__ import annotations

import errno
import os
from typing import Callable

from mqcore.errors import DiskFullError

#: (used bytes, bytes still available to us) of the partition holding a path
SpaceUsage = Callable[[str], tuple[int, int]]


def statvfs_usage(path: str) -> tuple[int, int]:
    """Used and available bytes as ``df`` counts them (root's reserve is neither)."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return used, st.f_bavail * st.f_frsize


def used_percent(path: str) -> float:
    """Percent of the partition holding ``path`` in use, as ``df``'s Use% and RocketMQ's
    ``UtilAll.getDiskPartitionSpaceUsedPercent`` count it: used / (used + available to us),
    so root's reserve counts as neither. The one measure behind the cleanup's decisions,
    ``brokerStatus``/``clusterList``'s ``commitLogDiskRatio`` and the disk-ratio metrics."""
    used, avail = statvfs_usage(path)
    total = used + avail
    return 100.0 * used / total if total > 0 else 0.0


class DiskSpaceGuard:
    """``guard(directory, size)``: raise ``DiskFullError`` unless a ``size``-byte file fits
    under ``warning_ratio`` percent of the partition holding ``directory``."""

    def __init__(self, warning_ratio: int, usage: SpaceUsage = statvfs_usage):
        self.warning_ratio = warning_ratio
        self.usage = usage

    def __call__(self, directory: str, size: int) -> None:
        try:
            used, avail = self.usage(directory)
        except OSError:
            return  # cannot measure: the reservation itself still fails cleanly when full
        total = used + avail
        if total <= 0:
            return
        after = 100.0 * (used + size) / total
        if size > avail or after > self.warning_ratio:
            raise DiskFullError(
                errno.ENOSPC,
                f"the disk is full: a new {size}-byte store file in {directory} would bring its partition "
                f"to {after:.1f}% (used {used} of {total} bytes), above diskSpaceWarningLevelRatio "
                f"{self.warning_ratio}%; writes are refused until space is freed")
