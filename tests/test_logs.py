"""Log files as RocketMQ keeps them (broker.log, store.log, remoting.log, namesrv.log),
rotated by size, in the directory ``--log-dir`` names; recovery progress."""
from __future__ import annotations

import io
import logging
import os

import pytest

from mqcore.config import StoreConfig
from mqcore.errors import ConfigError
from mqcore.logs import configure_logging, parse_level
from mqcore.message import MessageExtBrokerInner
from mqcore.progress import ProgressReporter
from mqcore.store.message_store import MessageStore
from tests.support.processes import BrokerProcess, NamesrvProcess


def test_each_logger_writes_its_own_file_and_files_rotate_by_size(tmp_path):
    console = io.StringIO()
    handle = configure_logging("broker", str(tmp_path / "logs"), "INFO", console=console, max_bytes=2000,
                               backups=2)
    try:
        logging.getLogger("mqcore.broker.topics").info("a broker line")
        logging.getLogger("mqcore.store.recovery").info("a store line")
        logging.getLogger("mqcore.remoting.server").info("a remoting line")
        logging.getLogger("mqcore.namesrv.server").info("a namesrv line")
        logging.getLogger("mqcore.broker.topics").debug("below the level")
        for h in handle.handlers:
            h.flush()
        files = {name: open(path).read() for name, path in handle.files.items()}
        assert "a broker line" in files["broker.log"] and "a store line" not in files["broker.log"]
        assert "a remoting line" not in files["broker.log"] and "a namesrv line" not in files["broker.log"]
        assert "a store line" in files["store.log"] and "a broker line" not in files["store.log"]
        assert "a remoting line" in files["remoting.log"] and "a namesrv line" in files["namesrv.log"]
        assert "below the level" not in "".join(files.values())
        assert all(s in console.getvalue() for s in ("a broker line", "a store line", "a remoting line"))
        for i in range(100):  # ~8 KB into a 2 KB file: rolled over, two backups kept
            logging.getLogger("mqcore.broker").info("filler line %03d %s", i, "x" * 40)
        names = sorted(os.listdir(tmp_path / "logs"))
        assert {"broker.log", "broker.log.1", "broker.log.2"} <= set(names) and "broker.log.3" not in names
        assert os.path.getsize(tmp_path / "logs" / "broker.log") <= 2000
    finally:
        handle.close()
    assert not any(h in logging.getLogger().handlers for h in handle.handlers)


def test_unknown_levels_and_unwritable_dirs_are_clear_errors(tmp_path):
    assert parse_level("warn") == logging.WARNING
    with pytest.raises(ConfigError, match="--log-level 'LOUD' is not one of DEBUG, INFO, WARNING, ERROR"):
        parse_level("LOUD")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match="logDir"):
        configure_logging("broker", str(tmp_path / "file" / "logs"), "INFO", console=None)


def test_broker_and_name_server_processes_write_their_files(tmp_path):
    with NamesrvProcess() as ns:
        with BrokerProcess(tmp_path / "store", namesrv=ns.addr, conf={"logDir": str(tmp_path / "blogs")}) as b:
            assert b.broker_addr
            # the console says where the logs are kept
            blogs = os.path.abspath(tmp_path / "blogs")
            assert any(f"logs go to {blogs} (broker.log" in line and "store.log" in line for line in b.lines), b.lines
        broker_log = (tmp_path / "blogs" / "broker.log").read_text()
        assert "serving on" in broker_log and "stopped" in broker_log
        assert "metrics on" not in broker_log  # metricsPort 0 (the default): no endpoint
        assert "recovery" in (tmp_path / "blogs" / "store.log").read_text()
        assert (tmp_path / "blogs" / "remoting.log").exists()
    namesrv_files = os.listdir(ns.log_dir)
    assert "namesrv.log" in namesrv_files and "remoting.log" in namesrv_files
    assert not os.path.exists(tmp_path / "store-logs")  # logDir in broker.conf was used, not the default


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        self.t += 1.0  # every report is a second after the previous: each one is logged
        return self.t


def test_a_long_recovery_reports_bytes_scanned_of_total(tmp_path, caplog):
    cfg = StoreConfig(store_path=str(tmp_path / "store"), commitlog_file_size_bytes=64 * 1024,
                      index_slots=100, index_entries=400, message_index_enable=False)
    with MessageStore(cfg) as store:
        for i in range(1500):  # ~250 KB: four full 64 KB files and part of a fifth
            assert store.put_message(MessageExtBrokerInner(topic="T", body=b"p" * 100)).ok
        data_end = store.get_max_phy_offset()
    open(cfg.abort_path, "w").close()  # as after a crash: the abnormal recovery scans every file
    calls = []
    tty = io.StringIO()
    reporter = ProgressReporter("store recovery", logging.getLogger("mqcore.store.recovery"), stream=tty,
                                force_tty=True, clock=_Clock(), log_every_s=1.0, bar_every_s=0.0)

    def progress(done, total):
        calls.append((done, total))
        reporter(done, total)
    progress.finish = reporter.finish

    caplog.set_level(logging.INFO, logger="mqcore.store.recovery")
    store = MessageStore(cfg, recovery_progress=progress)
    report = store.load()
    store.shutdown()
    assert report.abnormal and report.records_scanned == 1500
    dones = [d for d, _t in calls]
    assert dones == sorted(dones) and len(calls) >= 10   # per scanned batch and per file
    total = calls[-1][1]
    assert data_end <= total < data_end + 64 * 1024   # the last file counts up to its written data
    assert dones[-1] == report.bytes_scanned  # records only: the end-of-file padding is skipped
    lines = [r.getMessage() for r in caplog.records if r.name == "mqcore.store.recovery"]
    assert any("store recovery: scanned" in line and "of 0.3 MiB" in line for line in lines)
    assert lines[-1].startswith("store recovery: done, scanned") and "(100%)" in lines[-1]
    bar = tty.getvalue()
    assert bar.count("\r") == len(calls) + 1 and bar.endswith("(100%)\n")
    assert "[" + "#" * 30 + "]" in bar
