"""Damage in a commitlog: ranges of offsets a reader cannot read, and why.

One definition for ``mqstore verify`` and the Spark reader (and ``mqcore-analytics``): a
missing or empty middle file, a record that is torn or corrupt, data that stops before a
file's end while later files hold data, and consume-queue units pointing past the log's
end. Each is a ``[lo, hi)`` range of commitlog offsets; ``units`` says how many messages
the consume queues list there (what a reader that went on would silently lose).
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from mqcore.format.layout import offset_to_file_name


class DamageKind:
    MISSING_FILE = "missing file"      # a hole between two commitlog files
    EMPTY_FILE = "empty file"          # a middle file that holds nothing
    CORRUPT = "corrupt record"         # bad magic / size / CRC, or a record cut short
    STOPS_EARLY = "data stops early"   # zeros inside a file while later files hold data
    PAST_END = "past the log end"      # consume queues point beyond the commitlog's last record


@dataclasses.dataclass(frozen=True)
class Damage:
    kind: str
    lo: int
    hi: int
    files: tuple[str, ...]
    units: int = -1  # consume-queue units pointing into [lo, hi); -1 = not counted

    def describe(self) -> str:
        where = ", ".join(self.files)
        lost = f"; the consume queues list {self.units} message(s) there" if self.units >= 0 else ""
        return f"{self.kind}: commitlog offsets [{self.lo}, {self.hi}) ({self.hi - self.lo} bytes) in {where}{lost}"


def file_gaps(files: Sequence[tuple[str, int, int]], empty: Sequence[str] = ()) -> list[Damage]:
    """Holes between consecutive commitlog files holding data, given as (name, base offset,
    size) in offset order. ``empty`` names files that exist but hold nothing: a hole made of
    them is EMPTY_FILE, one with a file absent MISSING_FILE."""
    out = []
    for (name_a, base_a, size_a), (name_b, base_b, _) in zip(files, files[1:]):
        end = base_a + size_a
        if base_b <= end:
            continue
        names = [offset_to_file_name(o) for o in range(end, base_b, size_a)] if size_a > 0 else []
        absent = [n for n in names if n not in empty]
        shown = names if len(names) <= 4 else names[:2] + [f"... {len(names) - 3} more"] + names[-1:]
        kind = DamageKind.MISSING_FILE if absent or not names else DamageKind.EMPTY_FILE
        out.append(Damage(kind, end, base_b, tuple(shown) or (f"between {name_a} and {name_b}",)))
    return out


def summary(damages: Sequence[Damage]) -> str:
    """One line: how many ranges, bytes and listed messages."""
    lost = sum(d.units for d in damages if d.units > 0)
    return (f"{len(damages)} damaged range(s), {sum(d.hi - d.lo for d in damages)} bytes of commitlog, "
            f"{lost} message(s) the consume queues list are unreadable")
