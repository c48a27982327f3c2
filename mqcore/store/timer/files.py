"""The timer files (``mqcore.format.timer`` has their layout): timerlog, timerwheel, timercheck,
timermetrics, in the store root where Apache 5.3.3 keeps them.

Every file is memory-mapped and written in place, so what was written before a ``kill -9``
is in the page cache and survives it; ``flush`` (the service's flush interval, and
shutdown) puts it on disk against a power cut. The files are created only when the first
timer arrives: a store that never held a timer has none of them (and moves to a 4.9
broker as it is).

Threads: the timer service thread only (one writer, one reader).
"""
from __future__ import annotations

import json
import logging
import mmap
import os
from typing import Iterator

import numpy as np

from mqcore.errors import CorruptFileError, StoreIOError
from mqcore.format import timer as T
from mqcore.format.javahash import string_hash
from mqcore.store import config_files
from mqcore.store.mapped_file_queue import MappedFileQueue

log = logging.getLogger(__name__)


class _MappedRegion:
    """One whole file mapped read-write, created at ``size`` with its blocks reserved (a store
    into an unbacked mapped page would kill the process when the disk is full)."""

    def __init__(self, path: str, size: int):
        self.path = path
        existed = os.path.exists(path)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            actual = os.fstat(self.fd).st_size
            if existed and actual not in (0, size):
                os.close(self.fd)
                raise CorruptFileError(f"{path} is {actual} bytes, expected {size} (not a RocketMQ 5 timer file?)")
            if actual != size:
                os.ftruncate(self.fd, size)
                os.posix_fallocate(self.fd, 0, size)
            self.mm = mmap.mmap(self.fd, size)
        except OSError as e:
            raise StoreIOError(e.errno, f"cannot map {path}: {e.strerror}") from e
        self.existed = existed and actual == size

    def flush(self) -> None:
        self.mm.flush()

    def close(self) -> None:
        self.mm.flush()
        self.mm.close()
        os.close(self.fd)


class TimerWheel:
    """``timerwheel``: a slot per precision step over 14 days, each the head of a chain of
    timerlog units (``TimerWheel``)."""

    def __init__(self, path: str, precision_ms: int):
        self.precision_ms = precision_ms
        self.region = _MappedRegion(path, T.WHEEL_LENGTH)
        self.mm = self.region.mm
        self.slots = np.frombuffer(self.mm, T.SLOT_DTYPE)
        self.n = T.SLOTS_TOTAL * 2

    def index(self, time_ms: int) -> int:
        return time_ms // self.precision_ms % self.n

    def get(self, time_ms: int) -> tuple[int, int, int, int]:
        """(first, last, num, magic) of the slot of ``time_ms``; -1s when it holds another time."""
        t, first, last, num, magic = T.SLOT.unpack_from(self.mm, self.index(time_ms) * T.SLOT_SIZE)
        if t != time_ms // self.precision_ms:
            return -1, -1, 0, 0
        return first, last, num, magic

    def put(self, time_ms: int, first: int, last: int, num: int, magic: int) -> None:
        T.SLOT.pack_into(self.mm, self.index(time_ms) * T.SLOT_SIZE, time_ms // self.precision_ms, first, last,
                         num, magic)

    def revise_last(self, time_ms: int, last: int) -> None:
        """Recovery: the slot's last unit is ``last`` (``reviseSlot(.., IGNORE, last, force)``)."""
        first, _, num, magic = self.get(time_ms)
        if first == -1:
            self.put(time_ms, last, last, 1, 0)
        else:
            self.put(time_ms, first, last, num, magic)

    #: slots read per pread in scans (4 MiB): a scan reads the file instead of touching the map,
    #: so a scan of the whole wheel (the pending count at start) does not map 38.7 MB into RSS
    SCAN_SLOTS = 131072

    def _scan(self, first_slot: int, steps: int) -> Iterator[tuple[int, np.ndarray]]:
        """(step offset, slots array) chunks for ``steps`` consecutive slots from slot number
        ``first_slot`` (time // precision), read with pread; a chunk never wraps the ring."""
        done = 0
        while done < steps:
            idx = (first_slot + done) % self.n
            count = min(steps - done, self.SCAN_SLOTS, self.n - idx)
            raw = os.pread(self.region.fd, count * T.SLOT_SIZE, idx * T.SLOT_SIZE)
            yield done, np.frombuffer(raw, T.SLOT_DTYPE)
            done += count

    def next_busy(self, start_ms: int, end_ms: int) -> int:
        """The first time in [start, end) (precision steps) whose slot holds that time, else end."""
        p = self.precision_ms
        steps = min((end_ms - start_ms) // p, self.n)
        if steps <= 0:
            return end_ms
        first = start_ms // p
        if steps <= 128:  # the usual turn: a page or two of the map
            times = np.arange(first, first + steps, dtype=np.int64)
            hit = np.flatnonzero(self.slots["time"][times % self.n] == times)
            return int((first + hit[0]) * p) if len(hit) else start_ms + steps * p
        for at, chunk in self._scan(first, steps):
            hit = np.flatnonzero(chunk["time"] == np.arange(first + at, first + at + len(chunk), dtype=np.int64))
            if len(hit):
                return int((first + at + hit[0]) * p)
        return start_ms + steps * p

    def pending(self, from_ms: int) -> int:
        """Timers in the slots from ``from_ms`` on (``getAllNum``)."""
        first = from_ms // self.precision_ms
        total = 0
        for at, chunk in self._scan(first, self.n):
            live = chunk["time"] == np.arange(first + at, first + at + len(chunk), dtype=np.int64)
            total += int(chunk["num"][live].sum())
        return total

    def flush(self) -> None:
        self.region.flush()

    def close(self) -> None:
        del self.slots
        self.region.close()


class TimerLog:
    """``timerlog/``: the 52-byte units in arrival order (``TimerLog``), on a MappedFileQueue."""

    def __init__(self, directory: str, file_size: int):
        self.q = MappedFileQueue(directory, file_size)
        self.file_size = file_size

    def load(self) -> None:
        """Map the files and find the end of the units (a unit with a bad size or magic ends them)."""
        for note in self.q.load():
            log.warning("timerlog: %s", note)
        last = self.q.last
        if last is None:
            return
        units = np.frombuffer(last.buf, T.UNIT_DTYPE, count=self.file_size // T.UNIT_SIZE)
        bad = np.flatnonzero((units["size"] != T.UNIT_SIZE) | ((units["magic"] | 0xF) != 0xF))
        end = int(bad[0]) * T.UNIT_SIZE if len(bad) else len(units) * T.UNIT_SIZE
        if len(bad) and units["magic"][bad[0]] == T.BLANK_MAGIC:
            end = self.file_size  # the file was closed by a blank: it is full
        last.set_positions(end)

    def append(self, unit: bytes) -> int:
        """Append one unit; returns its offset. A file without room for it (and a blank)
        is closed with a blank first."""
        mf = self.q.get_last_for_append(0)
        if len(unit) + T.MIN_BLANK_LEN > mf.remaining():
            pos = mf.wrote_position
            room = mf.remaining()
            T.INT32.pack_into(mf.buf, pos + T.U_SIZE, room)
            T.INT64.pack_into(mf.buf, pos + T.U_PREV_POS, 0)
            T.INT32.pack_into(mf.buf, pos + T.U_MAGIC, T.BLANK_MAGIC)
            mf.wrote_position = self.file_size
            mf = self.q.get_last_for_append(0)
        pos = mf.wrote_position
        mf.buf[pos:pos + len(unit)] = unit
        mf.wrote_position = pos + len(unit)
        return mf.file_from_offset + pos

    def unit(self, offset: int) -> tuple[int, ...] | None:
        """The fields of the unit at ``offset`` (``format.timer.UNIT`` order), or None."""
        mf = self.q.find_by_offset(offset)
        if mf is None:
            return None
        return tuple(T.UNIT.unpack_from(mf.buf, offset - mf.file_from_offset))

    def units_from(self, offset: int) -> Iterator[tuple[int, np.ndarray]]:
        """(offset, units array) per file from ``offset`` to the end (recovery's scan)."""
        for mf in list(self.q.files):
            if mf.wrote_offset <= offset:
                continue
            start = max(offset, mf.file_from_offset) - mf.file_from_offset
            start -= start % T.UNIT_SIZE
            n = (mf.wrote_position - start) // T.UNIT_SIZE
            if n > 0:
                yield mf.file_from_offset + start, np.frombuffer(mf.buf, T.UNIT_DTYPE, count=n, offset=start)

    def last_unit_offset(self) -> int:
        """The offset of the newest unit, -1 when there is none."""
        for mf in reversed(self.q.files):
            n = mf.wrote_position // T.UNIT_SIZE
            while n > 0:
                at = (n - 1) * T.UNIT_SIZE
                size, _, magic = T.INT32.unpack_from(mf.buf, at)[0], 0, T.INT32.unpack_from(mf.buf, at + T.U_MAGIC)[0]
                if size == T.UNIT_SIZE and T.magic_ok(magic):
                    return mf.file_from_offset + at
                n -= 1
        return -1

    @property
    def end(self) -> int:
        return self.q.max_offset()

    def flush(self) -> int:
        return self.q.flush(0)

    def flushed(self) -> int:
        return self.q.flushed_offset()

    def delete_below(self, min_commitlog_offset: int) -> int:
        """Drop whole files whose every unit points below the commitlog's first offset
        (their messages are gone; ``deleteExpiredFileByOffsetForTimerLog``)."""
        dropped = 0
        while len(self.q.files) > 1:
            mf = self.q.files[0]
            at = (self.file_size - T.MIN_BLANK_LEN) // T.UNIT_SIZE * T.UNIT_SIZE - T.UNIT_SIZE
            if T.INT64.unpack_from(mf.buf, at + T.U_OFFSET_PY)[0] >= min_commitlog_offset:
                break
            self.q.delete_first(1)
            dropped += 1
        return dropped

    def close(self) -> None:
        self.q.flush(0)
        self.q.close()


class TimerCheckpoint:
    """``config/timercheck``: read time, timerlog flush position, timer queue offset (x2), data version."""

    def __init__(self, path: str):
        self.region = _MappedRegion(path, T.CHECK_FILE_SIZE)
        (self.read_time_ms, self.flush_pos, self.queue_offset, self.master_queue_offset, self.state_version,
         self.version_ts, self.version_counter) = T.CHECK.unpack_from(self.region.mm, 0)
        self.existed = self.region.existed

    def write(self, now_ms: int) -> None:
        self.version_counter += 1
        self.version_ts = now_ms
        T.CHECK.pack_into(self.region.mm, 0, self.read_time_ms, self.flush_pos, self.queue_offset,
                          self.master_queue_offset, self.state_version, self.version_ts, self.version_counter)

    def flush(self) -> None:
        self.region.flush()

    def close(self) -> None:
        self.region.close()


class TimerMetrics:
    """``config/timermetrics``: pending timers per real topic (JSON, as ``TimerMetrics`` writes it)."""

    def __init__(self, path: str):
        self.path = path
        self.counts: dict[str, list[int]] = {}
        self.version = {"counter": 0, "stateVersion": 0, "timestamp": 0}

    def load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                doc = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            log.warning("timer metrics %s unreadable (%s): counting from zero", self.path, e)
            return
        for topic, m in (doc.get("timingCount") or {}).items():
            if isinstance(m, dict):
                self.counts[topic] = [int(m.get("count", 0)), int(m.get("timeStamp", 0))]
        if isinstance(doc.get("dataVersion"), dict):
            self.version.update(doc["dataVersion"])

    def add(self, topic: str, n: int, now_ms: int) -> None:
        m = self.counts.setdefault(topic, [0, now_ms])
        m[0] += n
        m[1] = now_ms

    def persist(self, now_ms: int) -> None:
        self.version["counter"] = int(self.version.get("counter", 0)) + 1
        self.version["timestamp"] = now_ms
        config_files.persist(self.path, {"dataVersion": self.version,
                                      "timingCount": {t: {"count": c, "timeStamp": ts}
                                                      for t, (c, ts) in self.counts.items()}})


def topic_hash(topic: str | None) -> int:
    return 0 if topic is None else string_hash(topic)
