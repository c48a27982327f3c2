"""What of a store a read cannot see: the damage survey behind ``onCorrupt``.

A store missing a middle commitlog file used to read as if complete (rows absent, no
word). Now every read is planned against a survey (``mqcore.format.damage``): holes
between files and consume-queue units past the log's end are found at planning time
(from the file listing and the queues' last units, so planning costs no more reading);
torn and corrupt records and data stopping early inside a file are found by the tasks
as they walk. ``mqcore-analytics`` also walks every file before Spark starts
(``walk=True``), so its report names all of it up front.

Damage fails the read, naming what, where and how many listed messages, unless the user
asked to read past it with ``onCorrupt=skip`` (``mqcore-analytics --read-past-damage``):
then it is logged as a warning and the rows that are there are read.
"""
from __future__ import annotations

import dataclasses
import logging

from mqcore.errors import StoreError
from mqcore.format.damage import Damage, DamageKind, file_gaps, summary
from mqcore.kernel_api import ColumnKernels
from mqcore.spark.files import Snapshot, StoreDirs, list_commitlog, list_queues, positions_in, scan_file
from mqcore.spark.options import I64_MAX

log = logging.getLogger(__name__)

#: how a user reads past damage; named in every damage error
READ_PAST = ("set option onCorrupt=skip (mqcore-analytics: --read-past-damage) to read the records that are "
             "there, with this report as a warning; `mqstore verify STORE` lists every problem")
#: damaged ranges described one by one in an error or report; the rest are counted
SHOWN = 10


class StoreDamageError(StoreError):
    """The store has ranges a read cannot see (see ``mqcore.spark.damage``)."""


@dataclasses.dataclass(frozen=True)
class DamageReport:
    store: str
    damages: tuple[Damage, ...]
    walked: bool  # the files were walked (torn/corrupt records and early stops are included)

    def __bool__(self) -> bool:
        return bool(self.damages)

    @property
    def lost_messages(self) -> int:
        return sum(d.units for d in self.damages if d.units > 0)

    def lines(self) -> list[str]:
        out = [f"{self.store}: {summary(self.damages)}"]
        out += [f"  {d.describe()}" for d in self.damages[:SHOWN]]
        if len(self.damages) > SHOWN:
            out.append(f"  ... {len(self.damages) - SHOWN} more damaged range(s)")
        return out

    def error(self) -> StoreDamageError:
        return StoreDamageError("\n".join(["the store is damaged, so this read would silently miss records:",
                                           *self.lines(), READ_PAST]))


def survey(dirs: StoreDirs, snap: Snapshot, *, walk: bool, check_crc: bool = False, pinned: bool = False,
           kernels: ColumnKernels | None = None) -> DamageReport:
    """The damage in ``snap``'s part of the store. ``walk`` walks every file's records too
    (local stores only: a header hop per record, no decoding); ``pinned`` (a replayed
    ``snapshotOffset``) leaves out the consume queues' reach past the snapshot end."""
    st = dirs.storage
    data = [(st.basename(f.path), f.base_offset, f.size) for f in snap.files]
    now = list_commitlog(dirs)  # listed after the snapshot read the queues: a file rolled since shows here
    listed = {st.basename(f.path) for f in now}
    damages = file_gaps(data, sorted(listed - {name for name, _, _ in data}))
    walked = walk and st.is_local
    if walked:
        for i, f in enumerate(snap.files):
            name = data[i][0]
            spots: list[tuple[int, int]] = []
            stats = scan_file(f.path, f.base_offset, snap.data_end(i), check_crc, kernels=kernels, spots=spots)
            damages += [Damage(DamageKind.CORRUPT, f.base_offset + a, f.base_offset + b, (name,)) for a, b in spots]
            if i + 1 < len(snap.files) and stats.end == "NO_DATA" and stats.data_end < snap.data_end(i):
                damages.append(Damage(DamageKind.STOPS_EARLY, f.base_offset + stats.data_end, f.base_offset + f.size,
                                      (name,)))
    grew = any(f.base_offset >= snap.end_offset for f in now)  # a live store's writer rolled on meanwhile
    if not pinned and snap.dispatched > snap.end_offset and not grew:
        last = data[-1][0] if data else st.display(dirs.commitlog)
        damages.append(Damage(DamageKind.PAST_END, snap.end_offset, snap.dispatched, (f"the file(s) after {last}",)))
    if damages:
        damages = [dataclasses.replace(d, units=listed_units(dirs, d.lo, I64_MAX if d.kind == DamageKind.PAST_END
                                                             else d.hi)) for d in damages]
    damages.sort(key=lambda d: d.lo)
    return DamageReport(st.display(dirs.root or dirs.commitlog), tuple(damages), walked)


def enforce(report: DamageReport, on_corrupt: str) -> None:
    """Fail on damage unless the read was asked to go past it (then warn)."""
    if not report:
        return
    if on_corrupt != "skip":
        raise report.error()
    for line in report.lines():
        log.warning("onCorrupt=skip reads past damage: %s", line)


def stops_early_error(display: str, base_offset: int, pos: int, limit: int,
                      store: StoreDirs | None) -> StoreDamageError:
    """A task found zeros inside the snapshot's data (a torn or zeroed stretch of a file)."""
    lo, hi = base_offset + pos, base_offset + limit
    listed = f"; the consume queues list {listed_units(store, lo, hi)} message(s) there" if store else ""
    return StoreDamageError(
        f"the store is damaged: {DamageKind.STOPS_EARLY}: {display} holds no records from file position {pos} "
        f"(commitlog offsets [{lo}, {hi})) although its data runs to {limit}{listed}; {READ_PAST}")


def listed_units(store: StoreDirs, lo: int, hi: int) -> int:
    """Consume-queue units pointing into commitlog offsets [lo, hi)."""
    return len(positions_in(list_queues(store), lo, hi)[0])
