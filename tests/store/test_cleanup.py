"""Disk cleanup: the pure policy, then passes over real small stores with an injected
clock, disk-usage source and file ages, then one real run (mtimes, psutil, thread)."""
from __future__ import annotations

import logging
import os
import time

import pytest

from mqcore.config import StoreConfig
from mqcore.errors import ConfigError
from mqcore.store.cleanup import (HOUR_MS, CleanTrigger, CleanupPolicy, CleanupService, local_hour,
                                  parse_delete_when)
from mqcore.store.mapped_file import DestroyOutcome
from mqcore.store.message_store import MessageStore
from mqcore.store.results import GetMessageStatus, PutMessageStatus
from tests.support.store import msg, small_config

NOW = 1_750_000_000_000
OLD = NOW - 100 * HOUR_MS      # expired (older than 72 h)
YOUNG = NOW - 1 * HOUR_MS      # not expired


# --- policy --------------------------------------------------------------------------------------
def test_delete_when_parsing():
    assert parse_delete_when("04") == {4}
    assert parse_delete_when("03; 04;23") == {3, 4, 23}
    for bad in ("4am", "24", "-1"):
        with pytest.raises(ConfigError, match="deleteWhen"):
            parse_delete_when(bad)


@pytest.mark.parametrize("hour, usage, trigger, immediately, full", [
    (3, 50.0, None, False, False),                              # quiet: nothing to do, disk OK
    (4, 50.0, CleanTrigger.DELETE_WHEN, False, False),          # the deleteWhen hour
    (3, 76.0, CleanTrigger.DISK_ABOVE_MAX, False, False),       # > 75 %: any hour
    (3, 86.0, CleanTrigger.DISK_CLEAN_FORCIBLY, True, None),    # > 85 %: unexpired too, full flag kept
    (4, 91.0, CleanTrigger.DISK_FULL, True, True),              # > 90 %: refuse writes
    (3, None, None, False, None),                               # usage unknown: only deleteWhen applies
])
def test_policy_decisions(tmp_path, hour, usage, trigger, immediately, full):
    d = CleanupPolicy(StoreConfig(store_path=str(tmp_path))).decide(hour, usage)
    assert (d.trigger, d.clean_immediately, d.mark_disk_full) == (trigger, immediately, full)


def test_policy_file_reasons(tmp_path):
    p = CleanupPolicy(StoreConfig(store_path=str(tmp_path), delete_when="01;02"))
    at_hour = p.decide(2, 10.0)
    assert "expired" in p.file_reason(at_hour, NOW, OLD) and "deleteWhen hour 02" in p.file_reason(at_hour, NOW, OLD)
    assert p.file_reason(at_hour, NOW, YOUNG) is None            # unexpired waits
    assert p.file_reason(p.decide(5, 10.0), NOW, OLD) is None     # wrong hour, disk fine
    forced = p.decide(5, 87.5)
    assert "deleted early" in p.file_reason(forced, NOW, YOUNG) and "87.5%" in p.file_reason(forced, NOW, YOUNG)
    no_force = CleanupPolicy(StoreConfig(store_path=str(tmp_path), clean_file_forcibly_enable=False))
    assert no_force.file_reason(no_force.decide(5, 87.5), NOW, YOUNG) is None
    manual = p.decide(5, 10.0, manual=True)
    assert manual.trigger is CleanTrigger.MANUAL and p.file_reason(manual, NOW, YOUNG) is None


# --- passes over a real store ------------------------------------------------------------------------
class Env:
    """A small store (64 KiB commitlog files, 50-unit CQ files, 300-entry index files)
    plus the injected clock, hour, disk usage and file ages a cleanup service sees."""

    def __init__(self, store: MessageStore):
        self.store = store
        self.now = NOW
        self.hour = 12
        self.usage = 30.0
        self.modified: dict[str, int] = {}
        self.svc = CleanupService(store, clock=lambda: self.now, disk_usage=lambda path: self.usage,
                                  last_modified_ms=lambda mf: self.modified.get(mf.name, self.now),
                                  hour_of=lambda now: self.hour, delete_interval_ms=0)

    @property
    def files(self):
        return self.store.commitlog.queue.files

    def age_all(self, when: int) -> None:
        for mf in self.files:
            self.modified[mf.name] = when


def fill(store, n=600, topic="T", body=b"x" * 1000):
    for i in range(n):
        r = store.put_message(msg(topic, body, UNIQ_KEY=f"U{i}", KEYS=f"k{i}"))
        assert r.status is PutMessageStatus.PUT_OK


@pytest.fixture
def env(tmp_path, kernels):
    store = MessageStore(small_config(tmp_path / "store", delete_files_batch_max=3), kernels=kernels, clock=lambda: NOW)
    store.load()
    store.start()
    fill(store)
    yield Env(store)
    store.shutdown()


def test_expired_files_go_only_at_delete_when_hour(env):
    env.age_all(OLD)
    n = len(env.files)
    assert n >= 8
    r = env.svc.run_once()
    assert r.decision.trigger is None and not r.deleted and len(env.files) == n
    env.hour = 4
    r = env.svc.run_once()
    assert r.count("commitlog") == 3 and len(env.files) == n - 3       # delete_files_batch_max per pass
    assert all("deleteWhen hour 04" in d.reason and d.age_ms == 100 * HOUR_MS for d in r.deleted
               if d.kind == "commitlog")
    while env.svc.run_once().count("commitlog"):
        pass
    assert len(env.files) == 1, "the file being written is never deleted"


def test_scan_stops_at_the_first_unexpired_file(env):
    env.age_all(OLD)
    env.modified[env.files[2].name] = YOUNG    # a young file in the middle: no holes behind it
    env.hour = 4
    r = env.svc.run_once()
    assert r.count("commitlog") == 2
    assert env.svc.run_once().count("commitlog") == 0


def test_disk_above_max_deletes_expired_at_any_hour_but_not_young(env):
    env.age_all(YOUNG)
    first_two = [mf.name for mf in env.files[:2]]
    for name in first_two:
        env.modified[name] = OLD
    env.usage = 80.0
    r = env.svc.run_once()
    assert r.decision.trigger is CleanTrigger.DISK_ABOVE_MAX
    assert [os.path.basename(d.path) for d in r.deleted if d.kind == "commitlog"] == first_two
    assert "diskMaxUsedSpaceRatio 75%" in r.deleted[0].reason


def test_clean_forcibly_deletes_oldest_unexpired_a_batch_a_pass_until_usage_drops(env):
    env.age_all(YOUNG)
    n = len(env.files)
    per_file = 0.5
    base = 88.0 - per_file * n                 # usage falls as files go: 88 -> 86.5 -> 85
    env.svc.disk_usage = lambda path: base + per_file * len(env.files)
    seen, reasons = [], []
    while True:
        r = env.svc.run_once()
        seen.append((r.decision.usage_percent, r.count("commitlog")))
        reasons += [d.reason for d in r.deleted if d.kind == "commitlog"]
        if not r.count("commitlog"):
            break
    assert seen == [(88.0, 3), (86.5, 3), (85.0, 0)]
    assert len(env.files) == n - 6
    assert all("not expired" in why and "diskSpaceCleanForciblyRatio 85%" in why for why in reasons)


def test_disk_full_refuses_writes_until_space_is_freed_and_reads_go_on(env):
    store = env.store
    env.usage = 95.0
    env.age_all(YOUNG)
    env.svc.run_once()
    assert env.svc.disk_full
    r = store.put_message(msg("T", b"more"))
    assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk is full" in r.remark
    assert "95.0%" in r.remark and "90%" in r.remark
    assert store.get_message("T", 0, store.get_min_offset_in_queue("T", 0), 4).status is GetMessageStatus.FOUND
    env.usage = 87.0                            # between 85 and 90: still refused (RocketMQ keeps the flag)
    env.svc.run_once()
    assert store.put_message(msg("T", b"more")).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    env.usage = 60.0
    env.svc.run_once()
    assert not env.svc.disk_full and store.put_message(msg("T", b"more")).status is PutMessageStatus.PUT_OK


def test_disk_full_never_clears_another_refusal(env):
    env.store.refuse_puts("maintenance")
    env.usage = 95.0
    env.svc.run_once()
    assert env.store.refusal == "maintenance"
    env.usage = 10.0
    env.svc.run_once()
    assert env.store.refusal == "maintenance"
    env.store.accept_puts()


def test_held_file_is_kept_then_forced_and_stays_readable(env):
    store = env.store
    env.age_all(OLD)
    env.hour = 4
    first = env.files[0]
    held = store.get_message("T", 0, 0, 4)                  # a reader holds views of the first file
    assert held.status is GetMessageStatus.FOUND
    r = env.svc.run_once()
    assert r.held == [first.path] and not r.count("commitlog") and env.files[0] is first
    env.now += store.config.destroy_mapped_file_interval_forcibly_ms - 1
    assert env.svc.run_once().held == [first.path]
    env.now += 1
    r = env.svc.run_once()
    assert r.deleted[0].outcome is DestroyOutcome.FORCED and r.deleted[0].path == first.path
    assert not os.path.exists(first.path) and r.pending_close == 1
    assert bytes(held.buffers[0][4:8]) != b"\0\0\0\0"      # the reader's bytes are still there
    del held
    assert store.commitlog.queue.retry_pending_close() == 0 and first.closed


def test_consume_queue_and_index_files_follow_and_pulls_are_told(env):
    store = env.store
    cq = store.queues.get("T", 0)
    cq_files = len(cq.queue.files)
    index_files = len(store.index.files)
    assert cq_files > 3 and index_files > 3
    env.age_all(OLD)
    env.hour = 4
    r = env.svc.run_once()
    cl_min = store.get_min_phy_offset()
    assert r.count("commitlog") == 3 and r.count("consumequeue") >= 1 and r.count("index") >= 1
    assert all("< commitlog min offset" in d.reason for d in r.deleted if d.kind != "commitlog")
    min_off = store.get_min_offset_in_queue("T", 0)
    assert min_off > 0
    assert store.get_commitlog_offset_in_queue("T", 0, min_off) >= cl_min
    assert store.get_commitlog_offset_in_queue("T", 0, min_off - 1) < cl_min
    got = store.get_message("T", 0, 0, 8)
    assert got.status is GetMessageStatus.OFFSET_TOO_SMALL and got.next_begin_offset == min_off
    got = store.get_message("T", 0, min_off, 8)
    assert got.status is GetMessageStatus.FOUND
    assert store.messages_by_key("T", "k599") and not store.messages_by_key("T", "k0")
    assert len(cq.queue.files) < cq_files and len(store.index.files) < index_files


def test_every_deletion_is_logged_with_file_age_and_reason(env, caplog):
    env.age_all(OLD)
    env.hour = 4
    with caplog.at_level(logging.INFO, logger="mqcore.store.cleanup"):
        r = env.svc.run_once()
    lines = [rec.getMessage() for rec in caplog.records if rec.getMessage().startswith("deleted ")]
    assert len(lines) == len(r.deleted)
    first = r.deleted[0]
    assert f"deleted commitlog file {first.path}, age 100.0 h: expired" in lines[0]


def test_restart_after_cleanup_keeps_the_rest(tmp_path, kernels):
    path = tmp_path / "store"
    with MessageStore(small_config(path), kernels=kernels) as store:
        fill(store)
        env = Env(store)
        env.age_all(OLD)
        env.hour = 4
        for _ in range(3):
            env.svc.run_once()
        cl_min, q_min, q_max = store.get_min_phy_offset(), store.get_min_offset_in_queue("T", 0), \
            store.get_max_offset_in_queue("T", 0)
    with MessageStore(small_config(path), kernels=kernels) as store:
        assert store.get_min_phy_offset() == cl_min
        assert store.get_min_offset_in_queue("T", 0) == q_min and store.get_max_offset_in_queue("T", 0) == q_max
        assert store.get_message("T", 0, q_min, 4).status is GetMessageStatus.FOUND


def test_real_run_with_mtimes_psutil_and_the_service_thread(tmp_path):
    """No injection: real mtimes (set with os.utime), psutil disk usage, the thread."""
    cfg = small_config(tmp_path / "store", file_reserved_time_hours=1, delete_when=f"{local_hour(int(time.time() * 1000)):02d}",
                       clean_resource_first_delay_ms=0, clean_resource_interval_ms=50)
    with MessageStore(cfg) as store:
        fill(store, 300)
        files = list(store.commitlog.queue.files)
        assert len(files) >= 4
        old = time.time() - 2 * 3600
        for mf in files[:3]:
            os.utime(mf.path, (old, old))
        svc = CleanupService(store, delete_interval_ms=10)
        svc.start()
        try:
            deadline = time.monotonic() + 10
            while store.commitlog.queue.files[0] is not files[3] and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            svc.shutdown()
        assert store.commitlog.queue.files[0] is files[3], "the three old files are gone, the young ones stay"
        assert not any(os.path.exists(mf.path) for mf in files[:3])
        assert store.get_message("T", 0, store.get_min_offset_in_queue("T", 0), 4).status is GetMessageStatus.FOUND


def test_consume_queue_file_held_by_a_reader_is_retried_on_the_next_pass(env):
    store = env.store
    cq = store.queues.get("T", 0)
    env.age_all(OLD)
    env.hour = 4
    held = cq.units_at(0, 10)                               # a pull in progress on the first CQ file
    first_cq = cq.queue.files[0]
    r = env.svc.run_once()
    assert r.count("commitlog") == 3 and first_cq.path in r.held and cq.queue.files[0] is first_cq
    assert store.get_min_offset_in_queue("T", 0) > 0        # the min offset moves up all the same
    del held
    env.hour = 12                                          # no commitlog deletion: only the CQ retry
    r = env.svc.run_once()
    assert r.count("consumequeue") >= 1 and not os.path.exists(first_cq.path)


def test_manual_delete_request_deletes_expired_files_at_any_hour(env):
    env.age_all(OLD)
    env.svc.request_manual_delete(passes=2)
    r = env.svc.run_once()
    assert r.decision.trigger is CleanTrigger.MANUAL and r.count("commitlog") == 3
    assert "a manual delete request" in r.deleted[0].reason
    assert env.svc.run_once().count("commitlog") == 3
    assert env.svc.run_once().decision.trigger is None      # the two requested passes are used up


def test_a_disk_already_full_at_start_refuses_writes_before_the_first_pass(env):
    env.usage = 96.0
    env.svc.start()                                         # first pass only after 60 s
    try:
        r = env.store.put_message(msg("T", b"x"))
        assert r.status is PutMessageStatus.SERVICE_NOT_AVAILABLE and "disk is full" in r.remark
    finally:
        env.svc.shutdown()


def test_forcible_cleanup_says_which_groups_lose_unconsumed_messages(env, caplog):
    """cleanFileForciblyEnable deletes unexpired files (RocketMQ semantics, kept); each such
    deletion names the topics and groups losing messages they had not consumed, and the
    totals are kept for metrics."""
    store = env.store
    committed = {"T": {"CG_fast": {0: 600}, "CG_slow": {0: 10}}}
    env.svc.committed_offsets = lambda topic: committed.get(topic, {})
    env.age_all(YOUNG)
    env.usage = 88.0                                            # above diskSpaceCleanForciblyRatio
    first_three = [(mf.file_from_offset, mf.end_offset) for mf in env.files[:3]]
    cq = store.queues.get("T", 0)
    a, b = cq.offsets_in_phy_range(first_three[0][0], first_three[-1][1])
    assert a == 0 and b > 10
    with caplog.at_level(logging.WARNING, logger="mqcore.store.cleanup"):
        r = env.svc.run_once()
    assert r.count("commitlog") == 3
    assert sum(loss.messages for loss in r.losses) == b
    assert sum(loss.unconsumed.get("CG_slow", 0) for loss in r.losses) == b - 10
    assert all("CG_fast" not in loss.unconsumed for loss in r.losses)
    st = env.svc.stats
    assert st.commitlog_files_deleted == 3 and st.commitlog_files_deleted_forcibly == 3
    assert st.messages_deleted == b and st.unconsumed_by_group == {("T", "CG_slow"): b - 10}
    assert st.unconsumed_messages_deleted == b - 10
    warned = [rec.getMessage() for rec in caplog.records if "not yet consumed" in rec.getMessage()]
    assert warned and all("topic T" in w and "group CG_slow" in w for w in warned)


def test_high_disk_with_nothing_to_delete_warns_on_crossing_then_every_ten_minutes(env, caplog):
    """Above 75 % with only young files a pass (every 10 s) can delete nothing: the warning is
    logged when that starts, not on every pass, again after STUCK_WARNING_INTERVAL_MS, and anew
    once the disk dropped below and crossed again."""
    from mqcore.store.cleanup import STUCK_WARNING_INTERVAL_MS

    def warnings():
        return [r for r in caplog.records if "no commitlog file could be deleted" in r.getMessage()]

    env.age_all(YOUNG)
    env.usage = 80.0
    with caplog.at_level(logging.WARNING, logger="mqcore.store.cleanup"):
        for _ in range(30):  # five minutes of 10 s passes
            env.svc.run_once()
            env.now += 10_000
        assert len(warnings()) == 1 and "diskMaxUsedSpaceRatio 75%" in warnings()[0].getMessage()
        env.now += STUCK_WARNING_INTERVAL_MS
        env.svc.run_once()
        assert len(warnings()) == 2
        env.usage = 50.0
        env.svc.run_once()
        env.usage = 80.0
        env.svc.run_once()
        assert len(warnings()) == 3
