"""The ACL file in force, reloaded when it changes.

``AclFile.load()`` at start raises :class:`~mqcore.errors.AclConfigError` for a bad or
missing file: a server never starts with an ACL it could not read. After that a
service thread polls the file's status (mtime, size, inode) every ``poll_interval_s``;
once a change has held still for one more poll (an editor or ``echo >`` truncates, then
writes: the half-written file must not be taken for the new rules) it parses the new
text and swaps it in whole. A new text that does not parse leaves the previous good
config in force and is logged once (not at every poll).
Readers take ``current`` (one attribute read of an immutable object) from any thread.

:class:`WatchedFile` is that watcher for any parsed file: ACL 2.0's ``auth.json``
(mqcore.acl.v2.store) is watched by the same code.
"""
from __future__ import annotations

import logging
import os
import threading
from typing import Callable, Generic, TypeVar

from mqcore.acl.config import PlainAclConfig, parse_plain_acl
from mqcore.clock import system_clock_ms
from mqcore.errors import AclConfigError
from mqcore.service import ServiceThread

log = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 1.0

T = TypeVar("T")

#: a file's status as polled: (mtime ns, size, inode); None when it cannot be stat'ed
Status = tuple[int, int, int] | None


class WatchedFile(ServiceThread, Generic[T]):
    """A file, the data parsed from it (``current``) and the thread that reloads it on a change.

    A subclass says how to read the file (``_read``, AclConfigError for a bad one) and what
    to say about the data in the log (``_summary``)."""

    #: the log lines' prefix
    label = ""
    #: what stays in force when a new text does not parse (the log lines' words)
    kept = "config stays"
    #: True when ``_read`` takes a missing file for an empty one (a deleted file then empties
    #: the data); False when a file that is gone keeps the last good data (logged once)
    missing_is_empty = False
    #: the file named in a read error ("cannot read <file_kind><path>")
    file_kind = ""
    #: the logger the lines go to (each subclass's module)
    logger = log

    def __init__(self, path: str, *, clock: Callable[[], int] = system_clock_ms,
                 poll_interval_s: float = DEFAULT_POLL_INTERVAL_S) -> None:
        super().__init__()
        self.path = os.path.abspath(path)
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.current = self._empty()
        #: epoch ms of the last successful (re)load
        self.loaded_at_ms = 0
        self.reloads = 0
        self._lock = threading.Lock()  # one change at a time (loads, reloads, a subclass's writes)
        self._seen: Status = None
        self._pending: Status = None
        self._reported: Status = None

    def _status(self) -> Status:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size, st.st_ino

    def _empty(self) -> T:
        """The data before the first load."""
        raise NotImplementedError

    def _parse(self, text: str) -> T:
        """The file's text -> its data; AclConfigError naming the file and the bad part."""
        raise NotImplementedError

    def _read(self) -> T:
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            if self.missing_is_empty and isinstance(e, FileNotFoundError):
                return self._empty()
            raise AclConfigError(f"cannot read {self.file_kind}{self.path}: {e}") from None
        return self._parse(text)

    def _summary(self, data: T) -> str:
        raise NotImplementedError

    def load(self) -> T:
        """First load; AclConfigError for a file that cannot be read or parsed."""
        with self._lock:
            status = self._status()
            self.current = self._read()
            self._seen = status
            self.loaded_at_ms = self.clock()
        self.logger.info("%s: %s loaded, %s", self.label, self.path, self._summary(self.current))
        return self.current

    def poll(self) -> bool:
        """Reload if the file changed since the last look; True when new data is in force."""
        with self._lock:
            status = self._status()
            if status == self._seen:
                self._pending = None
                return False
            if status != self._pending:  # changed since the last look: wait until it holds still
                self._pending = status
                return False
            self._seen, self._pending = status, None
            if status is None and not self.missing_is_empty:
                if self._reported != (0, 0, 0):
                    self._reported = (0, 0, 0)
                    self.logger.error("%s: %s is gone; the last good %s in force", self.label, self.path, self.kept)
                return False
            try:
                data = self._read()
            except AclConfigError as e:
                if self._reported != status:  # once per bad version of the file
                    self._reported = status
                    self.logger.error("%s: %s; the previous %s in force until the file is fixed", self.label, e,
                                      self.kept)
                return False
            self.current = data
            self._reported = None
            self.loaded_at_ms = self.clock()
            self.reloads += 1
        self.logger.info("%s: %s reloaded, %s", self.label, self.path, self._summary(data))
        return True

    def run(self) -> None:
        while not self.stopped:
            self.wait_for_running(self.poll_interval_s)
            if self.stopped:
                break
            try:
                self.poll()
            except Exception:  # the watcher must outlive anything odd on the file system
                self.logger.exception("%s: watching %s failed; retrying", self.label, self.path)


class AclFile(WatchedFile[PlainAclConfig]):
    """A ``plain_acl.yml`` and the config parsed from it."""

    name = "acl-file-watch"
    label = "ACL"
    file_kind = "ACL file "

    def _empty(self) -> PlainAclConfig:
        return PlainAclConfig()

    def _parse(self, text: str) -> PlainAclConfig:
        return parse_plain_acl(text, self.path)

    def _summary(self, data: PlainAclConfig) -> str:
        return f"{len(data.accounts)} account(s), {len(data.global_white)} global white address(es)"
