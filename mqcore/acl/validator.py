"""The check itself: may this request from this address go through?

Order, as RocketMQ 4.9.8's ``PlainPermissionManager.validate``:

1. a global white address passes everything, signed or not;
2. no ``AccessKey`` -> refused; an unknown one -> refused;
3. the account's own white address passes everything (no signature needed);
4. a wrong or missing signature -> refused;
5. a send to the message-trace topic passes (trace data of any permitted client);
6. an admin request from a non-admin account -> refused;
7. each topic/group the request needs: the account's entry for it, else its default
   topic/group permission; an admin account that lists no entries owns every resource.

The answer to a refused request is Java's: see :func:`denied_response`.
"""
from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Callable

from mqcore.acl import resources
from mqcore.acl.config import Account, PlainAclConfig, is_group_resource
from mqcore.acl.permission import ADMIN_CODES, PUB, allows
from mqcore.acl.signing import ACCESS_KEY, CHECKED_SKIP, SIGNATURE, request_signature
from mqcore.remoting.codes import RequestCode as RC
from mqcore.remoting.codes import ResponseCode
from mqcore.remoting.command import RemotingCommand, create_response

if TYPE_CHECKING:  # the hooks only read the peer's address
    from mqcore.remoting.channel import Channel

TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: a 4.9 broker answers a refused request with SYSTEM_ERROR and the exception's text
#: (its RPC hook throws ``AclException``; checked against the Java broker in
#: tests/reference/test_acl_reference.py); clients and tools look for this name
EXCEPTION_NAME = "org.apache.rocketmq.acl.common.AclException"
DENIED_CODE = ResponseCode.SYSTEM_ERROR

#: name-server requests that change state: with ACL on, only admin accounts (mqcore's addition)
NAMESRV_WRITE_CODES = frozenset({
    RC.REGISTER_BROKER, RC.UNREGISTER_BROKER, RC.PUT_KV_CONFIG, RC.DELETE_KV_CONFIG,
    RC.DELETE_TOPIC_IN_NAMESRV, RC.WIPE_WRITE_PERM_OF_BROKER, RC.ADD_WRITE_PERM_OF_BROKER,
    RC.UPDATE_NAMESRV_CONFIG,
})


def _print(resource: str) -> str:
    if is_group_resource(resource):
        return f"group:{resource[len('%RETRY%'):]}"
    return f"topic:{resource}"


class PlainAccessValidator:
    """Checks requests against the config ``source()`` returns at the time of the call
    (a reload takes effect on the next request)."""

    def __init__(self, source: Callable[[], PlainAclConfig]) -> None:
        self._source = source

    def check(self, request: RemotingCommand, remote_host: str, *, admin_only: bool = False) -> str | None:
        """None when allowed, else why not (RocketMQ's message). ``admin_only``: the
        request needs an admin account whatever its code (the name server's writes)."""
        config = self._source()
        for pattern in config.global_white:
            if pattern.matches(remote_host):
                return None
        ext = request.ext_fields or {}
        access_key = ext.get(ACCESS_KEY)
        if access_key is None:
            return "No accessKey is configured"
        account = config.accounts.get(access_key)
        if account is None:
            return f"No acl config for {access_key}"
        if account.white_address.matches(remote_host):
            return None
        expected = request_signature(ext, request.body, account.secret_key, skip=CHECKED_SKIP)
        given = ext.get(SIGNATURE) or ""
        if not hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("ascii")):  # constant time
            return f"Check signature failed for accessKey={access_key}"
        if admin_only:
            if not account.admin:
                return f"Need admin permission for request code={request.code}, but accessKey={access_key} is not"
            return None
        try:
            need = resources.needed(request)
        except resources.ResourceParseError as e:
            return str(e)
        if need.get(TRACE_TOPIC) == PUB:
            return None
        return _check_perms(request.code, need, account)

    def check_signed(self, access_key: str | None, remote_host: str, signature_ok: Callable[[str], bool],
                     need: dict[str, int]) -> tuple[bool, str] | None:
        """The same order for a request signed another way (5.x gRPC: ``signature_ok(secret)``
        checks the signature) that needs ``need``: None when allowed, else (whether the
        caller was authenticated, why not)."""
        config = self._source()
        for pattern in config.global_white:
            if pattern.matches(remote_host):
                return None
        if access_key is None:
            return False, "No accessKey is configured"
        account = config.accounts.get(access_key)
        if account is None:
            return False, f"No acl config for {access_key}"
        if account.white_address.matches(remote_host):
            return None
        if not signature_ok(account.secret_key):
            return False, f"Check signature failed for accessKey={access_key}"
        if need.get(TRACE_TOPIC) == PUB:
            return None
        why = _check_perms(None, need, account)
        return None if why is None else (True, why)

    def denied(self, request: RemotingCommand, remote_host: str, *, admin_only: bool = False) -> RemotingCommand | None:
        why = self.check(request, remote_host, admin_only=admin_only)
        return None if why is None else denied_response(request, why)


def _check_perms(code: int | None, need: dict[str, int], account: Account) -> str | None:
    if code in ADMIN_CODES and not account.admin:
        return f"Need admin permission for request code={code}, but accessKey={account.access_key} is not"
    owned = account.resource_perms
    if not need or (owned is None and account.admin):
        return None
    for resource, perm in need.items():
        if owned is not None and resource in owned:
            have = owned[resource]
        else:
            have = account.default_group_perm if is_group_resource(resource) else account.default_topic_perm
        if not allows(perm, have):
            return f"No default permission for {_print(resource)}"
    return None


def denied_response(request: RemotingCommand, why: str) -> RemotingCommand:
    return create_response(request, DENIED_CODE, f"{EXCEPTION_NAME}: {why}")


class BrokerAclHook:
    """The broker's check before every request (Java's ACL ``RPCHook``)."""

    def __init__(self, validator: PlainAccessValidator) -> None:
        self.validator = validator

    def __call__(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        return self.validator.denied(request, channel.remote_host)


class NamesrvAclHook:
    """The name server's check: writes need an admin signature, reads stay open."""

    def __init__(self, validator: PlainAccessValidator) -> None:
        self.validator = validator

    def __call__(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        if request.code not in NAMESRV_WRITE_CODES:
            return None
        return self.validator.denied(request, channel.remote_host, admin_only=True)
