"""A store whose commitlog lives elsewhere (``storePathCommitLog``, as the README recommends
for a disk of its own): given the store root, the reader finds it through the root's
``config/storePaths.json`` (written by the store), or the option ``commitLogPath``; and when
neither says where it is, an error says what to do instead of 0 rows and success."""
from __future__ import annotations

import dataclasses
import json
import os

import pytest

from mqcore.errors import StoreError
from mqcore.format import layout as L
from mqcore.spark.analytics import cli
from mqcore.spark.decode import read_table
from mqcore.store.message_store import MessageStore
from tests.support import storegen

N = 120


@pytest.fixture
def moved_store(tmp_path):
    root, elsewhere = tmp_path / "store", tmp_path / "disk2" / "commitlog"
    cfg = dataclasses.replace(storegen.config(str(root)), store_path_commitlog=str(elsewhere))
    with MessageStore(cfg, clock=storegen.StepClock()) as store:
        for _kind, m in storegen.messages(N):
            assert store.put_message(m).ok
    assert not os.path.isdir(root / "commitlog") or not os.listdir(root / "commitlog")
    return str(root), str(elsewhere)


def test_the_store_root_names_its_moved_commitlog_and_the_reader_follows(moved_store):
    root, elsewhere = moved_store
    with open(os.path.join(root, L.CONFIG_DIR, L.STORE_PATHS_FILE)) as f:
        assert json.load(f) == {"storePathCommitLog": os.path.abspath(elsewhere)}
    assert read_table(root).num_rows == N


def test_a_copied_store_without_the_note_is_an_error_or_read_with_the_option(moved_store):
    root, elsewhere = moved_store
    os.unlink(os.path.join(root, L.CONFIG_DIR, L.STORE_PATHS_FILE))  # e.g. written by a Java broker
    with pytest.raises(StoreError, match=r"commitLogPath.*") as e:
        read_table(root)
    assert "storePathCommitLog" in str(e.value) and "holds no commitlog files" in str(e.value)
    assert read_table(root, commitLogPath=elsewhere).num_rows == N
    assert cli.main(["volume", root]) == 2  # refused before Spark starts, not "0 rows"


def test_a_store_back_in_its_default_place_drops_the_note(moved_store, tmp_path):
    root, elsewhere = moved_store
    os.rename(elsewhere, os.path.join(root, "commitlog"))
    with MessageStore(storegen.config(root), clock=storegen.StepClock()):
        pass
    assert not os.path.exists(os.path.join(root, L.CONFIG_DIR, L.STORE_PATHS_FILE))
    assert read_table(root).num_rows == N


@pytest.mark.spark
def test_spark_and_the_analytics_job_read_the_moved_commitlog(spark, moved_store, capsys):
    root, _ = moved_store
    assert spark.read.format("rocketmq").load(root).count() == N
