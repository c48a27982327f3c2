"""The ACL 2.0 admin requests (AUTH_CREATE_USER 3001 ... AUTH_LIST_ACL 3010), as Apache RocketMQ
5.3.3's ``AdminBrokerProcessor`` answers them, so Apache's ``mqadmin createUser``, ``getUser``,
``listUser``, ``updateUser``, ``deleteUser``, ``createAcl``, ``getAcl``, ``listAcl``,
``updateAcl`` and ``deleteAcl`` manage mqbroker.

Headers (extFields): ``username`` (user requests), ``filter`` (list users), ``subject`` (ACL
requests, ``User:<name>``), ``policyType`` and ``resource`` (delete ACL), ``subjectFilter`` and
``resourceFilter`` (list ACLs). Bodies: UserInfo ``{"username","password","userType","userStatus"}``
and AclInfo ``{"subject","policies":[{"policyType","entries":[{"resource","actions","sourceIps",
"decision"}]}]}``, in JSON both ways.

Who may send them is the authorization check's business (Cluster Update for changes, Cluster Get
for reads); on top of it only a Super user creates, changes or deletes a Super user.
"""
from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Callable

from mqcore.acl.signing import ACCESS_KEY
from mqcore.acl.v2.model import (
    Acl,
    AuthModelError,
    PolicyType,
    Resource,
    User,
    UserStatus,
    UserType,
    acl_from_json,
    subject_of,
    user_from_json,
    _by_name,
)
from mqcore.acl.v2.store import AuthData, AuthStore
from mqcore.errors import ProtocolError
from mqcore.jsonutil import loads_lenient
from mqcore.remoting.codes import ResponseCode
from mqcore.remoting.command import RemotingCommand, create_response

if TYPE_CHECKING:
    from mqcore.remoting.channel import Channel

AUTH_CREATE_USER, AUTH_UPDATE_USER, AUTH_DELETE_USER, AUTH_GET_USER, AUTH_LIST_USER = range(3001, 3006)
AUTH_CREATE_ACL, AUTH_UPDATE_ACL, AUTH_DELETE_ACL, AUTH_GET_ACL, AUTH_LIST_ACL = range(3006, 3011)
AUTH_CODES = tuple(range(3001, 3011))


class _Refused(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def _no_permission(remark: str) -> _Refused:  # Apache's AuthenticationException/AuthorizationException
    return _Refused(ResponseCode.NO_PERMISSION, remark)


def _json(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8")


def _body(request: RemotingCommand) -> Any:
    if not request.body:
        return None
    try:
        return loads_lenient(bytes(request.body))
    except (ProtocolError, ValueError, RecursionError):
        raise _Refused(ResponseCode.SYSTEM_ERROR, "the request body is not JSON") from None


class AuthAdmin:
    """The ten request handlers over one :class:`AuthStore`."""

    def __init__(self, store: AuthStore) -> None:
        self.store = store

    def processors(self) -> dict[int, Callable[[Channel, RemotingCommand], RemotingCommand]]:
        return {AUTH_CREATE_USER: self.create_user, AUTH_UPDATE_USER: self.update_user,
                AUTH_DELETE_USER: self.delete_user, AUTH_GET_USER: self.get_user, AUTH_LIST_USER: self.list_user,
                AUTH_CREATE_ACL: self.create_acl, AUTH_UPDATE_ACL: self.create_acl,
                AUTH_DELETE_ACL: self.delete_acl, AUTH_GET_ACL: self.get_acl, AUTH_LIST_ACL: self.list_acl}

    # --- helpers -----------------------------------------------------------------------------
    def _answer(self, request: RemotingCommand, fn: Callable[[], bytes | None]) -> RemotingCommand:
        try:
            body = fn()
        except _Refused as e:
            return create_response(request, e.code, e.remark)
        except AuthModelError as e:
            return create_response(request, ResponseCode.NO_PERMISSION, str(e))
        return create_response(request, ResponseCode.SUCCESS, body=body or b"")

    def _not_super_login(self, request: RemotingCommand, data: AuthData) -> bool:
        """Apache's ``isNotSuperUserLogin``: an unsigned request (authentication off) counts as super."""
        name = (request.ext_fields or {}).get(ACCESS_KEY)
        if not name:
            return False
        user = data.users.get(name)
        if user is None:
            raise _no_permission(f"User:{name} is not found")
        return user.user_type is not UserType.SUPER

    @staticmethod
    def _username(request: RemotingCommand) -> str:
        name = (request.ext_fields or {}).get("username")
        if not name or not name.strip():
            raise _Refused(ResponseCode.INVALID_PARAMETER, "The username is blank")
        return name

    # --- users ---------------------------------------------------------------------------------
    def create_user(self, channel: Channel | None, request: RemotingCommand) -> RemotingCommand:
        def run() -> None:
            name = self._username(request)
            _, password, utype, status = user_from_json(_body(request), username=name)

            def change(data: AuthData) -> AuthData:
                if utype is UserType.SUPER and self._not_super_login(request, data):
                    raise _Refused(ResponseCode.SYSTEM_ERROR, "The super user can only be create by super user")
                if not password or not password.strip():
                    raise _no_permission("password can not be blank")
                if name in data.users:
                    raise _no_permission("The user is existed")
                users = dict(data.users)
                users[name] = User(name, password, utype or UserType.NORMAL, status or UserStatus.ENABLE)
                return dataclasses.replace(data, users=users)
            self.store.change(change)
        return self._answer(request, run)

    def update_user(self, channel: Channel | None, request: RemotingCommand) -> RemotingCommand:
        def run() -> None:
            name = self._username(request)
            _, password, utype, status = user_from_json(_body(request), username=name)

            def change(data: AuthData) -> AuthData:
                if utype is UserType.SUPER and self._not_super_login(request, data):
                    raise _Refused(ResponseCode.SYSTEM_ERROR, "The super user can only be update by super user")
                old = data.users.get(name)
                if old is None:
                    raise _no_permission("The user is not exist")
                if old.user_type is UserType.SUPER and self._not_super_login(request, data):
                    raise _no_permission("The super user can only be update by super user")
                new = User(name, password if password and password.strip() else old.password,
                           utype or old.user_type, status or old.status)
                return dataclasses.replace(data, users={**data.users, name: new})
            self.store.change(change)
        return self._answer(request, run)

    def delete_user(self, channel: Channel | None, request: RemotingCommand) -> RemotingCommand:
        def run() -> None:
            name = (request.ext_fields or {}).get("username")
            if not name or not name.strip():
                raise _no_permission("username can not be blank")

            def change(data: AuthData) -> AuthData:
                old = data.users.get(name)
                if old is None:
                    return data  # Apache answers success
                if old.user_type is UserType.SUPER and self._not_super_login(request, data):
                    raise _no_permission("The super user can only be update by super user")
                users = {k: v for k, v in data.users.items() if k != name}
                acls = {k: v for k, v in data.acls.items() if k != f"User:{name}"}  # its ACL goes too
                return AuthData(users, acls)
            self.store.change(change)
        return self._answer(request, run)

    def get_user(self, channel: Channel | None, request: RemotingCommand) -> RemotingCommand:
        def run() -> bytes | None:
            user = self.store.current.users.get(self._username(request))
            return None if user is None else _json(user.to_json())
        return self._answer(request, run)

    def list_user(self, channel: Channel | None, request: RemotingCommand) -> RemotingCommand:
        def run() -> bytes | None:
            needle = (request.ext_fields or {}).get("filter") or ""
            users = [u.to_json() for u in self.store.current.users.values()
                     if not needle.strip() or needle in u.username]
            return _json(users) if users else None
        return self._answer(request, run)

    # --- ACLs ------------------------------------------------------------------------------------
    def create_acl(self, channel: Channel | None, request: RemotingCommand) -> RemotingCommand:
        """AUTH_CREATE_ACL and AUTH_UPDATE_ACL: Apache does the same for both (create, or merge
        the new entries into the subject's ACL)."""
        def run() -> None:
            header_subject = (request.ext_fields or {}).get("subject")
            data_in = _body(request)
            if not isinstance(data_in, dict) or not data_in.get("policies"):
                raise _Refused(ResponseCode.SYSTEM_ERROR, "The body of acl is null")
            acl = acl_from_json(data_in, header_subject)

            def change(data: AuthData) -> AuthData:
                if acl.subject[len("User:"):] not in data.users:
                    raise _no_permission(f"The subject of {acl.subject} is not exist.")
                old = data.acls.get(acl.subject)
                return dataclasses.replace(data, acls={**data.acls, acl.subject: acl if old is None else old.merged(acl)})
            self.store.change(change)
        return self._answer(request, run)

    def delete_acl(self, channel: Channel | None, request: RemotingCommand) -> RemotingCommand:
        def run() -> None:
            ext = request.ext_fields or {}
            subject = subject_of(ext.get("subject"))
            if subject is None:
                raise _no_permission("The subject is null.")
            ptype = _by_name(PolicyType, ext.get("policyType")) or PolicyType.CUSTOM
            resource = Resource.parse(ext.get("resource"))

            def change(data: AuthData) -> AuthData:
                if subject[len("User:"):] not in data.users:
                    raise _no_permission("The subject is not exist.")
                old = data.acls.get(subject)
                if old is None:
                    raise _no_permission("The acl is not exist.")
                new: Acl | None = None if resource is None else old.without(ptype, resource)
                acls = dict(data.acls)
                if new is None or not new.policies:
                    del acls[subject]
                else:
                    acls[subject] = new
                return dataclasses.replace(data, acls=acls)
            self.store.change(change)
        return self._answer(request, run)

    def get_acl(self, channel: Channel | None, request: RemotingCommand) -> RemotingCommand:
        def run() -> bytes | None:
            subject = subject_of((request.ext_fields or {}).get("subject"))
            data = self.store.current
            if subject is None or subject[len("User:"):] not in data.users:
                raise _no_permission("The subject is not exist.")
            acl = data.acls.get(subject)
            return None if acl is None else _json(acl.to_json())
        return self._answer(request, run)

    def list_acl(self, channel: Channel | None, request: RemotingCommand) -> RemotingCommand:
        def run() -> bytes | None:
            ext = request.ext_fields or {}
            subject_filter = ext.get("subjectFilter") or ""
            resource_filter = ext.get("resourceFilter") or ""
            out = []
            for subject, acl in self.store.current.acls.items():
                if subject_filter.strip() and subject_filter not in subject:
                    continue
                policies = []
                for p in acl.to_json()["policies"]:
                    entries = p["entries"]
                    # Apache filters entries only when the subject's own key lacks the filter text
                    if resource_filter.strip() and resource_filter not in subject:
                        entries = [e for e in entries if resource_filter in e["resource"]]
                    if entries:
                        policies.append({**p, "entries": entries})
                if policies:
                    out.append({"subject": subject, "policies": policies})
            return _json(out) if out else None
        return self._answer(request, run)


def initial_users(data: AuthData, init_user: str | None, inner_credentials: str | None) -> AuthData:
    """``initAuthenticationUser`` and ``innerClientAuthenticationCredentials``: Super users created
    at start when no user of that name exists (an existing one is left as it is, as Apache does)."""
    users = dict(data.users)
    if init_user:
        parsed = json.loads(init_user)
        name, password, _, _ = user_from_json(parsed)
        if name and password and name not in users:
            users[name] = User(name, password, UserType.SUPER, UserStatus.ENABLE)
    if inner_credentials:
        parsed = json.loads(inner_credentials)
        name, password = parsed.get("accessKey"), parsed.get("secretKey")
        if name and password and name not in users:
            users[name] = User(name, password, UserType.SUPER, UserStatus.ENABLE)
    return data if users == data.users else dataclasses.replace(data, users=users)
