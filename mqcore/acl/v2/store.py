"""Where ACL 2.0's users and ACL rules live: one JSON file, ``<storePathRootDir>/config/auth.json``.

Apache 5.3 keeps them in two RocksDB databases under the same ``config`` directory; mqcore keeps
one JSON file (``{"users": [UserInfo...], "acls": [AclInfo...]}``, the admin bodies' shapes), so
an operator can read, back up and edit it. Admin requests (AUTH_CREATE_USER...) change it through
:class:`AuthStore`, which writes the whole file atomically (a temp file renamed over it). The file
is also watched like ``plain_acl.yml`` (mqcore.acl.watch): an edit by hand is applied, once it
has held still for one more poll, to every later request; an edit that does not parse is logged
once and the previous rules stay in force.

Readers take ``current`` (one attribute read of an immutable :class:`AuthData`) from any thread.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Callable

from mqcore.acl.v2.model import (
    Acl,
    AuthModelError,
    User,
    UserStatus,
    UserType,
    acl_from_json,
    user_from_json,
)
from mqcore.acl.watch import WatchedFile
from mqcore.errors import AclConfigError

log = logging.getLogger(__name__)

FILE_NAME = "auth.json"


@dataclasses.dataclass(frozen=True)
class AuthData:
    users: dict[str, User] = dataclasses.field(default_factory=dict)
    acls: dict[str, Acl] = dataclasses.field(default_factory=dict)  # subject -> its ACL

    def to_json(self) -> dict[str, Any]:
        return {"users": [u.to_json() for u in self.users.values()],
                "acls": [a.to_json() for a in self.acls.values()]}


def parse_auth(text: str, path: str) -> AuthData:
    """The file's text -> its data; AclConfigError names the file and the bad part."""
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as e:
        raise AclConfigError(f"{path}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise AclConfigError(f"{path}: not a JSON object")
    users: dict[str, User] = {}
    for i, item in enumerate(data.get("users") or ()):
        name, password, utype, status = user_from_json(item)
        if not name or not password:
            raise AclConfigError(f"{path}: users[{i}]: a user needs a username and a password")
        if name in users:
            raise AclConfigError(f"{path}: users[{i}]: user {name!r} appears twice")
        users[name] = User(name, password, utype or UserType.NORMAL, status or UserStatus.ENABLE)
    acls: dict[str, Acl] = {}
    for i, item in enumerate(data.get("acls") or ()):
        try:
            acl = acl_from_json(item)
        except AuthModelError as e:
            raise AclConfigError(f"{path}: acls[{i}]: {e}") from None
        acls[acl.subject] = acls[acl.subject].merged(acl) if acl.subject in acls else acl
    return AuthData(users, acls)


class AuthStore(WatchedFile[AuthData]):
    """The file and the data parsed from it; changed by the admin requests, watched for edits."""

    name = "auth-file-watch"
    label = "ACL 2.0"
    kept = "users and ACLs stay"
    missing_is_empty = True  # no file yet: no users, no ACLs (the admin requests create it)
    logger = log

    def _empty(self) -> AuthData:
        return AuthData()

    def _parse(self, text: str) -> AuthData:
        return parse_auth(text, self.path)

    def _summary(self, data: AuthData) -> str:
        return f"{len(data.users)} user(s), {len(data.acls)} ACL(s)"

    def _write(self, data: AuthData) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data.to_json(), f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self.current = data
        self._seen, self._pending = self._status(), None

    def change(self, fn: Callable[[AuthData], AuthData]) -> AuthData:
        """Apply ``fn`` to the data in force and store what it returns (it may raise to refuse)."""
        with self._lock:
            new = fn(self.current)
            if new is not self.current:
                self._write(new)
            return new


def dashboard_accounts(data: AuthData) -> Any:
    """ACL 2.0's enabled Super users as ACL 1.0 admin accounts (mqcore.acl.config.PlainAclConfig):
    who may log in to the web dashboard under ACL 2.0 (it asks for admin accounts)."""
    from types import MappingProxyType

    from mqcore.acl.addresses import compile_pattern
    from mqcore.acl.config import Account, PlainAclConfig
    from mqcore.acl.permission import DENY

    nobody = compile_pattern("")
    accounts = {u.username: Account(u.username, u.password, nobody, True, DENY, DENY, None)
                for u in data.users.values() if u.user_type is UserType.SUPER and u.status is UserStatus.ENABLE}
    return PlainAclConfig((), MappingProxyType(accounts))
