"""The ACL file in force, reloaded when it changes.

``AclFile.load()`` at start raises :class:`~mqcore.errors.AclConfigError` for a bad or
missing file: a server never starts with an ACL it could not read. After that a
service thread polls the file's status (mtime, size, inode) every ``poll_interval_s``;
once a change has held still for one more poll (an editor or ``echo >`` truncates, then
writes: the half-written file must not be taken for the new rules) it parses the new
text and swaps it in whole. A new text that does not parse leaves the previous good
config in force and is logged once (not at every poll).
Readers take ``current`` (one attribute read of an immutable object) from any thread.
"""
from __future__ import annotations

import logging
import os
from typing import Callable

from mqcore.acl.config import PlainAclConfig, parse_plain_acl
from mqcore.clock import system_clock_ms
from mqcore.errors import AclConfigError
from mqcore.service import ServiceThread

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 1.0


class AclFile(ServiceThread):
    """A ``plain_acl.yml`` and the config parsed from it."""

    name = "acl-file-watch"

    def __init__(self, path: str, *, clock: Callable[[], int] = system_clock_ms,
                 poll_interval_s: float = DEFAULT_POLL_INTERVAL_S) -> None:
        super().__init__()
        self.path = os.path.abspath(path)
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.current = PlainAclConfig()
        #: epoch ms of the last successful (re)load
        self.loaded_at_ms = 0
        self.reloads = 0
        self._seen: tuple[int, int, int] | None = None
        self._pending: tuple[int, int, int] | None = None
        self._reported: tuple[int, int, int] | None = None

    def _status(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _read(self) -> PlainAclConfig:
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise AclConfigError(f"cannot read ACL file {self.path}: {e}") from None
        return parse_plain_acl(text, self.path)

    def load(self) -> PlainAclConfig:
        """First load; raises AclConfigError (nothing is in force without a good file)."""
        status = self._status()
        self.current = self._read()
        self._seen = status
        self.loaded_at_ms = self.clock()
        log.info("ACL: %s loaded, %d account(s), %d global white address(es)", self.path,
                 len(self.current.accounts), len(self.current.global_white))
        return self.current

    def poll(self) -> bool:
        """Reload if the file changed since the last look; True when a new config is in force."""
        status = self._status()
        if status == self._seen:
            self._pending = None
            return False
        if status != self._pending:  # changed since the last look: wait until it holds still
            self._pending = status
            return False
        self._seen, self._pending = status, None
        if status is None:
            if self._reported != (0, 0, 0):
                self._reported = (0, 0, 0)
                log.error("ACL: %s is gone; the last good config stays in force", self.path)
            return False
        try:
            config = self._read()
        except AclConfigError as e:
            if self._reported != status:  # once per bad version of the file
                self._reported = status
                log.error("ACL: %s; the previous config stays in force until the file is fixed", e)
            return False
        self.current = config
        self._reported = None
        self.loaded_at_ms = self.clock()
        self.reloads += 1
        log.info("ACL: %s reloaded, %d account(s), %d global white address(es)", self.path,
                 len(config.accounts), len(config.global_white))
        return True

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(self.poll_interval_s)
            if self.stopped:
                break
            try:
                self.poll()
            except Exception:  # the watcher must outlive anything odd on the file system
                log.exception("ACL: watching %s failed; retrying", self.path)
