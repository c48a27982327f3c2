"""A damaged store is never read as if complete: the reader and mqcore-analytics name the damage
(what, commitlog offsets, files, messages the consume queues list there) and fail, unless asked
to read past it (onCorrupt=skip / --read-past-damage), which reads the rest and reports it."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

from mqcore.spark.analytics import cli
from mqcore.spark.damage import StoreDamageError
from mqcore.spark.decode import read_table
from mqcore.errors import RecordDecodeError
from mqcore.tools.mqstore import main as mqstore
from tests.support import storegen

FILE = 32 * 1024


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pristine") / "store")
    truth = storegen.build(root, n=1200, file_size=FILE)
    return root, truth, sorted(os.listdir(os.path.join(root, "commitlog")))


def _copy(pristine, tmp_path) -> str:
    root = str(tmp_path / "store")
    shutil.copytree(pristine[0], root)
    return root


def _in(truth, lo, hi) -> list[int]:
    return sorted(o for o in truth if lo <= o < hi)


def missing_middle_file(pristine, tmp_path):
    root, (_, truth, files) = _copy(pristine, tmp_path), pristine
    os.remove(os.path.join(root, "commitlog", files[2]))
    lo = int(files[2])
    return root, lo, lo + FILE, files[2], len(_in(truth, lo, lo + FILE))


def torn_record(pristine, tmp_path):
    """The second half of a record in a middle file and the next record's header zeroed: a
    write torn across both (what a lost page of a mapped file leaves)."""
    root, (_, truth, files) = _copy(pristine, tmp_path), pristine
    base = int(files[2])
    victim = _in(truth, base + 10_000, base + FILE)[0]
    size = truth[victim][1].store_size
    with open(os.path.join(root, "commitlog", files[2]), "r+b") as f:
        f.seek(victim - base + size // 2)
        f.write(b"\0" * (size - size // 2 + 64))
    return root, victim, None, files[2], None


def stops_early(pristine, tmp_path):
    """A middle file zeroed from a record boundary to its end: no torn header, only zeros."""
    root, (_, truth, files) = _copy(pristine, tmp_path), pristine
    base = int(files[3])
    cut = _in(truth, base + FILE // 2, base + FILE)[0]
    path = os.path.join(root, "commitlog", files[3])
    with open(path, "r+b") as f:
        f.seek(cut - base)
        f.write(b"\0" * (base + FILE - cut))
    return root, cut, base + FILE, files[3], len(_in(truth, cut, base + FILE))


def queues_past_the_log(pristine, tmp_path):
    """The last commitlog file lost: the consume queues point past what the commitlog holds."""
    root, (_, truth, files) = _copy(pristine, tmp_path), pristine
    os.remove(os.path.join(root, "commitlog", files[-1]))
    lo = int(files[-1])
    return root, lo, max(o + m.store_size for o, (_, m) in truth.items()), files[-2], len(_in(truth, lo, 1 << 62))


DAMAGE = {"missing middle file": missing_middle_file, "torn record": torn_record, "data stops early": stops_early,
          "consume queues past the log": queues_past_the_log}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_the_reader_refuses_a_damaged_store_and_reads_past_it_when_asked(case, pristine, tmp_path, caplog):
    root, lo, hi, file_name, lost = DAMAGE[case](pristine, tmp_path)
    truth = pristine[1]
    with pytest.raises((StoreDamageError, RecordDecodeError)) as e:
        read_table(root, includeBody="false")
    text = str(e.value)
    assert f"offset {lo}" in text or f"[{lo}, " in text, text
    assert file_name in text and "onCorrupt=skip" in text, text
    if lost is not None:
        assert f"{lost} message(s)" in text, text
    with caplog.at_level("WARNING"):
        table = read_table(root, includeBody="false", onCorrupt="skip")
    got = set(table.column("commitlog_offset").to_pylist())
    assert got <= set(truth)
    if hi is not None:  # every record outside the damaged range is read, none inside it
        assert got == set(truth) - set(_in(truth, lo, hi))
    else:
        assert lo not in got and len(got) >= len(truth) - 3
    assert caplog.records, "reading past damage must leave a report"


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_analytics_refuses_a_damaged_store_naming_the_damage(case, pristine, tmp_path, capsys):
    root, lo, hi, file_name, lost = DAMAGE[case](pristine, tmp_path)
    args = cli.parser().parse_args(["volume", root])
    assert cli.preflight(args) == cli.EXIT_DAMAGED
    err = capsys.readouterr().err
    assert f"[{lo}, " in err and file_name in err and "--read-past-damage" in err, err
    if lost is not None:
        assert f"{lost} message(s)" in err, err
    ok = cli.parser().parse_args(["volume", root, "--read-past-damage"])
    report = cli.preflight(ok)
    assert report and f"[{lo}, " in capsys.readouterr().err


def test_analytics_clean_store_has_no_report(pristine, capsys):
    args = cli.parser().parse_args(["volume", pristine[0]])
    report = cli.preflight(args)
    assert not isinstance(report, int) and not report
    assert capsys.readouterr().err == ""


def test_mqstore_verify_names_the_missing_file(pristine, tmp_path, capsys):
    root, lo, hi, name, _ = missing_middle_file(pristine, tmp_path)
    assert mqstore(["verify", root]) == 1
    out = capsys.readouterr().out
    assert f"[missing file] missing file: commitlog offsets [{lo}, {hi})" in out and name in out, out


def test_plot_without_matplotlib_fails_before_spark(pristine, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    args = cli.parser().parse_args(["volume", pristine[0], "--plot", "/nonexistent/v.png"])
    assert cli.preflight(args) == cli.EXIT_USAGE
    assert "--plot needs matplotlib" in capsys.readouterr().err


@pytest.mark.spark
def test_analytics_reads_past_damage_when_asked(spark, pristine, tmp_path, capsys):
    root, lo, hi, file_name, lost = missing_middle_file(pristine, tmp_path)
    truth = pristine[1]
    args = cli.parser().parse_args(["volume", root, "--read-past-damage", "--show", "0"])
    report = cli.preflight(args)
    rows = cli.run_job(spark, args, report)
    assert sum(r["messages"] for r in rows) == len(truth) - lost
    err = capsys.readouterr().err
    assert err.count(f"missing file: commitlog offsets [{lo}, {hi})") == 2, err  # before and after the results
    assert spark.conf.get(cli.ON_CORRUPT_CONF, None) is None  # the next job on this session fails again
    with pytest.raises(Exception, match="onCorrupt=skip"):
        cli.run_job(spark, cli.parser().parse_args(["volume", root, "--show", "0"]), report)


@pytest.mark.spark
@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_the_jvm_reader_refuses_a_damaged_store_and_reads_past_it_when_asked(case, jvm_reader, pristine, tmp_path):
    root, lo, hi, file_name, lost = DAMAGE[case](pristine, tmp_path)
    truth = pristine[1]
    with pytest.raises(Exception) as e:
        jvm_reader.read.format("rocketmq-jvm").load(root).select("commitlog_offset").collect()
    text = str(e.value)
    assert "onCorrupt=skip" in text and (f"offset {lo}" in text or f"[{lo}, " in text), text
    if lost is not None and case != "data stops early":  # found by a task, which has no queues to count
        assert f"{lost} message(s)" in text, text
    rows = (jvm_reader.read.format("rocketmq-jvm").option("onCorrupt", "skip").load(root)
            .select("commitlog_offset").collect())
    got = {r[0] for r in rows}
    if hi is not None:
        assert got == set(truth) - set(_in(truth, lo, hi))
    else:
        assert lo not in got and len(got) >= len(truth) - 3


def test_a_file_rolled_while_planning_is_no_damage(pristine, tmp_path):
    """On a live store the writer may roll to a new file and dispatch into it between the
    snapshot's listing and its reading of the queues: the queues then point past the listed
    files, but the file is there by the time the survey looks again."""
    from mqcore.spark.damage import survey
    from mqcore.spark.files import locate_store, take_snapshot
    root = _copy(pristine, tmp_path)
    last = os.path.join(root, "commitlog", pristine[2][-1])
    os.rename(last, last + ".rolling")  # not listed when the snapshot is taken ...
    dirs = locate_store(root)
    snap = take_snapshot(dirs)
    assert snap.dispatched > snap.end_offset
    os.rename(last + ".rolling", last)  # ... but there when the survey lists again
    assert not survey(dirs, snap, walk=True)
