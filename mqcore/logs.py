"""Log files where a RocketMQ operator looks for them, plus the console.

RocketMQ writes ``~/logs/rocketmqlogs/broker.log`` (the broker), ``store.log`` (the
message store), ``remoting.log`` (the network layer) and ``namesrv.log`` (the name
server), each rolled over by size. ``configure_logging`` sets up the same files for
mqcore's loggers; the entry points call it once with the directory from ``logDir`` /
``--log-dir``. Library code only ever calls ``logging.getLogger(__name__)``.

    handle = configure_logging("broker", "/tmp/logs", "INFO")
    ...
    handle.close()   # detach and close the handlers (tests, embedded use)
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import logging.handlers
import os
import sys
from typing import TextIO

from mqcore.errors import ConfigError

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: RocketMQ rolls its files at 128 MiB and keeps 10 of them
DEFAULT_MAX_BYTES = 128 << 20
DEFAULT_BACKUPS = 10
FORMAT = "%(asctime)s %(levelname)s %(name)s - %(message)s"

#: file -> the logger names it collects, per process kind
FILES = {
    "broker": {"broker.log": ("mqcore.broker", "mqbroker", "mqcore.metrics", "mqcore"),
               "store.log": ("mqcore.store",),
               "remoting.log": ("mqcore.remoting",),
               "namesrv.log": ("mqcore.namesrv",)},
    "namesrv": {"namesrv.log": ("mqcore.namesrv", "mqnamesrv", "mqcore"),
                "remoting.log": ("mqcore.remoting",)},
}


def default_log_dir() -> str:
    return os.path.join(os.path.expanduser("~"), "logs", "rocketmqlogs")


def parse_level(text: str) -> int:
    """``--log-level`` -> a logging level; anything else is a ConfigError naming the choices."""
    name = text.strip().upper()
    if name == "WARN":
        name = "WARNING"
    if name not in LEVELS:
        raise ConfigError(f"--log-level {text!r} is not one of {', '.join(LEVELS)}")
    level: int = getattr(logging, name)
    return level


def log_level(text: str) -> int:
    """argparse type of ``--log-level``."""
    try:
        return parse_level(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--log-level ")) from e


class _Under:
    """Passes records of the named loggers (and their children) only, but not those a
    more specific file of the same set takes (``mqcore.store`` records stay out of
    broker.log's ``mqcore`` catch-all)."""

    def __init__(self, names: tuple[str, ...], excluded: tuple[str, ...]):
        self.names = names
        self.excluded = excluded

    def filter(self, record: logging.LogRecord) -> bool:
        def under(n: str) -> bool:
            return record.name == n or record.name.startswith(n + ".")

        if any(under(n) for n in self.excluded):
            return False
        return any(under(n) for n in self.names)


@dataclasses.dataclass
class LogHandle:
    directory: str
    files: dict[str, str]
    handlers: list[logging.Handler]
    previous_level: int

    def close(self) -> None:
        root = logging.getLogger()
        for h in self.handlers:
            root.removeHandler(h)
            h.close()
        root.setLevel(self.previous_level)


def configure_logging(kind: str, log_dir: str | None, level: int | str = logging.INFO, *,
                      console: TextIO | None = sys.stderr, max_bytes: int = DEFAULT_MAX_BYTES,
                      backups: int = DEFAULT_BACKUPS) -> LogHandle:
    """Attach size-rotated files for ``kind`` ("broker" or "namesrv") under ``log_dir``
    (None: ``~/logs/rocketmqlogs``) and a console handler to the root logger."""
    if isinstance(level, str):
        level = parse_level(level)
    directory = os.path.abspath(os.path.expanduser(log_dir or default_log_dir()))
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"logDir {directory}: cannot create it: {e.strerror}") from e
    fmt = logging.Formatter(FORMAT)
    handlers: list[logging.Handler] = []
    files = {}
    table = FILES[kind]
    all_names = [n for names in table.values() for n in names]
    for file_name, names in table.items():
        path = os.path.join(directory, file_name)
        try:
            h = logging.handlers.RotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups,
                                                     encoding="utf-8")
        except OSError as e:
            for done in handlers:
                done.close()
            raise ConfigError(f"logDir {directory}: cannot write {file_name}: {e.strerror}") from e
        # a catch-all name ("mqcore") leaves the records of the more specific files alone
        more_specific = tuple(n for n in all_names if n not in names
                              and any(n.startswith(m + ".") for m in names))
        h.addFilter(_Under(names, more_specific))
        h.setFormatter(fmt)
        handlers.append(h)
        files[file_name] = path
    if console is not None:
        to_console = logging.StreamHandler(console)
        to_console.setFormatter(fmt)
        handlers.append(to_console)
    root = logging.getLogger()
    previous = root.level
    root.setLevel(level)
    for handler in handlers:
        root.addHandler(handler)
    return LogHandle(directory, files, handlers, previous)
